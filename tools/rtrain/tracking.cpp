// rtrain's records in the run store (see tracking.hpp).
#include "tracking.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "rkit/ckpt/archive.hpp"
#include "rkit/cpus.hpp"
#include "rkit/digest.hpp"
#include "rkit/error.hpp"
#include "rkit/host.hpp"
#include "rkit/nvml.hpp"
#include "rkit/prices.hpp"
#include "rkit/process.hpp"
#include "rkit/time.hpp"
#include "rkit/topology.hpp"
#include "rkit/version.hpp"

namespace rkit::rtrain {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The peak resident memory of this process (RUSAGE_SELF) or of its largest waited-for child.
std::uint64_t peak_rss_bytes(int who) {
  struct rusage u {};
  return ::getrusage(who, &u) == 0 ? static_cast<std::uint64_t>(u.ru_maxrss) * 1024 : 0;
}

// git's output, or nullopt when it fails (not a work tree, no git).
std::optional<std::string> git(const std::string& dir, std::vector<std::string> args) {
  // Only in a folder of this user's: a repository's configuration (core.fsmonitor, clean
  // filters) runs commands, and another user's must not run ours.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || st.st_uid != ::getuid()) return std::nullopt;
  SpawnOptions o;
  o.argv = {"git", "--no-optional-locks", "-c", "core.fsmonitor=false", "-C", dir};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.out = Redirect::pipe();
  o.err = Redirect::null();
  try {
    RunResult r = run(o, 30.0);
    if (!r.status.success()) return std::nullopt;
    return r.out;
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "";
}

std::string absolute(const std::string& path) {
  return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
}

// One warning per run when the store dropped metrics beyond its limit of keys.
void warn_dropped(std::size_t dropped, const std::string& id, bool& warned) {
  if (dropped == 0 || warned) return;
  warned = true;
  warn("rtrain",
       fmt::format("run {}: a run keeps at most {} metrics; values of further ones are not recorded", id,
                   runs::Store::kMaxMetricKeys),
       std::cerr);
}

// A numeric field of an event record, as a metric.
void add_metrics(const Json& event, std::vector<runs::Metric>& out) {
  const std::int64_t step = event.value("step", std::int64_t{0});
  const double t = event.value("time_unix_s", unix_now_s());
  for (const auto& [key, v] : event.items()) {
    if (!v.is_number() || key == "step" || key == "time_unix_s") continue;
    out.push_back({key, step, v.get<double>(), t});
  }
}

}  // namespace

void TrackOptions::resolve(const Config& config) {
  if (price_sheet.empty()) price_sheet = configured_price_sheet(config).value_or("");
  if (const char* t = std::getenv("RKIT_TRACK"); t && std::string_view(t) == "0") enabled = false;
  if (experiment.empty())
    if (const char* e = std::getenv("RKIT_EXPERIMENT"); e && *e) experiment = e;
  if (experiment.empty()) experiment = "default";
  (void)tags_json();  // refuses a bad tag now, before any work
}

void add_track_flags(CLI::App& cmd, TrackOptions& o, bool opt_in) {
  cmd.add_option("--experiment", o.experiment,
                 "Record the run under this experiment (default $RKIT_EXPERIMENT, else "
                 "default)")
      ->type_name("NAME");
  cmd.add_option("--run-name", o.name, "A name for the run's record")->type_name("NAME");
  cmd.add_option("--tag", o.tags, "A tag of the run's record (repeatable)")->type_name("KEY=VALUE");
  cmd.add_option("--project", o.project,
                 "Keep the record in DIR/runs.db, a project's store (default $RKIT_PROJECT_DIR, else the state "
                 "directory's)")
      ->type_name("DIR");
  if (opt_in)
    cmd.add_flag(
        "--track", o.enabled,
        "Keep a record of the run, with what the workers log to $RKIT_METRICS_FILE (examples/python/rkit_track.py)");
  else
    cmd.add_flag(
        "--no-track", [&o](std::int64_t) { o.enabled = false; },
        "Keep no record in the run store (also $RKIT_TRACK=0)");
}

Json TrackOptions::tags_json() const {
  Json out = Json::object();
  for (const std::string& t : tags) {
    const std::size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0) throw Error(Exit::Usage, fmt::format("--tag '{}': expected KEY=VALUE", t));
    out[t.substr(0, eq)] = t.substr(eq + 1);
  }
  return out;
}

