// File: rsub/daemon.cpp — the wake socket, the scheduler daemon and its launcher (daemon.hpp).
#include "daemon.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <future>
#include <iostream>
#include <set>
#include <unordered_map>

#include "rkit/atomic_file.hpp"
#include "rkit/cgroup.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/topology.hpp"
#include "protocol.hpp"
#include "server.hpp"
#include "store.hpp"

namespace rkit::rsub {

std::string lock_path(const std::string& dir, std::int64_t id, int attempt) {
  return fmt::format("{}/run/{}.{}.lock", dir, id, attempt);
}

namespace {

// The wake socket is a file in the state directory, which only the daemon's user may
// enter; the daemon (which holds daemon.lock) binds it, its supervisors write to it.
sockaddr_un wake_address(const std::string& dir, socklen_t& len) { return unix_address(dir + "/wake.sock", len); }

// 1: the lock is held (its holder lives), 0: free, -1: no such file.
int probe_lock(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? -1 : 1;
  const int rc = ::flock(fd, LOCK_SH | LOCK_NB);
  ::close(fd);
  return rc == 0 ? 0 : 1;
}

}  // namespace

bool wake_daemon(const std::string& dir) {
  socklen_t len = 0;
  const sockaddr_un addr = wake_address(dir, len);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const char byte = 1;
  const bool sent = ::sendto(fd, &byte, 1, 0, reinterpret_cast<const sockaddr*>(&addr), len) == 1 || errno == EAGAIN;
  ::close(fd);
  return sent;  // EAGAIN: its queue is full of wake-ups already
}

namespace {

// Runs `args` as a grandchild in a session of its own, which init adopts, so that it
// outlives the caller and is never the caller's to wait for. `prepare` runs in the
// grandchild before exec (fork-safe calls only). False when fork failed.
bool spawn_detached(std::vector<std::string> args, const std::function<void()>& prepare) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    prepare();
    ::execv(argv[0], argv.data());
    const std::string line = std::string("rsub: cannot run ") + argv[0] + ": " + std::strerror(errno) + "\n";
    [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
    ::_exit(127);
  }
  ::waitpid(pid, nullptr, 0);
  return true;
}

}  // namespace

