// File: rsub/daemon/shim.cpp — the supervisor of one attempt of one job, and the launcher that
// starts supervisors for the daemon (`rsub _launcher`).
//
// It starts the job's tasks together (a gang) in one process group, each bound to its
// cores, with its GPUs in CUDA_VISIBLE_DEVICES and its output appended to its log files;
// then waits. The attempt ends when every task has ended; the first task to fail, the
// time limit or a SIGTERM (rsub cancel) ends the others: SIGTERM to the group, SIGKILL
// after the grace period. The end goes to the store in one transaction before the
// supervisor exits, which frees the lock the daemon watches (daemon.hpp).
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/store.hpp"
#include "daemon/daemon.hpp"
#include "daemon/protocol.hpp"
#include "rkit/cgroup.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rsub {

namespace {

// Everything a task's child needs, built before fork. The supervisor is single-threaded,
// so the child may also look up its user (getpwuid) before exec.
struct TaskLaunch {
  std::vector<std::string> args, env;
  std::vector<char*> argv, envp;
  UniqueFd out, err;  // its log files, opened by the supervisor
  std::string workdir;
  cpu_set_t cpus;
  bool bind = false;
};

// A task's log file, in the job's log directory: created owned by the job's user, 0600,
// appended to by later attempts. Opened through the directory's descriptor without
// following links; the directory is the supervisor's, where no user can reach.
UniqueFd open_log(int dir_fd, const std::string& name, std::uint32_t uid) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600));
  if (!fd) throw system_error("open the log " + name, errno);
  if (::geteuid() == 0 && uid != 0 && ::fchown(fd.get(), uid, static_cast<gid_t>(-1)) != 0)
    throw system_error("give the log " + name + " to the job's user", errno);
  return fd;
}

// The environment a job's tasks start from: the submitter's, captured at submit; for a
// job stored without one, a plain PATH. Never the daemon's own.
std::vector<std::string> base_environment(Store& store, std::int64_t id) {
  if (auto env = store.environment(id)) return *env;
  return {"PATH=/usr/local/bin:/usr/bin:/bin"};
}

