// File: tools/rcost/report.cpp — keys, the calendar, --since/--until, rates and host facts
// (report.hpp); the report itself is built in aggregate.cpp.
#include "report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "rkit/cli.hpp"
#include "rkit/error.hpp"
#include "rkit/time.hpp"
#include "rkit/units.hpp"

namespace rkit::rcost {

// ------------------------------------------------------------------ keys and time

namespace {

constexpr std::pair<Key, const char*> kKeyNames[] = {{Key::Tenant, "tenant"},    {Key::User, "user"},
                                                     {Key::Project, "project"},  {Key::Workflow, "workflow"},
                                                     {Key::Rule, "rule"},        {Key::Experiment, "experiment"},
                                                     {Key::GpuType, "gpu_type"}, {Key::Backend, "backend"},
                                                     {Key::Node, "node"},        {Key::Partition, "partition"},
                                                     {Key::State, "state"},      {Key::Job, "job"},
                                                     {Key::Day, "day"},          {Key::Month, "month"}};

}  // namespace

std::int64_t month_index(double t) {
  const std::tm tm = utc_tm(t);
  return (tm.tm_year + 1900) * 12LL + tm.tm_mon;
}

// The first second of month i, UTC (arithmetic: called from several threads here).
double month_start(std::int64_t i) { return utc_seconds(static_cast<long>(i / 12), static_cast<int>(i % 12) + 1, 1); }

std::string key_name(Key k) {
  for (auto [key, name] : kKeyNames)
    if (key == k) return name;
  return "?";
}

std::vector<Key> parse_keys(const std::string& text) {
  std::vector<Key> keys;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string word = text.substr(from, comma - from);
    from = comma + 1;
    const auto* it =
        std::find_if(std::begin(kKeyNames), std::end(kKeyNames), [&](auto& kn) { return word == kn.second; });
    if (it == std::end(kKeyNames)) {
      std::vector<const char*> all;
      for (auto [k, n] : kKeyNames) all.push_back(n);
      usage_error(fmt::format("--by: unknown key \"{}\" (keys: {})", word, fmt::join(all, ", ")));
    }
    if (std::find(keys.begin(), keys.end(), it->first) != keys.end())
      usage_error(fmt::format("--by: \"{}\" given twice", word));
    keys.push_back(it->first);
  }
  const bool day = std::count(keys.begin(), keys.end(), Key::Day),
             month = std::count(keys.begin(), keys.end(), Key::Month);
  if (day && month) usage_error("--by: day and month cannot be combined");
  return keys;
}

std::pair<double, double> month_of(double t) {
  const std::int64_t i = month_index(t);
  return {month_start(i), month_start(i + 1)};
}

std::string format_day(double unix_s) {
  const std::tm tm = utc_tm(unix_s);
  return fmt::format("{:04}-{:02}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}
std::string format_month(double unix_s) {
  const std::tm tm = utc_tm(unix_s);
  return fmt::format("{:04}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1);
}
std::string format_iso(double unix_s) {
  const std::tm tm = utc_tm(unix_s);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

double parse_time_arg(const std::string& text, double now, const std::string& option) {
  if (text == "now") return now;
  if (text == "today") return std::floor(now / kDay) * kDay;
  if (!text.empty() && text[0] == '@') {
    try {
      std::size_t used = 0;
      const double v = std::stod(text.substr(1), &used);
      if (used == text.size() - 1 && std::isfinite(v)) return v;
    } catch (const std::exception&) {
    }
    usage_error(fmt::format("{}: \"{}\" is not @UNIX_SECONDS", option, text));
  }
  // YYYY-MM-DD[(T| )HH:MM[:SS]][Z]
  std::tm tm{};
  int n = 0;
  if (text.size() >= 10 && std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &n) == 3 &&
      n == 10) {
    std::string rest = text.substr(10);
    if (!rest.empty() && rest.back() == 'Z') rest.pop_back();
    int m = 0;
    bool ok = rest.empty();
    if (!ok && (rest[0] == 'T' || rest[0] == ' ')) {
      if (std::sscanf(rest.c_str() + 1, "%2d:%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &m) == 3)
        ok = static_cast<std::size_t>(m) + 1 == rest.size();
      else if (std::sscanf(rest.c_str() + 1, "%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &m) == 2)
        ok = static_cast<std::size_t>(m) + 1 == rest.size();
    }
    const bool in_range = tm.tm_mon >= 1 && tm.tm_mon <= 12 && tm.tm_mday >= 1 && tm.tm_mday <= 31 && tm.tm_hour >= 0 &&
                          tm.tm_hour < 24 && tm.tm_min >= 0 && tm.tm_min < 60 && tm.tm_sec >= 0 && tm.tm_sec <= 60;
    if (ok && in_range) return utc_seconds(tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  } else {
    try {
      return now - parse_duration(text);
    } catch (const Error&) {
    }
  }
  usage_error(
      fmt::format("{}: \"{}\" is not a time (2026-11-01, 2026-11-01T08:00Z, @UNIX_SECONDS, now, today, "
                  "or a duration such as 7d meaning that long ago)",
                  option, text));
}

// ------------------------------------------------------------------ prices

Rates job_rates(const PriceSheet& prices, const std::string& backend, const std::string& gpu_type) {
  const ResourcePrices& p = prices.at(backend);
  Rates r;
  r.cpu = p.hourly(1, 0, "", 0);
  r.gpu = p.hourly(0, 1, gpu_type, 0);
  r.memory_gib = p.hourly(0, 0, "", 1ull << 30);
  const double effective = r.cpu + r.gpu + r.memory_gib;
  const double list =
      p.list_hourly(1, 0, "", 0) + p.list_hourly(0, 1, gpu_type, 0) + p.list_hourly(0, 0, "", 1ull << 30);
  r.list_factor = effective > 0 ? list / effective : 1;
  return r;
}

void Row::finish_waits() {
  wait_count = waits.count();
  if (!waits.empty()) {
    wait_p50 = waits.quantile(0.5);
    wait_p90 = waits.quantile(0.9);
    wait_p99 = waits.quantile(0.99);
  }
  waits = Waits();
}

std::unordered_map<std::uint32_t, HostFacts> host_facts(const std::vector<Sample>& samples, const NodeBackends& jobs,
                                                        const Strings& strings, const std::string& fallback_backend) {
  std::unordered_map<std::uint32_t, HostFacts> hosts;
  std::unordered_map<std::uint32_t, double> model_at;
  for (const Sample& s : samples) {
    HostFacts& h = hosts[s.host];
    if (h.backend.empty()) h.backend = fallback_backend;
    if (s.gpu_model && (!h.model || s.end < model_at[s.host])) {
      h.model = s.gpu_model;
      model_at[s.host] = s.end;
    }
  }
  // The backend most of a host's jobs ran on (the first named, on a tie).
  std::unordered_map<std::uint32_t, std::uint64_t> most;
  for (const auto& [key, n] : jobs) {
    const auto [host, backend] = key;
    const auto it = hosts.find(host);
    if (it == hosts.end() || n <= most[host]) continue;
    most[host] = n;
    it->second.backend = strings.name(backend);
  }
  return hosts;
}

std::unordered_map<std::uint32_t, HostFacts> host_facts(const Dataset& data, const std::string& fallback_backend) {
  NodeBackends jobs;
  for (const Job& j : data.jobs)
    if (j.node) ++jobs[{j.node, j.backend}];
  return host_facts(data.samples, jobs, data.strings, fallback_backend);
}

}  // namespace rkit::rcost
