// File: rsub/core/spec.hpp
//
// The job spec: what `rsub submit JOB.toml` reads and what `rsub [opts] -- CMD` builds,
// the same for every backend. Parsed from TOML with every error naming "file:line: what
// is wrong" (exit 65); flags override the file (errors name the flag, exit 64). The
// normalised JSON form (to_json/from_json) is what the job store keeps.
//
//   JobSpec spec = load_spec("train.toml");       // Error(NoInput) when missing
//   SpecOverrides o; o.tasks = 2; o.env = {"SEED=3"};
//   apply_overrides(spec, o);                     // Error(Usage) names the flag
//   store.submit(spec, ...);
//
// The TOML keys (documented in rsub(1)):
//   name, tenant, project, workflow and rule (the workflow a job is a step of, and its
//   rule: set by rsub's Snakemake profile), command (array of strings, or a string run
//   by /bin/sh -c),
//   workdir, env (table of strings), priority (-1000..1000), backend, time_limit
//   (duration text such as "2h" or seconds as a number; 0 = none), hold (bool),
//   [resources] tasks (>= 1), nodes (>= 1; tasks spread evenly over them), cpus_per_task
//   (>= 1), gpus_per_task (>= 0), gpu_type, memory (per task: size text such as "16G", or
//   bytes),
//   [retry] max_attempts (>= 1), on_exit_codes (1..255), on_signals (names such as
//   "SIGKILL"/"KILL" or numbers), backoff (duration),
//   [array] range ("0-99", "1,3,5-7", "0-15:4"), max_concurrent (>= 0, 0 = no limit),
//   depends: an array of "afterok:12", "afterany:12:13", "afterok:slurm:1234" strings, or
//   of tables { type = "afterok", job = 12 },
//   [slurm] partition, qos, account (instead of the backend's tenant mapping), switches
//   (>= 1: at most this many leaf switches), switch_wait (duration: how long to wait
//   for them); read by Slurm backends only,
//   [kubernetes] image (the container image), queue (Kueue LocalQueue, instead of the
//   backend's tenant mapping); read by Kubernetes backends only.
// Unknown keys are errors (a typo must not be silently ignored).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rsub {

enum class DepType { AfterOk, AfterAny, AfterNotOk };
std::string_view dep_type_name(DepType type);  // "afterok", "afterany", "afternotok"

struct Dependency {
  DepType type = DepType::AfterOk;
  std::int64_t job = 0;  // rsub's id
  // A job named by its backend's id ("slurm:1234") as typed; the client resolves it to
  // `job` before storing (job stays 0 until then).
  std::string remote{};
  bool operator==(const Dependency&) const = default;
};

struct Resources {
  int tasks = 1;
  int cpus_per_task = 1;
  int gpus_per_task = 0;
  std::string gpu_type;            // empty: any; else matched case-insensitively in GPU names
  std::uint64_t memory_bytes = 0;  // per task; 0: not asked
  int nodes = 1;                   // machines the tasks spread over (tasks % nodes == 0)
  bool operator==(const Resources&) const = default;
};

struct RetryPolicy {
  int max_attempts = 1;            // attempts in all, the first included
  std::vector<int> on_exit_codes;  // exit codes that retry
  std::vector<int> on_signals;     // signal numbers that retry
  double backoff_s = 10;           // before the 2nd attempt; doubles, capped at 600 s
  bool operator==(const RetryPolicy&) const = default;
};

struct ArraySpec {
  std::vector<int> indices;  // sorted, unique, each >= 0
  int max_concurrent = 0;    // 0: no limit
  bool operator==(const ArraySpec&) const = default;
};

// Hints only Slurm backends read.
struct SlurmHints {
  std::string partition, qos, account;  // empty: the backend's
  int switches = 0;                     // 0: no limit
  double switch_wait_s = 0;             // with switches: the longest wait for them
  bool operator==(const SlurmHints&) const = default;
};

// Hints only Kubernetes backends read.
struct KubeHints {
  std::string image;  // empty: the backend's default image
  std::string queue;  // empty: the backend's queue for the tenant
  bool operator==(const KubeHints&) const = default;
};

struct JobSpec {
  std::string name;    // default: the command's basename
  std::string tenant;  // empty: filled by the client from config/user
  std::string project;
  std::string workflow;              // empty: not part of a workflow
  std::string rule;                  // the workflow's rule this job runs (empty: none)
  std::vector<std::string> command;  // argv; a TOML string becomes {"/bin/sh", "-c", s}
  std::string workdir;               // empty: filled by the client (its cwd)
  std::map<std::string, std::string> env;
  Resources resources;
  std::optional<double> time_limit_s;  // nullopt: none
  RetryPolicy retry;
  std::optional<ArraySpec> array;
  std::vector<Dependency> depends;
  int priority = 0;  // -1000..1000
  std::string backend = "local";
  bool hold = false;  // submit held
  SlurmHints slurm;
  KubeHints kube;
  bool operator==(const JobSpec&) const = default;

  // The normalised form kept in the store and shown in rkit.job.v1's "spec".
  Json to_json() const;
  // The inverse of to_json (Error(DataErr) on a malformed record).
  static JobSpec from_json(const Json& json);
};

// Parses TOML text; `source` names it in errors ("train.toml:12: resources.tasks must be
// at least 1"). Errors throw Error(DataErr). A spec without a command is an error.
JobSpec parse_spec(std::string_view text, const std::string& source);
// Reads and parses a file ("-": stdin). Error(NoInput) when it cannot be read.
JobSpec load_spec(const std::string& path);

// Command-line overrides; each set field replaces (env: adds to) the spec's value.
struct SpecOverrides {
  std::optional<std::string> name, tenant, project, workflow, rule, workdir, gpu_type, backend;
  std::optional<std::string> partition, qos, account, image;  // [slurm], [kubernetes] hints
  std::vector<std::string> env;                               // "K=V"
  std::optional<int> tasks, nodes, cpus_per_task, gpus_per_task, priority;
  std::optional<std::string> memory;      // size text
  std::optional<std::string> time_limit;  // duration text; "0" = none
  std::optional<int> retries;             // max_attempts = retries + 1
  std::optional<std::string> retry_on;    // "75,137,SIGKILL": exit codes and signal names
  std::optional<std::string> array;       // Slurm's syntax: "0-99%10"
  std::vector<std::string> depends;       // "afterok:12:13" (each may hold several ids)
  std::optional<bool> hold;
  std::vector<std::string> command;  // after "--": replaces the spec's command
};
// Applies the overrides and validates the result. Errors throw Error(Usage) naming the
// flag ("--tasks: must be at least 1").
void apply_overrides(JobSpec& spec, const SpecOverrides& overrides);

// "0-99", "1,3,5-7", "0-15:4" → indices (Error(Usage) "array range ...: why").
std::vector<int> parse_array_range(std::string_view text);
// "afterok:12:13" → two dependencies; "afterok:slurm:1234" → one with remote "slurm:1234"
// (Error(Usage) on anything else).
std::vector<Dependency> parse_dependency(std::string_view text);
// "a,b,,c" → {"a", "b", "", "c"}: every field, empty ones too (views into `s`).
std::vector<std::string_view> split(std::string_view s, char sep);
// `text` made valid as a name (a job's, a workflow's): whitespace and control characters
// become _, and so does every byte outside ASCII when it is not UTF-8.
std::string valid_name(std::string text);
// "SIGKILL", "KILL", "9" → 9; nullopt when not a signal.
std::optional<int> parse_signal(std::string_view text);

}  // namespace rkit::rsub
