// File: workers.cpp — a supervisor of a group of worker processes (rkit/workers.hpp).
#include "rkit/workers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

#include "rkit/error.hpp"

namespace rkit {

namespace {

using Clock = WorkerGroup::Clock;

constexpr std::size_t kReadBytes = 65536;
// Without a pidfd (kernels before 5.3) an exit wakes no poll: look this often.
constexpr int kExitPollMs = 50;
// A forwarded signal that lands just before poll() does not interrupt it: look this often.
constexpr int kSignalPollMs = 100;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::duration duration_of(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(s, 0.0)));
}

void set_nonblocking(int fd) {
  if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

double WorkerState::uptime_s() const { return seconds((status ? ended : Clock::now()) - started); }

std::string RootCause::describe() const {
  if (!reason.empty()) return reason;
  return status ? status->describe() : "failed";
}

WorkerGroup::WorkerGroup(WorkerGroupOptions options) : options_(options) {}

WorkerGroup::~WorkerGroup() { finish(); }

std::size_t WorkerGroup::spawn(const SpawnOptions& options) {
  if (stop_at_ || finished_) throw Error(Exit::Software, "spawn a worker into a group that was stopped");
  SpawnOptions o = options;
  o.new_process_group = true;  // stopping a worker stops what it started too
  Child child = options_.forward ? options_.forward->spawn(o) : Child::spawn(o);
  set_nonblocking(child.stdout_fd());
  set_nonblocking(child.stderr_fd());
  Slot s{std::move(child), {}, -1, 0, {}, false};
  s.state.pid = s.child.pid();
  s.state.started = Clock::now();
  s.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, s.state.pid, 0));  // -1: we look every kExitPollMs
  workers_.push_back(std::move(s));
  return workers_.size() - 1;
}

bool WorkerGroup::running() const {
  return !finished_ && std::any_of(workers_.begin(), workers_.end(), [](const Slot& s) { return !s.state.status; });
}

void WorkerGroup::stop() {
  if (stop_at_ || finished_) return;
  stop_at_ = Clock::now();
  for (Slot& s : workers_) s.child.signal(SIGTERM);
}

void WorkerGroup::mark_failed(Slot& s, std::uint64_t seen_in) {
  s.state.failed = true;
  s.failed_in = seen_in;
  s.failed_at = Clock::now();
  if (!first_failure_) first_failure_ = s.failed_at;
}

void WorkerGroup::fail(std::size_t i, std::string reason) {
  Slot& s = workers_.at(i);
  if (stop_at_ || s.state.failed || finished_) return;
  s.state.reason = std::move(reason);
  mark_failed(s, calls_ + 1);  // after what the last wait() saw
  tick(Clock::now());
}

void WorkerGroup::tick(Clock::time_point now) {
  if (!stop_at_ && options_.forward && options_.forward->last_signal()) stop();
  if (!stop_at_ && first_failure_ && now >= *first_failure_ + duration_of(options_.settle_s)) stop();
  if (stop_at_ && !killed_ && now >= *stop_at_ + duration_of(options_.grace_s)) {
    killed_ = true;
    for (Slot& s : workers_) s.child.signal(SIGKILL);  // the groups: what the workers left behind too
  }
}

void WorkerGroup::read_output(std::size_t i, int fd, std::vector<WorkerEvent>& events, bool until_empty) {
  Child& child = workers_[i].child;
  const int which = fd == child.stdout_fd() ? 1 : 2;
  char buf[kReadBytes];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    WorkerEvent e;
    e.kind = WorkerEvent::Kind::Output;
    e.worker = i;
    e.fd = which;
    if (n > 0) {
      e.data.assign(buf, static_cast<std::size_t>(n));
      events.push_back(std::move(e));
      if (until_empty) continue;
      return;
    }
    // End of file, or an error that ends this pipe as well.
    int ours = which == 1 ? child.take_stdout_fd() : child.take_stderr_fd();
    close_fd(ours);
    events.push_back(std::move(e));
    return;
  }
}

void WorkerGroup::reap(std::vector<WorkerEvent>& events) {
  const bool stopped = stop_at_ || (options_.forward && options_.forward->last_signal());
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    Slot& s = workers_[i];
    if (s.state.status) continue;
    const auto st = s.child.try_wait();
    if (!st) continue;
    close_fd(s.pidfd);
    s.state.status = st;
    s.state.ended = Clock::now();
    if (stopped) {
      s.state.stopped = true;
    } else if (!st->success() && !s.state.failed) {
      s.by_signal = st->signaled();
      mark_failed(s, calls_);
    }
    WorkerEvent e;
    e.kind = WorkerEvent::Kind::Exited;
    e.worker = i;
    e.status = *st;
    events.push_back(std::move(e));
  }
}