Json code_revision(const std::string& dir) {
  const auto found = git(dir, {"rev-parse", "--show-toplevel", "--absolute-git-dir"});
  if (!found) return nullptr;
  // git looks for the repository above `dir` too: it and its .git must be this user's
  // (another user's could run their filters and hooks as this one; git 2.35.2 refuses
  // them too, as "dubious ownership").
  const std::string top = first_line(*found),
                    git_dir = first_line(found->substr(std::min(found->size(), top.size() + 1)));
  for (const std::string& d : {top, git_dir}) {
    struct stat st {};
    if (d.empty() || ::stat(d.c_str(), &st) != 0 || st.st_uid != ::getuid()) return nullptr;
  }
  Json code{{"repo", top}, {"commit", nullptr}, {"branch", nullptr}, {"dirty", false}, {"diff_xxh3", nullptr}};
  if (const auto head = git(dir, {"rev-parse", "--verify", "-q", "HEAD"})) code["commit"] = first_line(*head);
  if (const auto branch = git(dir, {"symbolic-ref", "--short", "-q", "HEAD"})) code["branch"] = first_line(*branch);
  if (code["commit"].is_string()) {
    const auto diff = git(dir, {"diff", "HEAD", "--no-ext-diff", "--no-textconv", "--binary"});
    if (!diff) {
      code["dirty"] = nullptr;  // unknown: git diff failed, and reproduce refuses an unknown tree
    } else if (!diff->empty()) {
      code["dirty"] = true;
      code["diff_xxh3"] = digest_hex(digest_bytes(*diff));
    }
  }
  return code;
}

Json system_facts() {
  Json s{{"host", host_name()},
         {"kernel", kernel_name()},
         {"cpu_model", cpu_model()},
         {"cpus", usable_cpus()},
         {"memory_bytes", physical_memory_bytes()},
         {"rkit_version", kVersion},
         {"rkit_revision", kGitRevision},
         {"topology_xxh3", nullptr},
         {"blas", nullptr},
         {"gpu_driver", nullptr}};
  try {
    ProbeOptions p;
    p.use_nvml = false;  // the GPUs' PCI view is enough to tell machines apart, and fast
    s["topology_xxh3"] = digest_hex(digest_bytes(probe(p).to_json().dump()));
  } catch (const Error&) {
  }
  using Config = const char* (*)();
  if (auto* f = reinterpret_cast<Config>(::dlsym(RTLD_DEFAULT, "openblas_get_config"))) s["blas"] = std::string(f());
  std::string why;
  if (auto nvml = Nvml::load(why)) s["gpu_driver"] = nvml->driver_version();
  return s;
}

Json input_record(const std::string& name, const std::string& path) {
  const FileDigest d = digest_file(path);
  return {{"name", name}, {"path", absolute(path)}, {"bytes", d.bytes}, {"xxh3", digest_hex(d.xxh3)}};
}

Json parent_record(const std::string& kind, const std::string& path) {
  Json p{{"kind", kind}, {"archive", absolute(path)}, {"archive_xxh3", nullptr}, {"run_id", nullptr}};
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    rckpt::Archive a = rckpt::Archive::open(path);
    p["archive_xxh3"] = rckpt::hash_hex(a.manifest().archive_xxh3);
    const Json& prov = a.manifest().provenance;
    if (prov.is_object() && prov.contains("run_id")) p["run_id"] = prov["run_id"];
  }
  return p;
}

std::string config_digest(const Json& params) { return digest_hex(digest_bytes(params.dump())); }

