#include "rkit/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>

#include "rkit/error.hpp"
#include "rkit/host.hpp"

extern char** environ;

namespace rkit {

bool ExitStatus::exited() const { return WIFEXITED(raw_); }
int ExitStatus::code() const { return WIFEXITED(raw_) ? WEXITSTATUS(raw_) : -1; }
bool ExitStatus::signaled() const { return WIFSIGNALED(raw_); }
int ExitStatus::signal() const { return WIFSIGNALED(raw_) ? WTERMSIG(raw_) : 0; }
int ExitStatus::shell_code() const { return exited() ? code() : 128 + signal(); }
std::string ExitStatus::describe() const {
  if (exited()) return fmt::format("exit {}", code());
  return fmt::format("killed by signal {} ({})", signal(), signal_name(signal()));
}

std::string rkit_program(const std::string& name) {
  std::string var = "RKIT_";
  for (char c : name) var += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (const char* env = std::getenv(var.c_str()); env && *env) return env;
  if (const std::filesystem::path exe = self_exe(); !exe.empty()) {
    for (const std::filesystem::path& candidate :
         {exe.parent_path() / name, exe.parent_path().parent_path() / name / name})
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return name;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return fmt::format("signal {}", sig);
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Blocks `signals` in the calling thread while alive, then restores the previous mask.
// With `discard`, those that became pending meanwhile are dropped instead of being
// delivered (unless they were already blocked before).
class SignalBlock {
 public:
  SignalBlock(std::span<const int> signals, bool discard) : discard_(discard) {
    sigemptyset(&set_);
    for (int s : signals) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~SignalBlock() {
    if (discard_) {
      sigset_t drop;
      sigemptyset(&drop);
      for (int s = 1; s < NSIG; ++s)
        if (sigismember(&set_, s) == 1 && sigismember(&old_, s) == 0) sigaddset(&drop, s);
      struct timespec zero {};
      siginfo_t info;
      while (sigtimedwait(&drop, &info, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

 private:
  sigset_t set_, old_;
  bool discard_;
};

// Owns the spawn attribute objects and the parent's ends of pipes until spawn.
struct SpawnPlan {
  posix_spawn_file_actions_t actions{};
  posix_spawnattr_t attr{};
  std::vector<int> child_ends;  // closed in the parent after spawn
  std::array<int, 3> parent_ends{-1, -1, -1};

  SpawnPlan() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnPlan() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    for (int fd : child_ends) ::close(fd);
    for (int& fd : parent_ends) close_fd(fd);
  }

  void redirect(int target, const Redirect& r) {
    switch (r.kind) {
      case Redirect::Kind::Inherit: return;
      case Redirect::Kind::Null:
        posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0);
        return;
      case Redirect::Kind::File: {
        int flags = target == 0 ? O_RDONLY : (O_WRONLY | O_CREAT | (r.append ? O_APPEND : O_TRUNC));
        // Open here so that a bad path is our error, not a silent child failure.
        int fd = ::open(r.path.c_str(), flags | O_CLOEXEC, 0644);
        if (fd < 0) throw system_error(r.path, errno);
        child_ends.push_back(fd);
        posix_spawn_file_actions_adddup2(&actions, fd, target);
        return;
      }
      case Redirect::Kind::ToStdout: posix_spawn_file_actions_adddup2(&actions, 1, target); return;
      case Redirect::Kind::Pipe: {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw system_error("pipe", errno);
        int child = target == 0 ? fds[0] : fds[1];
        int parent = target == 0 ? fds[1] : fds[0];
        child_ends.push_back(child);
        parent_ends[static_cast<std::size_t>(target)] = parent;
        posix_spawn_file_actions_adddup2(&actions, child, target);
        return;
      }
    }
  }
};

std::vector<std::string> build_env(const SpawnOptions& o) {
  std::vector<std::string> env;
  auto overridden = [&](std::string_view entry) {
    auto eq = entry.find('=');
    std::string_view name = entry.substr(0, eq);
    for (const auto& u : o.unset_env)
      if (u == name) return true;
    for (const auto& [k, v] : o.env)
      if (k == name) return true;
    return false;
  };
  if (!o.clear_env)
    for (char** e = environ; *e; ++e)
      if (!overridden(*e)) env.emplace_back(*e);
  for (const auto& [k, v] : o.env) env.push_back(k + "=" + v);
  return env;
}

}  // namespace

Child Child::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) throw Error(Exit::Software, "spawn: empty argv");
  SpawnPlan plan;
  plan.redirect(0, o.in);
  plan.redirect(1, o.out);
  plan.redirect(2, o.err);
  if (!o.cwd.empty()) {
    // Checked here: a failed chdir in the child would be reported as "cannot run PROGRAM".
    struct stat st {};
    if (::stat(o.cwd.c_str(), &st) != 0) throw system_error("working directory " + o.cwd, errno);
    if (!S_ISDIR(st.st_mode)) throw system_error("working directory " + o.cwd, ENOTDIR);
    posix_spawn_file_actions_addchdir_np(&plan.actions, o.cwd.c_str());
  }

  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (o.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&plan.attr, 0);
  }
  posix_spawnattr_setflags(&plan.attr, flags);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&plan.attr, &empty);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&defaults, s);
  posix_spawnattr_setsigdefault(&plan.attr, &defaults);

