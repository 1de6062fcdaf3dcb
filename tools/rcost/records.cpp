// File: tools/rcost/records.cpp — reading jobs, samples and sacct text (records.hpp).
#include "records.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>

#include "records_impl.hpp"
#include "rkit/cpus.hpp"
#include "rkit/parallel.hpp"
#include "rkit/time.hpp"

namespace rkit::rcost {

using namespace detail;

// Names are short (tenants, users, hosts): 8 bytes at a time, multiplied and mixed.
std::uint64_t Strings::hash(std::string_view s) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  std::uint64_t tail = 0;
  if (s.size() > i) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 29);
}

void Strings::grow() {
  std::vector<std::uint32_t> slots(std::max<std::size_t>(1024, slots_.size() * 2), 0);
  const std::size_t mask = slots.size() - 1;
  for (std::uint32_t id = 0; id < names_.size(); ++id) {
    std::size_t i = hashes_[id] & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = id + 1;
  }
  slots_ = std::move(slots);
}

std::uint32_t Strings::id(std::string_view s) {
  if (slots_.empty()) grow();
  const std::uint64_t h = hash(s);
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = h & mask;
  for (; slots_[i]; i = (i + 1) & mask) {
    const std::uint32_t id = slots_[i] - 1;
    if (hashes_[id] == h && names_[id] == s) return id;
  }
  const auto id = static_cast<std::uint32_t>(names_.size());
  names_.emplace_back(s);
  hashes_.push_back(h);
  slots_[i] = id + 1;
  if (names_.size() * 2 > slots_.size()) grow();
  return id;
}

std::optional<std::uint32_t> Strings::find(std::string_view s) const {
  if (slots_.empty()) return std::nullopt;
  const std::uint64_t h = hash(s);
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = h & mask; slots_[i]; i = (i + 1) & mask) {
    const std::uint32_t id = slots_[i] - 1;
    if (hashes_[id] == h && names_[id] == s) return id;
  }
  return std::nullopt;
}

// ------------------------------------------------------------------ sacct text

namespace {

// The header line of `sacct -P`: names the columns. Throws Error(DataErr) when a
// field rcost needs is missing.
SacctColumns sacct_columns(std::string_view header, const std::string& where) {
  SacctColumns c;
  const auto names = split_bar(trim(header));
  c.count = names.size();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string_view n = names[i];
    const int at = static_cast<int>(i);
    if (n == "JobID")
      c.job_id = at;
    else if (n == "User")
      c.user = at;
    else if (n == "Account")
      c.account = at;
    else if (n == "Partition")
      c.partition = at;
    else if (n == "State")
      c.state = at;
    else if (n == "Submit")
      c.submit = at;
    else if (n == "Eligible")
      c.eligible = at;
    else if (n == "Start")
      c.start = at;
    else if (n == "End")
      c.end = at;
    else if (n == "AllocTRES")
      c.alloc_tres = at;
    else if (n == "NodeList")
      c.node_list = at;
  }
  std::vector<const char*> missing;
  auto need = [&](int col, const char* name) {
    if (col < 0) missing.push_back(name);
  };
  need(c.job_id, "JobID");
  need(c.user, "User");
  need(c.account, "Account");
  need(c.state, "State");
  need(c.submit, "Submit");
  need(c.start, "Start");
  need(c.end, "End");
  need(c.alloc_tres, "AllocTRES");
  if (!missing.empty())
    throw Error(
        Exit::DataErr, fmt::format("{}: sacct text lacks the field(s) {}", where, fmt::join(missing, ",")),
        "use sacct -a -X -P --format=JobID,User,Account,Partition,State,Submit,Eligible,Start,End,AllocTRES,NodeList");
  return c;
}

}  // namespace

std::vector<std::string_view> detail::split_bar(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t from = 0;
  for (;;) {
    const std::size_t bar = line.find('|', from);
    out.push_back(line.substr(from, bar == std::string_view::npos ? std::string_view::npos : bar - from));
    if (bar == std::string_view::npos) break;
    from = bar + 1;
  }
  return out;
}

bool detail::parse_number(std::string_view s, double& out) {
  // Digits and a point only: from_chars would also take "nan", "inf" and a sign.
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s.front()))) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out, std::chars_format::fixed);
  return ec == std::errc() && p == end;
}