runs::NewRun describe_run(const TrainConfig& config) {
  TrainConfig c = config;
  if (c.data != "synthetic") c.data = absolute(c.data);
  c.ckpt_dir = absolute(c.ckpt_dir);
  runs::NewRun r;
  r.params = run_options().to_json(c);
  r.code = code_revision(std::filesystem::current_path().string());
  r.system = system_facts();
  if (c.data == "synthetic")
    r.inputs.push_back({{"name", "data"},
                        {"path", "synthetic"},
                        {"bytes", nullptr},
                        {"xxh3", digest_hex(digest_bytes(fmt::format("synthetic rows={} factors={} noise={} seed={}",
                                                                     c.rows, c.factors, c.noise, c.seed)))}});
  else
    try {
      r.inputs.push_back(input_record("data", c.data));
    } catch (const Error&) {  // the loader says what is wrong with the file, as it always has
      r.inputs.push_back({{"name", "data"}, {"path", c.data}, {"bytes", nullptr}, {"xxh3", nullptr}});
    }
  r.job = job_of_environment();
  return r;
}

Json run_cost(const HeldResources& held, const Json& job, const std::string& price_sheet) {
  std::string backend = "local";
  if (job.is_object() && job.value("backend", "") == "slurm") backend = "slurm";
  if (job.is_object() && job.value("backend", "") == "rsub") {  // "NAME:ID" off the local backend
    const std::string id = json_text(job, "id");
    if (const std::size_t colon = id.find(':'); colon != std::string::npos) backend = id.substr(0, colon);
  }
  const double hours = held.seconds / 3600;
  Json cost{{"backend", backend}, {"cpus", held.cpus},
            {"gpus", held.gpus},  {"memory_bytes", held.memory_bytes},
            {"hours", hours},     {"currency", nullptr},
            {"amount", nullptr},  {"price_sheet", price_sheet.empty() ? Json() : Json(price_sheet)}};
  if (price_sheet.empty()) return cost;
  try {
    const PriceSheet sheet = load_prices(price_sheet);
    cost["currency"] = sheet.currency;
    cost["amount"] = sheet.at(backend).hourly(held.cpus, held.gpus, "", held.memory_bytes) * hours;
  } catch (const Error& e) {  // the run's record is kept, its cost left unknown
    cost["error"] = e.what();
  }
  return cost;
}

Json job_of_environment() {
  if (const char* j = std::getenv("RSUB_JOB_ID"); j && *j) return {{"backend", "rsub"}, {"id", j}};
  if (const char* s = std::getenv("SLURM_JOB_ID"); s && *s) return {{"backend", "slurm"}, {"id", s}};
  return nullptr;
}

RunTracker::RunTracker(const TrackOptions& o, runs::NewRun run) {
  if (!o.enabled) return;
  const auto t0 = Clock::now();
  const double started_s = unix_now_s();  // its record, and its cost, count the setup too
  start_ = t0;
  price_sheet_ = o.price_sheet;
  job_ = run.job;
  run.experiment = o.experiment.empty() ? "default" : o.experiment;
  run.name = o.name;
  run.tags = o.tags_json();
  const char* attached = std::getenv("RKIT_RUN_RECORD");
  const char* launcher_store = std::getenv("RKIT_RUN_STORE");  // the launcher's, whatever --project says here
  const bool attach = attached && *attached;
  store_ = std::make_unique<runs::Store>(attach && launcher_store && *launcher_store ? std::string(launcher_store)
                                                                                     : runs::store_path(o.project));
  if (attach) {
    id_ = attached;
    attached_ = true;
    store_->attach(id_, run);
  } else {
    id_ = store_->create(run, started_s);
  }
  provenance_ = {{"run_id", id_}, {"config_xxh3", config_digest(run.params)}, {"inputs", run.inputs}};
  last_flush_ = Clock::now();
  setup_s_ = since(t0);
}

RunTracker::~RunTracker() {
  if (store_ && !finished_) finish("FAILED", "rtrain stopped without a summary");
}

Json RunTracker::provenance() const { return store_ ? provenance_ : Json(); }

