// Tests of rkit/workers.hpp: a group of worker processes, its stop and its root cause.
// Every wait is on the group's own events (or a pidfd), never a sleep.
#include "rkit/workers.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rkit/error.hpp"

namespace rkit {
namespace {

using Clock = std::chrono::steady_clock;

SpawnOptions sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"sh", "-c", script};
  o.out = Redirect::pipe();
  o.err = Redirect::pipe();
  return o;
}

// Waits on the group until no worker runs (at most `limit_s`), handing every event to
// `on` and keeping each worker's stdout and stderr.
struct Outputs {
  std::map<std::size_t, std::string> out, err;
};
Outputs run_to_end(
    WorkerGroup& g, double limit_s = 20,
    const std::function<void(const WorkerEvent&)>& on = [](const WorkerEvent&) {}) {
  Outputs o;
  const auto deadline = Clock::now() + std::chrono::duration<double>(limit_s);
  while (g.running()) {
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "the workers did not end within " << limit_s << " s";
      break;
    }
    for (const WorkerEvent& e : g.wait(1)) {
      if (e.kind == WorkerEvent::Kind::Output) (e.fd == 1 ? o.out : o.err)[e.worker] += e.data;
      on(e);
    }
  }
  for (const WorkerEvent& e : g.drain()) (e.fd == 1 ? o.out : o.err)[e.worker] += e.data;
  return o;
}

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// True once `pid` (not our child) has ended: its pidfd polls readable (a zombie of
// another's counts), waiting up to 5 s.
bool ends(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 5000) == 1;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST(WorkerGroup, AllSucceed) {
  std::vector<pid_t> pids;
  {
    WorkerGroup g;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(g.spawn(sh("echo out " + std::to_string(i) + "; echo err >&2")), i);
    for (std::size_t i = 0; i < g.size(); ++i) pids.push_back(g.worker(i).pid);
    int exits = 0;
    const Outputs o = run_to_end(g, 20, [&](const WorkerEvent& e) {
      if (e.kind != WorkerEvent::Kind::Exited) return;
      ++exits;
      EXPECT_TRUE(e.status.success());
    });
    EXPECT_EQ(exits, 3);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(o.out.at(i), "out " + std::to_string(i) + "\n");
      EXPECT_EQ(o.err.at(i), "err\n");
      ASSERT_TRUE(g.worker(i).status);
      EXPECT_TRUE(g.worker(i).status->success());
      EXPECT_FALSE(g.worker(i).failed);
      EXPECT_FALSE(g.worker(i).stopped);
    }
    EXPECT_FALSE(g.failed());
    EXPECT_FALSE(g.stopping());
    EXPECT_FALSE(g.root_cause());
    EXPECT_EQ(g.exit_code(), 0);
    EXPECT_TRUE(g.wait(5).empty());  // nothing left to wait for: at once
  }
  for (pid_t pid : pids) EXPECT_TRUE(gone(pid)) << pid;
}

TEST(WorkerGroup, AFailureStopsTheOthersWithSigterm) {
  std::vector<pid_t> pids;
  const auto t0 = Clock::now();
  {
    WorkerGroup g(WorkerGroupOptions{.grace_s = 30});
    g.spawn(sh("exec sleep 60"));
    g.spawn(sh("echo dying >&2; exit 3"));
    g.spawn(sh("exec sleep 60"));
    for (std::size_t i = 0; i < g.size(); ++i) pids.push_back(g.worker(i).pid);
    const Outputs o = run_to_end(g);
    EXPECT_EQ(o.err.at(1), "dying\n");
    EXPECT_TRUE(g.failed());
    EXPECT_TRUE(g.stopping());
    const auto cause = g.root_cause();
    ASSERT_TRUE(cause);
    EXPECT_EQ(cause->worker, 1u);
    EXPECT_EQ(cause->describe(), "exit 3");
    EXPECT_EQ(cause->exit_code(), 3);
    EXPECT_FALSE(cause->by_signal);
    for (std::size_t i : {0u, 2u}) {  // stopped by SIGTERM: not failures
      ASSERT_TRUE(g.worker(i).status);
      EXPECT_EQ(g.worker(i).status->signal(), SIGTERM);
      EXPECT_TRUE(g.worker(i).stopped);
      EXPECT_FALSE(g.worker(i).failed);
    }
    EXPECT_EQ(g.exit_code(), 3);  // as srun: not the 143 of those the stop ended
  }
  EXPECT_LT(seconds_since(t0), 20);  // SIGTERM did it, not the 30 s grace's SIGKILL
  for (pid_t pid : pids) EXPECT_TRUE(gone(pid)) << pid;
}

TEST(WorkerGroup, AWorkerIgnoringSigtermIsKilledAfterTheGrace) {
  std::vector<pid_t> pids;
  {
    WorkerGroup g(WorkerGroupOptions{.grace_s = 0.3});
    g.spawn(sh("trap '' TERM; echo ready; exec sleep 60"));  // sleep keeps SIGTERM ignored
    SpawnOptions second = sh("read line; exit 2");
    second.in = Redirect::pipe();
    g.spawn(second);
    for (std::size_t i = 0; i < g.size(); ++i) pids.push_back(g.worker(i).pid);
    std::string out;
    bool told = false;
    Clock::time_point stopped_at{};
    run_to_end(g, 20, [&](const WorkerEvent& e) {
      if (e.kind == WorkerEvent::Kind::Output && e.worker == 0) out += e.data;
      if (!told && out == "ready\n") {  // worker 0 ignores SIGTERM now: let worker 1 fail
        told = true;
        ASSERT_EQ(::write(g.stdin_fd(1), "go\n", 3), 3);
      }
      if (e.kind == WorkerEvent::Kind::Exited && e.worker == 1) stopped_at = Clock::now();
    });
    ASSERT_TRUE(told);
    const auto cause = g.root_cause();
    ASSERT_TRUE(cause);
    EXPECT_EQ(cause->worker, 1u);
    EXPECT_EQ(cause->exit_code(), 2);
    ASSERT_TRUE(g.worker(0).status);
    EXPECT_EQ(g.worker(0).status->signal(), SIGKILL);
    EXPECT_TRUE(g.worker(0).stopped);
    EXPECT_GE(std::chrono::duration<double>(g.worker(0).ended - stopped_at).count(), 0.25);  // after the grace
    EXPECT_EQ(g.exit_code(), 2);
  }
  for (pid_t pid : pids) EXPECT_TRUE(gone(pid)) << pid;
}

