// comm.gloo: CPU collectives the way nccl-tests measures NCCL's, on Gloo over TCP
// between real processes on this machine. rbench starts --ranks copies of itself
// (`rbench _worker comm.gloo ...`, one per rank); they meet through a gloo FileStore in
// a private temporary directory, connect over 127.0.0.1 and run allreduce, allgather,
// reduce_scatter and broadcast over a sweep of sizes (comm_gloo_rank.cpp). Rank 0
// streams its results back on a pipe; the parent watches every rank, and on an error,
// Ctrl-C or a stall kills and reaps them all (a rank also dies with the parent:
// PR_SET_PDEATHSIG). This file is the suite: options, starting and watching the ranks
// (an rkit::WorkerGroup, whose rule names the rank that caused a failure), and rank 0's
// rows as results.
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "comm_gloo.hpp"
#include "rkit/error.hpp"
#include "rkit/gloo.hpp"
#include "rkit/host.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/process.hpp"
#include "rkit/units.hpp"
#include "rkit/workers.hpp"
#include "suite.hpp"

namespace rkit::rbench::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kMaxRanks = 64;
constexpr std::uint64_t kMaxBytes = 1ull << 30;
// After a rank fails, how long the others may end of it before they are killed, so that
// the cause (say, a rank the OOM killer took) is told apart from its effects.
constexpr double kSettle_s = 0.25;

// A private directory for the rendezvous and the ranks' logs, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/rbench-gloo-XXXXXX";
    if (!::mkdtemp(pattern.data())) throw system_error("cannot create a directory like " + pattern, errno);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::uint64_t> sizes_asked(bool quick) {
  const char* env = std::getenv("RKIT_BENCH_GLOO_SIZES");
  if (!env || !*env) return sweep_sizes(quick);
  std::vector<std::uint64_t> sizes;
  for (const std::string& text : split_list(env, ',')) {
    std::uint64_t b = 0;
    try {
      b = parse_size(text);
    } catch (const Error& e) {
      throw Error(Exit::Usage, std::string("RKIT_BENCH_GLOO_SIZES: ") + e.what());
    }
    if (b < sizeof(float) || b > kMaxBytes)
      throw Error(Exit::Usage, "RKIT_BENCH_GLOO_SIZES: " + text + " is not from 4 B to " + format_bytes(kMaxBytes));
    sizes.push_back(b);
  }
  if (sizes.empty()) throw Error(Exit::Usage, "RKIT_BENCH_GLOO_SIZES: no size given");
  return sizes;
}

std::chrono::milliseconds timeout_asked() {
  const char* env = std::getenv("RKIT_BENCH_GLOO_TIMEOUT");
  double s = 60;
  if (env && *env) {
    try {
      s = parse_duration(env);
    } catch (const Error& e) {
      throw Error(Exit::Usage, std::string("RKIT_BENCH_GLOO_TIMEOUT: ") + e.what());
    }
    if (s < 0.1) throw Error(Exit::Usage, "RKIT_BENCH_GLOO_TIMEOUT: at least 0.1s");
  }
  return std::chrono::milliseconds(static_cast<long long>(s * 1000));
}

// The last line a rank wrote on stderr (its error), without rbench's prefix.
std::string last_log_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  for (const char* prefix : {"rbench: error: "})
    if (last.rfind(prefix, 0) == 0) last.erase(0, std::char_traits<char>::length(prefix));
  return last;
}

// A signal that means the rank crashed (a bug: 70), rather than that something outside
// killed it (the OOM killer, an administrator: 75, a run to retry).
bool crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT || sig == SIGSYS;
}

// The error for the ranks that failed: the group's root cause (rkit/workers.hpp: a rank
// killed by a signal, what the others then fail of, else the first seen to fail, else
// the lowest), with the last line of its log.
[[noreturn]] void fail(const WorkerGroup& ranks, const std::vector<std::string>& logs) {
  const std::optional<RootCause> cause = ranks.root_cause();
  if (!cause || !cause->status) throw Error(Exit::Software, "comm.gloo: a rank failed");
  const std::size_t which = cause->worker;
  const ExitStatus& st = *cause->status;
  if (st.signaled())
    throw Error(crash_signal(st.signal()) ? Exit::Software : Exit::TempFail,
                fmt::format("comm.gloo: rank {} (pid {}) was {}", which, ranks.worker(which).pid, st.describe()),
                st.signal() == SIGKILL ? "out of memory? each rank holds up to 1.5x the largest size" : "");
  std::string why = last_log_line(logs[which]);
  const int code = st.code();
  const Exit exit = code >= 64 && code <= 78 ? static_cast<Exit>(code) : Exit::Software;
  throw Error(exit,
              fmt::format("comm.gloo: rank {} failed ({}){}{}", which, st.describe(), why.empty() ? "" : ": ", why));
}