TaskLaunch prepare(const JobRecord& job, int task, int log_dir_fd, const std::vector<std::string>& environment) {
  TaskLaunch t;
  t.args = job.spec.command;
  std::vector<std::pair<std::string, std::string>> set = {
      {"RSUB_JOB_ID", job.display_id()},
      {"RSUB_TASK_ID", std::to_string(task)},
      {"RSUB_NTASKS", std::to_string(job.spec.resources.tasks)},
      {"RSUB_ARRAY_INDEX", job.array_index ? std::to_string(*job.array_index) : ""},
      {"RSUB_ATTEMPT", std::to_string(job.attempts)},
  };
  const TaskAlloc& a = job.alloc.at(static_cast<std::size_t>(task));
  // No GPUs asked: none visible, as Slurm does with --gres unset and ConstrainDevices.
  // The indices are the topology's, in PCI bus order: CUDA must count them that way too.
  set.emplace_back("CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(a.gpus, ",")));
  set.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  if (::geteuid() == 0 && job.uid != 0)  // a root supervisor runs the job as its user
    if (const passwd* pw = ::getpwuid(job.uid)) {
      set.emplace_back("HOME", pw->pw_dir);
      set.emplace_back("USER", pw->pw_name);
      set.emplace_back("LOGNAME", pw->pw_name);
    }
  if (a.pus.size() > 0 && !job.spec.env.count("OMP_NUM_THREADS"))
    set.emplace_back("OMP_NUM_THREADS", std::to_string(job.spec.resources.cpus_per_task));
  for (const auto& [k, v] : job.spec.env) set.emplace_back(k, v);
  for (const std::string& kv : environment) {
    const std::string key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced |= k == key;
    if (!replaced) t.env.push_back(kv);
  }
  for (const auto& [k, v] : set)
    if (!(k == "RSUB_ARRAY_INDEX" && v.empty())) t.env.push_back(k + "=" + v);
  for (auto& s : t.args) t.argv.push_back(s.data());
  t.argv.push_back(nullptr);
  for (auto& s : t.env) t.envp.push_back(s.data());
  t.envp.push_back(nullptr);
  t.out = open_log(log_dir_fd, fmt::format("task-{}.out", task), job.uid);
  t.err = open_log(log_dir_fd, fmt::format("task-{}.err", task), job.uid);
  t.workdir = job.spec.workdir.empty() ? "/" : job.spec.workdir;
  CPU_ZERO(&t.cpus);
  for (int pu : a.pus)
    if (pu >= 0 && pu < CPU_SETSIZE) {
      CPU_SET(pu, &t.cpus);
      t.bind = true;
    }
  return t;
}

[[noreturn]] void child_fail(const char* what, const char* detail) {
  const std::string line = fmt::format("rsub: {}: {}\n", what, detail);
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
  ::_exit(127);
}

// In the child, between fork and exec. A root supervisor runs the job as its user.
[[noreturn]] void exec_task(TaskLaunch& t, pid_t group, const JobRecord& job, const JobCgroup* cgroup) {
  ::setpgid(0, group);
  // Into the job's cgroup first: its cpuset bounds the affinity set below, and only
  // root may move a process.
  if (cgroup && cgroup->enter_child() != 0) child_fail("cannot enter the job's cgroup", std::strerror(errno));
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0 || ::dup2(in, 0) < 0 || ::dup2(t.out.get(), 1) < 0 || ::dup2(t.err.get(), 2) < 0) ::_exit(126);
  // Default dispositions and no blocked signal: ignored ones (SIGPIPE under systemd,
  // SIGHUP under nohup) would otherwise survive exec into the job.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // A mask naming no CPU of this machine is refused; the task then runs unbound.
  if (t.bind) ::sched_setaffinity(0, sizeof t.cpus, &t.cpus);
  if (::geteuid() == 0 && job.uid != 0) {
    const passwd* pw = ::getpwuid(job.uid);
    if (!pw || ::initgroups(pw->pw_name, pw->pw_gid) != 0 || ::setgid(pw->pw_gid) != 0 || ::setuid(job.uid) != 0)
      child_fail("cannot become the job's user", std::strerror(errno));
  }
  // A supervisor killed outright takes its tasks with it (set after setuid, which clears
  // it), so that a LOST job leaves nothing running on cores the scheduler hands out again.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) ::_exit(137);  // the supervisor died before the line above
  if (::chdir(t.workdir.c_str()) != 0) child_fail(t.workdir.c_str(), std::strerror(errno));
  ::execvpe(t.argv[0], t.argv.data(), t.envp.data());
  child_fail(t.argv[0], std::strerror(errno));
}

