// rtrain run --trace: Chrome Trace Event Format timelines, gzip-compressed (see trace.hpp).
#include "trace.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>

#include "rkit/atomic_file.hpp"
#include "rkit/error.hpp"
#include "rkit/time.hpp"

namespace rkit::rtrain {
namespace {

std::int64_t ns_between(Tracer::Clock::time_point a, Tracer::Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// Microseconds as the format wants them, to the nanosecond (nothing is before the zero).
void append_us(std::string& out, std::int64_t ns) {
  ns = std::max<std::int64_t>(ns, 0);
  out += fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

std::string gzip(std::string_view text, const std::string& what) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw Error(Exit::Software, what + ": zlib cannot start");
  std::string out;
  char buf[1 << 16];
  std::size_t at = 0;
  int rc = Z_OK;
  do {  // in pieces: zlib's counts are 32-bit
    const std::size_t piece = std::min<std::size_t>(text.size() - at, 1u << 30);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data() + at));
    z.avail_in = static_cast<uInt>(piece);
    at += piece;
    const int flush = at == text.size() ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      rc = deflate(&z, flush);
      out.append(buf, sizeof buf - z.avail_out);
    } while (z.avail_out == 0 && rc == Z_OK);
  } while (at < text.size() && rc == Z_OK);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw Error(Exit::Software, what + ": zlib failed");
  return out;
}

void write_gz(const std::string& path, std::string_view text) { atomic_write_file(path, gzip(text, path)); }

}  // namespace

Tracer::Tracer(std::string dir, int rank, int world) : dir_(std::move(dir)), rank_(rank), world_(world) {
  if (dir_.empty()) return;
  std::error_code ec;  // the folder now, not after hours of training
  std::filesystem::create_directories(dir_, ec);
  if (ec || ::access(dir_.c_str(), W_OK) != 0)
    throw Error(Exit::IoErr, fmt::format("--trace {}: {}", dir_, ec ? ec.message() : std::strerror(errno)));
}

void Tracer::align(const std::function<void()>& barrier) {
  barrier();
  std::lock_guard lock(mu_);
  zero_ = Clock::now();
  zero_unix_s_ = unix_now_s();
}

void Tracer::complete(int tid, std::string name, const char* cat, Clock::time_point begin, Clock::time_point end,
                      Json args) {
  if (!enabled()) return;
  std::lock_guard lock(mu_);
  events_.push_back({tid, std::move(name), cat, ns_between(zero_, begin),
                     std::max<std::int64_t>(0, ns_between(begin, end)), std::move(args)});
}

void Tracer::name_thread(int tid, std::string name) {
  std::lock_guard lock(mu_);
  thread_names_.emplace_back(tid, std::move(name));
}

Tracer::Slice layer_slice(Tracer* tracer, const char* pass, std::size_t layer) {
  if (!tracer) return {};
  return tracer->slice(fmt::format("{} {}", pass, layer), pass, Json{{"layer", layer}});
}

std::string trace_file(const std::string& dir, int rank) { return fmt::format("{}/rank-{}.trace.json.gz", dir, rank); }

std::string Tracer::write() {
  if (!enabled()) return "";
  std::string out = "{\"traceEvents\":[\n";
  auto meta = [&](const char* what, int tid, const std::string& name) {
    out += fmt::format("{{\"ph\":\"M\",\"name\":\"{}\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", what, rank_, tid);
    append_json_string(out, name);
    out += "}},\n";
  };
  meta("process_name", 0, fmt::format("rank {}", rank_));
  out += fmt::format(
      "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}},\n", rank_,
      rank_);
  meta("thread_name", kComputeThread, "compute");
  meta("thread_name", kCommThread, "collectives");
  std::lock_guard lock(mu_);
  for (const auto& [tid, name] : thread_names_) meta("thread_name", tid, name);
  for (const Event& e : events_) {
    out += "{\"ph\":\"X\",\"name\":";
    append_json_string(out, e.name);
    out += ",\"cat\":";
    append_json_string(out, e.cat);
    out += fmt::format(",\"pid\":{},\"tid\":{},\"ts\":", rank_, e.tid);
    append_us(out, e.begin_ns);
    out += ",\"dur\":";
    append_us(out, e.dur_ns);
    if (!e.args.is_null()) out += ",\"args\":" + to_json_line(e.args);
    out += "},\n";
  }
  if (out.ends_with(",\n")) out.erase(out.size() - 2, 1);
  out += fmt::format(
      "],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"schema\":\"rkit.trace.v1\",\"rank\":{},"
      "\"world_size\":{},\"zero_unix_s\":{:.6f}}}}}\n",
      rank_, world_, zero_unix_s_);
  const std::string path = trace_file(dir_, rank_);
  write_gz(path, out);
  return path;
}

Json read_trace(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads a file that is not gzip as it is
  if (!f) throw system_error("open " + path, errno);
  std::string text;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  int err = 0;
  const std::string why = n < 0 ? gzerror(f, &err) : "";
  gzclose(f);
  if (n < 0) throw Error(Exit::DataErr, fmt::format("{}: not a whole gzip file ({})", path, why));
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw Error(Exit::DataErr, fmt::format("{}: not a trace (no traceEvents array)", path));
  return j;
}

std::pair<int, std::size_t> merge_traces(const std::string& dir, const std::string& out) {
  std::map<int, std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename();
    constexpr std::string_view prefix = "rank-", suffix = ".trace.json.gz";
    if (!name.starts_with(prefix) || !name.ends_with(suffix)) continue;
    int rank = -1;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size() - suffix.size();
    if (auto [p, err] = std::from_chars(first, last, rank);
        err == std::errc() && p == last && rank >= 0 && name == fmt::format("rank-{}{}", rank, suffix))
      files[rank] = entry.path();
  }
  if (ec) throw Error(Exit::NoInput, fmt::format("{}: {}", dir, ec.message()));
  if (files.empty()) throw Error(Exit::NoInput, fmt::format("{}: no rank-R.trace.json.gz in it", dir));
  Json merged{{"traceEvents", Json::array()}, {"displayTimeUnit", "ms"}};
  Json ranks = Json::array();
  for (auto& [rank, path] : files) {
    Json t = read_trace(path);
    for (Json& e : t["traceEvents"]) merged["traceEvents"].push_back(std::move(e));
    ranks.push_back(t.value("otherData", Json::object()));
  }
  const std::size_t events = merged["traceEvents"].size();
  merged["otherData"] = Json{{"schema", "rkit.trace.v1"}, {"ranks", std::move(ranks)}};
  write_gz(out, merged.dump() + "\n");
  return {static_cast<int>(files.size()), events};
}

}  // namespace rkit::rtrain