void start_daemon(const std::string& exe, const std::string& config_path, const std::string& dir) {
  Store{dir};  // the directory, private, before the daemon's log goes there
  const std::string log = dir + "/daemon.log";
  std::vector<std::string> args = {exe, "daemon", "--foreground"};
  if (!config_path.empty()) args.insert(args.end(), {"--config", config_path});
  const bool started = spawn_detached(std::move(args), [&] {
    const int null = ::open("/dev/null", O_RDONLY);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (null >= 0) ::dup2(null, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::close_range(3, ~0U, 0);  // nothing of the caller's: a pipe it reads must see EOF
  });
  if (!started) throw system_error("start the rsub daemon", errno);
}

namespace {

// The daemon's launcher (run_launcher): started on first use and again when it died,
// it forks each job's supervisor from a small single-threaded process, with no exec per
// job and no fork of the daemon's threads and memory.
class ShimLauncher {
 public:
  explicit ShimLauncher(std::string dir) : dir_(std::move(dir)) {}
  ~ShimLauncher() { stop(); }
  ShimLauncher(const ShimLauncher&) = delete;
  ShimLauncher& operator=(const ShimLauncher&) = delete;

  // Hands the request and the attempt's lock to the launcher; false when none would take it.
  bool send(const ShimRequest& request, int lock_fd) {
    for (int tries = 0; tries < 2; ++tries) {
      if (!socket_ && !start()) return false;
      if (send_with_fd(socket_.get(), &request, sizeof request, lock_fd)) return true;
      std::cerr << "rsub daemon: the launcher: " << std::strerror(errno) << " (starting another)\n";
      stop();
    }
    return false;
  }

 private:
  bool start() {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return false;
    UniqueFd mine(pair[0]), theirs(pair[1]);
    std::vector<std::string> args = {"/proc/self/exe", "_launcher", dir_, std::to_string(theirs.get())};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int keep = theirs.get();
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {  // fork-safe calls only: the daemon has threads
      ::setsid();  // a terminal's signals are the daemon's, not its launcher's
      ::fcntl(keep, F_SETFD, 0);
      ::close_range(3, static_cast<unsigned>(keep) - 1, 0);
      ::close_range(static_cast<unsigned>(keep) + 1, ~0U, 0);
      for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execv(argv[0], argv.data());
      const char line[] = "rsub daemon: cannot start its launcher (exec /proc/self/exe failed)\n";
      [[maybe_unused]] auto n = ::write(2, line, sizeof line - 1);
      ::_exit(127);
    }
    socket_ = std::move(mine);
    return true;
  }
  // Ends the launcher (closing our end would too, unless it is stuck); the supervisors it
  // started run on, and a request it held is lost with the lock it carried (the job is
  // then queued again: no supervisor wrote its pid).
  void stop() {
    socket_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

  std::string dir_;
  UniqueFd socket_;
  pid_t pid_ = -1;
};

class Daemon {
 public:
  Daemon(const Settings& s, const Machine& m) : s_(s), machine_(m), store_(s.dir) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    host_ = name;
    for (const auto& [tenant, v] : store_.usage()) usage_[tenant] = v;
  }

  // Loads what changed since the last pass (the first loads every active job): the
  // input of the next one.
  void refresh() {
    if (!loaded_) {
      change_seq_ = store_.change_seq();  // before the load: what changes meanwhile is read again
      loaded_ = true;
    } else {
      try {
        for (const Store::ActiveState& st : store_.changed_since(change_seq_)) apply(st);
      } catch (...) {
        // The log was read past what was applied: start again from a full load.
        resync();
        throw;
      }
    }
    for (JobRecord& j : store_.active_jobs_after(max_id_)) {
      max_id_ = std::max(max_id_, j.id);
      const std::int64_t id = j.id;
      track(jobs_.emplace(id, std::move(j)).first->second);
    }
  }

  // Forgets the active jobs, so that the next refresh loads them all again.
  void resync() {
    jobs_.clear();
    in_.pending.clear();
    pending_at_.clear();
    reasons_.clear();
    running_.clear();
    max_id_ = 0;
    loaded_ = false;
  }

  // The running daemon drops the change log it has read, now and then.
  void trim_changes() {
    if (change_seq_ - trimmed_seq_ < 4096) return;
    store_.forget_changes(change_seq_);
    trimmed_seq_ = change_seq_;
  }

  // Running jobs: cancel requests, and supervisors that vanished. True when a job changed.
  bool watch_running() {
    bool changed = false;
    for (const std::int64_t id : running_) {
      const JobRecord& j = jobs_.at(id);
      const std::string lock = lock_path(s_.dir, id, j.attempts);
      if (j.cancel_requested && !signalled_.count({id, j.attempts})) signal_shim(lock, id, j.attempts);
      const int held = probe_lock(lock);
      if (held == 1) continue;
      // Free or missing: the supervisor is gone. Read the store again (it records the end
      // before it lets go of the lock) before deciding anything. A supervisor writes its
      // pid into the lock file before it starts any task: without one, nothing ran.
      std::string pid;
      try {
        pid = read_file(lock, 64);
      } catch (const Error&) {
      }
      store_.transaction([&] {
        const auto now = store_.job(id);
        if (!now || now->state != JobState::Running || now->attempts != j.attempts) return;
        changed = true;
        if (pid.empty() && !store_.attempt_started(id, j.attempts)) {
          // No supervisor ever ran: the daemon died between marking the attempt and
          // starting it, or the supervisor could not start (said in daemon.log).
          if (++start_failures_[id] < 3) {
            store_.undo_start(id, j.attempts);
          } else {
            store_.finish(id, JobState::Failed, "its supervisor could not start 3 times (see daemon.log)", now_s());
          }
          return;
        }
        // Its tasks die with it (PR_SET_PDEATHSIG); what they started in their process
        // group goes now, before the scheduler hands their cores out again.
        if (auto group = store_.task_group(id, j.attempts); group && *group > 1) ::kill(-*group, SIGKILL);
        kill_cgroup(id, j.attempts);
        store_.finish(id, JobState::Lost,
                      fmt::format("the supervisor of attempt {} vanished without recording an end", j.attempts),
                      now_s());
      });
    }
    return changed;
  }

  void pass() {
    const double now = now_s();
    refresh();
    if (watch_running()) refresh();
    decay_usage(now);
    SchedPlan plan = schedule(input(now, false));
    for (const Start& start : plan.starts) launch(start, now);
    std::vector<std::pair<std::int64_t, std::string>> reasons;
    for (const Verdict& v : plan.verdicts) {
      if (v.never) {
        store_.finish(v.job, JobState::Failed, v.reason + ": " + v.detail, now);
        continue;
      }
      auto it = pending_at_.find(v.job);
      if (it != pending_at_.end() && reasons_[it->second] != v.reason) reasons.emplace_back(v.job, v.reason);
    }
    store_.set_reasons(reasons);
    for (auto& [job, reason] : reasons)  // stored: what the next pass compares with
      if (auto it = pending_at_.find(job); it != pending_at_.end()) reasons_[it->second] = std::move(reason);
    if (now - usage_saved_ > 10) save_usage(now);
  }

  // The scheduler's input: the pending jobs as track() keeps them, the running ones, and
  // what changes with time. `details`: verdicts with their detail lines (`rsub why`).
  const SchedInput& input(double now, bool details) {
    in_.machine = &machine_;
    in_.config = s_.sched;
    in_.now = now;
    in_.details = details;
    in_.running.clear();
    for (const std::int64_t id : running_) {
      const JobRecord& j = jobs_.at(id);
      in_.running.push_back({id, j.spec.tenant, j.user, j.array_parent, j.alloc, j.start_s.value_or(now),
                             j.spec.time_limit_s});
    }
    std::vector<std::int64_t> unknown;
    for (const PendingJob& p : in_.pending)
      for (const Dependency& d : p.depends) unknown.push_back(d.job);
    std::sort(unknown.begin(), unknown.end());
    unknown.erase(std::unique(unknown.begin(), unknown.end()), unknown.end());
    // A dependency on an array is on all its elements (Slurm's rule): it is over when
    // every element is, and satisfied as the worst of them says.
    in_.dependencies.clear();
    for (const auto& [id, states] : store_.dependency_states(unknown)) {
      DepStatus status = DepStatus::Completed;
      for (JobState state : states) {
        if (!terminal(state)) status = DepStatus::Active;
        else if (state != JobState::Completed && status == DepStatus::Completed) status = DepStatus::NotOk;
      }
      in_.dependencies[id] = status;
    }
    in_.usage.clear();
    for (const auto& [tenant, v] : usage_) in_.usage[tenant] = v.first;
    return in_;
  }

  void launch(const Start& start, double now) {
    JobRecord& j = jobs_.at(start.job);
    const int attempt = j.attempts + 1;
    const std::string lock = lock_path(s_.dir, j.id, attempt);
    ::mkdir((s_.dir + "/run").c_str(), 0700);
    UniqueFd fd(::open(lock.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      std::cerr << "rsub daemon: cannot lock " << lock << ": " << std::strerror(errno) << "\n";
      return;
    }
    if (!store_.start_attempt(j.id, start.tasks, host_, now)) {  // cancelled or held meanwhile
      ::unlink(lock.c_str());
      return;
    }
    j.state = JobState::Running;
    j.attempts = attempt;
    j.alloc = start.tasks;
    j.start_s = now;
    track(j);
    spawn_shim(j.id, attempt, fd.get());
  }

  void spawn_shim(std::int64_t id, int attempt, int lock_fd) {
    const ShimRequest request{id, attempt, s_.job_pids_max, s_.kill_grace_s};
    // On failure the lock is free and holds no pid: the next pass queues the job again.
    if (!launcher_.send(request, lock_fd)) std::cerr << "rsub daemon: cannot start job " << id << "'s supervisor\n";
  }

  // What is left of an attempt whose supervisor died: its cgroup, killed and removed.
  void kill_cgroup(std::int64_t id, int attempt) {
    if (::geteuid() != 0) return;
    try {
      if (auto cg = JobCgroup::open(cgroup_parent(store_.tag()), fmt::format("job-{}.{}", id, attempt))) {
        cg->kill_all(std::chrono::seconds(5));
        cg->remove();
      }
    } catch (const std::exception& e) {
      std::cerr << "rsub daemon: job " << id << ": " << e.what() << '\n';
    }
  }

  void signal_shim(const std::string& lock, std::int64_t id, int attempt) {
    std::string text;
    try {
      text = read_file(lock, 64);
    } catch (const Error&) {
      return;
    }
    const int pid = std::atoi(text.c_str());
    if (pid > 1 && probe_lock(lock) == 1 && ::kill(pid, SIGTERM) == 0) signalled_.insert({id, attempt});
  }

  // One job's change: taken as it is now, or forgotten once it ended.
  void apply(const Store::ActiveState& st) {
    auto it = jobs_.find(st.id);
    if (it == jobs_.end()) {
      // Jobs after max_id_ are loaded whole by refresh; an older one active again (none
      // is today) is read whole here.
      if (st.id > max_id_ || terminal(st.state)) return;
      if (auto j = store_.job(st.id); j && !terminal(j->state)) track(jobs_.emplace(st.id, std::move(*j)).first->second);
      return;
    }
    JobRecord& j = it->second;
    if (st.attempts != j.attempts || st.state != j.state) {
      if (j.state == JobState::Running) account(j, now_s());
      j = *store_.job(j.id);  // started, requeued or ended meanwhile: take it whole
    } else {
      j.held = st.held;
      j.cancel_requested = st.cancel_requested;
      j.eligible_s = st.eligible_s;
      j.reason.clear();  // the stored one may have changed with them (rsub hold): the next pass writes it
    }
    if (!terminal(j.state)) {
      track(j);
      return;
    }
    forget(j);
    untrack(j.id);
    jobs_.erase(it);
  }

  // Keeps in_.pending (one entry per pending job, at pending_at_[id], its last stored
  // reason in reasons_ at the same place) and running_ in step with a job of jobs_ that
  // was loaded or changed, so that a pass does not rebuild them from every job.
  void track(const JobRecord& j) {
    if (j.state == JobState::Running) {
      untrack(j.id);
      running_.insert(j.id);
      return;
    }
    running_.erase(j.id);
    PendingJob p{j.id,
                 j.spec.tenant,
                 j.user,
                 j.array_parent,
                 j.spec.array ? j.spec.array->max_concurrent : 0,
                 j.spec.resources,
                 j.spec.time_limit_s,
                 j.spec.priority,
                 j.submit_s,
                 j.eligible_s,
                 j.held,
                 j.spec.depends};
    auto [it, added] = pending_at_.try_emplace(j.id, in_.pending.size());
    if (added) {
      in_.pending.push_back(std::move(p));
      reasons_.push_back(j.reason);
    } else {
      in_.pending[it->second] = std::move(p);
      reasons_[it->second] = j.reason;
    }
  }
  void untrack(std::int64_t id) {
    running_.erase(id);
    auto it = pending_at_.find(id);
    if (it == pending_at_.end()) return;
    const std::size_t at = it->second, last = in_.pending.size() - 1;
    if (at != last) {  // the last entry takes its place
      in_.pending[at] = std::move(in_.pending[last]);
      reasons_[at] = std::move(reasons_[last]);
      pending_at_[in_.pending[at].id] = at;
    }
    in_.pending.pop_back();
    reasons_.pop_back();
    pending_at_.erase(id);
  }

  // Fair-share usage: core-seconds plus gpu_weight × GPU-seconds, decayed.
  void account(const JobRecord& j, double now) {
    const double from = std::max(j.start_s.value_or(now), last_pass_);
    const auto& r = j.spec.resources;
    auto& usage = usage_.try_emplace(j.spec.tenant, 0.0, now).first->second;
    usage.first += std::max(0.0, now - from) * r.tasks * (r.cpus_per_task + s_.gpu_weight * r.gpus_per_task);
  }
  // A job leaves the active set: its last stretch of usage, and what was kept about it.
  void forget(const JobRecord& j) {
    if (j.state == JobState::Running) account(j, now_s());
    start_failures_.erase(j.id);
    for (auto it = signalled_.lower_bound({j.id, 0}); it != signalled_.end() && it->first == j.id;)
      it = signalled_.erase(it);
  }
  void decay_usage(double now) {
    for (auto& [tenant, v] : usage_) v.first = decay(v.first, std::max(0.0, now - v.second), s_.half_life_s);
    for (const std::int64_t id : running_) account(jobs_.at(id), now);
    for (auto& [tenant, v] : usage_) v.second = now;
    last_pass_ = now;
  }
  void save_usage(double now) {
    std::vector<std::pair<std::string, std::pair<double, double>>> rows(usage_.begin(), usage_.end());
    store_.set_usage(rows);
    usage_saved_ = now;
  }

  // A pass with details over the daemon's own state, brought up to date first, starting
  // nothing (rsub why).
  SchedPlan explain_pass() {
    refresh();
    return schedule(input(now_s(), true));
  }

  Store& store() { return store_; }
  void finish_up() { save_usage(now_s()); }
  // New settings (the configuration file changed); the machine is probed again when
  // what describes it did.
  void set_settings(const Settings& s) {
    const bool machine = s.local_cpus != s_.local_cpus || s.local_gpus != s_.local_gpus || s.local_memory != s_.local_memory;
    s_ = s;
    if (machine) machine_ = local_machine(s_);
  }
  const Machine& machine() const { return machine_; }

 private:
  Settings s_;
  Machine machine_;
  Store store_;
  ShimLauncher launcher_{s_.dir};
  std::string host_;
  std::map<std::int64_t, JobRecord> jobs_;  // the active ones
  SchedInput in_;                            // what track() keeps of them for the scheduler
  std::unordered_map<std::int64_t, std::size_t> pending_at_;
  std::vector<std::string> reasons_;
  std::set<std::int64_t> running_;
  std::int64_t max_id_ = 0;
  bool loaded_ = false;
  std::int64_t change_seq_ = 0, trimmed_seq_ = 0;  // the change log: read up to, dropped up to
  std::set<std::pair<std::int64_t, int>> signalled_;  // (job, attempt) sent a cancel
  std::unordered_map<std::int64_t, int> start_failures_;  // attempts whose supervisor never ran
  std::map<std::string, std::pair<double, double>> usage_;
  double last_pass_ = now_s();
  double usage_saved_ = 0;
};

}  // namespace

namespace {

// The socket clients reach the daemon on. A shared daemon's lives in a directory that
// only the daemon's user may change (else another user could put a socket of theirs in
// its place): made 0755 when missing, refused when others may write to it.
UniqueFd listen_socket(const Settings& settings) {
  const std::string path = settings.socket_path();
  socklen_t len = 0;
  const sockaddr_un addr = unix_address(path, len);
  if (settings.shared()) {
    const std::string parent = path.substr(0, path.rfind('/'));
    for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
      ::mkdir(path.substr(0, slash).c_str(), 0755);
    struct stat st {};
    if (::stat(parent.empty() ? "/" : parent.c_str(), &st) != 0) throw system_error("stat " + parent, errno);
    if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
      throw Error(Exit::Config,
                  fmt::format("rsub.socket {}: its directory {} must belong to the daemon's user and be writable by "
                              "nobody else",
                              path, parent),
                  fmt::format("chown {} and chmod 0755 it", parent));
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ::unlink(addr.sun_path);  // a dead daemon's: we hold the lock
  // Made with no permission at all, then opened to those who may reach it: nobody
  // connects in between.
  const mode_t old = ::umask(0777);
  const int rc = fd ? ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) : -1;
  const int bind_errno = errno;
  ::umask(old);
  if (rc != 0) throw system_error("bind the rsub socket " + path, bind_errno);
  if (::chmod(addr.sun_path, settings.shared() ? 0666 : 0600) != 0 || ::listen(fd.get(), 512) != 0)
    throw system_error("listen on " + path, errno);
  return fd;
}

}  // namespace

int run_daemon(const Settings& initial, const DaemonOptions& options) {
  if (initial.shared() && ::geteuid() != 0)
    throw Error(Exit::NoPerm, "a shared rsub daemon (rsub.socket) must run as root: only root starts jobs as their users");
  Store{initial.dir};  // creates the directory and the store
  ::chmod(initial.dir.c_str(), 0700);  // nobody but the daemon's user reads or changes the store
  const std::string lock = initial.dir + "/daemon.lock";
  UniqueFd lock_fd(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock_fd) throw system_error("open " + lock, errno);
  if (::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) return 75;

  // Signals arrive through a descriptor, polled with the wake socket.
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  UniqueFd sig_fd(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  socklen_t len = 0;
  const sockaddr_un addr = wake_address(initial.dir, len);
  UniqueFd wake(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  ::unlink(addr.sun_path);  // a dead daemon's: we hold the lock
  if (!wake || ::bind(wake.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0)
    throw system_error("bind the rsub wake socket", errno);
  ::chmod(addr.sun_path, 0600);  // the daemon's supervisors run as its user
  UniqueFd wake_event(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));  // the request threads' wake-ups
  // Listening from now: clients that connect while the machine is probed wait in the
  // backlog, and are served once the capacity is recorded.
  UniqueFd listener = options.once ? UniqueFd() : listen_socket(initial);

  SettingsSource source(initial);
  Daemon daemon(initial, local_machine(initial));
  std::shared_ptr<const Settings> settings = source.current();
  auto record_capacity = [&] {
    const Machine& machine = daemon.machine();
    Json gpu_names = Json::array();
    for (const auto& g : machine.topology.gpus) gpu_names.push_back(g.name);
    daemon.store().set_meta("capacity", Json{{"cpus", machine.topology.cores.size()},
                                             {"gpus", machine.topology.gpus.size()},
                                             {"memory_bytes", machine.memory_bytes},
                                             {"gpu_names", gpu_names}}
                                            .dump());
  };
  record_capacity();
  // rsub why: a request thread asks, the scheduling thread answers after its next pass.
  std::mutex explain_mu;
  std::vector<std::pair<std::int64_t, std::promise<Explanation>>> explain_asks;
  bool explain_closed = false;  // the daemon is stopping: asks are refused
  auto wake_loop = [fd = wake_event.get()] {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
  };
  auto explain = [&](std::int64_t job) {
    std::future<Explanation> answer;
    {
      std::lock_guard lock(explain_mu);
      if (explain_closed) throw Error(Exit::TempFail, "the rsub daemon is stopping", "try again once it is back");
      explain_asks.emplace_back(job, std::promise<Explanation>());
      answer = explain_asks.back().second.get_future();
    }
    wake_loop();
    if (answer.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
      throw Error(Exit::TempFail, "the rsub daemon did not explain the job within 30 s", "try again");
    return answer.get();
  };
  // Answered before the pass that the ask woke: a job that pass starts is told so.
  auto answer_explains = [&](bool closing) {
    std::vector<std::pair<std::int64_t, std::promise<Explanation>>> asks;
    {
      std::lock_guard lock(explain_mu);
      asks.swap(explain_asks);
      explain_closed = closing;
    }
    if (asks.empty()) return;
    if (closing) {
      for (auto& [job, promise] : asks)
        promise.set_exception(std::make_exception_ptr(
            Error(Exit::TempFail, "the rsub daemon is stopping", "try again once it is back")));
      return;
    }
    try {
      const SchedPlan plan = daemon.explain_pass();
      for (auto& [job, promise] : asks) promise.set_value(explain_job(plan, job));
    } catch (...) {
      for (auto& [job, promise] : asks) promise.set_exception(std::current_exception());
    }
  };
  std::unique_ptr<RequestServer> server;
  if (!options.once) {
    server = std::make_unique<RequestServer>(listener.release(), source, wake_loop, explain, !initial.shared());
    server->start();
  }
  atomic_write_file(initial.dir + "/daemon.pid", std::to_string(::getpid()) + "\n");
  // A daemon whose directory was removed (a test's, a user's rm -rf) has nothing left to
  // serve: it ends instead of running on.
  struct stat home {};
  ::stat(initial.dir.c_str(), &home);
  auto dir_gone = [&] {
    struct stat now {};
    return ::stat(initial.dir.c_str(), &now) != 0 || now.st_ino != home.st_ino || now.st_dev != home.st_dev;
  };
  for (;;) {
    if (auto now = source.current(); now != settings) {
      settings = now;
      daemon.set_settings(*settings);
      record_capacity();
    }
    answer_explains(false);
    try {
      daemon.pass();
    } catch (const std::exception& e) {  // a busy or damaged store: say so, try again
      if (options.once) throw;
      std::cerr << "rsub daemon: scheduling pass failed: " << e.what() << '\n';
    }
    if (options.once) break;
    try {
      daemon.trim_changes();
    } catch (const std::exception& e) {
      std::cerr << "rsub daemon: trim the change log: " << e.what() << '\n';
    }
    pollfd fds[3] = {{wake.get(), POLLIN, 0}, {sig_fd.get(), POLLIN, 0}, {wake_event.get(), POLLIN, 0}};
    ::poll(fds, 3, 1000);
    if (fds[1].revents & POLLIN || dir_gone()) break;
    char buf[256];
    while (::recv(wake.get(), buf, sizeof buf, 0) > 0) {
    }
    std::uint64_t count = 0;
    [[maybe_unused]] auto n = ::read(wake_event.get(), &count, sizeof count);
  }
  answer_explains(true);  // what still waits, and what comes from now, is told the daemon stops
  const bool idle = !server || server->stop();
  JobCgroup::remove_parent(cgroup_parent(daemon.store().tag()));  // this store's level, empty once its jobs are gone
  if (server) ::unlink(initial.socket_path().c_str());
  daemon.finish_up();
  ::unlink((initial.dir + "/daemon.pid").c_str());
  ::unlink(addr.sun_path);
  // A request still inside a store call holds the server: end the process under it.
  if (!idle) ::_exit(0);
  return 0;
}

Explanation explain_job(const SchedPlan& plan, std::int64_t job) {
  Explanation x;
  x.starts = std::any_of(plan.starts.begin(), plan.starts.end(), [&](const Start& s) { return s.job == job; });
  for (const Verdict& v : plan.verdicts) {
    x.pending += v.position > 0;
    if (v.job == job) x.verdict = v;
  }
  return x;
}

SchedPlan dry_pass(const Settings& settings, const Machine& machine) {
  Daemon d(settings, machine);
  d.refresh();
  return schedule(d.input(now_s(), true));
}

SchedPlan pass_after(const Settings& settings, const Machine& machine, const std::function<void()>& change) {
  Daemon d(settings, machine);
  d.refresh();
  change();
  return d.explain_pass();
}

PassTiming time_pass(const Settings& settings, const Machine& machine) {
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  PassTiming out;
  Daemon d(settings, machine);
  auto t = std::chrono::steady_clock::now();
  d.refresh();
  out.load_ms = ms_since(t);
  t = std::chrono::steady_clock::now();
  d.refresh();
  out.refresh_ms = ms_since(t);
  const SchedInput& in = d.input(now_s(), false);
  out.input_ms = ms_since(t) - out.refresh_ms;
  out.plan = schedule(in);
  out.pass_ms = ms_since(t);
  return out;
}

}  // namespace rkit::rsub