double monotonic() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// The job attempt's cgroup, under a root supervisor where the machine has cgroups:
// rkit/<store tag>/job-ID.N (the tag keeps two stores' jobs apart). Its cores, memory,
// tasks and GPUs are the kernel's to enforce. nullopt without cgroups (a personal,
// unprivileged daemon: the limits are then scheduled only).
std::optional<JobCgroup> job_cgroup(Store& store, const JobRecord& job, int attempt, int pids_max) {
  if (::geteuid() != 0 || cgroup_version() == CgroupVersion::None) return std::nullopt;
  CgroupLimits limits;
  std::vector<int> gpus;
  for (const TaskAlloc& a : job.alloc) {
    limits.cpus.insert(limits.cpus.end(), a.pus.begin(), a.pus.end());
    gpus.insert(gpus.end(), a.gpus.begin(), a.gpus.end());
  }
  std::sort(limits.cpus.begin(), limits.cpus.end());
  limits.cpus.erase(std::unique(limits.cpus.begin(), limits.cpus.end()), limits.cpus.end());
  // Only CPUs this machine has ([local] cpus may claim more): none of them, no cpuset,
  // as the affinity of such a task is left alone too.
  cpu_set_t online;
  CPU_ZERO(&online);
  if (::sched_getaffinity(0, sizeof online, &online) == 0)
    std::erase_if(limits.cpus, [&](int c) { return c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &online); });
  const auto& r = job.spec.resources;
  if (r.memory_bytes > 0) {
    limits.memory_bytes = r.memory_bytes * static_cast<std::uint64_t>(r.tasks);
  } else {  // none asked: the machine's memory per CPU for each of its CPUs (Slurm's DefMemPerCPU)
    const auto cpus = static_cast<std::uint64_t>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    const auto memory =
        static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(::sysconf(_SC_PAGE_SIZE));
    limits.memory_bytes = memory / cpus * static_cast<std::uint64_t>(std::max(1, r.tasks * r.cpus_per_task));
  }
  if (pids_max > 0) limits.pids_max = pids_max;
  if (::access("/dev/nvidiactl", F_OK) == 0) limits.gpus = gpus;  // the machine has NVIDIA GPUs
  return JobCgroup::create(cgroup_parent(store.tag()), fmt::format("job-{}.{}", job.id, attempt), limits);
}

}  // namespace

std::string cgroup_parent(const std::string& store_tag) { return "rkit/" + store_tag; }

