// rtop serve: the Prometheus text it writes (escaping, HELP/TYPE, numbers), --listen,
// the node reading from crafted /proc text, the queue and cost per tenant from a few
// rkit.job.v1 records, the Exporter against a stand-in rsub, and the HTTP server's
// limits against slow, huge and many clients.
#include "serve.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <future>
#include <limits>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exposition.hpp"
#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "test_support.hpp"

namespace rkit::rtop {
namespace {

using testing::error_of;

// The sample lines (not # lines) of an exposition.
std::vector<std::string> sample_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l == line) return true;
  return false;
}

// --- the text format ---------------------------------------------------------------------

TEST(RtopExposition, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(escape_label_value("desk-a"), "desk-a");
  EXPECT_EQ(escape_label_value(R"(a\b)"), R"(a\\b)");
  EXPECT_EQ(escape_label_value(R"(say "hi")"), R"(say \"hi\")");
  EXPECT_EQ(escape_label_value("two\nlines"), R"(two\nlines)");
  EXPECT_EQ(escape_label_value(R"(\")"), R"(\\\")");
}

TEST(RtopExposition, LabelValuesKeepUtf8AndReplaceInvalidBytes) {
  EXPECT_EQ(escape_label_value("Zürich 日本 🚀"), "Zürich 日本 🚀");
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(escape_label_value("a\xff"
                               "b"),
            "a" + fffd + "b");
  EXPECT_EQ(escape_label_value("\xc0\xaf"), fffd + fffd);                        // overlong '/'
  EXPECT_EQ(escape_label_value("\xed\xa0\x80"), fffd + fffd + fffd);             // a surrogate
  EXPECT_EQ(escape_label_value("x\xe2\x82"), "x" + fffd + fffd);                 // cut short
  EXPECT_EQ(escape_label_value("\xf4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // past U+10FFFF
}

TEST(RtopExposition, HelpEscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(escape_help(R"(a "b" c\d)"
                        "\ne"),
            R"(a "b" c\\d\ne)");
}

TEST(RtopExposition, NumbersAreWhatPrometheusParses) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(-0.0), "0");
  EXPECT_EQ(format_value(1), "1");
  EXPECT_EQ(format_value(0.37), "0.37");
  EXPECT_EQ(format_value(312.5), "312.5");
  EXPECT_EQ(format_value(85899345920.0), "85899345920");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  // Shortest text that reads back as the same double.
  for (double v : {1e21, 1.5e-7, 0.1 + 0.2, 123456789.123456789, -42.25, 4.9e-324}) {
    const std::string s = format_value(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
  }
}

TEST(RtopExposition, MetricAndLabelNames) {
  for (const char* ok : {"rkit_queue_jobs", "a", "_x", "rkit:rule:rate5m", "A9_b"})
    EXPECT_TRUE(valid_metric_name(ok)) << ok;
  for (const char* bad : {"", "9a", "rkit-queue", "rkit queue", "rkit.jobs", "ä"})
    EXPECT_FALSE(valid_metric_name(bad)) << bad;
  EXPECT_TRUE(valid_metric_name("tenant", true));
  EXPECT_FALSE(valid_metric_name("a:b", true));
  EXPECT_FALSE(valid_metric_name("__name__", true));
}

TEST(RtopExposition, FamiliesHaveHelpThenTypeThenSamples) {
  MetricFamily jobs{"rkit_queue_jobs", "Jobs\nqueued", MetricType::Gauge, {}};
  jobs.add(3, {{"tenant", "desk \"a\""}, {"state", "pending"}}).add(0.5, {{"tenant", "b"}, {"state", "running"}});
  MetricFamily empty{"rkit_empty", "Never shown", MetricType::Gauge, {}};
  MetricFamily errors{"rkit_scrape_errors_total", "Errors", MetricType::Counter, {}};
  errors.add(7);
  EXPECT_EQ(render_exposition({jobs, empty, errors}),
            "# HELP rkit_queue_jobs Jobs\\nqueued\n"
            "# TYPE rkit_queue_jobs gauge\n"
            "rkit_queue_jobs{tenant=\"desk \\\"a\\\"\",state=\"pending\"} 3\n"
            "rkit_queue_jobs{tenant=\"b\",state=\"running\"} 0.5\n"
            "# HELP rkit_scrape_errors_total Errors\n"
            "# TYPE rkit_scrape_errors_total counter\n"
            "rkit_scrape_errors_total 7\n");
}

TEST(RtopExposition, InvalidNamesAreBugs) {
  MetricFamily bad_name{"rkit-bad", "x", MetricType::Gauge, {}};
  bad_name.add(1);
  EXPECT_EQ(error_of([&] { render_exposition({bad_name}); }).code(), Exit::Software);
  MetricFamily bad_label{"rkit_ok", "x", MetricType::Gauge, {}};
  bad_label.add(1, {{"bad-label", "v"}});
  EXPECT_EQ(error_of([&] { render_exposition({bad_label}); }).code(), Exit::Software);
}

// --- --listen ---------------------------------------------------------------------------

TEST(RtopServe, ListenTakesHostAndPort) {
  ListenAddress a = parse_listen("127.0.0.1:9464");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9464);
  EXPECT_EQ(a.text(), "127.0.0.1:9464");
  a = parse_listen("[::1]:0");
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.port, 0);
  EXPECT_EQ(a.text(41234), "[::1]:41234");
  a = parse_listen(":9100");
  EXPECT_EQ(a.host, "0.0.0.0");
  EXPECT_EQ(a.port, 9100);
  a = parse_listen("localhost:65535");
  EXPECT_EQ(a.host, "localhost");
  EXPECT_EQ(a.port, 65535);
}

