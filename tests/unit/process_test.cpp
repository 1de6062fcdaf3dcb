#include "rkit/process.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "rkit/error.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

using testing::EnvGuard;
using testing::TempDir;

SpawnOptions sh(const std::string& script) {
  SpawnOptions o;
  o.argv = {"sh", "-c", script};
  o.out = Redirect::pipe();
  o.err = Redirect::pipe();
  return o;
}

// True once `pid` no longer runs: gone, or a zombie waiting for a reaper that is
// not us (the grandchildren of our children are reparented). Waits up to 3 s.
bool ended(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    auto paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'Z' || line[paren + 2] == 'X'))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

pid_t read_pid(const std::string& path) {
  std::ifstream f(path);
  pid_t pid = 0;
  f >> pid;
  return pid;
}

// Reads one line from a child's pipe (blocking).
std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

TEST(ExitStatus, DecodesAnExitCode) {
  RunResult r = run(sh("exit 3"));
  EXPECT_TRUE(r.status.exited());
  EXPECT_FALSE(r.status.signaled());
  EXPECT_EQ(r.status.code(), 3);
  EXPECT_EQ(r.status.signal(), 0);
  EXPECT_EQ(r.status.shell_code(), 3);
  EXPECT_FALSE(r.status.success());
  EXPECT_EQ(r.status.describe(), "exit 3");
  EXPECT_FALSE(r.timed_out);
}

TEST(ExitStatus, SuccessIsExitZero) {
  RunResult r = run(sh("true"));
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.status.shell_code(), 0);
  EXPECT_EQ(r.status.describe(), "exit 0");
}

TEST(ExitStatus, DecodesASignal) {
  RunResult r = run(sh("kill -TERM $$"));
  EXPECT_FALSE(r.status.exited());
  EXPECT_TRUE(r.status.signaled());
  EXPECT_EQ(r.status.signal(), SIGTERM);
  EXPECT_EQ(r.status.code(), -1);
  EXPECT_EQ(r.status.shell_code(), 128 + SIGTERM);
  EXPECT_EQ(r.status.shell_code(), 143);
  EXPECT_FALSE(r.status.success());
  EXPECT_NE(r.status.describe().find("SIGTERM"), std::string::npos) << r.status.describe();
  EXPECT_EQ(r.status.describe(), "killed by signal 15 (SIGTERM)");
}

TEST(SignalName, KnownAndUnknown) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(99), "signal 99");
}

TEST(Run, CapturesStdoutAndStderrSeparately) {
  RunResult r = run(sh("echo out1; echo err1 >&2; echo out2; printf err2 >&2"));
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.out, "out1\nout2\n");
  EXPECT_EQ(r.err, "err1\nerr2");
  EXPECT_GE(r.elapsed_s, 0.0);
  EXPECT_LT(r.elapsed_s, 5.0);
}

TEST(Run, LargeOutputsOnBothPipesDoNotDeadlock) {
  RunResult r = run(sh("head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2; head -c 100000 /dev/zero"), 10.0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.out.size(), 400000u);
  EXPECT_EQ(r.err.size(), 200000u);
}

TEST(Run, UncapturedStreamsStayEmpty) {
  SpawnOptions o = sh("echo visible");
  o.out = Redirect::null();
  RunResult r = run(o);
  EXPECT_TRUE(r.out.empty());
}

TEST(Run, FeedsInputToStdin) {
  SpawnOptions o;
  o.argv = {"cat"};
  o.in = Redirect::pipe();
  o.out = Redirect::pipe();
  RunResult r = run(o, 10.0, 5.0, "hello\nworld\n");
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.out, "hello\nworld\n");
}

TEST(Run, FeedsLargeInputWhileReadingOutput) {
  std::string input;
  for (int i = 0; i < 200000; ++i) input += std::to_string(i) + "\n";  // ~1.3 MB, more than a pipe holds
  SpawnOptions o;
  o.argv = {"cat"};
  o.in = Redirect::pipe();
  o.out = Redirect::pipe();
  RunResult r = run(o, 10.0, 5.0, input);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.out.size(), input.size());
  EXPECT_TRUE(r.out == input);
}