int run_shim(const std::string& dir, std::int64_t id, int attempt, int lock_fd, double kill_grace_s, int pids_max) {
  // Signals first (the daemon starts us with them blocked already): a cancel that comes
  // as soon as the pid is known must end the attempt as CANCELLED, not kill us.
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGCHLD, SIG_DFL);             // an inherited SIG_IGN would reap the tasks behind our back
  ::fcntl(lock_fd, F_SETFD, FD_CLOEXEC);  // tasks do not inherit the lock
  // The pid in the lock file tells the daemon that tasks may have started: without it
  // written, start none (the daemon then puts the job back in the queue).
  const std::string pid_text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd, 0) != 0 || ::write(lock_fd, pid_text.data(), pid_text.size()) != ssize_t(pid_text.size()))
    throw system_error("record the supervisor's pid", errno);

  Store store(dir);
  const std::optional<JobRecord> job = store.job(id);
  if (!job || job->state != JobState::Running || job->attempts != attempt) return 0;  // not ours to run
  const int ntasks = static_cast<int>(job->alloc.size());
  // <dir>/logs/ID: the supervisor's (0700), inside the daemon's private directory.
  const std::string log_dir = fmt::format("{}/logs/{}", dir, job->display_id());
  ::mkdir((dir + "/logs").c_str(), 0700);
  ::mkdir(log_dir.c_str(), 0700);
  UniqueFd log_dir_fd(::open(log_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!log_dir_fd) throw system_error("open " + log_dir, errno);

  std::optional<JobCgroup> cgroup;
  try {
    cgroup = job_cgroup(store, *job, attempt, pids_max);
  } catch (const std::exception& e) {
    // A root supervisor that cannot confine the job does not run it unconfined.
    warn("rsub supervisor", fmt::format("job {}: {}", id, e.what()), std::cerr);
    AttemptEnd end;
    end.exit_code = 126;
    end.end_s = now_s();
    store.end_attempt(id, attempt, end);
    ::unlink(lock_path(dir, id, attempt).c_str());
    wake_daemon(dir);
    return 0;
  }
  const std::vector<std::string> environment = base_environment(store, id);
  std::vector<TaskLaunch> launches;
  for (int t = 0; t < ntasks; ++t) launches.push_back(prepare(*job, t, log_dir_fd.get(), environment));
  std::vector<pid_t> pids(static_cast<std::size_t>(ntasks), -1);
  pid_t group = 0;
  for (int t = 0; t < ntasks; ++t) {
    const pid_t pid = ::fork();
    if (pid == 0) exec_task(launches[static_cast<std::size_t>(t)], group, *job, cgroup ? &*cgroup : nullptr);
    if (pid < 0) break;  // the tasks started so far are ended below, and the attempt fails
    if (group == 0) group = pid;
    ::setpgid(pid, group);  // also here: whichever of parent and child runs first
    pids[static_cast<std::size_t>(t)] = pid;
  }
  for (TaskLaunch& l : launches) l.out.reset(), l.err.reset();  // the tasks hold their logs
  // The task rows are a record, not the protocol: a store error here (a full disk) must
  // not leave the tasks unsupervised.
  auto record = [](const char* what, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      warn("rsub supervisor", fmt::format("{}: {}", what, e.what()), std::cerr);
    }
  };
  const double started = now_s();
  record("record the tasks' start", [&] {
    store.transaction([&] {
      for (int t = 0; t < ntasks; ++t)
        if (pids[static_cast<std::size_t>(t)] > 0)
          store.task_started(id, attempt, t, pids[static_cast<std::size_t>(t)], started);
    });
  });

  AttemptEnd end;
  bool ending = false;  // the group has had its SIGTERM
  double kill_at = 0;
  auto end_group = [&](AttemptEnd::How how, std::optional<int> code, std::optional<int> sig) {
    if (ending) return;
    end.how = how;
    end.exit_code = code;
    end.signal = sig;
    ending = true;
    kill_at = monotonic() + kill_grace_s;
    if (group > 0) ::killpg(group, SIGTERM);
  };
  if (std::find(pids.begin(), pids.end(), -1) != pids.end()) end_group(AttemptEnd::How::Exited, 127, std::nullopt);

  UniqueFd signals(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));  // the blocked ones, polled
  const double t0 = monotonic();
  const std::optional<double> limit = job->spec.time_limit_s;
  struct TaskEnd {
    int task;
    std::optional<int> code, sig;
    double at;
  };
  std::optional<TaskEnd> last_task;
  int running = 0;
  for (pid_t p : pids) running += p > 0;
  while (running > 0) {
    // Reap whatever ended.
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      const auto it = std::find(pids.begin(), pids.end(), pid);
      if (it == pids.end()) continue;
      const auto t = static_cast<std::size_t>(it - pids.begin());
      --running;
      std::optional<int> code, sig;
      if (WIFEXITED(status))
        code = WEXITSTATUS(status);
      else
        sig = WTERMSIG(status);
      // The last task's end is stored with the attempt's, in one transaction.
      if (running > 0)
        record("record a task's end", [&] { store.task_ended(id, attempt, static_cast<int>(t), code, sig, now_s()); });
      else
        last_task = TaskEnd{static_cast<int>(t), code, sig, now_s()};
      // A task killed by SIGKILL in a group whose memory limit struck: OUT_OF_MEMORY.
      if (sig == SIGKILL && cgroup && cgroup->oom_killed()) end_group(AttemptEnd::How::OutOfMemory, code, sig);
      if (code.value_or(1) != 0) end_group(sig ? AttemptEnd::How::Signaled : AttemptEnd::How::Exited, code, sig);
    }
    if (running == 0) break;
    // Wait for the next event: a child, a signal, the time limit or the kill deadline.
    double wait_s = 3600;
    if (limit && !ending) wait_s = std::min(wait_s, t0 + *limit - monotonic());
    if (ending) wait_s = std::min(wait_s, kill_at - monotonic());
    if (wait_s <= 0) {
      if (!ending) {
        end_group(AttemptEnd::How::TimedOut, std::nullopt, std::nullopt);
      } else {
        if (group > 0) ::killpg(group, SIGKILL);
        if (cgroup) cgroup->kill_all(std::chrono::seconds(5));
        kill_at = monotonic() + 3600;
      }
      continue;
    }
    pollfd fds[2] = {{signals.get(), POLLIN, 0}, {cgroup ? cgroup->oom_fd() : -1, POLLIN, 0}};
    ::poll(fds, 2, static_cast<int>(std::ceil(wait_s * 1000)));
    if (fds[1].revents & POLLIN && cgroup->consume_oom_event())
      end_group(AttemptEnd::How::OutOfMemory, std::nullopt, SIGKILL);  // the rest of the job goes too
    signalfd_siginfo info{};
    while (::read(signals.get(), &info, sizeof info) == ssize_t(sizeof info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) end_group(AttemptEnd::How::Cancelled, std::nullopt, sig);
    }
  }
  if (group > 0) ::killpg(group, SIGKILL);  // nothing of the job outlives its attempt:
  if (cgroup) {                             // neither its process group nor what left it
    cgroup->kill_all(std::chrono::seconds(10));
    const CgroupUsage used = cgroup->usage();
    end.cpu_s = used.cpu_s;
    end.peak_memory_bytes = used.peak_memory_bytes;
    if (used.oom_killed && end.how == AttemptEnd::How::Signaled) end.how = AttemptEnd::How::OutOfMemory;
    try {
      cgroup->remove();
    } catch (const std::exception& e) {
      warn("rsub supervisor", fmt::format("job {}: {}", id, e.what()), std::cerr);
    }
  }
  if (!ending) end.how = AttemptEnd::How::Exited, end.exit_code = 0;
  end.end_s = now_s();
  // The end must be stored before the lock goes (else the job is LOST): keep trying for
  // ten minutes, holding the lock, through a busy or full store.
  for (int tries = 0;; ++tries) {
    try {
      store.transaction([&] {
        if (last_task) store.task_ended(id, attempt, last_task->task, last_task->code, last_task->sig, last_task->at);
        store.end_attempt(id, attempt, end);
      });
      break;
    } catch (const std::exception& e) {
      if (tries == 60) throw;
      warn("rsub supervisor", fmt::format("record the end of job {}: {} (retrying)", id, e.what()), std::cerr);
      ::sleep(10);
    }
  }
  ::unlink(lock_path(dir, id, attempt).c_str());  // the end is stored: nothing to watch
  wake_daemon(dir);
  return 0;
}