TEST(RtopServe, BadListenIsAUsageError) {
  for (const char* bad : {"", "9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:http",
                          "::1:9464", "[::1]", "[]:80", "[::1]9464", "host:0009464"}) {
    Error e = error_of([&] { parse_listen(bad); });
    EXPECT_EQ(e.code(), Exit::Usage) << bad;
    EXPECT_NE(std::string(e.what()).find("--listen"), std::string::npos) << e.what();
  }
}

// --- the node -----------------------------------------------------------------------------

const char* const kStat =
    "cpu  300 20 80 500 100 0 0 0 40 0\n"
    "cpu0 200 20 30 200 50 0 0 0 40 0\n"
    "cpu1 100 0 50 300 50 0 0 0 0 0\n"
    "intr 123456 0 0\n";
const char* const kMeminfo =
    "MemTotal:       16318264 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:   12000000 kB\n"
    "SwapTotal:             0 kB\n";

TEST(RtopServe, NodeReadingFromProcText) {
  NodeReading n = read_node(kStat, kMeminfo, "0.52 0.58 0.59 1/467 12345\n", 100);
  EXPECT_EQ(n.cpus, 2u);
  EXPECT_DOUBLE_EQ(n.cpu_busy_s, 4.0);  // user+nice+system = 400 ticks
  EXPECT_DOUBLE_EQ(n.cpu_idle_s, 6.0);  // idle+iowait = 600 ticks
  EXPECT_EQ(n.memory_total_bytes, 16318264ull * 1024);
  EXPECT_EQ(n.memory_available_bytes, 12000000ull * 1024);
  EXPECT_DOUBLE_EQ(n.load1, 0.52);
  EXPECT_DOUBLE_EQ(n.load15, 0.59);
  EXPECT_EQ(error_of([] { read_node("intr 1\n", kMeminfo, "", 100); }).code(), Exit::DataErr);
}

