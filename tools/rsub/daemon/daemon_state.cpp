// File: rsub/daemon/daemon_state.cpp — the daemon's state between passes and one scheduling
// pass over it (daemon_state.hpp), and the launcher that starts the jobs' supervisors.
#include "daemon/daemon_state.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iostream>

#include "daemon/protocol.hpp"
#include "rkit/cgroup.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/host.hpp"

namespace rkit::rsub {

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
      warn("rsub daemon", fmt::format("the launcher: {} (starting another)", std::strerror(errno)), std::cerr);
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
      ::setsid();     // a terminal's signals are the daemon's, not its launcher's
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

namespace {

// 1: the lock is held (its holder lives), 0: free, -1: no such file.
int probe_lock(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? -1 : 1;
  const int rc = ::flock(fd, LOCK_SH | LOCK_NB);
  ::close(fd);
  return rc == 0 ? 0 : 1;
}

}  // namespace

Daemon::~Daemon() = default;

Daemon::Daemon(const Settings& s, const Machine& m)
    : s_(s), machine_(m), store_(s.dir), launcher_(std::make_unique<ShimLauncher>(s_.dir)) {
  host_ = host_name();
  for (const auto& [tenant, v] : store_.usage()) usage_[tenant] = v;
}

void Daemon::refresh() {
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

void Daemon::resync() {
  jobs_.clear();
  in_.pending.clear();
  pending_at_.clear();
  reasons_.clear();
  running_.clear();
  max_id_ = 0;
  loaded_ = false;
}

void Daemon::finish_up() {
  try {
    refresh();
    watch_running();
  } catch (const std::exception& e) {
    warn("rsub daemon", std::string("last look at the running jobs: ") + e.what(), std::cerr);
  }
  save_usage(now_s());
}

void Daemon::trim_changes() {
  if (change_seq_ - trimmed_seq_ < 4096) return;
  store_.forget_changes(change_seq_);
  trimmed_seq_ = change_seq_;
}

bool Daemon::watch_running() {
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
                    fmt::format("the supervisor of attempt {} vanished without recording an end", j.attempts), now_s());
    });
  }
  return changed;
}

void Daemon::pass() {
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

const SchedInput& Daemon::input(double now, bool details) {
  in_.machine = &machine_;
  in_.config = s_.sched;
  in_.now = now;
  in_.details = details;
  in_.running.clear();
  for (const std::int64_t id : running_) {
    const JobRecord& j = jobs_.at(id);
    in_.running.push_back(
        {id, j.spec.tenant, j.user, j.array_parent, j.alloc, j.start_s.value_or(now), j.spec.time_limit_s});
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
      if (!terminal(state))
        status = DepStatus::Active;
      else if (state != JobState::Completed && status == DepStatus::Completed)
        status = DepStatus::NotOk;
    }
    in_.dependencies[id] = status;
  }
  in_.usage.clear();
  for (const auto& [tenant, v] : usage_) in_.usage[tenant] = v.first;
  return in_;
}

void Daemon::launch(const Start& start, double now) {
  JobRecord& j = jobs_.at(start.job);
  const int attempt = j.attempts + 1;
  const std::string lock = lock_path(s_.dir, j.id, attempt);
  ::mkdir((s_.dir + "/run").c_str(), 0700);
  UniqueFd fd(::open(lock.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    warn("rsub daemon", fmt::format("cannot lock {}: {}", lock, std::strerror(errno)), std::cerr);
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

void Daemon::spawn_shim(std::int64_t id, int attempt, int lock_fd) {
  const ShimRequest request{id, attempt, s_.job_pids_max, s_.kill_grace_s};
  // On failure the lock is free and holds no pid: the next pass queues the job again.
  if (!launcher_->send(request, lock_fd))
    warn("rsub daemon", fmt::format("cannot start job {}'s supervisor", id), std::cerr);
}

void Daemon::kill_cgroup(std::int64_t id, int attempt) {
  if (::geteuid() != 0) return;
  try {
    if (auto cg = JobCgroup::open(cgroup_parent(store_.tag()), fmt::format("job-{}.{}", id, attempt))) {
      cg->kill_all(std::chrono::seconds(5));
      cg->remove();
    }
  } catch (const std::exception& e) {
    warn("rsub daemon", fmt::format("job {}: {}", id, e.what()), std::cerr);
  }
}

void Daemon::signal_shim(const std::string& lock, std::int64_t id, int attempt) {
  std::string text;
  try {
    text = read_file(lock, 64);
  } catch (const Error&) {
    return;
  }
  const int pid = std::atoi(text.c_str());
  if (pid > 1 && probe_lock(lock) == 1 && ::kill(pid, SIGTERM) == 0) signalled_.insert({id, attempt});
}

void Daemon::apply(const Store::ActiveState& st) {
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

void Daemon::track(const JobRecord& j) {
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

void Daemon::untrack(std::int64_t id) {
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

void Daemon::account(const JobRecord& j, double now) {
  const double from = std::max(j.start_s.value_or(now), last_pass_);
  const auto& r = j.spec.resources;
  auto& usage = usage_.try_emplace(j.spec.tenant, 0.0, now).first->second;
  usage.first += std::max(0.0, now - from) * r.tasks * (r.cpus_per_task + s_.gpu_weight * r.gpus_per_task);
}

void Daemon::forget(const JobRecord& j) {
  if (j.state == JobState::Running) account(j, now_s());
  start_failures_.erase(j.id);
  for (auto it = signalled_.lower_bound({j.id, 0}); it != signalled_.end() && it->first == j.id;)
    it = signalled_.erase(it);
}

void Daemon::decay_usage(double now) {
  for (auto& [tenant, v] : usage_) v.first = decay(v.first, std::max(0.0, now - v.second), s_.half_life_s);
  for (const std::int64_t id : running_) account(jobs_.at(id), now);
  for (auto& [tenant, v] : usage_) v.second = now;
  last_pass_ = now;
}

void Daemon::save_usage(double now) {
  std::vector<std::pair<std::string, std::pair<double, double>>> rows(usage_.begin(), usage_.end());
  store_.set_usage(rows);
  usage_saved_ = now;
}

SchedPlan Daemon::explain_pass() {
  refresh();
  return schedule(input(now_s(), true));
}

void Daemon::set_settings(const Settings& s) {
  const bool machine =
      s.local_cpus != s_.local_cpus || s.local_gpus != s_.local_gpus || s.local_memory != s_.local_memory;
  s_ = s;
  if (machine) machine_ = local_machine(s_);
}

}  // namespace rkit::rsub