void RunTracker::record(const Json& event) {
  if (!store_) return;
  try {
    record_one(event);
  } catch (const std::exception& e) {  // the record is lost, the training is not
    warn("rtrain", fmt::format("run {}: recording stops: {}", id_, e.what()), std::cerr);
    store_.reset();
  }
}

void RunTracker::record_one(const Json& event) {
  const auto t0 = Clock::now();
  const std::string kind = json_text(event, "event");
  if (kind == "step" || kind == "eval") {
    add_metrics(event, pending_);
  } else if (kind == "checkpoint") {
    Json out{{"kind", "checkpoint"},
             {"path", absolute(json_text(event, "path"))},
             {"step", event.value("step", Json())},
             {"bytes", event.value("bytes", Json())},
             {"xxh3", event.value("archive_xxh3", Json())}};
    store_->add_output(id_, out);
  } else if ((kind == "resume" || kind == "init") && event.contains("parent")) {
    store_->set_parent(id_, event["parent"]);
  } else if (kind == "summary") {
    summary_ = event;
    if (event.contains("output"))
      store_->add_output(id_, {{"kind", "weights"},
                               {"path", absolute(event["output"].get<std::string>())},
                               {"step", event.value("steps", 0)},
                               {"bytes", nullptr},
                               {"xxh3", event.value("output_xxh3", Json())}});
  }
  if (since(last_flush_) >= 1.0) flush();
  busy_s_ += since(t0);
}

void RunTracker::flush() {
  if (!pending_.empty()) warn_dropped(store_->log(id_, pending_), id_, dropped_warned_);
  pending_.clear();
  last_flush_ = Clock::now();
}

void RunTracker::finish(const std::string& status, const std::string& error) noexcept {
  if (!store_ || finished_) return;
  finished_ = true;  // once: a record that could not be ended is not ended FAILED later
  try {
    finish_run(status, error);
  } catch (const std::exception& e) {
    warn("rtrain", fmt::format("run {}: its record could not be ended: {}", id_, e.what()), std::cerr);
  } catch (...) {
  }
}

void RunTracker::finish_run(const std::string& status, const std::string& error) {
  const auto t0 = Clock::now();
  flush();
  busy_s_ += since(t0);
  Json summary = summary_.is_null() ? Json::object() : summary_;
  if (!error.empty()) summary["error"] = error;
  summary["tracking_s"] = busy_s_;
  summary["tracking_setup_s"] = setup_s_;
  HeldResources held{.seconds = since(start_),
                     .cpus = static_cast<double>(usable_cpus()),
                     .gpus = json_text(summary, "device", "").starts_with("cuda") ? 1.0 : 0.0,
                     .memory_bytes = peak_rss_bytes(RUSAGE_SELF)};
  summary["cost"] = run_cost(held, job_, price_sheet_);
  if (attached_) {  // the launcher ends the run; the trainer's summary is its to keep
    store_->set_summary(id_, summary);
    return;
  }
  store_->finish(id_, status, unix_now_s(), summary);
}

LaunchTracker::LaunchTracker(const TrackOptions& o, runs::NewRun run, std::string metrics_dir, int workers)
    : dir_(std::move(metrics_dir)),
      start_(Clock::now()),
      price_sheet_(o.price_sheet),
      job_(run.job),
      workers_(std::max(workers, 1)) {
  // The files of this node's ranks, and no others.
  run.experiment = o.experiment.empty() ? "default" : o.experiment;
  run.name = o.name;
  run.tags = o.tags_json();
  store_ = std::make_unique<runs::Store>(runs::store_path(o.project));
  id_ = store_->create(run, unix_now_s() - since(start_));  // started when start_ was taken
  for (int rank = 0; rank < workers_; ++rank)
    sources_[rank].path = fmt::format("{}/{}{}.jsonl", dir_, metrics_file_prefix(id_), rank);
}