TEST(Run, EmptyInputClosesStdin) {
  SpawnOptions o;
  o.argv = {"cat"};
  o.in = Redirect::pipe();
  o.out = Redirect::pipe();
  RunResult r = run(o, 5.0);
  EXPECT_FALSE(r.timed_out) << "cat waited for input that never came";
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.out, "");
}

TEST(Run, ChildThatIgnoresItsInputDoesNotKillUs) {
  SpawnOptions o;
  o.argv = {"true"};
  o.in = Redirect::pipe();
  std::string input(2 << 20, 'x');
  RunResult r = run(o, 10.0, 5.0, input);  // SIGPIPE would end this test binary
  EXPECT_TRUE(r.status.success());
  sigset_t now;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &now), 0);
  EXPECT_FALSE(sigismember(&now, SIGPIPE)) << "run() left SIGPIPE blocked";
}

TEST(Run, FastCommandIsNotTimedOut) {
  RunResult r = run(sh("echo hi"), 5.0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.out, "hi\n");
}

TEST(Run, TimeoutKillsTheWholeProcessGroup) {
  TempDir dir;
  std::string pidfile = dir.file("bg.pid");
  RunResult r = run(sh("sleep 30 & echo $! > " + pidfile + "; sleep 30"), 0.5);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(r.elapsed_s, 5.0);
  EXPECT_GE(r.elapsed_s, 0.45);
  EXPECT_TRUE(r.status.signaled());
  EXPECT_EQ(r.status.signal(), SIGTERM);
  pid_t bg = read_pid(pidfile);
  ASSERT_GT(bg, 0) << "the shell did not record its background job";
  EXPECT_TRUE(ended(bg)) << "background sleep " << bg << " survived the timeout";
  if (!ended(bg)) ::kill(bg, SIGKILL);
}

TEST(Run, ChildIgnoringSigtermIsKilledAfterTheGrace) {
  // The timeout leaves the shell a whole second to set its trap, even on a loaded
  // machine: a SIGTERM before the trap would end it without testing the SIGKILL.
  RunResult r = run(sh("trap '' TERM; sleep 30"), 1.0, /*grace_s=*/0.3);
  EXPECT_TRUE(r.timed_out);
  EXPECT_TRUE(r.status.signaled());
  EXPECT_EQ(r.status.signal(), SIGKILL);
  EXPECT_EQ(r.status.shell_code(), 137);
  EXPECT_GE(r.elapsed_s, 1.25);
  EXPECT_LT(r.elapsed_s, 5.0);
}

TEST(Run, TimeoutKillsGrandchildrenThatIgnoreSigterm) {
  // Once the child has ended, its group still has members: run() must not return
  // before they got SIGKILL, whether the child ended on SIGTERM or on SIGKILL.
  for (std::string outer : {"", "trap '' TERM; "}) {
    TempDir dir;
    std::string pidfile = dir.file("bg.pid");
    // A second for the shells to set their traps (see above).
    RunResult r = run(sh(outer + "(trap '' TERM; sleep 30) & echo $! > " + pidfile + "; sleep 30"), 1.0,
                      /*grace_s=*/0.3);
    EXPECT_TRUE(r.timed_out) << outer;
    EXPECT_LT(r.elapsed_s, 5.0) << outer;
    pid_t bg = read_pid(pidfile);
    ASSERT_GT(bg, 0) << "the shell did not record its background job";
    EXPECT_TRUE(ended(bg)) << "grandchild " << bg << " ignoring SIGTERM survived the timeout, with '" << outer << "'";
    if (!ended(bg)) ::kill(bg, SIGKILL);
  }
}

