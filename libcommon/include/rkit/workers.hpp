// File: rkit/workers.hpp
//
// One supervisor of a group of worker processes, for the tools that run several at once
// (rtrain launch's workers, rbench comm.gloo's ranks): spawns them (each with its own
// SpawnOptions, leading its own process group), waits for what they do (output on their
// pipes, exits), names the worker whose failure is the group's root cause, and stops the
// rest: SIGTERM to every worker's process group, SIGKILL after a grace, all reaped.
// What the workers are for (heartbeats, logs, rendezvous, parsing their output) stays
// with the tool.
//
//   rkit::WorkerGroup group({.grace_s = 5});
//   for (int r = 0; r < 4; ++r) {
//     rkit::SpawnOptions s;
//     s.argv = {"worker", std::to_string(r)};
//     s.out = rkit::Redirect::pipe();
//     group.spawn(s);
//   }
//   while (group.running())
//     for (const rkit::WorkerEvent& e : group.wait(/*timeout_s=*/1))
//       if (e.kind == rkit::WorkerEvent::Kind::Output) consume(e.worker, e.data);
//   if (auto cause = group.root_cause())  // worker 2 exit 3
//     fail(fmt::format("worker {} {}", cause->worker, cause->describe()));
//
// The root cause, one rule for every tool:
//   1. Candidates are the workers that failed on their own: those that ended other than
//      with exit 0 before the group was stopped, and those the caller declared failed
//      (fail(): a hang it saw) before then. A worker that ends after the stop (stop(), a
//      signal to this process forwarded to the workers, the stop after a failure) was
//      stopped: its end is an effect, never a cause.
//   2. Among them, one killed by a signal (a crash, the OOM killer) wins over those that
//      exited with an error: its peers typically fail of losing it.
//   3. Then the one seen first (by wait() calls: those reaped in one call are seen
//      together), then the lowest index.
// A failure stops the group, settle_s after the first one: others that fail meanwhile
// are candidates too (a settle of a fraction of a second lets the signal-killed cause
// be told apart from its effects); with settle_s 0 only the first wake-up's are.
//
// The destructor (and finish()) sends SIGKILL to every worker's process group, so that
// nothing the workers started outlives the group either, and reaps them; it never throws.
// Not thread-safe; one group's wait() at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rkit/process.hpp"

namespace rkit {

struct WorkerGroupOptions {
  double grace_s = 10;  // after the stop's SIGTERM, SIGKILL to those still running
  double settle_s = 0;  // after the first failure, how long the others may still fail on
                        // their own (and be candidates for the root cause) before the stop
  // When set, the workers are spawned through it (SIGINT, SIGTERM, SIGHUP to this process
  // reach their process groups) and removed from it by finish(); once such a signal has
  // come, the group counts as stopped (its workers' ends are not failures) and stops.
  SignalForwarder* forward = nullptr;
};

// Something that happened to a worker, from wait() or drain().
struct WorkerEvent {
  enum class Kind {
    Output,  // `data` was read from the worker's stdout (fd 1) or stderr (fd 2) pipe;
             // empty data: end of file, and the group closed its end of that pipe
    Exited,  // the worker ended and was reaped: `status`
  };
  Kind kind = Kind::Output;
  std::size_t worker = 0;  // the index spawn() returned
  int fd = 1;              // Output: 1 or 2
  std::string data;
  ExitStatus status;
};

// What the group knows of one worker.
struct WorkerState {
  using Clock = std::chrono::steady_clock;
  pid_t pid = -1;                    // also after it was reaped, for messages
  Clock::time_point started, ended;  // ended: when it was reaped
  std::optional<ExitStatus> status;  // once reaped
  bool stopped = false;              // it ended after the group's stop: not a failure of its own
  bool failed = false;               // a root cause candidate (see the rule above)
  std::string reason;                // fail()'s reason; "" for a worker that ended
  // Seconds from its start to its end (to now while it runs).
  double uptime_s() const;
};

// The worker whose failure is the group's (the rule above).
struct RootCause {
  std::size_t worker = 0;
  std::optional<ExitStatus> status;  // how it ended; none yet for a declared one still running
  std::string reason;                // fail()'s reason; "" when it ended on its own
  bool by_signal = false;            // it was killed by a signal before the stop
  double uptime_s = 0;               // from its start to its failure
  // The shell's code: its exit code, or 128 + signal (a stopped hung worker's 143); 1 while
  // a declared one still runs.
  int exit_code() const { return status ? status->shell_code() : 1; }
  // The reason, else the status: "exit 3", "killed by signal 9 (SIGKILL)".
  std::string describe() const;
};

class WorkerGroup {
 public:
  using Clock = std::chrono::steady_clock;