void LaunchTracker::read(Source& s, std::vector<runs::Metric>& metrics, Json& params) {
  constexpr std::size_t kMaxLine = std::size_t{1} << 20;
  constexpr std::uint64_t kMaxPerPoll = std::uint64_t{16} << 20;  // the rest on the next poll
  const int fd = ::open(s.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;
  struct stat st {};
  // A FIFO or device is no metrics file, nor is another user's.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    return;
  }
  char buf[1 << 16];
  for (std::uint64_t read_now = 0; read_now < kMaxPerPoll;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(s.offset));
    if (n <= 0) break;
    s.offset += static_cast<std::uint64_t>(n);
    read_now += static_cast<std::uint64_t>(n);
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (s.partial.size() <= kMaxLine) s.partial += buf[i];
        continue;
      }
      ++s.line;
      std::string line = std::exchange(s.partial, {});
      if (line.size() > kMaxLine || line.empty()) continue;
      try {
        const Json rec = parse_json(line, s.path);
        check_schema(rec, "rkit.metric", 1, s.path);
        const std::int64_t step = rec.value("step", std::int64_t{0});
        const double t = rec.value("time_unix_s", unix_now_s());
        if (const auto m = rec.find("metrics"); m != rec.end() && m->is_object())
          for (const auto& [k, v] : m->items())
            if (v.is_number()) metrics.push_back({k, step, v.get<double>(), t});
        if (const auto p = rec.find("params"); p != rec.end() && p->is_object()) params.update(*p);
      } catch (const std::exception& e) {
        if (!std::exchange(s.warned, true))
          warn("rtrain",
               fmt::format("{}:{}: not an rkit.metric.v1 record, skipped (and any more): {}", s.path, s.line, e.what()),
               std::cerr);
      }
    }
  }
  ::close(fd);
}

void LaunchTracker::poll(bool force) noexcept {
  if (!store_ || (!force && since(last_) < 1.0)) return;
  last_ = Clock::now();
  try {
    std::vector<runs::Metric> metrics;
    Json params = Json::object();
    for (auto& [_, s] : sources_) read(s, metrics, params);
    if (!metrics.empty() || !params.empty()) warn_dropped(store_->log(id_, metrics, params), id_, dropped_warned_);
  } catch (const std::exception& e) {  // the record is lost, the training is not
    warn("rtrain", fmt::format("run {}: recording stops: {}", id_, e.what()), std::cerr);
    store_.reset();
  }
}

std::string metrics_file_prefix(const std::string& run_id) { return "metrics." + run_id + ".rank"; }

void LaunchTracker::finish(int exit_code, bool interrupted, const Json& summary) noexcept {
  poll(true);
  if (!store_) return;
  try {
    finish_run(exit_code, interrupted, summary);
  } catch (const std::exception& e) {
    warn("rtrain", fmt::format("run {}: its record could not be ended: {}", id_, e.what()), std::cerr);
  }
}

void LaunchTracker::finish_run(int exit_code, bool interrupted, const Json& summary) {
  // The trainer's summary (an rtrain run worker's), with the launch's own over it.
  Json s = Json::object();
  if (const std::optional<runs::Run> r = store_->find(id_); r && r->summary != "null")
    s = parse_json(r->summary, "run store");
  if (summary.is_object()) s.update(summary);
  s["exit_code"] = exit_code;
  // The launch held this node's cores and the GPUs it was given; its workers' memory is
  // counted as the largest one's peak times their number.
  double gpus = 0;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v)
    gpus = 1 + static_cast<double>(std::count(v, v + std::strlen(v), ','));
  s["cost"] = run_cost({.seconds = since(start_),
                        .cpus = static_cast<double>(usable_cpus()),
                        .gpus = gpus,
                        .memory_bytes = peak_rss_bytes(RUSAGE_CHILDREN) * static_cast<std::uint64_t>(workers_)},
                       job_, price_sheet_);
  store_->finish(id_, exit_code == 0 ? "FINISHED" : interrupted ? "KILLED" : "FAILED", unix_now_s(), s);
}

}  // namespace rkit::rtrain