// Limits the address space to 64 MiB more than in use, so that capturing 1 GB makes
// run() throw std::bad_alloc from inside its loop, while SIGPIPE is blocked. Returns
// 0 when it threw and SIGPIPE is unblocked again.
int run_out_of_memory() {
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  rlimit limit{};
  ::getrlimit(RLIMIT_AS, &limit);
  limit.rlim_cur = static_cast<rlim_t>(pages * ::sysconf(_SC_PAGESIZE) + (64 << 20));
  ::setrlimit(RLIMIT_AS, &limit);
  bool threw = false;
  try {
    run(sh("exec head -c 1000000000 /dev/zero"), 20.0);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  sigset_t now;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
  if (!threw) return 2;
  return sigismember(&now, SIGPIPE) ? 1 : 0;
}

TEST(RunDeathTest, RestoresTheSignalMaskWhenItThrows) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit allows";
#endif
  // In a forked copy: the limit stays there.
  EXPECT_EXIT(std::_Exit(run_out_of_memory()), ::testing::ExitedWithCode(0), "");
}

TEST(Run, SetsAndOverridesEnvironment) {
  EnvGuard guard({"RKIT_TEST_OVERRIDE", "RKIT_TEST_UNSET"});
  guard.set("RKIT_TEST_OVERRIDE", "old");
  guard.set("RKIT_TEST_UNSET", "present");
  SpawnOptions o;
  o.argv = {"env"};
  o.out = Redirect::pipe();
  o.env = {{"RKIT_TEST_NEW", "hello world"}, {"RKIT_TEST_OVERRIDE", "new"}};
  o.unset_env = {"RKIT_TEST_UNSET"};
  RunResult r = run(o);
  ASSERT_TRUE(r.status.success());
  std::istringstream lines(r.out);
  int overrides = 0, news = 0, unsets = 0, paths = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("RKIT_TEST_OVERRIDE=", 0) == 0) {
      ++overrides;
      EXPECT_EQ(line, "RKIT_TEST_OVERRIDE=new");
    }
    if (line.rfind("RKIT_TEST_NEW=", 0) == 0) {
      ++news;
      EXPECT_EQ(line, "RKIT_TEST_NEW=hello world");
    }
    if (line.rfind("RKIT_TEST_UNSET=", 0) == 0) ++unsets;
    if (line.rfind("PATH=", 0) == 0) ++paths;
  }
  EXPECT_EQ(overrides, 1) << r.out;
  EXPECT_EQ(news, 1) << r.out;
  EXPECT_EQ(unsets, 0) << r.out;
  EXPECT_EQ(paths, ::getenv("PATH") ? 1 : 0) << "the rest of our environment is inherited";
}

TEST(Run, ClearEnvStartsFromNothing) {
  SpawnOptions o;
  o.argv = {"env"};  // still found: the lookup uses our PATH
  o.out = Redirect::pipe();
  o.clear_env = true;
  o.env = {{"ONLY", "1"}};
  RunResult r = run(o);
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_EQ(r.out, "ONLY=1\n");
}

TEST(Run, RunsInTheGivenDirectory) {
  TempDir dir;
  SpawnOptions o = sh("pwd -P");
  o.cwd = dir.path();
  RunResult r = run(o);
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_EQ(r.out, std::filesystem::canonical(dir.path()).string() + "\n");
}

