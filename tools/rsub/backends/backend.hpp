// File: rsub/backends/backend.hpp
//
// Where jobs run. Every job has a backend: the local machine (local.cpp: the daemon
// schedules its jobs), or one of the [rsub.backends.NAME] tables of the configuration,
// of a kind that reads its own table (remote.hpp: Slurm and Kubernetes, whose own
// schedulers run the jobs). The commands (commands.cpp) act on every job through this
// interface and name no kind; a kind a table may name is one entry of backend_kinds()
// (backend.cpp), the one list of them. A Backend lives within one request: it refers to
// the settings that opened it.
//
//   std::unique_ptr<Backend> b = open_backend(ctx, job.backend);  // acting for ctx.me
//   b->refresh(ctx, true, true);  // the states its queue shows now
//   b->control(ctx, {job}, Control::Cancel);
//
// Every backend's jobs live in the one store (backend and remote_id columns), so `rsub
// ls` shows all of them and rcost reads one history.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/job.hpp"
#include "core/spec.hpp"
#include "core/store.hpp"
#include "rkit/config.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rsub {

struct Context;  // commands.hpp: who asks, and the daemon's settings
class Backend;

// What every backend has (rsub(1), BACKENDS).
struct BackendCommon {
  std::string name;                      // "local", or the NAME of [rsub.backends.NAME]
  std::string kind;                      // "local", "slurm", "kubernetes"
  std::string log_dir;                   // where its jobs' output goes (<state>/rsub/logs[/NAME])
  double refresh_s = 2;                  // job states are read at most this often
  double submit_retry_s = 20;            // how long transient submission errors are retried
  std::optional<double> assumed_wait_s;  // for --backend auto, where it gives no estimate
};

// A backend's settings: each kind derives its own, with the keys it reads.
struct BackendConfig : BackendCommon {
  virtual ~BackendConfig() = default;
  // The backend acting for a caller. `run_as_uid`: a root daemon runs a backend's
  // commands as the caller (through setpriv), so that the backend authenticates them,
  // not root; unset: as the daemon's user.
  virtual std::unique_ptr<Backend> open(std::optional<std::uint32_t> run_as_uid) const = 0;
};

// A kind of backend a table may name (kind = "slurm"): its own keys, beside the common
// ones (kind, log_dir, refresh, submit_retry, assumed_wait), and how it reads them from
// `key` ("rsub.backends.NAME") into a config whose common fields `common` has read.
struct BackendKind {
  const char* name;
  std::vector<std::string> keys;
  std::shared_ptr<BackendConfig> (*parse)(const Config& config, const std::string& key, const BackendCommon& common);
};
// Every kind a table may name (backend.cpp).
const std::vector<BackendKind>& backend_kinds();

// Reads [rsub.backends.NAME]. Error(Config) naming file:line for an unknown kind or key,
// a value of the wrong type, or a name that is not one (letters, digits, - and _; not
// local or auto).
std::shared_ptr<const BackendConfig> parse_backend(const Config& config, const std::string& name,
                                                   const std::string& state_dir);
// The local machine's settings (local.cpp): its logs under <state_dir>/logs.
std::shared_ptr<const BackendConfig> local_backend_config(const std::string& state_dir);

// A task's output file, as a directory and a name in it (read through the directory's
// descriptor: commands.cpp, open_job_log).
struct LogFile {
  std::string dir, name;
};

// Whether, and how soon, a backend would start a job (--backend auto).
struct Offer {
  enum Fit { Now, Later, Never } fit = Later;
  std::optional<double> wait_s;  // the expected wait, when it gives one
  std::string why;               // "fits now (2 of 2 cores ...)", "expected wait 5m"
};

class Backend {
 public:
  virtual ~Backend() = default;
  // What a job gets by default here (its working directory: the client's, where the
  // tasks see the client's files), and the refusal of what cannot run here (several nodes
  // on one machine: Error(DataErr)). Before the job is stored, or printed by a dry run.
  virtual void prepare(Context& ctx, JobSpec& spec) = 0;
  // Stores the job (a row per array element) and hands it on; prints its id (table) or
  // its records. A dry run prints what it would hand on and stores nothing. Both refuse
  // a dependency on another backend's job (Error(Usage)) before anything is stored.
  virtual int submit(Context& ctx, JobSpec& spec, bool dry_run, const std::vector<std::string>& environment) = 0;
  // Reads the states of its active jobs into the store: at most every refresh_s for all
  // clients together, unless `force`. A backend it cannot reach is an error when
  // `strict`, else a warning on ctx.err (the states last read are shown). Returns whether
  // it may have written states through this request's connection, which data_version
  // does not show (the local daemon writes its own: false).
  virtual bool refresh(Context& ctx, bool strict, bool force) = 0;
  // Cancels, holds or releases its jobs `jobs` (whose ownership the command checked).
  virtual void control(Context& ctx, const std::vector<JobRecord>& jobs, Control action) = 0;
  // The file task `task`'s stdout (or stderr) goes to; Error(Unavailable) where rsub
  // cannot read it (Kubernetes: kubectl logs).
  virtual LogFile log_file(const JobRecord& job, int task, bool err) const = 0;
  // How often `rsub wait` looks at its jobs' states again, in seconds (logs -f: at
  // least every 0.2 s).
  virtual double poll_s() const = 0;
  // Why a job is where it is, as `rsub why` says: fills `rec` (an rkit.job.why.v1 record:
  // state, reason and what this backend knows) and the table's lines.
  virtual void explain(Context& ctx, const JobRecord& job, Json& rec, std::vector<std::string>& lines) = 0;
  // Its line in `rsub status` ("machine: 2 cores, 1 GPUs", "backend dc1: Slurm 22.05.8 ...");
  // one that cannot be reached says so.
  virtual std::string describe(Context& ctx) = 0;
  // What it has, for rsub status' totals: {"cpus": N, "gpus": N}, both keys always there,
  // null where it does not say.
  virtual Json capacity(Context& ctx) = 0;
  // Whether and when it would start the job (--backend auto, auto.cpp).
  virtual Offer offer(Context& ctx, const JobSpec& spec) = 0;
};

// The backend `name` acting for ctx.me: under a root daemon a remote backend's commands
// run as the caller, never as root. Error(Usage) naming the configured ones when `name`
// is not one.
std::unique_ptr<Backend> open_backend(const Context& ctx, const std::string& name);

}  // namespace rkit::rsub