TEST(WorkerGroup, ASignalKilledWorkerIsTheRootCauseOverEarlierErrors) {
  std::vector<pid_t> pids;
  {
    // A long settle: the error of worker 0 comes first, worker 1's SIGKILL within the settle.
    WorkerGroup g(WorkerGroupOptions{.grace_s = 30, .settle_s = 60});
    g.spawn(sh("exit 1"));
    g.spawn(sh("exec sleep 60"));
    g.spawn(sh("exec sleep 60"));
    for (std::size_t i = 0; i < g.size(); ++i) pids.push_back(g.worker(i).pid);
    run_to_end(g, 20, [&](const WorkerEvent& e) {
      if (e.kind != WorkerEvent::Kind::Exited) return;
      if (e.worker == 0) {
        EXPECT_TRUE(g.failed());
        EXPECT_FALSE(g.stopping());  // settling
        EXPECT_EQ(g.root_cause()->worker, 0u);
        ::kill(g.worker(1).pid, SIGKILL);  // as the OOM killer would
      }
      if (e.worker == 1) g.stop();  // not the 60 s settle
    });
    const auto cause = g.root_cause();
    ASSERT_TRUE(cause);
    EXPECT_EQ(cause->worker, 1u);
    EXPECT_TRUE(cause->by_signal);
    EXPECT_EQ(cause->describe(), "killed by signal 9 (SIGKILL)");
    EXPECT_EQ(cause->exit_code(), 137);
    EXPECT_TRUE(g.worker(0).failed);
    EXPECT_TRUE(g.worker(2).stopped);
    EXPECT_EQ(g.worker(2).status->signal(), SIGTERM);
    EXPECT_EQ(g.exit_code(), 137);
  }
  for (pid_t pid : pids) EXPECT_TRUE(gone(pid)) << pid;
}

TEST(WorkerGroup, ADeclaredFailureIsTheRootCauseAndStopsTheGroup) {
  WorkerGroup g(WorkerGroupOptions{.grace_s = 30});
  g.spawn(sh("exec sleep 60"));
  g.spawn(sh("exec sleep 60"));
  g.fail(1, "rank 1 hung");
  EXPECT_TRUE(g.stopping());
  g.fail(0, "too late");  // after the stop: ignored
  run_to_end(g);
  const auto cause = g.root_cause();
  ASSERT_TRUE(cause);
  EXPECT_EQ(cause->worker, 1u);
  EXPECT_EQ(cause->describe(), "rank 1 hung");
  EXPECT_EQ(cause->exit_code(), 143);  // the stop's SIGTERM ended it
  EXPECT_FALSE(g.worker(0).failed);
  EXPECT_EQ(g.exit_code(), 143);
}

TEST(WorkerGroup, AForwardedSignalStopsTheGroupWithoutAFailure) {
  SignalForwarder forward;
  WorkerGroup g(WorkerGroupOptions{.grace_s = 30, .forward = &forward});
  g.spawn(sh("exec sleep 60"));
  g.spawn(sh("exec sleep 60"));
  ::raise(SIGTERM);  // forwarded to the workers' groups, not the end of us
  run_to_end(g);
  EXPECT_TRUE(g.stopping());
  EXPECT_FALSE(g.failed());
  EXPECT_FALSE(g.root_cause());
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(g.worker(i).stopped);
    EXPECT_EQ(g.worker(i).status->signal(), SIGTERM);
  }
  EXPECT_EQ(g.exit_code(), 0);
}

TEST(WorkerGroup, TheDestructorKillsAndReapsWorkersAndWhatTheyStarted) {
  pid_t worker = -1, grandchild = -1;
  int grandchild_fd = -1;
  {
    WorkerGroup g;
    g.spawn(sh("trap '' TERM; sleep 60 & echo $!; exec sleep 60"));
    worker = g.worker(0).pid;
    std::string out;
    while (out.find('\n') == std::string::npos) {
      const auto events = g.wait(10);
      ASSERT_FALSE(events.empty()) << "no pid from the worker";
      for (const WorkerEvent& e : events) out += e.data;
    }
    grandchild = std::stoi(out);
    grandchild_fd = static_cast<int>(::syscall(SYS_pidfd_open, grandchild, 0));
    ASSERT_GE(grandchild_fd, 0);
  }
  EXPECT_TRUE(gone(worker));
  EXPECT_TRUE(ends(grandchild_fd)) << grandchild;  // SIGKILL to the worker's group reached it
  ::close(grandchild_fd);
}

TEST(WorkerGroup, SpawnAfterTheStopIsRefusedAndAMissingProgramThrows) {
  WorkerGroup g;
  SpawnOptions missing;
  missing.argv = {"/nonexistent/rkit-no-such-program"};
  EXPECT_THROW(g.spawn(missing), Error);
  EXPECT_EQ(g.size(), 0u);
  g.stop();
  EXPECT_THROW(g.spawn(sh("true")), Error);
}

}  // namespace
}  // namespace rkit