TEST(RtopServe, NodeFamilies) {
  NodeReading n = read_node(kStat, kMeminfo, "0.52 0.58 0.59 1/467 12345\n", 100);
  std::string text = render_exposition(node_families(n));
  EXPECT_TRUE(has_line(text, "rkit_node_cpus 2")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE rkit_node_cpu_seconds_total counter")) << text;
  EXPECT_TRUE(has_line(text, "rkit_node_cpu_seconds_total{mode=\"busy\"} 4")) << text;
  EXPECT_TRUE(has_line(text, "rkit_node_cpu_seconds_total{mode=\"idle\"} 6")) << text;
  EXPECT_TRUE(has_line(text, "rkit_node_memory_total_bytes 16709902336")) << text;
  EXPECT_TRUE(has_line(text, "rkit_node_load5 0.58")) << text;
  // No utilisation before a window has passed; then the window's.
  EXPECT_EQ(text.find("rkit_node_cpu_utilization_ratio"), std::string::npos) << text;
  n.cpu_utilization = 0.25;
  text = render_exposition(node_families(n));
  EXPECT_TRUE(has_line(text, "rkit_node_cpu_utilization_ratio 0.25")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE rkit_node_cpu_utilization_ratio gauge")) << text;
}

// --- GPUs ---------------------------------------------------------------------------------

TEST(RtopServe, GpuFamiliesFollowDcgmInBaseUnits) {
  GpuReading a{0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", {}};
  a.usage.util = 0.37;
  a.usage.memory_used_bytes = 20ull << 30;
  a.usage.memory_free_bytes = 60ull << 30;
  a.usage.memory_total_bytes = 80ull << 30;
  a.usage.power_w = 312.5;
  a.usage.total_energy_mj = 1234567;
  GpuReading b{1, "", "", {}};  // what NVML would not say is left out
  b.usage.power_w = 70;
  const std::string text = render_exposition(gpu_families(true, {a, b}));
  const std::string la = R"({gpu="0",uuid="GPU-aaaa",model="NVIDIA H100 80GB HBM3"})";
  EXPECT_TRUE(has_line(text, "rkit_nvml_up 1")) << text;
  EXPECT_TRUE(has_line(text, "rkit_gpu_utilization_ratio" + la + " 0.37")) << text;
  EXPECT_TRUE(has_line(text, "rkit_gpu_memory_used_bytes" + la + " 21474836480")) << text;
  EXPECT_TRUE(has_line(text, "rkit_gpu_memory_free_bytes" + la + " 64424509440")) << text;
  EXPECT_TRUE(has_line(text, "rkit_gpu_memory_total_bytes" + la + " 85899345920")) << text;
  EXPECT_TRUE(has_line(text, "rkit_gpu_power_watts" + la + " 312.5")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE rkit_gpu_energy_joules_total counter")) << text;
  EXPECT_TRUE(has_line(text, "rkit_gpu_energy_joules_total" + la + " 1234.567")) << text;  // mJ → J
  EXPECT_TRUE(has_line(text, "rkit_gpu_power_watts{gpu=\"1\"} 70")) << text;
  EXPECT_EQ(text.find("rkit_gpu_utilization_ratio{gpu=\"1\""), std::string::npos) << text;
  for (const char* dcgm : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                           "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"})
    EXPECT_NE(text.find(dcgm), std::string::npos) << dcgm << " not named in a HELP line";
}

TEST(RtopServe, WithoutNvmlOnlyTheUpGauge) {
  EXPECT_EQ(
      render_exposition(gpu_families(false, {})),
      "# HELP rkit_nvml_up 1 when NVML is loaded, so that GPUs are reported, else 0 (no NVIDIA driver, or --no-nvml).\n"
      "# TYPE rkit_nvml_up gauge\nrkit_nvml_up 0\n");
}

// --- the queue and its cost ------------------------------------------------------------------

Json job(const std::string& id, const std::string& tenant, const std::string& state, int tasks, int cpus_per_task,
         int gpus_per_task, Json gpu_type, std::uint64_t memory_per_task, double submit,
         const std::string& backend = "local") {
  return Json{{"schema", "rkit.job.v1"},
              {"id", id},
              {"backend", backend},
              {"tenant", tenant},
              {"user", "alice"},
              {"tasks", tasks},
              {"cpus_per_task", cpus_per_task},
              {"gpus_per_task", gpus_per_task},
              {"gpu_type", gpu_type},
              {"memory_per_task_bytes", memory_per_task},
              {"cpus", tasks * cpus_per_task},
              {"gpus", tasks * gpus_per_task},
              {"state", state},
              {"submit_unix_s", submit},
              {"a_future_key", {1, 2}}};
}

PriceSheet sheet() {
  PriceSheet s;
  s.currency = "EUR";
  ResourcePrices local;
  local.cpu_hour = 0.05;
  local.memory_gib_hour = 0.01;
  local.gpu_hour = {{"default", 2.0}, {"H100", 3.0}};
  s.backends["local"] = local;
  return s;
}

std::vector<Json> queue_records() {
  return {
      job("1", "desk-a", "RUNNING", 2, 2, 1, "H100", 8ull << 30, 900),  // 4 × 0.05 + 2 × 3 + 16 × 0.01 = 6.36
      job("2", "desk-a", "RUNNING", 1, 1, 1, nullptr, 0, 950),          // 0.05 + 2 = 2.05
      job("3", "desk-a", "PENDING", 1, 4, 2, nullptr, 0, 960),
      job("4", "desk-a", "PENDING", 1, 1, 0, nullptr, 0, 940),  // the oldest pending: 60 s
      job("5", "desk \"b\"", "PENDING", 3, 1, 1, nullptr, 0, 990),
      job("slurm:77", "desk-a", "RUNNING", 1, 8, 8, nullptr, 0, 100, "slurm"),  // remote: skipped
      job("6", "desk-c", "COMPLETED", 1, 1, 1, nullptr, 0, 100),                // ended: skipped
  };
}

TEST(RtopServe, QueueSumsJobsCoresAndGpusPerTenantAndState) {
  const PriceSheet prices = sheet();
  QueueSummary q = summarize_queue(queue_records(), 1000, &prices);
  ASSERT_EQ(q.tenants.size(), 2u);
  const TenantQueue& a = q.tenants.at("desk-a");
  EXPECT_EQ(a.pending_jobs, 2);
  EXPECT_EQ(a.running_jobs, 2);
  EXPECT_DOUBLE_EQ(a.pending_cpus, 5);
  EXPECT_DOUBLE_EQ(a.running_cpus, 5);
  EXPECT_DOUBLE_EQ(a.pending_gpus, 2);
  EXPECT_DOUBLE_EQ(a.running_gpus, 3);
  EXPECT_DOUBLE_EQ(*a.oldest_pending_submit_s, 940);
  EXPECT_NEAR(a.cost_per_hour, 6.36 + 2.05, 1e-12);
  EXPECT_TRUE(a.cost_known);
  const TenantQueue& b = q.tenants.at("desk \"b\"");
  EXPECT_EQ(b.pending_jobs, 1);
  EXPECT_EQ(b.running_jobs, 0);
  EXPECT_DOUBLE_EQ(b.pending_gpus, 3);
  EXPECT_DOUBLE_EQ(b.cost_per_hour, 0);
  EXPECT_TRUE(q.price_errors.empty());
}

TEST(RtopServe, QueueFamiliesAsText) {
  const PriceSheet prices = sheet();
  const std::string text = render_exposition(queue_families(summarize_queue(queue_records(), 1000, &prices), &prices));
  for (const char* line : {
           R"(rkit_queue_jobs{tenant="desk \"b\"",state="pending"} 1)",
           R"(rkit_queue_jobs{tenant="desk \"b\"",state="running"} 0)",
           R"(rkit_queue_jobs{tenant="desk-a",state="pending"} 2)",
           R"(rkit_queue_jobs{tenant="desk-a",state="running"} 2)",
           R"(rkit_queue_gpus{tenant="desk-a",state="running"} 3)",
           R"(rkit_queue_cpus{tenant="desk-a",state="pending"} 5)",
           R"(rkit_queue_oldest_pending_age_seconds{tenant="desk-a"} 60)",
           R"(rkit_queue_oldest_pending_age_seconds{tenant="desk \"b\""} 10)",
           R"(rkit_tenant_cost_per_hour{tenant="desk \"b\"",currency="EUR"} 0)",
           "# TYPE rkit_tenant_cost_per_hour gauge",
       })
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(text, m, std::regex(R"(rkit_tenant_cost_per_hour\{tenant="desk-a",currency="EUR"\} (\S+))")))
      << text;
  EXPECT_NEAR(std::stod(m[1]), 8.41, 1e-9);
  // Users never become labels: only tenant, state and currency do.
  EXPECT_EQ(text.find("alice"), std::string::npos);
  EXPECT_EQ(text.find("user"), std::string::npos);
}

