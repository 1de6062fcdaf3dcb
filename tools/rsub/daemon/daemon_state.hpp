// File: rsub/daemon/daemon_state.hpp — internal to the daemon (daemon.cpp, daemon_state.cpp):
// what the running daemon keeps between its scheduling passes (the active jobs, the
// scheduler's input kept in step with them, fair-share usage) and what one pass does
// with it: start jobs through the launcher, watch the running ones, record verdicts.
// One thread uses it: the daemon's scheduling loop (run_daemon), or dry_pass and its
// kin, which make one pass and write nothing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/store.hpp"
#include "daemon/daemon.hpp"
#include "daemon/sched.hpp"

namespace rkit::rsub {

class ShimLauncher;  // daemon_state.cpp: starts the supervisors

class Daemon {
 public:
  Daemon(const Settings& s, const Machine& m);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Loads what changed since the last pass (the first loads every active job): the
  // input of the next one.
  void refresh();
  // Forgets the active jobs, so that the next refresh loads them all again.
  void resync();
  // The running daemon drops the change log it has read, now and then.
  void trim_changes();
  // Running jobs: cancel requests, and supervisors that vanished. True when a job changed.
  bool watch_running();
  // One scheduling pass: starts what may start, records the others' reasons.
  void pass();
  // The scheduler's input: the pending jobs as track() keeps them, the running ones, and
  // what changes with time. `details`: verdicts with their detail lines (`rsub why`).
  const SchedInput& input(double now, bool details);
  void launch(const Start& start, double now);
  void spawn_shim(std::int64_t id, int attempt, int lock_fd);
  // What is left of an attempt whose supervisor died: its cgroup, killed and removed.
  void kill_cgroup(std::int64_t id, int attempt);
  void signal_shim(const std::string& lock, std::int64_t id, int attempt);
  // One job's change: taken as it is now, or forgotten once it ended.
  void apply(const Store::ActiveState& st);
  // Keeps in_.pending (one entry per pending job, at pending_at_[id], its last stored
  // reason in reasons_ at the same place) and running_ in step with a job of jobs_ that
  // was loaded or changed, so that a pass does not rebuild them from every job.
  void track(const JobRecord& j);
  void untrack(std::int64_t id);
  // Fair-share usage: core-seconds plus gpu_weight × GPU-seconds, decayed.
  void account(const JobRecord& j, double now);
  // A job leaves the active set: its last stretch of usage, and what was kept about it.
  void forget(const JobRecord& j);
  void decay_usage(double now);
  void save_usage(double now);
  // A pass with details over the daemon's own state, brought up to date first, starting
  // nothing (rsub why).
  SchedPlan explain_pass();

  Store& store() { return store_; }
  // The daemon stops: cancels that reached the store since the last pass (a stop that
  // came with the cancel's wake-up) are still delivered to their jobs, and usage saved.
  void finish_up();
  // New settings (the configuration file changed); the machine is probed again when
  // what describes it did.
  void set_settings(const Settings& s);
  const Machine& machine() const { return machine_; }

 private:
  Settings s_;
  Machine machine_;
  Store store_;
  std::unique_ptr<ShimLauncher> launcher_;  // daemon_state.cpp's
  std::string host_;
  std::map<std::int64_t, JobRecord> jobs_;  // the active ones
  SchedInput in_;                           // what track() keeps of them for the scheduler
  std::unordered_map<std::int64_t, std::size_t> pending_at_;
  std::vector<std::string> reasons_;
  std::set<std::int64_t> running_;
  std::int64_t max_id_ = 0;
  bool loaded_ = false;
  std::int64_t change_seq_ = 0, trimmed_seq_ = 0;         // the change log: read up to, dropped up to
  std::set<std::pair<std::int64_t, int>> signalled_;      // (job, attempt) sent a cancel
  std::unordered_map<std::int64_t, int> start_failures_;  // attempts whose supervisor never ran
  std::map<std::string, std::pair<double, double>> usage_;
  double last_pass_ = now_s();
  double usage_saved_ = 0;
};

}  // namespace rkit::rsub
