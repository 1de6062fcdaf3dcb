// File: rtrain/launch_group.cpp — one generation of a node's workers (launch_group.hpp).
#include "launch_group.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <iostream>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/host.hpp"

namespace rkit::rtrain {

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

Events::Events(const std::string& path) {
  if (path.empty()) return;
  if (path == "-") {
    out_ = &std::cout;
  } else {
    file_.open(path, std::ios::app);
    if (!file_) throw system_error("open " + path, errno);
    out_ = &file_;
  }
}

void Events::emit(const std::string& event, Json fields) {
  if (!out_) return;
  Json rec{{"schema", "rkit.train.event.v1"}, {"event", event}, {"time_unix_s", now_s()}};
  rec.update(fields);
  *out_ << to_json_line(rec) << '\n' << std::flush;
}

namespace {

// This node's name, for root causes ("rank 3 on gpu07 ...").
const std::string& host() {
  static const std::string name = host_name();
  return name;
}

// Sets this thread's CPU mask to `pus` (nothing when empty) and restores it when it goes.
class CpuMask {
 public:
  explicit CpuMask(const std::vector<int>& pus) {
    if (pus.empty()) return;
    if (::sched_getaffinity(0, sizeof saved_, &saved_) != 0) throw system_error("read this agent's CPU mask", errno);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int pu : pus) CPU_SET(pu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) throw system_error("bind a worker to its CPUs", errno);
    active_ = true;
  }
  ~CpuMask() {
    if (active_) ::sched_setaffinity(0, sizeof saved_, &saved_);
  }
  CpuMask(const CpuMask&) = delete;
  CpuMask& operator=(const CpuMask&) = delete;

 private:
  cpu_set_t saved_{};
  bool active_ = false;
};

// Creates (or empties) the heartbeat file `name` in the folder open as `dir_fd` and sets
// its modification time to now: never through a symbolic link, never a FIFO or device
// someone left there.
void touch_heartbeat(int dir_fd, const std::string& name) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (!fd) throw system_error("heartbeat file " + name, errno);
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0 || !S_ISREG(sb.st_mode))
    throw Error(Exit::IoErr, "heartbeat file " + name + ": not a regular file");
  ::futimens(fd.get(), nullptr);
}

// A line of a worker's output on our stream, with its rank in front.
void print_line(const Worker& w, bool err, const std::string& line) {
  (err ? std::cerr : std::cout) << fmt::format("[{}]: {}\n", w.rank, line);
}

}  // namespace

