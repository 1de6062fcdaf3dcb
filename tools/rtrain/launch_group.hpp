// File: rtrain/launch_group.hpp — rtrain launch's generation of one node's workers.
//
// The parts of launch.hpp's agent that run the workers: the rkit.train.event.v1 records,
// and a Group, one generation of this node's workers on a WorkerGroup (rkit/workers.hpp:
// spawning, exits, the stop and the root cause) plus what is rtrain's own: torchrun's
// environment and CPU/GPU binding, the rank-prefixed output and per-rank logs, the
// stderr tail a failure report quotes, and the heartbeat files.
//
//   Events events(o.events_path);
//   Group g(o, layout, generation, run_id, hb_dir, hb_fd, secret, forward, events);
//   while (g.running()) g.step(50);
//   g.finish();
//   if (g.failure()) report(g, generation);
#pragma once

#include <deque>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "launch.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/process.hpp"
#include "rkit/workers.hpp"

namespace rkit::rtrain {

// Seconds since the epoch (the records' time_unix_s, heartbeat ages).
double now_s();

// Writes rkit.train.event.v1 records to a file (appended), to stdout ("-"), or nowhere ("").
class Events {
 public:
  explicit Events(const std::string& path);
  // One record: schema, event, time_unix_s, then `fields`.
  void emit(const std::string& event, Json fields);

 private:
  std::ofstream file_;
  std::ostream* out_ = nullptr;
};

// One worker's own things: its global rank, its output cut into lines, its logs, the
// last lines of its stderr, its heartbeat file.
struct Worker {
  int rank = 0;
  std::string out_buf, err_buf;  // a line not yet ended
  std::deque<std::string> err_tail;
  std::ofstream out_log, err_log;
  std::string heartbeat, heartbeat_name;  // the path the worker gets; the name in the heartbeat folder
};

// A generation of this node's workers: started together (bound to their placement),
// watched (output, exits, heartbeats), stopped together (SIGTERM, then SIGKILL after
// --kill-grace). A worker that ends after the stop, or after a signal to this agent
// (forwarded to the workers), was stopped, not failed.
class Group {
 public:
  // Starts the workers and emits "start". Throws as Child::spawn, or system_error for a
  // heartbeat file that cannot be made.
  Group(const LaunchOptions& o, const Layout& layout, int generation, const std::string& run_id,
        const std::string& hb_dir, int hb_fd, const std::string& secret, SignalForwarder& forward, Events& events);

  bool running() const { return group_.running(); }
  // The root cause, "rank 3 on gpu07 exit 2 after 4.1s" or "rank 0 on gpu07 hung: ...".
  std::optional<std::string> failure() const;
  // The root cause's exit code (128 + signal; 143 for a hung worker stopped; 1 while it runs).
  int failed_code() const;
  const Worker* failed_worker() const;

  // Reads output, reaps (emitting "worker_exit"), checks heartbeats ("hang_detected"),
  // carries out a stop; waits up to timeout_ms.
  void step(int timeout_ms);
  void stop() { group_.stop(); }
  // As srun: the highest exit code of the workers that ended on their own (not those the
  // stop ended), and of the root cause (a hung worker).
  int exit_code() const { return group_.exit_code(); }
  // Prints what the workers wrote last (what the pipes hold now: a process they left
  // behind may keep one open), then kills what remains of every worker's process group.
  void finish();

 private:
  void take(const WorkerEvent& e);  // one event of the WorkerGroup

  const LaunchOptions& o_;
  int generation_;
  int hb_fd_;  // the heartbeat folder, open
  Events& events_;
  std::vector<Worker> workers_;
  WorkerGroup group_;
};

// Prints the root cause of a failed generation on stderr, with the stderr tail of its worker.
void report(const Group& g, int generation);

}  // namespace rkit::rtrain