  explicit WorkerGroup(WorkerGroupOptions options = {});
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts one more worker (in its own process group, whatever options says) and returns
  // its index, 0, 1, ... Piped stdout and stderr are the group's to read (wait()); a
  // piped stdin is the caller's (stdin_fd). Throws as Child::spawn (66, 77); Error(Software)
  // after the stop or finish().
  std::size_t spawn(const SpawnOptions& options);

  // Waits until something happens, at most `timeout_s` (0: only looks), and returns what
  // did: output read (at most 64 KiB per pipe and call), workers reaped (their Exited
  // after their output of this call). Empty: the timeout passed, or there is nothing left
  // to wait for (no worker running, no pipe open), which it returns at once. Meanwhile it
  // carries out the stop: after the first failure's settle_s, stop(); grace_s after the
  // stop, SIGKILL to every worker's group still running.
  std::vector<WorkerEvent> wait(double timeout_s);

  // What the open pipes hold now, read without waiting (the output of workers that have
  // ended: a process they left behind may keep a pipe open, so not until end of file).
  std::vector<WorkerEvent> drain();

  // Stops the group: SIGTERM to every worker's process group (also of those that ended:
  // what they started may remain); wait() sends SIGKILL grace_s later. From now on, a
  // worker's end is not a failure. Idempotent.
  void stop();

  // Declares worker `i` failed (say, hung) with `reason`, as if it had failed on its own
  // now: a candidate for the root cause, and the group stops. Ignored once the group is
  // stopped, or when the worker failed already.
  void fail(std::size_t i, std::string reason);

  // SIGKILL to every worker's process group, reaps those still running, closes the pipes
  // and removes them from the forwarder; what the group knows stays readable. Idempotent;
  // never throws.
  void finish() noexcept;

  std::size_t size() const { return workers_.size(); }
  const WorkerState& worker(std::size_t i) const { return workers_.at(i).state; }
  // Worker i's stdin pipe (-1 when not a pipe, or closed).
  int stdin_fd(std::size_t i) const { return workers_.at(i).child.stdin_fd(); }
  bool running() const;  // a worker is not reaped yet
  bool stopping() const { return stop_at_.has_value(); }
  bool failed() const { return first_failure_.has_value(); }
  std::optional<RootCause> root_cause() const;
  // As srun: the highest shell code (exit code, 128 + signal) of the workers that ended
  // on their own, and of the root cause (a hung worker the stop ended); 0 when all
  // succeeded.
  int exit_code() const;

 private:
  struct Slot {
    Child child;
    WorkerState state;
    int pidfd = -1;
    std::uint64_t failed_in = 0;  // the wait() call that saw it fail
    Clock::time_point failed_at;
    bool by_signal = false;
  };
  void read_output(std::size_t i, int fd, std::vector<WorkerEvent>& events, bool until_empty);
  void reap(std::vector<WorkerEvent>& events);
  void mark_failed(Slot& s, std::uint64_t seen_in);
  void tick(Clock::time_point now);  // the stop's steps that fell due

  WorkerGroupOptions options_;
  std::vector<Slot> workers_;
  std::uint64_t calls_ = 0;  // wait() calls
  std::optional<Clock::time_point> first_failure_, stop_at_;
  bool killed_ = false, finished_ = false;
};

}  // namespace rkit