Group::Group(const LaunchOptions& o, const Layout& layout, int generation, const std::string& run_id,
             const std::string& hb_dir, int hb_fd, const std::string& secret, SignalForwarder& forward, Events& events)
    : o_(o),
      generation_(generation),
      hb_fd_(hb_fd),
      events_(events),
      workers_(static_cast<std::size_t>(o.nproc)),
      group_(WorkerGroupOptions{.grace_s = o.kill_grace_s, .settle_s = 0, .forward = &forward}) {
  const std::string resume = o.ckpt_dir.empty() ? "" : newest_checkpoint(o.ckpt_dir);  // one answer for every rank
  for (int local = 0; local < o.nproc; ++local) {
    Worker& w = workers_[static_cast<std::size_t>(local)];
    const WorkerPlacement* place = o.placement.empty() ? nullptr : &o.placement[static_cast<std::size_t>(local)];
    w.rank = layout.offset + local;
    w.heartbeat_name = fmt::format("heartbeat.{}", w.rank);
    w.heartbeat = fmt::format("{}/{}", hb_dir, w.heartbeat_name);
    touch_heartbeat(hb_fd, w.heartbeat_name);  // touched now: the timeout counts from the start
    if (!o.log_dir.empty()) {
      w.out_log.open(fmt::format("{}/attempt-{}.rank-{}.out", o.log_dir, generation, w.rank));
      w.err_log.open(fmt::format("{}/attempt-{}.rank-{}.err", o.log_dir, generation, w.rank));
    }
    SpawnOptions s;
    s.argv = o.command;
    s.env = worker_env(o, local, layout, generation, run_id, w.heartbeat, resume, secret);
    if (place && !place->gpus.empty()) {
      s.env.emplace_back("CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(place->gpus, ",")));
      s.env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");  // indices as nvidia-smi and rtop count them
    }
    s.out = Redirect::pipe();
    s.err = Redirect::pipe();
    // A child inherits its parent's CPU mask: the worker is started with its own (this
    // agent is single-threaded), so it runs bound from its first instruction.
    const CpuMask bound(place ? place->pus : std::vector<int>{});
    group_.spawn(s);
  }
  events_.emit("start", {{"generation", generation},
                         {"node_rank", layout.node_rank},
                         {"workers", o.nproc},
                         {"world_size", layout.world},
                         {"master_port", layout.master_port},
                         {"run_id", run_id}});
}

std::optional<std::string> Group::failure() const {
  const auto cause = group_.root_cause();
  if (!cause) return std::nullopt;
  if (!cause->reason.empty()) return cause->reason;  // a hang: the reason names the rank
  return fmt::format("rank {} on {} {} after {:.1f}s", workers_[cause->worker].rank, host(), cause->describe(),
                     cause->uptime_s);
}

int Group::failed_code() const {
  const auto cause = group_.root_cause();
  return cause ? cause->exit_code() : 1;
}

const Worker* Group::failed_worker() const {
  const auto cause = group_.root_cause();
  return cause ? &workers_[cause->worker] : nullptr;
}

void Group::take(const WorkerEvent& e) {
  Worker& w = workers_[e.worker];
  if (e.kind == WorkerEvent::Kind::Exited) {
    events_.emit("worker_exit", {{"generation", generation_},
                                 {"rank", w.rank},
                                 {"exit_code", e.status.shell_code()},
                                 {"uptime_s", group_.worker(e.worker).uptime_s()}});
    return;
  }
  if (e.data.empty()) return;  // end of file: the group closed the pipe
  const bool err = e.fd == 2;
  std::string& pending = err ? w.err_buf : w.out_buf;
  pending += e.data;
  (err ? w.err_log : w.out_log).write(e.data.data(), static_cast<std::streamsize>(e.data.size()));
  for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
    const std::string line = pending.substr(0, nl);
    print_line(w, err, line);
    if (err) {
      w.err_tail.push_back(line);
      if (w.err_tail.size() > 5) w.err_tail.pop_front();
    }
    pending.erase(0, nl + 1);
  }
}

void Group::step(int timeout_ms) {
  for (const WorkerEvent& e : group_.wait(timeout_ms / 1000.0)) take(e);
  if (o_.heartbeat_timeout_s <= 0) return;
  const double now = now_s();
  for (std::size_t i = 0; i < workers_.size() && !group_.failed() && !group_.stopping(); ++i) {
    if (group_.worker(i).status) continue;
    const Worker& w = workers_[i];
    struct stat sb {};
    if (::fstatat(hb_fd_, w.heartbeat_name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
        now - static_cast<double>(sb.st_mtim.tv_sec) - sb.st_mtim.tv_nsec / 1e9 > o_.heartbeat_timeout_s) {
      events_.emit("hang_detected", {{"generation", generation_}, {"rank", w.rank}});
      group_.fail(i, fmt::format("rank {} on {} hung: no heartbeat for {:.0f}s", w.rank, host(),
                                 o_.heartbeat_timeout_s));  // and the group stops
    }
  }
}

void Group::finish() {
  for (const WorkerEvent& e : group_.drain()) take(e);
  for (Worker& w : workers_)
    for (bool err : {false, true})
      if (const std::string& rest = err ? w.err_buf : w.out_buf; !rest.empty())  // a last line without its newline
        print_line(w, err, rest);
  group_.finish();  // nothing of a generation outlives it (data loaders, wrappers' children)
}

void report(const Group& g, int generation) {
  std::cerr << fmt::format("rtrain: worker failed (generation {}): {}\n", generation, *g.failure());
  if (const Worker* w = g.failed_worker())
    for (const auto& line : w->err_tail) std::cerr << fmt::format("rtrain:   [{}]: {}\n", w->rank, line);
}

}  // namespace rkit::rtrain