TEST(RtopServe, NoPriceSheetNoCostMetric) {
  const std::string text = render_exposition(queue_families(summarize_queue(queue_records(), 1000, nullptr), nullptr));
  EXPECT_EQ(text.find("rkit_tenant_cost_per_hour"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, R"(rkit_queue_jobs{tenant="desk-a",state="running"} 2)")) << text;
}

TEST(RtopServe, AJobThePricesCannotPriceHidesItsTenantsCostOnly) {
  PriceSheet prices = sheet();
  prices.backends.erase("local");
  prices.backends["other"] = ResourcePrices{};
  std::vector<Json> jobs = queue_records();
  jobs.push_back(job("7", "desk-d", "PENDING", 1, 1, 0, nullptr, 0, 999));
  QueueSummary q = summarize_queue(jobs, 1000, &prices);
  EXPECT_FALSE(q.tenants.at("desk-a").cost_known);
  EXPECT_EQ(q.price_errors.size(), 2u);  // jobs 1 and 2
  const std::string text = render_exposition(queue_families(q, &prices));
  EXPECT_EQ(text.find(R"(rkit_tenant_cost_per_hour{tenant="desk-a")"), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, R"(rkit_tenant_cost_per_hour{tenant="desk-d",currency="EUR"} 0)")) << text;
}