TEST(Run, MissingWorkingDirectoryIsNamed) {
  TempDir dir;
  SpawnOptions o = sh("true");
  o.cwd = dir.file("nope");
  try {
    run(o);
    FAIL() << "ran in a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_NE(std::string(e.what()).find(o.cwd), std::string::npos) << e.what();
  }
  std::string file = dir.file("plain");
  testing::write(file, "");
  o.cwd = file;
  try {
    run(o);
    FAIL() << "ran in a file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST(Run, RedirectsToAndFromFiles) {
  TempDir dir;
  std::string out = dir.file("out.txt");
  SpawnOptions o = sh("echo line");
  o.out = Redirect::file(out);
  RunResult r = run(o);
  ASSERT_TRUE(r.status.success());
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(testing::slurp(out), "line\n");

  run(o);  // truncates
  EXPECT_EQ(testing::slurp(out), "line\n");
  o.out = Redirect::file(out, /*append=*/true);
  run(o);
  EXPECT_EQ(testing::slurp(out), "line\nline\n");

  SpawnOptions c;
  c.argv = {"cat"};
  c.in = Redirect::file(out);
  c.out = Redirect::pipe();
  RunResult rc = run(c);
  EXPECT_EQ(rc.out, "line\nline\n");
}

TEST(Run, MissingInputFileIsNoInput) {
  TempDir dir;
  SpawnOptions c;
  c.argv = {"cat"};
  c.in = Redirect::file(dir.file("missing"));
  try {
    run(c);
    FAIL() << "spawned with a missing input file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_NE(std::string(e.what()).find(dir.file("missing")), std::string::npos) << e.what();
  }
}

TEST(Run, NullRedirectsToDevNull) {
  // `[` is a shell builtin: it looks at the shell's own descriptors.
  const std::string probe =
      "if [ /proc/self/fd/0 -ef /dev/null ]; then echo in-null >&2; fi; "
      "if [ /proc/self/fd/1 -ef /dev/null ]; then echo out-null >&2; fi";
  SpawnOptions o = sh(probe);
  o.in = Redirect::null();
  o.out = Redirect::null();
  RunResult r = run(o);
  EXPECT_TRUE(r.status.success());
  EXPECT_EQ(r.err, "in-null\nout-null\n");

  SpawnOptions control = sh(probe);  // stdin and stdout are pipes here
  control.in = Redirect::pipe();
  RunResult rc0 = run(control);
  EXPECT_EQ(rc0.err, "");

  SpawnOptions c;
  c.argv = {"cat"};
  c.in = Redirect::null();
  c.out = Redirect::pipe();
  RunResult rc = run(c, 5.0);
  EXPECT_FALSE(rc.timed_out);
  EXPECT_EQ(rc.out, "");
}

TEST(Run, StderrToStdout) {
  SpawnOptions o = sh("echo a; echo b >&2; echo c");
  o.err = Redirect::to_stdout();
  RunResult r = run(o);
  EXPECT_EQ(r.out, "a\nb\nc\n");
  EXPECT_EQ(r.err, "");
}

TEST(Spawn, MissingProgramIsNoInput) {
  SpawnOptions o;
  o.argv = {"rkit-no-such-program-xyz"};
  try {
    Child::spawn(o);
    FAIL() << "spawned a missing program";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_EQ(static_cast<int>(e.code()), 66);
    EXPECT_NE(std::string(e.what()).find("rkit-no-such-program-xyz"), std::string::npos) << e.what();
    EXPECT_FALSE(e.hint().empty());
  }
  EXPECT_THROW(run(o), Error);
}

TEST(Spawn, NonExecutableFileIsNoPerm) {
  TempDir dir;
  std::string script = dir.file("script.sh");
  testing::write(script, "#!/bin/sh\necho hi\n");
  ASSERT_EQ(::chmod(script.c_str(), 0644), 0);  // no x bit: refused even to root
  SpawnOptions o;
  o.argv = {script};
  try {
    Child::spawn(o);
    FAIL() << "executed a file without an x bit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoPerm);
    EXPECT_NE(std::string(e.what()).find(script), std::string::npos) << e.what();
  }
}

TEST(Spawn, EmptyArgvIsAnInternalError) {
  try {
    Child::spawn(SpawnOptions{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Software);
  }
}

TEST(Child, LeadsItsOwnProcessGroup) {
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  Child c = Child::spawn(o);
  EXPECT_EQ(::getpgid(c.pid()), c.pid());
  EXPECT_NE(::getpgid(c.pid()), ::getpgrp());
  c.terminate(1.0);

  o.new_process_group = false;
  Child same = Child::spawn(o);
  EXPECT_EQ(::getpgid(same.pid()), ::getpgrp());
  ExitStatus s = same.terminate(1.0);
  EXPECT_EQ(s.signal(), SIGTERM);
}

TEST(Child, WaitForAndTryWait) {
  SpawnOptions o;
  o.argv = {"sleep", "0.3"};
  Child c = Child::spawn(o);
  EXPECT_TRUE(c.running());
  EXPECT_FALSE(c.try_wait().has_value());
  EXPECT_FALSE(c.wait_for(0.05).has_value());
  auto s = c.wait_for(5.0);
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->success());
  EXPECT_FALSE(c.running());
  EXPECT_TRUE(c.wait().success()) << "wait() after the end returns the same status";
  EXPECT_TRUE(c.try_wait()->success());
}

TEST(Child, SignalGoesToTheChild) {
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  Child c = Child::spawn(o);
  c.signal(SIGUSR1);
  ExitStatus s = c.wait();
  EXPECT_TRUE(s.signaled());
  EXPECT_EQ(s.signal(), SIGUSR1);
}

TEST(Child, TerminateSendsSigtermThenSigkill) {
  SpawnOptions polite;
  polite.argv = {"sleep", "30"};
  Child a = Child::spawn(polite);
  ExitStatus sa = a.terminate(5.0);
  EXPECT_EQ(sa.signal(), SIGTERM);

  SpawnOptions stubborn = sh("trap '' TERM; echo ready; sleep 30");
  stubborn.err = Redirect::inherit();
  Child b = Child::spawn(stubborn);
  ASSERT_EQ(read_line(b.stdout_fd()), "ready");  // the trap is in place
  auto t0 = std::chrono::steady_clock::now();
  ExitStatus sb = b.terminate(0.2);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(sb.signal(), SIGKILL);
  EXPECT_GE(took, 0.15);
  EXPECT_LT(took, 5.0);
}

TEST(Child, SignalReachesTheGroupAfterTheChildWasReaped) {
  SpawnOptions o = sh("sleep 30 & echo $!");
  o.err = Redirect::inherit();
  Child c = Child::spawn(o);
  pid_t grandchild = static_cast<pid_t>(std::stol(read_line(c.stdout_fd())));
  EXPECT_TRUE(c.wait().success());
  EXPECT_TRUE(c.own_group());
  c.signal(SIGKILL);
  EXPECT_TRUE(ended(grandchild)) << "grandchild " << grandchild << " survived";
  if (!ended(grandchild)) ::kill(grandchild, SIGKILL);
}

TEST(Child, PipesCanBeUsedDirectly) {
  SpawnOptions o;
  o.argv = {"cat"};
  o.in = Redirect::pipe();
  o.out = Redirect::pipe();
  Child c = Child::spawn(o);
  ASSERT_GE(c.stdin_fd(), 0);
  ASSERT_GE(c.stdout_fd(), 0);
  EXPECT_EQ(c.stderr_fd(), -1);
  ASSERT_EQ(::write(c.stdin_fd(), "ping\n", 5), 5);
  c.close_stdin();
  EXPECT_EQ(c.stdin_fd(), -1);
  EXPECT_EQ(read_line(c.stdout_fd()), "ping");
  EXPECT_TRUE(c.wait().success());
}

TEST(Child, DestructorKillsARunningChildAndItsGroup) {
  TempDir dir;
  pid_t pid = -1, grandchild = -1;
  {
    SpawnOptions o = sh("sleep 30 & echo $!; sleep 30");
    o.err = Redirect::inherit();
    Child c = Child::spawn(o);
    pid = c.pid();
    grandchild = static_cast<pid_t>(std::stol(read_line(c.stdout_fd())));
    ASSERT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_EQ(::kill(pid, 0), -1) << "child still exists (not killed or not reaped)";
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(ended(grandchild)) << "grandchild " << grandchild << " survived";
  if (!ended(grandchild)) ::kill(grandchild, SIGKILL);
}

// With SIGCHLD ignored the kernel reaps children itself and waitpid fails with
// ECHILD. Returns 0 when both children are gone.
int overwrite_and_destroy_with_sigchld_ignored() {
  std::signal(SIGCHLD, SIG_IGN);
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  pid_t first = -1;
  pid_t second = -1;
  {
    Child c = Child::spawn(o);
    first = c.pid();
    c = Child::spawn(o);  // kills and reaps the first
    second = c.pid();
  }
  return ::kill(first, 0) != 0 && ::kill(second, 0) != 0 && errno == ESRCH ? 0 : 1;
}

TEST(ChildDeathTest, DestructorAndMoveAssignmentNeverThrow) {
  // A throwing destructor would end the process in std::terminate: run in a forked
  // copy, so that neither outcome disturbs the other tests.
  EXPECT_EXIT(std::_Exit(overwrite_and_destroy_with_sigchld_ignored()), ::testing::ExitedWithCode(0), "");
}

TEST(Child, MoveAssignmentKillsAndReapsTheOverwrittenChild) {
  SpawnOptions o = sh("sleep 30 & echo $!; sleep 30");
  o.err = Redirect::inherit();
  Child c = Child::spawn(o);
  pid_t old_pid = c.pid();
  pid_t grandchild = static_cast<pid_t>(std::stol(read_line(c.stdout_fd())));
  SpawnOptions sleeper;
  sleeper.argv = {"sleep", "30"};
  c = Child::spawn(sleeper);
  EXPECT_NE(c.pid(), old_pid);
  EXPECT_TRUE(c.running());
  EXPECT_EQ(c.stdout_fd(), -1);
  EXPECT_EQ(::kill(old_pid, 0), -1) << "overwritten child still exists (not killed or not reaped)";
  EXPECT_TRUE(ended(grandchild)) << "grandchild " << grandchild << " survived";
  if (!ended(grandchild)) ::kill(grandchild, SIGKILL);
  EXPECT_EQ(c.terminate(1.0).signal(), SIGTERM);
}

TEST(Child, MoveTransfersOwnership) {
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  Child a = Child::spawn(o);
  pid_t pid = a.pid();
  Child b = std::move(a);
  EXPECT_FALSE(a.running());
  EXPECT_EQ(a.pid(), -1);
  EXPECT_TRUE(b.running());
  EXPECT_EQ(b.pid(), pid);
  { Child sink = std::move(b); }
  EXPECT_EQ(::kill(pid, 0), -1) << "moved-to Child did not kill on destruction";
}

TEST(Child, MovedFromChildDoesNotReapOtherChildren) {
  SpawnOptions sleeper;
  sleeper.argv = {"sleep", "30"};
  SpawnOptions o;
  o.argv = {"sh", "-c", "exit 7"};
  Child a = Child::spawn(sleeper);
  Child b = std::move(a);
  Child other = Child::spawn(o);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(other.pid()), &info, WEXITED | WNOWAIT), 0);  // `other` has ended
  try {
    a.wait();  // a moved-from Child has no process: waitpid(-1) would take `other`'s status
    ADD_FAILURE() << "wait() on a moved-from Child returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Software);
  }
  EXPECT_EQ(other.wait().code(), 7) << "another Child's status was stolen";
  b.terminate(1.0);
}