class CommGloo : public Suite {
 public:
  std::string name() const override { return "comm.gloo"; }
  std::string description() const override {
    return "Gloo collectives over TCP between local processes: allreduce, allgather, reduce_scatter, broadcast";
  }

  void check_options(const RunOptions& opt) const override {
    // One rank moves nothing (nccl-tests would print busbw 0, and broadcast a no-op's speed).
    if (opt.ranks < 2 || opt.ranks > kMaxRanks)
      throw Error(Exit::Usage,
                  fmt::format("comm.gloo: --ranks {}: a collective needs 2 to {} ranks", opt.ranks, kMaxRanks));
    sizes_asked(opt.quick);
    timeout_asked();
  }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    check_options(opt);
    RankPlan plan;
    plan.ranks = opt.ranks;
    plan.warmup = opt.warmup;
    plan.reps = std::max(opt.reps, 1);
    plan.timeout = timeout_asked();
    plan.collectives.assign(std::begin(kGlooCollectives), std::end(kGlooCollectives));
    plan.sizes = sizes_asked(opt.quick);
    std::size_t expected_rows = 0;
    for (Collective c : plan.collectives)
      for (std::uint64_t b : plan.sizes) expected_rows += collective_counts(c, b, plan.ranks).bytes > 0;

    TempDir dir;  // declared first: removed after the ranks are reaped
    plan.store_dir = dir.path() + "/store";
    std::filesystem::create_directory(plan.store_dir);
    const std::filesystem::path exe = self_exe();
    if (exe.empty()) throw Error(Exit::Software, "comm.gloo: cannot find rbench's own executable (/proc/self/exe)");
    // Started and watched together; a failure is settled for kSettle_s, then the group
    // stops and the rest are killed (the destructor: SIGKILL, reaped) on the way out.
    WorkerGroup ranks(WorkerGroupOptions{.grace_s = 0, .settle_s = kSettle_s, .forward = nullptr});
    std::vector<std::string> logs;
    for (unsigned r = 0; r < plan.ranks; ++r) {
      plan.rank = r;
      SpawnOptions so;
      so.argv = {exe.string(), kWorkerCommand, name(), "parent=" + std::to_string(::getpid())};
      for (auto& a : plan_to_args(plan)) so.argv.push_back(std::move(a));
      so.in = Redirect::null();
      so.out = r == 0 ? Redirect::pipe() : Redirect::null();
      logs.push_back(fmt::format("{}/rank-{}.log", dir.path(), r));
      so.err = Redirect::file(logs.back());
      ranks.spawn(so);
    }

