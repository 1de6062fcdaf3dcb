// File: rsub/daemon/daemon.cpp — the wake socket, starting a personal daemon, and the daemon's
// process: its sockets, signals and scheduling loop (daemon.hpp). Its state between passes
// and the launcher of supervisors are daemon_state.cpp's.
#include "daemon/daemon.hpp"

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
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>

#include "core/store.hpp"
#include "daemon/daemon_state.hpp"
#include "daemon/protocol.hpp"
#include "daemon/server.hpp"
#include "rkit/atomic_file.hpp"
#include "rkit/cgroup.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/topology.hpp"

namespace rkit::rsub {

std::string lock_path(const std::string& dir, std::int64_t id, int attempt) {
  return fmt::format("{}/run/{}.{}.lock", dir, id, attempt);
}

namespace {

// The wake socket is a file in the state directory, which only the daemon's user may
// enter; the daemon (which holds daemon.lock) binds it, its supervisors write to it.
sockaddr_un wake_address(const std::string& dir, socklen_t& len) { return unix_address(dir + "/wake.sock", len); }

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

void run_daemon(const Settings& initial, const DaemonOptions& options) {
  if (initial.shared() && ::geteuid() != 0)
    throw Error(Exit::NoPerm,
                "a shared rsub daemon (rsub.socket) must run as root: only root starts jobs as their users");
  Store{initial.dir};                  // creates the directory and the store
  ::chmod(initial.dir.c_str(), 0700);  // nobody but the daemon's user reads or changes the store
  const std::string lock = initial.dir + "/daemon.lock";
  UniqueFd lock_fd(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock_fd) throw system_error("open " + lock, errno);
  if (::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0)
    throw Error(Exit::TempFail, "a daemon already runs for " + initial.dir);

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
  ::chmod(addr.sun_path, 0600);                                   // the daemon's supervisors run as its user
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
        promise.set_exception(
            std::make_exception_ptr(Error(Exit::TempFail, "the rsub daemon is stopping", "try again once it is back")));
      return;
    }
    try {
      const SchedPlan plan = daemon.explain_pass();
      for (auto& [job, promise] : asks) promise.set_value(explain_job(plan, job));
    } catch (...) {
      for (auto& [job, promise] : asks) promise.set_exception(std::current_exception());
    }
  };
  // The scheduling passes completed since the daemon started (rsub status --json reports
  // them as daemon_passes): what a test waits on for a whole pass after its change.
  std::atomic<std::uint64_t> passes{0};
  auto passes_done = [&passes] { return passes.load(); };
  std::unique_ptr<RequestServer> server;
  if (!options.once) {
    server =
        std::make_unique<RequestServer>(listener.release(), source, wake_loop, explain, passes_done, !initial.shared());
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
      ++passes;
    } catch (const std::exception& e) {  // a busy or damaged store: say so, try again
      if (options.once) throw;
      warn("rsub daemon", std::string("scheduling pass failed: ") + e.what(), std::cerr);
    }
    if (options.once) break;
    try {
      daemon.trim_changes();
    } catch (const std::exception& e) {
      warn("rsub daemon", std::string("trim the change log: ") + e.what(), std::cerr);
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