  std::vector<std::string> env = build_env(o);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], &plan.actions, &plan.attr, argv.data(), envp.data());
  if (rc != 0) {
    Error e = system_error("cannot run '" + o.argv[0] + "'", rc);
    if (rc == ENOENT) throw Error(e.code(), e.what(), "is it installed and on PATH?");
    throw e;
  }

  Child c;
  c.pid_ = pid;
  c.own_group_ = o.new_process_group;
  c.in_fd_ = std::exchange(plan.parent_ends[0], -1);
  c.out_fd_ = std::exchange(plan.parent_ends[1], -1);
  c.err_fd_ = std::exchange(plan.parent_ends[2], -1);
  c.pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));  // -1 on old kernels: we poll
  return c;
}

Child::Child(Child&& other) noexcept { *this = std::move(other); }

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = std::exchange(other.pid_, -1);
    own_group_ = other.own_group_;
    group_alive_ = std::exchange(other.group_alive_, true);
    in_fd_ = std::exchange(other.in_fd_, -1);
    out_fd_ = std::exchange(other.out_fd_, -1);
    err_fd_ = std::exchange(other.err_fd_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

Child::~Child() { reset(); }

void Child::reset() noexcept {
  if (running()) {
    signal(SIGKILL);
    // Not wait(), which throws: waitpid fails with ECHILD when SIGCHLD is ignored and
    // the kernel reaped the child itself. Either way the process is gone.
    int st = 0;
    pid_t r;
    do r = ::waitpid(pid_, &st, 0);
    while (r < 0 && errno == EINTR);
    if (r == pid_) status_ = ExitStatus::from_wait(st);
  }
  reset_fds();
  pid_ = -1;
  status_.reset();
  group_alive_ = true;
}

void Child::reset_fds() {
  close_fd(in_fd_);
  close_fd(out_fd_);
  close_fd(err_fd_);
  close_fd(pidfd_);
}

void Child::close_stdin() { close_fd(in_fd_); }

void Child::signal(int sig) const {
  if (pid_ <= 0) return;
  if (own_group_) {
    // The group outlives a reaped leader while members that ignored our signals
    // remain; its id cannot be reused until it is empty, which ESRCH tells us.
    if (group_alive_ && ::kill(-pid_, sig) != 0 && errno == ESRCH) group_alive_ = false;
  } else if (running()) {
    ::kill(pid_, sig);
  }
}

std::optional<ExitStatus> Child::try_wait() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r;
  do r = ::waitpid(pid_, &st, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == pid_) status_ = ExitStatus::from_wait(st);
  return status_;
}

ExitStatus Child::wait() {
  if (status_) return *status_;
  // waitpid(-1) would reap some other child of ours.
  if (pid_ <= 0) throw Error(Exit::Software, "wait on a Child that has no process");
  int st = 0;
  pid_t r;
  do r = ::waitpid(pid_, &st, 0);
  while (r < 0 && errno == EINTR);
  if (r != pid_) throw system_error("waitpid", errno);
  status_ = ExitStatus::from_wait(st);
  return *status_;
}

std::optional<ExitStatus> Child::wait_for(double timeout_s) {
  auto t0 = Clock::now();
  for (;;) {
    if (auto s = try_wait()) return s;
    double left = timeout_s - seconds_since(t0);
    if (left <= 0) return std::nullopt;
    int ms = static_cast<int>(std::min(left, 0.05) * 1000) + 1;
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
    } else {
      ::poll(nullptr, 0, ms);
    }
  }
}

ExitStatus Child::terminate(double grace_s) {
  if (!running()) return wait();
  signal(SIGTERM);
  if (auto s = wait_for(grace_s)) return *s;
  signal(SIGKILL);
  return wait();
}