// SignalForwarder tests install their own handler first, so that a forwarder that
// failed to catch a signal cannot end the test binary.
volatile sig_atomic_t g_own_handler_hits = 0;
void own_handler(int) { g_own_handler_hits = g_own_handler_hits + 1; }

class SignalForwarderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct sigaction sa {};
    sa.sa_handler = own_handler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(::sigaction(kSignals[i], &sa, &saved_[i]), 0);
    g_own_handler_hits = 0;
  }
  void TearDown() override {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &saved_[i], nullptr);
  }
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction saved_[3]{};
};

TEST_F(SignalForwarderTest, ForwardsSigtermToTheChild) {
  SignalForwarder fwd;
  EXPECT_EQ(fwd.last_signal(), 0);
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  Child c = Child::spawn(o);
  fwd.add(c);
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_EQ(fwd.last_signal(), SIGTERM);
  EXPECT_EQ(g_own_handler_hits, 0) << "the forwarder did not take over SIGTERM";
  auto s = c.wait_for(5.0);
  ASSERT_TRUE(s.has_value()) << "the child did not receive SIGTERM";
  EXPECT_EQ(s->signal(), SIGTERM);
}

TEST_F(SignalForwarderTest, OnlyRegisteredChildrenReceiveSignals) {
  SignalForwarder fwd;
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  Child kept = Child::spawn(o);
  Child removed = Child::spawn(o);
  Child never = Child::spawn(o);
  fwd.add(kept);
  fwd.add(removed);
  fwd.remove(removed);
  ASSERT_EQ(::raise(SIGINT), 0);
  EXPECT_EQ(fwd.last_signal(), SIGINT);
  auto s = kept.wait_for(5.0);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->signal(), SIGINT);
  EXPECT_FALSE(removed.wait_for(0.2).has_value());
  EXPECT_FALSE(never.try_wait().has_value());
  EXPECT_EQ(removed.terminate(1.0).signal(), SIGTERM);
  EXPECT_EQ(never.terminate(1.0).signal(), SIGTERM);
}