TEST(RtopServe, BadRecordsAreDataErrors) {
  Json v2 = job("1", "a", "PENDING", 1, 1, 0, nullptr, 0, 1);
  v2["schema"] = "rkit.job.v2";
  EXPECT_EQ(error_of([&] { summarize_queue({v2}, 1, nullptr); }).code(), Exit::DataErr);
  Json no_tenant = job("1", "a", "PENDING", 1, 1, 0, nullptr, 0, 1);
  no_tenant.erase("tenant");
  Error e = error_of([&] { summarize_queue({no_tenant}, 1, nullptr); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("record 1"), std::string::npos) << e.what();
  Json text_cpus = job("1", "a", "PENDING", 1, 1, 0, nullptr, 0, 1);
  text_cpus["cpus"] = "four";
  EXPECT_EQ(error_of([&] { summarize_queue({text_cpus}, 1, nullptr); }).code(), Exit::DataErr);
}

// --- options -----------------------------------------------------------------------------------

TEST(RtopServe, PricesFromTheFlagElseTheConfigRelativeToIt) {
  testing::TempDir dir;
  ::mkdir(dir.file("etc").c_str(), 0755);
  testing::write(dir.file("etc/prices.toml"), "currency = \"CHF\"\n[backends.local]\ncpu_hour = 1\n");
  testing::write(dir.file("etc/rkit.toml"), "[rcost]\nprices = \"prices.toml\"\n");
  testing::write(dir.file("empty.toml"), "");
  testing::write(dir.file("slurm_only.toml"), "[backends.slurm]\ncpu_hour = 1\n");
  auto from_config = serve_prices(load_config(dir.file("etc/rkit.toml")), std::nullopt);
  ASSERT_TRUE(from_config);
  EXPECT_EQ(from_config->currency, "CHF");
  EXPECT_FALSE(serve_prices(load_config(dir.file("empty.toml")), std::nullopt));
  testing::write(dir.file("etc/rsub.toml"), "[rsub.auto]\nprices = \"prices.toml\"\n");
  auto from_rsub = serve_prices(load_config(dir.file("etc/rsub.toml")), std::nullopt);
  ASSERT_TRUE(from_rsub);
  EXPECT_EQ(from_rsub->currency, "CHF");
  auto from_flag = serve_prices(load_config(dir.file("empty.toml")), dir.file("etc/prices.toml"));
  ASSERT_TRUE(from_flag);
  EXPECT_EQ(from_flag->currency, "CHF");
  EXPECT_EQ(error_of([&] { serve_prices(load_config(dir.file("empty.toml")), dir.file("missing.toml")); }).code(),
            Exit::NoInput);
  EXPECT_EQ(error_of([&] { serve_prices(load_config(dir.file("empty.toml")), dir.file("slurm_only.toml")); }).code(),
            Exit::DataErr);
}

// --- the Exporter, with a stand-in rsub ------------------------------------------------------

// A script that stands in for rsub: it records its arguments and standard input, then
// runs `body`.
std::string fake_rsub(const testing::TempDir& dir, const std::string& body) {
  const std::string path = dir.file("rsub");
  testing::write(path, "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + dir.file("args") + "\ncat > " + dir.file("stdin") +
                           "\n" + body + "\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

ServeOptions exporter_options(const std::string& rsub) {
  ServeOptions o;
  o.use_nvml = false;
  o.rsub_program = rsub;
  o.rsub_config = "/somewhere/rkit.toml";
  o.queue_timeout_s = 2;
  o.quiet = true;
  o.cpu_window_s = 0.05;
  return o;
}

TEST(RtopServe, ExporterReadsTheQueueThroughRsubLs) {
  testing::TempDir dir;
  std::string records;
  for (const Json& j : queue_records()) records += to_json_line(j) + "\n";
  testing::write(dir.file("records.jsonl"), records);
  ServeOptions o = exporter_options(fake_rsub(dir, "cat " + dir.file("records.jsonl")));
  o.prices = sheet();
  Exporter exporter(o);
  const std::string text = exporter.scrape();
  EXPECT_EQ(testing::slurp(dir.file("args")), "--config\n/somewhere/rkit.toml\n-q\nls\n--json\n--cached\n");
  EXPECT_TRUE(has_line(text, "rkit_queue_up 1")) << text;
  EXPECT_TRUE(has_line(text, R"(rkit_queue_jobs{tenant="desk-a",state="pending"} 2)")) << text;
  EXPECT_TRUE(has_line(text, R"(rkit_scrape_errors_total{source="queue"} 0)")) << text;
  EXPECT_TRUE(has_line(text, R"(rkit_scrape_errors_total{source="prices"} 0)")) << text;
  EXPECT_TRUE(has_line(text, "rkit_nvml_up 0")) << text;
  EXPECT_NE(text.find("rkit_tenant_cost_per_hour{tenant=\"desk-a\",currency=\"EUR\"} 8.41"), std::string::npos) << text;
  // Every sample line is NAME{LABELS} VALUE, and each family has its HELP and TYPE first.
  const std::regex sample(R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? \S+)re");
  for (const std::string& line : sample_lines(text)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    EXPECT_NE(text.find("# TYPE " + m[1].str() + " "), std::string::npos) << line;
    EXPECT_NE(text.find("# HELP " + m[1].str() + " "), std::string::npos) << line;
  }
}

TEST(RtopServe, ABrokenQueueIsVisibleAndTheRestIsServed) {
  testing::TempDir dir;
  ServeOptions o = exporter_options(fake_rsub(dir, "echo 'rsub: error: no store' >&2; exit 66"));
  Exporter exporter(o);
  std::string text = exporter.scrape();
  EXPECT_TRUE(has_line(text, "rkit_queue_up 0")) << text;
  EXPECT_TRUE(has_line(text, R"(rkit_scrape_errors_total{source="queue"} 1)")) << text;
  EXPECT_EQ(text.find("rkit_queue_jobs"), std::string::npos) << text;
  EXPECT_NE(text.find("rkit_node_memory_total_bytes "), std::string::npos) << text;
  text = exporter.scrape();
  EXPECT_TRUE(has_line(text, R"(rkit_scrape_errors_total{source="queue"} 2)")) << text;

  // Output that is not rkit.job.v1 records, and an rsub that does not answer in time.
  ServeOptions garbage = exporter_options(fake_rsub(dir, "echo '{\"schema\":\"rkit.job.v9\"}'"));
  EXPECT_TRUE(has_line(Exporter(garbage).scrape(), "rkit_queue_up 0"));
  ServeOptions slow = exporter_options(fake_rsub(dir, "exec sleep 30"));
  slow.queue_timeout_s = 0.3;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(has_line(Exporter(slow).scrape(), "rkit_queue_up 0"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  // The scraper's timeout (Prometheus's header) shortens the wait, so that the rest
  // still arrives in time.
  slow.queue_timeout_s = 30;
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_TRUE(has_line(Exporter(slow).scrape(1.0), "rkit_queue_up 0"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0);
  ServeOptions missing = exporter_options(dir.file("no-such-rsub"));
  EXPECT_TRUE(has_line(Exporter(missing).scrape(), "rkit_queue_up 0"));
}

TEST(RtopServe, WithoutTheQueueNoQueueMetrics) {
  ServeOptions o = exporter_options("/nonexistent/rsub");
  o.queue = false;
  Exporter exporter(o);
  // The CPU window passes (50 ms) and its gauge appears.
  std::string text;
  for (int i = 0; i < 100 && text.find("rkit_node_cpu_utilization_ratio ") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    text = exporter.scrape();
  }
  EXPECT_NE(text.find("rkit_node_cpu_utilization_ratio "), std::string::npos) << text;
  EXPECT_EQ(text.find("rkit_queue"), std::string::npos) << text;
  EXPECT_EQ(text.find("source=\"queue\""), std::string::npos) << text;
  EXPECT_TRUE(has_line(text, R"(rkit_scrape_errors_total{source="node"} 0)")) << text;
}

// --- HTTP against hostile clients --------------------------------------------------------------

using Clock = std::chrono::steady_clock;

using rkit::testing::seconds_since;

TEST(RtopServeLimits, RefusedBeforeTheBodyIsRead) {
  const ServeLimits limits;
  const std::string small = "100", at_cap = std::to_string(limits.max_body_bytes),
                    over = std::to_string(limits.max_body_bytes + 1), huge = "1000000000", not_a_number = "12x",
                    negative = "-1", empty, too_long = std::string(25, '9');
  EXPECT_EQ(request_refusal("GET", nullptr, false, limits), 0);
  EXPECT_EQ(request_refusal("HEAD", nullptr, false, limits), 0);
  EXPECT_EQ(request_refusal("GET", &small, false, limits), 0);
  EXPECT_EQ(request_refusal("GET", &at_cap, false, limits), 0);
  EXPECT_EQ(request_refusal("GET", &over, false, limits), 413);
  EXPECT_EQ(request_refusal("POST", &huge, false, limits), 413);  // the size first, whatever the method
  EXPECT_EQ(request_refusal("GET", nullptr, true, limits), 411);
  EXPECT_EQ(request_refusal("POST", nullptr, false, limits), 405);
  EXPECT_EQ(request_refusal("PUT", &small, false, limits), 405);
  for (const std::string* bad : {&not_a_number, &negative, &empty, &too_long})
    EXPECT_EQ(request_refusal("GET", bad, false, limits), 400) << *bad;
}

// Both ends of a TCP connection on loopback, non-blocking on the server's side, which a
// ClientConnection then owns.
struct TcpPair {
  int server = -1, client = -1;
  TcpPair() {
    const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(l, 1) != 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("listen on loopback");
    client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(client, reinterpret_cast<sockaddr*>(&a), len) != 0) throw std::runtime_error("connect");
    server = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    ::close(l);
  }
  ~TcpPair() {
    if (client >= 0) ::close(client);
  }
  void send(const std::string& text) const {
    ASSERT_EQ(::send(client, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
  }
};

using Stage = ClientConnection::Stage;
using End = ClientConnection::End;

// Advances `c` whenever its socket is ready or its deadline passes, as serve's loop does,
// while its stage is `stage` (10 s at most).
void pump(ClientConnection& c, Stage stage) {
  const auto start = Clock::now();
  while (c.stage() == stage && seconds_since(start) < 10) {
    pollfd p{c.fd(), c.events(), 0};
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(c.deadline() - Clock::now()).count();
    ::poll(&p, 1, static_cast<int>(std::clamp<long long>(ms, 0, 1000)));
    c.advance(Clock::now());
  }
}

// What `c` read, through read() as the worker's httplib does, with read()'s last answer.
std::string taken(ClientConnection& c, ssize_t& last) {
  std::string out;
  char buf[1000];
  while ((last = c.read(buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(last));
  return out;
}

TEST(RtopServeLimits, ARequestThatTricklesInEndsAtItsDeadlineNotAtAReadTimeout) {
  TcpPair pair;
  ServeLimits limits;
  limits.read_timeout_s = 0.4;
  const auto start = Clock::now();
  ClientConnection c(pair.server, limits, start);
  // A byte every 20 ms, and never the blank line that ends a head.
  std::atomic<bool> done{false};
  std::thread slow([&] {
    for (int i = 0; !done && i < 150; ++i) {
      if (::send(pair.client, "x", 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  pump(c, Stage::Reading);
  const double took = seconds_since(start);
  done = true;
  slow.join();
  EXPECT_EQ(c.stage(), Stage::Done);
  EXPECT_EQ(c.end(), End::Deadline);
  EXPECT_GE(took, 0.39);
  EXPECT_LT(took, 1.0);
  EXPECT_GT(c.bytes_received(), 5u);
}

TEST(RtopServeLimits, TheDeadlineCountsFromTheAccept) {
  TcpPair pair;
  ServeLimits limits;
  limits.read_timeout_s = 0.3;
  ClientConnection c(pair.server, limits, Clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(c.advance(Clock::now()), Stage::Done);
  EXPECT_EQ(c.end(), End::Deadline);
}

TEST(RtopServeLimits, AHeadThatHasComeGoesToAWorkerWhole) {
  TcpPair pair;
  ClientConnection c(pair.server, ServeLimits{}, Clock::now());
  pair.send("GET /metrics HTTP/1.1\r\n");
  EXPECT_EQ(c.advance(Clock::now()), Stage::Reading);
  pair.send("Host: x\r\n\r\n");
  pump(c, Stage::Reading);
  EXPECT_EQ(c.stage(), Stage::Answering);
  ssize_t last = 0;
  EXPECT_EQ(taken(c, last), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(last, -1);  // the worker never waits for more
  EXPECT_EQ(c.end(), End::Incomplete);
}

TEST(RtopServeLimits, ARequestLongerThanTheCapIsCutThere) {
  TcpPair pair;
  ServeLimits limits;
  limits.max_head_bytes = 1000;
  limits.max_body_bytes = 24;
  ClientConnection c(pair.server, limits, Clock::now());
  const std::string lots(200000, 'h');
  std::thread big([&] { ::send(pair.client, lots.data(), lots.size(), MSG_NOSIGNAL); });
  pump(c, Stage::Reading);
  EXPECT_EQ(c.stage(), Stage::Answering);  // for the worker to answer 400
  ssize_t last = 0;
  EXPECT_EQ(taken(c, last).size(), 1024u);
  EXPECT_EQ(last, -1);
  EXPECT_EQ(c.end(), End::TooLong);
  EXPECT_EQ(c.bytes_received(), 1024u);
  ::shutdown(pair.client, SHUT_RDWR);  // the sender's rest goes nowhere
  big.join();
}

TEST(RtopServeLimits, AClientThatClosesBeforeItsHeadEnds) {
  TcpPair pair;
  ClientConnection c(pair.server, ServeLimits{}, Clock::now());
  pair.send("GET / HTTP/1.1\r\n");
  ::shutdown(pair.client, SHUT_WR);
  pump(c, Stage::Reading);
  EXPECT_EQ(c.stage(), Stage::Done);
  EXPECT_EQ(c.end(), End::PeerClosed);
}

TEST(RtopServeLimits, AResponseNobodyReadsEndsAtTheWriteDeadline) {
  TcpPair pair;
  ServeLimits limits;
  limits.write_timeout_s = 0.4;
  ClientConnection c(pair.server, limits, Clock::now());
  pair.send("GET / HTTP/1.1\r\n\r\n");
  pump(c, Stage::Reading);
  ASSERT_EQ(c.stage(), Stage::Answering);
  const std::string big(64 << 20, 'r');  // more than the kernel's buffers hold
  ASSERT_EQ(c.write(big.data(), big.size()), static_cast<ssize_t>(big.size()));
  const auto start = Clock::now();
  c.answered(start);
  pump(c, Stage::Sending);  // the client never reads
  EXPECT_EQ(c.stage(), Stage::Done);
  EXPECT_EQ(c.end(), End::Deadline);
  EXPECT_GE(seconds_since(start), 0.39);
  EXPECT_LT(seconds_since(start), 1.5);
}

TEST(RtopServeLimits, LingeringLetsAClientThatIsStillSendingReadTheResponse) {
  TcpPair pair;
  ServeLimits limits;
  limits.linger_s = 2;
  ClientConnection c(pair.server, limits, Clock::now());
  // A head announcing a body the server will never read, then that body, while the
  // client watches for the answer.
  pair.send("POST / HTTP/1.1\r\nContent-Length: 4194304\r\n\r\n");
  const std::string body(4 << 20, 'b');
  std::string answer;
  std::thread client([&] {
    std::size_t sent = 0;
    pollfd p{pair.client, POLLIN | POLLOUT, 0};
    while (::poll(&p, 1, 3000) > 0) {
      if (p.revents & POLLIN) {
        char buf[256];
        const ssize_t n = ::recv(pair.client, buf, sizeof buf, 0);
        if (n <= 0) break;
        answer.append(buf, static_cast<std::size_t>(n));
      } else if (p.revents & POLLOUT) {
        const ssize_t n = ::send(pair.client, body.data() + sent, std::min<std::size_t>(65536, body.size() - sent),
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) break;
        if (n > 0) sent += static_cast<std::size_t>(n);
        if (sent == body.size()) p.events = POLLIN;
      } else {
        break;
      }
    }
    ::close(pair.client);  // having read the answer to its end
    pair.client = -1;
  });
  pump(c, Stage::Reading);
  ASSERT_EQ(c.stage(), Stage::Answering);
  const std::string response = "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  c.write(response.data(), response.size());
  const auto start = Clock::now();
  c.answered(start);
  pump(c, Stage::Sending);
  pump(c, Stage::Lingering);
  EXPECT_LT(seconds_since(start), 1.5);  // the client closed, or a MiB was discarded
  EXPECT_EQ(c.stage(), Stage::Done);
  client.join();
  EXPECT_EQ(answer, response);
  EXPECT_LT(c.bytes_received(), ServeLimits{}.max_head_bytes + ServeLimits{}.max_body_bytes + 1);
}

// rtop serve in this process with small limits, stopped by SIGTERM as by a signal from outside.
class ServeInProcess {
 public:
  ServeInProcess(const ServeLimits& limits, ServeOptions options = quiet_options()) : exporter_(options) {
    thread_ = std::thread([this, limits] {
      try {
        serve(
            exporter_, parse_listen("127.0.0.1:0"), [this](const std::string& url) { url_.set_value(url); }, limits);
      } catch (...) {
        url_.set_exception(std::current_exception());
      }
    });
    const std::string url = url_.get_future().get();
    port_ = std::stoi(url.substr(url.rfind(':') + 1));
  }
  ~ServeInProcess() {
    std::raise(SIGTERM);
    thread_.join();
  }
  int port() const { return port_; }
  static ServeOptions quiet_options() {
    ServeOptions o;
    o.use_nvml = false;
    o.queue = false;
    o.quiet = true;
    return o;
  }

 private:
  InterruptGuard guard_;
  Exporter exporter_;
  std::promise<std::string> url_;
  std::thread thread_;
  int port_ = 0;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect");
  return fd;
}

// What the server sends on `fd` until it closes (true) or `timeout_s` passes (false).
bool read_until_closed(int fd, double timeout_s, std::string& got) {
  const auto start = Clock::now();
  for (;;) {
    const double left = timeout_s - seconds_since(start);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
    got.append(buf, static_cast<std::size_t>(n));
  }
}

// Sends `request` on a new connection; the status line of the answer ("" when none
// came within `timeout_s`) and how long it took.
std::pair<std::string, double> ask(int port, const std::string& request, double timeout_s = 5) {
  const auto start = Clock::now();
  const int fd = connect_to(port);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  const bool closed = read_until_closed(fd, timeout_s, got);
  ::close(fd);
  return {closed ? got.substr(0, got.find("\r\n")) : "", seconds_since(start)};
}

const std::string kGet = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(RtopServeLimits, SlowClientsHoldNoWorker) {
  ServeLimits limits;
  limits.workers = 1;
  limits.read_timeout_s = 1;
  ServeInProcess server(limits);
  // More slow clients than workers, each a byte at a time.
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(connect_to(server.port()));
    ::send(slow.back(), "GET /metrics HTTP/1.1\r\nX: ", 26, MSG_NOSIGNAL);
  }
  const auto [status, took] = ask(server.port(), kGet);
  EXPECT_EQ(status, "HTTP/1.1 200 OK");
  EXPECT_LT(took, 0.9);  // before any slow one's deadline
  for (int fd : slow) {
    std::string got;
    EXPECT_TRUE(read_until_closed(fd, 3, got));  // cut at their deadline
    ::close(fd);
  }
}

TEST(RtopServeLimits, ANewConnectionBeyondTheLimitClosesTheOldestSilentOne) {
  ServeLimits limits;
  limits.connections = 4;
  limits.read_timeout_s = 2;
  ServeInProcess server(limits);
  // Six connections that say nothing: the first two are closed to make room, with a 503.
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(connect_to(server.port()));
  for (int i = 0; i < 6; ++i) {
    std::string got;
    const bool closed = read_until_closed(idle[i], i < 2 ? 1.0 : 0.2, got);
    EXPECT_EQ(closed, i < 2) << i;
    if (i < 2) {
      EXPECT_EQ(got.substr(0, 13), "HTTP/1.1 503 ") << got;
    }
  }
  // A scraper still gets in, at once.
  const auto [status, took] = ask(server.port(), kGet);
  EXPECT_EQ(status, "HTTP/1.1 200 OK");
  EXPECT_LT(took, 1.0);
  for (int fd : idle) ::close(fd);
}

TEST(RtopServeLimits, RequestsBeyondWorkersAndQueueAre503AtOnce) {
  testing::TempDir dir;
  ServeOptions o = exporter_options(fake_rsub(dir, "sleep 1; true"));  // each scrape takes a second
  ServeLimits limits;
  limits.workers = 1;
  limits.queue = 1;
  ServeInProcess server(limits, o);
  std::vector<int> fds;
  for (int i = 0; i < 2; ++i) {
    fds.push_back(connect_to(server.port()));
    ::send(fds.back(), kGet.data(), kGet.size(), MSG_NOSIGNAL);
  }
  // The first is being answered, the second waits (the server takes connections in
  // order, and both requests are there before the third connects).
  const auto [status, took] = ask(server.port(), kGet);
  EXPECT_EQ(status, "HTTP/1.1 503 Service Unavailable");
  EXPECT_LT(took, 0.5);
  for (int fd : fds) {
    std::string got;
    EXPECT_TRUE(read_until_closed(fd, 10, got));
    EXPECT_EQ(got.substr(0, 15), "HTTP/1.1 200 OK") << got;
    ::close(fd);
  }
}

TEST(RtopServeLimits, ServeRefusesBodiesBeforeReadingThem) {
  ServeInProcess server(ServeLimits{});
  for (const auto& [request, status] : std::vector<std::pair<std::string, std::string>>{
           {"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n", "413"},
           {"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n", "413"},
           {"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "411"},
           {"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", "405"},
           {"GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 9999999\r\n\r\n", "413"},
           {"GET /metrics HTTP/1.1\r\nX-Big: " + std::string(40000, 'a') + "\r\n\r\n", "400"},
           {"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", "200"}}) {
    const auto [line, took] = ask(server.port(), request);
    EXPECT_EQ(line.substr(0, 13), "HTTP/1.1 " + status + " ") << request.substr(0, 80);
  }
}

}  // namespace
}  // namespace rkit::rtop