int run_launcher(const std::string& dir, int fd) {
  // Supervisors are reaped as they end: nothing here waits for them.
  struct sigaction reap {};
  reap.sa_handler = SIG_IGN;
  reap.sa_flags = SA_NOCLDWAIT;
  ::sigaction(SIGCHLD, &reap, nullptr);
  for (int sig : {SIGINT, SIGHUP}) ::signal(sig, SIG_IGN);  // a terminal's; the daemon's closed end ends us
  for (;;) {
    ShimRequest request;
    int lock_fd = -1;
    const ssize_t n = recv_with_fd(fd, &request, sizeof request, lock_fd);
    if (n <= 0) return 0;  // the daemon is gone
    if (n != ssize_t(sizeof request) || lock_fd < 0) {
      warn("rsub launcher", "a malformed request from the daemon", std::cerr);
      if (lock_fd >= 0) ::close(lock_fd);
      continue;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The supervisor: a session of its own, the daemon's socket closed, the signals it
      // waits for blocked, everything else at its default.
      sigset_t mask;
      sigemptyset(&mask);
      for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, sig);
      ::sigprocmask(SIG_SETMASK, &mask, nullptr);
      for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
      ::setsid();
      ::close(fd);
      ::prctl(PR_SET_NAME, "rsub supervisor");  // in ps and top, not the launcher's name
      int code = 1;
      try {
        code = run_shim(dir, request.id, request.attempt, lock_fd, request.kill_grace_s, request.pids_max);
      } catch (const std::exception& e) {
        std::cerr << "rsub: supervisor: job " << request.id << ": " << e.what() << '\n';
      }
      std::cerr.flush();
      ::_exit(code);
    }
    // On failure the lock goes with our copy, holding no pid: the daemon queues the job again.
    if (pid < 0) warn("rsub launcher", std::string("fork: ") + std::strerror(errno), std::cerr);
    ::close(lock_fd);
  }
}

}  // namespace rkit::rsub