TEST_F(SignalForwarderTest, HandlerPreservesErrno) {
  SignalForwarder fwd;
  SpawnOptions o;
  o.argv = {"true"};
  Child c = Child::spawn(o);
  ASSERT_TRUE(c.wait().success());  // its group is gone: forwarding fails with ESRCH
  fwd.add(c);
  errno = EDOM;
  ASSERT_EQ(::raise(SIGTERM), 0);
  int after = errno;
  fwd.remove(c);
  EXPECT_EQ(fwd.last_signal(), SIGTERM);
  EXPECT_EQ(after, EDOM) << "the handler changed errno to " << std::strerror(after);
}

TEST_F(SignalForwarderTest, RefusesAChildThatDoesNotLeadAGroup) {
  SignalForwarder fwd;
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  o.new_process_group = false;
  Child c = Child::spawn(o);
  EXPECT_FALSE(c.own_group());
  try {
    fwd.add(c);
    ADD_FAILURE() << "registered a child whose group is ours";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Software);
  }
  Child taken = std::move(c);  // a moved-from Child has no process
  EXPECT_THROW(fwd.add(c), Error);
  EXPECT_EQ(taken.terminate(1.0).signal(), SIGTERM);
}

TEST_F(SignalForwarderTest, SpawnRegistersTheChild) {
  SignalForwarder fwd;
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  Child c = fwd.spawn(o);
  sigset_t now;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &now), 0);
  EXPECT_FALSE(sigismember(&now, SIGTERM)) << "spawn() left SIGTERM blocked";
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_EQ(g_own_handler_hits, 0);
  auto s = c.wait_for(5.0);
  ASSERT_TRUE(s.has_value()) << "the child did not receive SIGTERM";
  EXPECT_EQ(s->signal(), SIGTERM);

  o.new_process_group = false;  // refused by add(): killed, and the mask restored
  EXPECT_THROW(fwd.spawn(o), Error);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &now), 0);
  EXPECT_FALSE(sigismember(&now, SIGTERM));
}