    // Rank 0's lines until it closes its end, then the others' exits; a stall of rank 0,
    // or ranks that outlive it, end the run.
    const double stall_s = 2.0 * std::chrono::duration<double>(plan.timeout).count() + 10;
    const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    std::vector<Measurement> out;
    std::string pending;
    auto last_line = Clock::now();
    std::optional<Clock::time_point> eof;  // when rank 0 closed its end
    while (!eof || ranks.running()) {
      check_interrupted();
      for (const WorkerEvent& e : ranks.wait(0.1)) {
        if (e.kind != WorkerEvent::Kind::Output || e.worker != 0) continue;
        if (e.data.empty()) {
          eof = Clock::now();
          continue;
        }
        pending += e.data;
        last_line = Clock::now();
        for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
          handle_line(pending.substr(0, nl), plan, progress, out);
      }
      if (ranks.stopping()) fail(ranks, logs);  // a failure, settled
      if (!eof && since(last_line) > stall_s)
        throw Error(Exit::TempFail, fmt::format("comm.gloo: no progress from rank 0 for {:.0f} s", stall_s),
                    "raise RKIT_BENCH_GLOO_TIMEOUT for a slow or crowded machine");
      if (eof && ranks.running() && since(*eof) > stall_s)
        throw Error(Exit::TempFail, "comm.gloo: ranks did not exit after rank 0 finished");
    }
    if (ranks.failed()) fail(ranks, logs);  // all ended before the settle was over
    if (out.size() != expected_rows)
      throw Error(Exit::Software,
                  fmt::format("comm.gloo: rank 0 ended after {} of {} results", out.size(), expected_rows));
    return out;
  }

  int worker(const std::vector<std::string>& args) override {
    // Die with rbench, however it dies; if it is already gone, do not start.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (args.empty() || args[0].rfind("parent=", 0) != 0)
      throw Error(Exit::Usage, "comm.gloo worker: parent=PID first");
    const std::uint64_t parent = worker_number("parent", args[0].substr(7));
    if (static_cast<std::uint64_t>(::getppid()) != parent)
      throw Error(Exit::Software,
                  fmt::format("comm.gloo worker: not started by rbench (pid {}), or it is gone", parent));
    std::signal(SIGPIPE, SIG_IGN);  // a closed socket is an error to report, not a silent death
    RankPlan plan = plan_from_args(std::vector<std::string>(args.begin() + 1, args.end()));
    try {
      run_rank(plan, [](const Json& event) {
        std::cout << to_json_line(event) << '\n' << std::flush;
        if (!std::cout) throw Error(Exit::IoErr, "cannot write to rbench");
      });
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // A timeout is a machine too slow or too crowded for RKIT_BENCH_GLOO_TIMEOUT: 75, as
      // the parent's own stall check; any other Gloo failure is one of its sockets: 74.
      throw gloo_error(e, {Exit::TempFail, Exit::IoErr, Exit::IoErr}, fmt::format("rank {}: gloo", plan.rank));
    }
    return 0;
  }

 private:
  void handle_line(const std::string& line, const RankPlan& plan, const Progress& progress,
                   std::vector<Measurement>& out) {
    Json ev;
    try {
      ev = Json::parse(line);
    } catch (const std::exception&) {
      throw Error(Exit::Software, "comm.gloo: rank 0 wrote something other than a result: " + line.substr(0, 120));
    }
    const std::string kind = ev.value("event", "");
    if (kind == "sample") return;
    const Collective c = gloo_collective_named(ev.at("collective").get<std::string>());
    const std::uint64_t bytes = ev.at("bytes").get<std::uint64_t>();
    if (kind == "start") {
      if (progress)
        progress(fmt::format("comm.gloo {} {} x {} ranks", collective_name(c), format_bytes(bytes), plan.ranks));
      return;
    }
    if (kind != "row") throw Error(Exit::Software, "comm.gloo: rank 0 sent an unknown event: " + line.substr(0, 120));
    const double factor = busbw_factor(c, plan.ranks);
    const std::uint64_t wrong = ev.at("wrong").get<std::uint64_t>(), checked = ev.at("checked").get<std::uint64_t>();
    Measurement m;
    m.metric = collective_name(c);
    m.unit = "GB/s";
    for (const Json& t : ev.at("times_s")) {
      const double s = t.get<double>();
      m.samples.push_back(s > 0 ? static_cast<double>(bytes) / s / 1e9 * factor : 0.0);
    }
    // What identifies the measurement, nothing that varies with it: `iters` follows from
    // bytes (iterations_per_sample), algbw is the median / busbw_factor.
    m.params = {{"bytes", bytes}, {"ranks", plan.ranks}, {"dtype", "float32"}, {"busbw_factor", factor}};
    m.correct = wrong == 0 && checked > 0;
    const char* expected = c == Collective::Allreduce       ? "the exact sum over ranks"
                           : c == Collective::Allgather     ? "every rank's block, in rank order"
                           : c == Collective::ReduceScatter ? "the exact sum over ranks of the rank's block"
                                                            : "rank 0's data";
    m.check = fmt::format(
        "{} wrong of {} elements on all ranks: after the timed runs, one more {} of fresh float32 "
        "integer inputs, each element compared with {}",
        wrong, checked, collective_name(c), expected);
    m.peak_source = "none known: loopback TCP between processes is bound by memory copies and the kernel, not a link";
    out.push_back(std::move(m));
  }
};

RKIT_BENCH_SUITE(CommGloo);

}  // namespace
}  // namespace rkit::rbench::comm
