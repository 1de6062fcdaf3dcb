// File: rsub/daemon/daemon.hpp
//
// rsub's settings (settings.cpp), and the local backend's moving parts: the files under
// <state>/rsub, the scheduler daemon, and the supervisor ("shim") that owns one attempt
// of one job.
//
//   <state>/rsub/jobs.db          the store (store.hpp)
//   <state>/rsub/daemon.lock      flock()ed by the one daemon for its whole life
//   <state>/rsub/daemon.pid       its pid (written after it holds the lock)
//   <state>/rsub/wake.sock        the daemon's datagram socket: any byte wakes it
//   <state>/rsub/run/ID.N.lock    flock()ed by the supervisor of attempt N of job ID
//   <state>/rsub/logs/ID/task-T.out, .err   each task's output (attempts append)
//
// Durability: the daemon creates and locks a job attempt's lock file before it starts
// the supervisor, which receives the lock (through the launcher, run_launcher; the daemon
// then closes its copy), so the lock is free exactly when the supervisor is gone. The supervisor records the attempt's
// end in the store before it exits. A daemon that starts (also after kill -9) finds each RUNNING job's lock: held → its
// supervisor still runs and will record the end; free, no end recorded, and the supervisor's pid in the file (written
// before it starts any task) → LOST (its command may have run: it is never started again by itself); free and no pid →
// the daemon died before the supervisor started: PENDING again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "daemon/sched.hpp"
#include "rkit/config.hpp"

namespace rkit::rsub {

// Who may charge a tenant besides those whose default it is (rsub.tenants.T.users, .groups).
struct TenantAccess {
  std::vector<std::string> users, groups;
};

// The rsub settings of the configuration file (rsub(1), CONFIGURATION).
struct Settings {
  std::string config_path;  // the file they came from ("" when none)
  std::string dir;          // <state>/rsub
  // rsub.socket: a shared daemon's socket (/run/rkit/rsub.sock). Unset: a personal daemon,
  // started by its user's first command, listening on <dir>/rsub.sock.
  std::string socket;
  bool shared() const { return !socket.empty(); }
  std::string socket_path() const { return shared() ? socket : dir + "/rsub.sock"; }
  std::map<std::string, TenantAccess> tenant_access;
  SchedConfig sched;
  std::vector<std::string> admins;                      // rsub.admins: may cancel, hold, release anyone's jobs
  std::map<std::string, std::string> tenants_of_users;  // rsub.users: user → tenant
  std::optional<double> default_time_limit_s;           // rsub.default_time_limit
  double kill_grace_s = 10;                             // rsub.kill_grace
  int job_pids_max = 4096;                    // rsub.limits.max_pids_per_job: a job cgroup's pids.max (0: none)
  double half_life_s = 3600;                  // rsub.priority.half_life
  double gpu_weight = 10;                     // rsub.priority.gpu_weight: a GPU-second is worth N core-seconds
  std::optional<int> local_cpus, local_gpus;  // [local] cpus, gpus: instead of the host's
  std::optional<std::uint64_t> local_memory;  // [local] memory
  // Where jobs run: the local machine first, then each [rsub.backends.NAME], by name.
  std::vector<std::shared_ptr<const BackendConfig>> backends;
  const BackendConfig* backend(const std::string& name) const;  // nullptr: not configured
  // --backend auto: the remote backends it may choose, in order of preference when their
  // waits tie (rsub.auto.backends; default: all), the price sheet that costs a job there
  // (rsub.auto.prices), and each tenant's most a job may cost (rsub.tenants.T.max_job_cost).
  std::vector<std::string> auto_backends;
  std::string prices_path;
  std::map<std::string, double> max_job_cost;
};
// Errors: Error(Config) naming file:line for values of the wrong type or meaning.
Settings load_settings(const Config& config);

// What the jobs run on: the host's topology, or the [local] override (cores without
// SMT, GPUs named "GPU" with indices 0..N-1).
Machine local_machine(const Settings& settings);

// <dir>/run/ID.N.lock: the supervisor of attempt N of job ID holds it, and removes it
// once the attempt's end is stored.
std::string lock_path(const std::string& dir, std::int64_t id, int attempt);

// Wakes the daemon; false when none is listening.
bool wake_daemon(const std::string& dir);
// Starts a personal daemon in the background (detached, its output in <dir>/daemon.log).
// Returns at once; a daemon that finds another one running exits quietly.
void start_daemon(const std::string& exe, const std::string& config_path, const std::string& dir);

struct DaemonOptions {
  bool once = false;  // one scheduling pass, then exit (tests, benchmarks)
};
// Runs the daemon until SIGTERM or SIGINT. Error(TempFail) "a daemon already runs for
// DIR" when another daemon holds the lock.
void run_daemon(const Settings& settings, const DaemonOptions& options);

// Supervises attempt `attempt` of job `id`, holding the lock on descriptor `lock_fd`;
// `pids_max` bounds the tasks of its cgroup (0: none). Returns its exit code (0 once the
// end is stored).
int run_shim(const std::string& dir, std::int64_t id, int attempt, int lock_fd, double kill_grace_s, int pids_max);

// What the daemon asks its launcher for: one supervisor (the attempt's lock travels with
// the message, as SCM_RIGHTS).
struct ShimRequest {
  std::int64_t id = 0;
  std::int32_t attempt = 0;
  std::int32_t pids_max = 0;
  double kill_grace_s = 0;
};
// The hidden `rsub _launcher DIR FD` entry: the daemon's single-threaded helper, exec'd
// once, that forks a supervisor for each ShimRequest read from the socket `fd` (a
// socketpair's end only the daemon holds). A supervisor so started runs in a session of
// its own and needs no exec of its own. Returns 0 when the daemon closes its end.
int run_launcher(const std::string& dir, int fd);
// Where a store's job cgroups live, under each hierarchy: rkit/<store tag>.
std::string cgroup_parent(const std::string& store_tag);

// One scheduling pass over the store as a starting daemon makes it (load every active
// job, schedule with details), starting nothing and writing nothing: `rsub why` without
// a running daemon's own state.
SchedPlan dry_pass(const Settings& settings, const Machine& machine);

// For tests: loads the store as a starting daemon does, runs `change` (which writes to
// the store), reads what changed as the running daemon does, and schedules with details:
// the plan dry_pass makes after the change.
SchedPlan pass_after(const Settings& settings, const Machine& machine, const std::function<void()>& change);

// One pending job's place in a pass with details (rsub why).
struct Explanation {
  bool starts = false;             // the pass starts it
  std::optional<Verdict> verdict;  // else why not (none: the pass did not see it pending)
  int pending = 0;                 // the jobs left waiting by rank (position > 0)
};
Explanation explain_job(const SchedPlan& plan, std::int64_t job);

// For `rsub _bench-pass`: the time to load the active jobs (a daemon's first pass), and
// the time of a pass after it (pass_ms: reading what changed, refresh_ms; building the
// scheduler's input, input_ms; scheduling), in milliseconds.
struct PassTiming {
  double load_ms = 0, pass_ms = 0, refresh_ms = 0, input_ms = 0;
  SchedPlan plan;
};
PassTiming time_pass(const Settings& settings, const Machine& machine);

}  // namespace rkit::rsub
