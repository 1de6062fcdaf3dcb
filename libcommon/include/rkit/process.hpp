// File: rkit/process.hpp
//
// Child processes: spawn with argv and environment in their own process group,
// capture or redirect their output, time them out (SIGTERM, then SIGKILL after a
// grace period, to the whole group), forward our signals to them, and decode how
// they ended.
//
//   rkit::SpawnOptions opt;
//   opt.argv = {"lstopo-no-graphics", "--of", "xml"};
//   opt.out = rkit::Redirect::pipe();
//   rkit::RunResult r = rkit::run(opt, /*timeout_s=*/10);
//   if (!r.status.success()) ... r.status.describe() ... r.err ...
//
// A Child that goes out of scope while running is killed (SIGKILL to its group)
// and reaped, without throwing: no orphans, no zombies. Not thread-safe per Child.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rkit {

// How a process ended, from a wait(2) status.
class ExitStatus {
 public:
  ExitStatus() = default;
  static ExitStatus from_wait(int wait_status) {
    ExitStatus s;
    s.raw_ = wait_status;
    return s;
  }
  bool exited() const;    // ended by exit()
  int code() const;       // exit code when exited(), else -1
  bool signaled() const;  // ended by a signal
  int signal() const;     // the signal when signaled(), else 0
  bool success() const { return exited() && code() == 0; }
  // The shell's convention: the exit code, or 128 + signal.
  int shell_code() const;
  // "exit 3", "killed by signal 9 (SIGKILL)".
  std::string describe() const;

 private:
  int raw_ = 0;
};

// Where a child's stdin/stdout/stderr goes.
struct Redirect {
  enum class Kind { Inherit, Pipe, Null, File, ToStdout };
  Kind kind = Kind::Inherit;
  std::string path;     // Kind::File
  bool append = false;  // Kind::File, for output
  static Redirect inherit() { return {}; }
  static Redirect pipe() { return {Kind::Pipe, {}, false}; }
  static Redirect null() { return {Kind::Null, {}, false}; }
  static Redirect file(std::string p, bool append = false) { return {Kind::File, std::move(p), append}; }
  static Redirect to_stdout() { return {Kind::ToStdout, {}, false}; }  // stderr only: 2>&1
};

struct SpawnOptions {
  std::vector<std::string> argv;                         // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set or override
  std::vector<std::string> unset_env;                    // remove
  bool clear_env = false;                                // start from an empty environment
  std::string cwd;                                       // empty: ours
  Redirect in, out, err;
  bool new_process_group = true;  // the child leads its own group
};

class Child {
 public:
  // Starts the process. A program that cannot be executed throws rkit::Error
  // (66 not found, 77 permission denied), naming the program.
  static Child spawn(const SpawnOptions& options);

  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  // Pipe ends (-1 when not a pipe). The caller may read/write/close them.
  int stdin_fd() const { return in_fd_; }
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  void close_stdin();
  // Hands a pipe end over to the caller, who then closes it.
  int take_stdin_fd() { return std::exchange(in_fd_, -1); }
  int take_stdout_fd() { return std::exchange(out_fd_, -1); }
  int take_stderr_fd() { return std::exchange(err_fd_, -1); }

  // Sends `sig` to the child's process group, also after the child itself has been
  // reaped while others in its group remain; to the child alone, while it runs, when
  // it has no group of its own. Once the whole group is gone its id may be reused, so
  // signal a reaped child's group promptly (run() and terminate() do), not much later.
  void signal(int sig) const;
  // Non-blocking check; the status once the child has ended.
  std::optional<ExitStatus> try_wait();
  ExitStatus wait();
  // Waits up to `timeout_s`; nullopt if still running.
  std::optional<ExitStatus> wait_for(double timeout_s);
  // SIGTERM to the group; SIGKILL after `grace_s` if still running; reaps.
  ExitStatus terminate(double grace_s);
  bool running() const { return pid_ > 0 && !status_; }
  // Whether the child leads its own process group (SpawnOptions::new_process_group).
  bool own_group() const { return own_group_; }

 private:
  Child() = default;
  // Kills (SIGKILL to the group) and reaps a running child, closes the descriptors
  // and leaves no process; never throws.
  void reset() noexcept;
  void reset_fds();
  pid_t pid_ = -1;
  bool own_group_ = true;
  mutable bool group_alive_ = true;  // false once kill(-pid) said the group is empty
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  int pidfd_ = -1;
  std::optional<ExitStatus> status_;
};

struct RunResult {
  ExitStatus status;
  std::string out;         // captured stdout (when options.out is a pipe)
  std::string err;         // captured stderr (when options.err is a pipe)
  bool timed_out = false;  // killed because the timeout passed
  double elapsed_s = 0;
};

// Runs to completion, capturing piped outputs and feeding `input` to a piped stdin.
// With a timeout, the group gets SIGTERM when it passes, then SIGKILL after grace_s,
// or when the child has ended if that is sooner: members of the group that ignore
// SIGTERM do not outlive run().
RunResult run(const SpawnOptions& options, std::optional<double> timeout_s = std::nullopt, double grace_s = 5.0,
              std::string_view input = {});

// While alive, SIGINT, SIGTERM and SIGHUP received by this process are forwarded to
// the registered children's process groups instead of killing us; the caller then
// sees its children end and decides. One instance at a time.
//
// A signal that arrives between Child::spawn() and add() is not forwarded to that
// child (it only updates last_signal()). spawn() below closes this window: it blocks
// the forwarded signals in the calling thread from before the spawn until the child
// is registered, so that one arriving meanwhile is delivered, and forwarded, after.
// In a program with other threads, they must block these signals too for that to hold.
class SignalForwarder {
 public:
  SignalForwarder();
  ~SignalForwarder();
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;
  // Registers a child. It must lead its own process group (signals go to the group):
  // otherwise, or for a Child without a process, throws rkit::Error (70), as it does
  // beyond 64 children.
  void add(const Child& child);
  void remove(const Child& child);
  // Child::spawn(options) then add(), with no window for a signal to be missed.
  Child spawn(const SpawnOptions& options);
  // The last signal received (0 if none).
  int last_signal() const;
};

// "SIGTERM" for 15; "signal 99" for unknown numbers.
std::string signal_name(int sig);

// Another rkit tool to run, e.g. "rckpt": $RKIT_<NAME> (upper case) when set, else the
// executable beside this program (installed) or in the build tree (tools/<name>/<name>),
// else `name` itself, for the PATH lookup of Child::spawn.
std::string rkit_program(const std::string& name);

// `s` as one word of sh(1), in single quotes: 'it'\''s'.
std::string sh_quote(std::string_view s);

}  // namespace rkit