double parse_sacct_time(std::string_view s) { return parse_local_time(s).value_or(kNone); }

bool parse_tres(std::string_view s, Tres& out) {
  out = Tres{};
  bool untyped = false;
  double typed = 0;
  int types = 0;
  while (!s.empty()) {
    const std::size_t comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view key = item.substr(0, eq);
    std::string_view value = item.substr(eq + 1);
    if (key == "mem") {
      double scale = 1024.0 * 1024;  // sacct prints memory in MiB without a suffix
      if (!value.empty()) {
        switch (value.back()) {
          case 'K': scale = 1024.0; break;
          case 'M': scale = 1024.0 * 1024; break;
          case 'G': scale = 1024.0 * 1024 * 1024; break;
          case 'T': scale = 1024.0 * 1024 * 1024 * 1024; break;
          default: break;
        }
        if (!std::isdigit(static_cast<unsigned char>(value.back()))) {
          if (scale == 1024.0 * 1024 && value.back() != 'M') return false;  // not K, M, G or T
          value.remove_suffix(1);
        }
      }
      double v = 0;
      if (!parse_number(value, v) || v < 0) return false;
      out.memory_bytes = v * scale;
    } else if (key == "cpu") {
      if (!parse_number(value, out.cpus) || out.cpus < 0) return false;
    } else if (key == "gres/gpu") {
      if (!parse_number(value, out.gpus) || out.gpus < 0) return false;
      untyped = true;
    } else if (key.starts_with("gres/gpu:")) {
      // Typed counts repeat the untyped total when it is there; else they add up.
      double v = 0;
      if (!parse_number(value, v) || v < 0) return false;
      typed += v;
      const std::string type(key.substr(9));
      out.gpu_type = ++types == 1 ? type : std::string();  // mixed types: priced at the default
    }
  }
  if (!untyped) out.gpus = typed;
  return true;
}

// ------------------------------------------------------------------ chunks

namespace {

// Appends a chunk's records to `all`, translating its string ids and unit offsets.
void append(Dataset& all, const Dataset& part) {
  std::vector<std::uint32_t> map(part.strings.size());
  for (std::uint32_t i = 0; i < part.strings.size(); ++i) map[i] = all.strings.id(part.strings.name(i));
  const auto units_base = static_cast<std::uint32_t>(all.units.size());
  const auto utils_base = static_cast<std::uint32_t>(all.utils.size());
  const auto gpus_base = static_cast<std::uint32_t>(all.gpu_utils.size());
  all.units.insert(all.units.end(), part.units.begin(), part.units.end());
  all.utils.insert(all.utils.end(), part.utils.begin(), part.utils.end());
  all.gpu_utils.insert(all.gpu_utils.end(), part.gpu_utils.begin(), part.gpu_utils.end());
  for (Sample s : part.samples) {
    s.host = map[s.host];
    s.gpu_model = map[s.gpu_model];
    s.cpus_at += utils_base;
    s.gpus_at += gpus_base;
    all.samples.push_back(s);
  }
  all.ids.insert(all.ids.end(), part.ids.begin(), part.ids.end());
  all.jobs.reserve(all.jobs.size() + part.jobs.size());
  for (Job j : part.jobs) {
    for (std::uint32_t* id : {&j.tenant, &j.user, &j.project, &j.gpu_type, &j.backend, &j.node, &j.partition, &j.state})
      *id = map[*id];
    j.pus_at += units_base;
    j.gpus_at += units_base;
    all.jobs.push_back(j);
  }
}

// What an input is (JSON Lines or sacct text) and where its records start.
struct Plan {
  InputKind kind = InputKind::Json;
  SacctColumns cols;
  std::uint64_t header_lines = 0;  // lines before the first record (blank ones, sacct's header)
  std::vector<std::pair<std::size_t, std::size_t>> chunks;  // byte ranges, each starting at a line
};

Plan plan(const Input& in, unsigned threads) {
  Plan p;
  const std::size_t size = in.size();
  // The first non-blank line says what the input is: JSON, or sacct's header line.
  // Blank lines before it are skipped (and counted, for line numbers), however many.
  std::string window;
  std::size_t first = 0;  // where the first line that is not blank starts
  bool found = false;
  for (std::size_t at = 0; !found && at < size;) {
    const std::size_t to = std::min(size, at + (1 << 20));
    const char* bytes = in.bytes(at, to, window);
    for (std::size_t i = 0; i < to - at && !found; ++i) {
      if (bytes[i] == '\n') {
        ++p.header_lines;
        first = at + i + 1;
      } else if (bytes[i] != ' ' && bytes[i] != '\t' && bytes[i] != '\r') {
        found = true;
      }
    }
    at = to;
  }
  if (!found) return p;
  std::string head_buffer;
  const std::size_t head_size = std::min<std::size_t>(size - first, 1 << 20);
  const std::string_view head(in.bytes(first, first + head_size, head_buffer), head_size);
  const std::string_view line = trim(head.substr(0, std::min(head.find('\n'), head.size())));
  std::size_t body = first;
  if (line[0] != '{') {
    if (line.find('|') == std::string_view::npos || line.find("JobID") == std::string_view::npos)
      throw Error(Exit::DataErr,
                  fmt::format("{}:{}: neither JSON Lines nor sacct -P text", in.name(), p.header_lines + 1),
                  "rcost reads rkit.job.v1 and rkit.sample.v1 records, and `sacct -P` text with its header line");
    p.cols = sacct_columns(line, fmt::format("{}:{}", in.name(), p.header_lines + 1));
    p.kind = InputKind::Sacct;
    body = in.line_start_after(first);  // the line after the header
    p.header_lines += 1;
  }
  // Chunks of about 16 MiB (at least one per thread), each starting at a line.
  const std::size_t want = std::max<std::size_t>(threads, (size - std::min(body, size)) / (16u << 20) + 1);
  std::size_t from = std::min(body, size);
  for (std::size_t i = 1; i <= want && from < size; ++i) {
    const std::size_t to = i == want ? size : std::max(from, in.line_start_after(body + (size - body) / want * i - 1));
    if (to > from) p.chunks.emplace_back(from, to);
    from = to;
  }
  return p;
}

}  // namespace