RunResult run(const SpawnOptions& options, std::optional<double> timeout_s, double grace_s, std::string_view input) {
  auto t0 = Clock::now();
  Child child = Child::spawn(options);
  RunResult result;
  // Our ends of the pipes, closed on every way out (an exception too).
  struct Ends {
    int in, out, err;
    ~Ends() {
      close_fd(in);
      close_fd(out);
      close_fd(err);
    }
  } ends{child.take_stdin_fd(), child.take_stdout_fd(), child.take_stderr_fd()};
  int& in_fd = ends.in;
  int& out_fd = ends.out;
  int& err_fd = ends.err;

  // Block SIGPIPE while feeding stdin so that a child that stops reading gives EPIPE;
  // one left pending is dropped, also when we throw.
  constexpr int kSigpipe[] = {SIGPIPE};
  SignalBlock no_sigpipe(kSigpipe, /*discard=*/true);
  if (in_fd >= 0) {
    ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
    if (input.empty()) close_fd(in_fd);
  }
  std::size_t written = 0;
  std::optional<Clock::time_point> kill_at;
  bool killed = false;

  for (;;) {
    bool exited = child.try_wait().has_value();
    if (exited) close_fd(in_fd);
    if (exited && out_fd < 0 && err_fd < 0) break;

    int wait_ms = 50;
    if (timeout_s && !result.timed_out) {
      double left = *timeout_s - seconds_since(t0);
      if (left <= 0) {
        result.timed_out = true;
        child.signal(SIGTERM);
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
      } else {
        wait_ms = std::min(wait_ms, static_cast<int>(left * 1000) + 1);
      }
    }
    if (kill_at && !killed && Clock::now() >= *kill_at) {
      child.signal(SIGKILL);
      killed = true;
    }

    std::vector<pollfd> fds;
    if (out_fd >= 0) fds.push_back({out_fd, POLLIN, 0});
    if (err_fd >= 0) fds.push_back({err_fd, POLLIN, 0});
    if (in_fd >= 0) fds.push_back({in_fd, POLLOUT, 0});
    if (fds.empty()) {
      child.wait_for(wait_ms / 1000.0);
      continue;
    }
    int n = ::poll(fds.data(), fds.size(), exited ? 0 : wait_ms);
    if (n < 0 && errno != EINTR) throw system_error("poll", errno);
    bool progressed = false;
    for (const auto& p : fds) {
      if (!p.revents) continue;
      if (p.fd == in_fd) {
        ssize_t w = ::write(in_fd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<std::size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) written = input.size();  // EPIPE: stop
        if (written == input.size()) close_fd(in_fd);
        progressed = true;
        continue;
      }
      int& fd = p.fd == out_fd ? out_fd : err_fd;
      std::string& sink = p.fd == out_fd ? result.out : result.err;
      char buf[65536];
      ssize_t r = ::read(fd, buf, sizeof buf);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r > 0) {
        sink.append(buf, static_cast<std::size_t>(r));
        progressed = true;
      } else {
        close_fd(fd);  // EOF or error: stop watching this pipe
      }
    }
    // After the child has exited, an idle pipe means a grandchild holds it open:
    // do not wait for it.
    if (exited && !progressed) break;
  }
  // The child may have ended on SIGTERM while others in its group ignore it: they get
  // SIGKILL now, not the rest of the grace (waiting for the group to empty could not
  // tell them from zombies that no init reaps), so that none outlives the timeout.
  if (result.timed_out) child.signal(SIGKILL);

  result.status = child.wait();
  result.elapsed_s = seconds_since(t0);
  return result;
}

namespace {
constexpr std::size_t kMaxForwarded = 64;
std::array<std::atomic<pid_t>, kMaxForwarded> g_forward_groups{};
std::atomic<int> g_last_signal{0};
std::atomic<bool> g_forwarder_alive{false};
struct sigaction g_old_actions[3];
constexpr int kForwardedSignals[3] = {SIGINT, SIGTERM, SIGHUP};

void forward_signal(int sig) {
  int saved_errno = errno;  // the interrupted code may be about to read it
  g_last_signal.store(sig);
  for (auto& g : g_forward_groups) {
    pid_t pg = g.load();
    if (pg > 0) ::kill(-pg, sig);
  }
  errno = saved_errno;
}
}  // namespace

SignalForwarder::SignalForwarder() {
  if (g_forwarder_alive.exchange(true)) throw Error(Exit::Software, "two SignalForwarders at once");
  g_last_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) ::sigaction(kForwardedSignals[i], &sa, &g_old_actions[i]);
}

SignalForwarder::~SignalForwarder() {
  for (int i = 0; i < 3; ++i) ::sigaction(kForwardedSignals[i], &g_old_actions[i], nullptr);
  for (auto& g : g_forward_groups) g.store(0);
  g_forwarder_alive = false;
}

void SignalForwarder::add(const Child& child) {
  // kill(-pid) would fail, silently, for a child that is not a group leader.
  if (child.pid() <= 0 || !child.own_group())
    throw Error(
        Exit::Software,
        fmt::format("cannot forward signals to process {}: it does not lead its own process group", child.pid()));
  for (auto& g : g_forward_groups) {
    pid_t expected = 0;
    if (g.compare_exchange_strong(expected, child.pid())) return;
  }
  throw Error(Exit::Software, "too many children to forward signals to");
}

void SignalForwarder::remove(const Child& child) {
  for (auto& g : g_forward_groups) {
    pid_t expected = child.pid();
    g.compare_exchange_strong(expected, 0);
  }
}

Child SignalForwarder::spawn(const SpawnOptions& options) {
  // A forwarded signal that arrives meanwhile stays pending until the child is
  // registered (the child itself starts with an empty mask). Should add() throw, the
  // child is killed before the signals are unblocked.
  SignalBlock blocked(kForwardedSignals, /*discard=*/false);
  Child child = Child::spawn(options);
  add(child);
  return child;
}

int SignalForwarder::last_signal() const { return g_last_signal.load(); }

std::string sh_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace rkit
