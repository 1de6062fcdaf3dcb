// File: rsub/daemon/sched.hpp
//
// One scheduling pass of the local backend, as a pure function: no I/O, no clock (`now`
// is an input), so tests can replay any situation and the benchmark can time it.
//
//   SchedInput in{.machine = &machine, .config = cfg, .now = now};
//   in.running = ...; in.pending = ...; in.usage = ...; in.dependencies = ...;
//   SchedPlan plan = schedule(in);
//   for (const Start& s : plan.starts) launch(s.job, s.tasks);
//   for (const Verdict& v : plan.verdicts) store_reason(v.job, v.reason);
//
// The rules (Slurm's where Slurm has one):
// - Priority (Slurm's multifactor plugin): score = w_fs·F + w_age·A + w_prio·P with
//   F = 2^(−U/S), U = the tenant's decayed usage / all tenants' decayed usage (0 when
//   there is none), S = the tenant's shares / the shares of all tenants with pending or
//   running jobs; A = min(age / max_age, 1), age = now − submit time; P = the job's
//   priority (−1000..1000). Ties: earlier submit, then lower id.
// - Blocked before they compete (their reason says why), checked in this order: more
//   than the whole machine has (Impossible) or a dependency that can never be satisfied
//   (DependencyNeverSatisfied) — for both the verdict has `never` set and the daemon fails
//   the job, held or not; held (JobHeldUser); a dependency not yet satisfied
//   (Dependency); a retry's backoff not over (BeginTime); its array at max_concurrent
//   running (JobArrayTaskLimit); its user at max_running_jobs_per_user (UserJobLimit);
//   its tenant at max_gpus or max_cpus (TenantGpuLimit, TenantCpuLimit).
// - Gang: all tasks of a job are placed at once (rkit::place with the running jobs'
//   cores and GPUs busy, GPUs of another type busy too) or none is.
// - EASY backfill: walking the eligible jobs by score, each that fits starts; the first
//   that does not (the top job, reason Resources) gets a reservation: the earliest time
//   at which enough cores, GPUs and memory are free, counting running jobs as ending at
//   start + time limit (never, without a limit). A later job (reason Priority when it
//   cannot start) may still start now if it fits and either ends (by its time limit)
//   before the reservation or leaves enough for the top job at the reservation. When
//   the top job must wait for a job without a limit (no reservation time), later jobs
//   may take only what is left beyond its needs once all jobs with a limit have ended.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/job.hpp"
#include "core/spec.hpp"
#include "rkit/placement.hpp"
#include "rkit/topology.hpp"

namespace rkit::rsub {

// What the local backend schedules onto: the host's topology (or a [local] override
// built as a synthetic one) and its memory.
struct Machine {
  Topology topology;
  std::uint64_t memory_bytes = 0;  // 0: not known, so memory is not counted
};

struct TenantPolicy {
  double shares = 1;
  std::optional<int> max_gpus;  // GPUs its running jobs may hold together
  std::optional<int> max_cpus;  // cores its running jobs may hold together
};

struct SchedConfig {
  double weight_fairshare = 10000;
  double weight_age = 1000;
  double weight_priority = 1;
  double max_age_s = 7 * 86400;
  std::map<std::string, TenantPolicy> tenants;  // tenants not listed: shares 1, no quota
  std::optional<int> max_running_jobs_per_user;
  Policy policy = Policy::Pack;
};

struct RunningJob {
  std::int64_t id = 0;
  std::string tenant, user;
  std::optional<std::int64_t> array_parent;
  std::vector<TaskAlloc> tasks;
  double start_s = 0;
  std::optional<double> time_limit_s;
};

struct PendingJob {
  std::int64_t id = 0;
  std::string tenant, user;
  std::optional<std::int64_t> array_parent;
  int array_max_concurrent = 0;  // 0: no limit
  Resources resources;
  std::optional<double> time_limit_s;
  int priority = 0;
  double submit_s = 0;
  double eligible_s = 0;  // not before (a retry's backoff)
  bool held = false;
  std::vector<Dependency> depends;
};

// What a dependency's job has come to.
enum class DepStatus { Active, Completed, NotOk /* FAILED, CANCELLED, TIMEOUT, LOST */ };

struct SchedInput {
  const Machine* machine = nullptr;
  SchedConfig config;
  std::vector<RunningJob> running;
  std::vector<PendingJob> pending;
  std::unordered_map<std::string, double> usage;  // tenant → decayed usage (any unit)
  // The jobs that pending jobs depend on; a job id missing here is unknown, and a
  // dependency on it is never satisfied.
  std::unordered_map<std::int64_t, DepStatus> dependencies;
  double now = 0;
  // Verdicts with their detail lines (`rsub why`); without, only reasons (and the details
  // of `never` verdicts), which is all a daemon's pass stores.
  bool details = true;
};

struct Start {
  std::int64_t job = 0;
  std::vector<TaskAlloc> tasks;
};

struct PriorityFactors {
  double score = 0;
  double fairshare = 0;  // F in [0, 1]
  double age = 0;        // A in [0, 1]
  int priority = 0;      // P
};

// For each pending job that does not start: why (for `rsub why` and `rsub ls`).
struct Verdict {
  std::int64_t job = 0;
  std::string reason;  // Resources, Priority, Dependency, JobHeldUser, ...
  std::string detail;  // one line a user can act on: "needs 2 GPUs, 0 of 2 free"
                       // (empty unless SchedInput::details, or never)
  bool never = false;  // can never run (the daemon fails it)
  PriorityFactors priority;
  int position = 0;                        // 1-based rank by score among the jobs left waiting for
                                           // Resources or Priority (the top job is 1); 0 when blocked
  std::optional<double> expected_start_s;  // the reservation, for the top job
  std::vector<std::int64_t> waits_for;     // jobs that must finish first
};

struct SchedPlan {
  std::vector<Start> starts;
  std::vector<Verdict> verdicts;
};

SchedPlan schedule(const SchedInput& input);

// The fair-share factor F = 2^(−U/S) for a tenant with usage share U and shares share S
// (both fractions of the total); 0 when S is 0 (a tenant without shares).
double fairshare_factor(double usage_fraction, double shares_fraction);
// Usage decayed over `elapsed_s` with the half-life (no decay when half_life_s <= 0).
double decay(double usage, double elapsed_s, double half_life_s);

}  // namespace rkit::rsub