std::vector<WorkerEvent> WorkerGroup::wait(double timeout_s) {
  ++calls_;
  std::vector<WorkerEvent> events;
  if (finished_) return events;
  const auto deadline = Clock::now() + duration_of(timeout_s);
  for (;;) {
    tick(Clock::now());
    std::vector<pollfd> fds;
    std::vector<std::size_t> owner;
    bool blind = false;  // a running worker whose exit wakes no poll
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      const Slot& s = workers_[i];
      for (int fd : {s.child.stdout_fd(), s.child.stderr_fd()})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0}), owner.push_back(i);
      if (!s.state.status) {
        if (s.pidfd >= 0)
          fds.push_back({s.pidfd, POLLIN, 0}), owner.push_back(i);
        else
          blind = true;
      }
    }
    if (fds.empty() && !blind) return events;  // nothing left that could happen
    // Until the caller's deadline, or the stop's next step, whichever comes first.
    auto until = deadline;
    if (!stop_at_ && first_failure_) until = std::min(until, *first_failure_ + duration_of(options_.settle_s));
    if (stop_at_ && !killed_) until = std::min(until, *stop_at_ + duration_of(options_.grace_s));
    const auto now = Clock::now();
    long long ms = until > now ? std::chrono::ceil<std::chrono::milliseconds>(until - now).count() : 0;
    if (blind) ms = std::min<long long>(ms, kExitPollMs);
    if (options_.forward && !stop_at_) ms = std::min<long long>(ms, kSignalPollMs);
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(ms));
    if (n < 0 && errno != EINTR) throw system_error("wait for the workers", errno);
    for (std::size_t k = 0; n > 0 && k < fds.size(); ++k) {
      const Slot& s = workers_[owner[k]];
      if (fds[k].revents && fds[k].fd != s.pidfd) read_output(owner[k], fds[k].fd, events, /*until_empty=*/false);
    }
    reap(events);  // every pass: also without a pidfd, or a signal's EINTR
    tick(Clock::now());
    if (!events.empty() || Clock::now() >= deadline) return events;
  }
}

std::vector<WorkerEvent> WorkerGroup::drain() {
  std::vector<WorkerEvent> events;
  for (std::size_t i = 0; i < workers_.size(); ++i)
    for (int which : {1, 2})
      if (const int fd = which == 1 ? workers_[i].child.stdout_fd() : workers_[i].child.stderr_fd(); fd >= 0)
        read_output(i, fd, events, /*until_empty=*/true);
  return events;
}

void WorkerGroup::finish() noexcept {
  if (finished_) return;
  finished_ = true;
  for (Slot& s : workers_) {
    s.child.signal(SIGKILL);  // nothing a worker started outlives the group
    if (!s.state.status) {
      try {
        s.state.status = s.child.wait();
      } catch (const std::exception&) {  // ECHILD: with SIGCHLD ignored the kernel reaped it
      }
      s.state.ended = Clock::now();
      s.state.stopped = true;
    }
    close_fd(s.pidfd);
    for (int fd : {s.child.take_stdout_fd(), s.child.take_stderr_fd(), s.child.take_stdin_fd()})
      if (fd >= 0) ::close(fd);
    if (options_.forward) options_.forward->remove(s.child);
  }
}

std::optional<RootCause> WorkerGroup::root_cause() const {
  const Slot* best = nullptr;
  std::size_t which = 0;
  // The rule (workers.hpp): a signal's victim first, then the first seen, then the lowest index.
  const auto rank = [](const Slot& s) { return std::make_tuple(!s.by_signal, s.failed_in); };
  for (std::size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i].state.failed && (!best || rank(workers_[i]) < rank(*best))) best = &workers_[i], which = i;
  if (!best) return std::nullopt;
  RootCause c;
  c.worker = which;
  c.status = best->state.status;
  c.reason = best->state.reason;
  c.by_signal = best->by_signal;
  c.uptime_s = seconds(best->failed_at - best->state.started);
  return c;
}

int WorkerGroup::exit_code() const {
  const auto cause = root_cause();
  int code = 0;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const WorkerState& w = workers_[i].state;
    if (w.status && (!w.stopped || (cause && cause->worker == i))) code = std::max(code, w.status->shell_code());
  }
  return code;
}

}  // namespace rkit