const std::string& Dataset::job_id(std::size_t i) const {
  static const std::string none;
  return i < ids.size() ? ids[i] : none;
}

Inputs::Inputs(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) inputs_.push_back(std::make_unique<Input>(p));
}

Inputs::~Inputs() = default;

void Inputs::stream(const ReadOptions& opt, const Digest& digest, const Take& take, Dataset& totals) const {
  const unsigned threads = opt.threads ? opt.threads : std::max(1u, usable_cpus());
  std::uint64_t seq = 0;
  for (const auto& input : inputs_) {
    const Input& in = *input;
    const Plan p = plan(in, threads);
    std::uint64_t line_base = p.header_lines;  // the lines before the chunk being taken
    const std::uint64_t first_seq = seq;
    seq += p.chunks.size();
    ordered_parallel<ChunkResult>(
        p.chunks.size(), threads, 2 * threads,
        [&](std::size_t c, unsigned) {
          ChunkResult r;
          parse_chunk(in, p.kind, p.cols, opt, p.chunks[c].first, p.chunks[c].second, r);
          if (digest && !(opt.strict && r.data.bad_count)) r.digest = digest(r.data, first_seq + c);
          return r;
        },
        [&](std::size_t c, ChunkResult&& r) {
          for (auto& [line, why] : r.bad) {
            if (opt.strict)
              throw Error(Exit::DataErr, fmt::format("{}:{}: {}", in.name(), line_base + line, why),
                          "without --strict, bad records are counted and skipped");
            if (totals.bad.size() < kMaxBadKept)
              totals.bad.push_back({fmt::format("{}:{}", in.name(), line_base + line), why});
          }
          line_base += r.lines_in_chunk;
          totals.ignored += r.data.ignored;
          totals.lines += r.data.lines;
          totals.bad_count += r.data.bad_count;
          take(r.data, std::move(r.digest), first_seq + c);
        });
  }
}

Dataset read_inputs(const Inputs& inputs, const ReadOptions& opt) {
  Dataset all;
  inputs.stream(
      opt, nullptr, [&](Dataset& chunk, std::unique_ptr<ChunkDigest>, std::uint64_t) { append(all, chunk); }, all);
  return all;
}

Dataset read_inputs(const std::vector<std::string>& paths, const ReadOptions& opt) {
  return read_inputs(Inputs(paths), opt);
}

}  // namespace rkit::rcost