TEST_F(SignalForwarderTest, OneAtATime) {
  SignalForwarder fwd;
  try {
    SignalForwarder second;
    FAIL() << "two forwarders at once";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Software);
  }
  // The failed second one must not have undone the first.
  SpawnOptions o;
  o.argv = {"sleep", "30"};
  Child c = Child::spawn(o);
  fwd.add(c);
  ASSERT_EQ(::raise(SIGHUP), 0);
  EXPECT_EQ(g_own_handler_hits, 0);
  auto s = c.wait_for(5.0);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->signal(), SIGHUP);
}

TEST_F(SignalForwarderTest, RestoresHandlersAfterwards) {
  {
    SignalForwarder fwd;
    struct sigaction during {};
    ASSERT_EQ(::sigaction(SIGTERM, nullptr, &during), 0);
    EXPECT_NE(during.sa_handler, own_handler);
    SpawnOptions o;
    o.argv = {"sleep", "30"};
    Child c = Child::spawn(o);
    fwd.add(c);
    c.terminate(1.0);
  }
  for (int sig : kSignals) {
    struct sigaction now {};
    ASSERT_EQ(::sigaction(sig, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, own_handler) << signal_name(sig);
  }
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_EQ(g_own_handler_hits, 1);
  // A new forwarder can be created and starts clean.
  SignalForwarder again;
  EXPECT_EQ(again.last_signal(), 0);
}

}  // namespace
}  // namespace rkit
