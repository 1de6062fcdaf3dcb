// File: rtrain/tracking.hpp
//
// rtrain's records in the run store (rkit/runs.hpp): every `rtrain run`, and every job of
// `rtrain launch --track`, is a run with its resolved configuration, this machine and
// build, the Git revision it ran from, its inputs and parent by digest, its metrics as
// time series, its checkpoints and weights by digest, and its rsub job.
//
//   TrackOptions t;                                   // --experiment, --tag, --project ...
//   RunTracker tracker(t, describe_run(config));      // the run is RUNNING from here
//   run_training(config, tracker.provenance(), [&](const Json& r) { tracker.record(r); ... });
//   tracker.finish("FINISHED");
//
// Metrics are buffered and written at most once a second (and at the end), in one
// transaction each, so recording costs microseconds a step; busy_s() says how many.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rkit/config.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/runs.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

struct TrackOptions {
  bool enabled = true;            // --no-track; $RKIT_TRACK=0
  std::string project;            // --project DIR: the store DIR/runs.db ("": $RKIT_PROJECT_DIR, else the state dir's)
  std::string experiment;         // --experiment ("": $RKIT_EXPERIMENT, else "default")
  std::string name;               // --run-name
  std::vector<std::string> tags;  // --tag KEY=VALUE
  std::string price_sheet;        // what prices the run's cost: the configured sheet ("": none)
  // Resolves the defaults above from the environment and `config` (its price sheet, as
  // configured_price_sheet finds it); Error(Usage) for a tag without '='.
  void resolve(const Config& config);
  Json tags_json() const;
};

// --experiment, --run-name, --tag, --project on `cmd`, and --no-track (rtrain run), or
// --track for a command that keeps no record unless asked (`opt_in`: rtrain launch).
void add_track_flags(CLI::App& cmd, TrackOptions& o, bool opt_in = false);

// The Git revision of the work tree holding `dir`: {"repo", "commit", "branch", "dirty",
// "diff_xxh3"} (the digest of `git diff HEAD`, uncommitted changes to tracked files);
// null outside a work tree or without git.
Json code_revision(const std::string& dir);
// This machine and build: host, kernel, cpu_model, cpus, memory_bytes, topology_xxh3,
// rkit_version, rkit_revision, blas, gpu_driver.
Json system_facts();
// {"name", "path" (absolute), "bytes", "xxh3"} of a file read whole now.
Json input_record(const std::string& name, const std::string& path);
// How a checkpoint came to be this run's start: {"kind", "archive" (absolute),
// "archive_xxh3" (null for a folder), "run_id" (from the archive's provenance, or null)}.
Json parent_record(const std::string& kind, const std::string& path);

// The run store's description of an `rtrain run` about to start: its configuration
// (TrainConfig's recorded keys, paths made absolute), the code, system and inputs.
runs::NewRun describe_run(const TrainConfig& config);
// The scheduler's job this process is: {"backend": "rsub", "id": $RSUB_JOB_ID}, or
// Slurm's ($SLURM_JOB_ID); null outside a job.
Json job_of_environment();
// The digest of a run's configuration, as checkpoints carry it.
std::string config_digest(const Json& params);

// What a run held and what that cost, as its summary's "cost" keeps it: {"backend" (the
// price sheet's: "local", or the rsub job's, or "slurm"), "cpus" (the cores it could run
// on), "gpus", "memory_bytes" (its peak), "hours" (wall time), "currency", "amount" (null
// without a price sheet, or when the sheet cannot price it: then "error" says why),
// "price_sheet"}. What the run held, not what it used, is priced, as schedulers bill.
struct HeldResources {
  double seconds = 0, cpus = 0, gpus = 0;
  std::uint64_t memory_bytes = 0;
};
Json run_cost(const HeldResources& held, const Json& job, const std::string& price_sheet);

class RunTracker {
 public:
  // Creates the run, or, under `rtrain launch --track` ($RKIT_RUN_RECORD names the run the
  // launcher made), adds this one's description to it. Does nothing when !o.enabled.
  RunTracker(const TrackOptions& o, runs::NewRun run);
  ~RunTracker();  // a run neither finished nor handed back is FAILED

  bool enabled() const { return store_ != nullptr; }
  const std::string& id() const { return id_; }
  // What checkpoints carry: {"run_id", "config_xxh3", "inputs"}; null when not tracking.
  Json provenance() const;
  // One rkit.train.event.v1 record: step and eval records become metrics, checkpoint
  // records outputs, resume and init the parent, the summary is kept for finish().
  void record(const Json& event);
  // Writes what is buffered and ends the run (FINISHED, FAILED or KILLED), with the
  // summary seen (and `error`, when given) and the time recording took.
  // A store that fails once the run has started stops the recording with one warning; it
  // never stops training. One that cannot take the run at its start (a link, a folder
  // root may not use, no store to attach to) is the constructor's Error: nothing has run.
  void finish(const std::string& status, const std::string& error = "") noexcept;
  // Seconds spent recording metrics and outputs (the per-step cost), and setting up.
  double busy_s() const { return busy_s_; }

 private:
  void flush();
  void record_one(const Json& event);
  void finish_run(const std::string& status, const std::string& error);
  std::unique_ptr<runs::Store> store_;
  std::string id_;
  bool attached_ = false;  // the launcher's run: it ends it
  bool finished_ = false;
  Json provenance_, summary_;
  std::vector<runs::Metric> pending_;
  std::chrono::steady_clock::time_point start_, last_flush_;
  double busy_s_ = 0, setup_s_ = 0;
  std::string price_sheet_;
  Json job_;
  bool dropped_warned_ = false;
};

// The metrics files of run `run_id`'s workers are named PREFIX<rank>.jsonl (a --log-dir
// may hold other runs' too).
std::string metrics_file_prefix(const std::string& run_id);

// rtrain launch --track: the launcher's run record, and the metrics its workers write,
// one rkit.metric.v1 line each, to $RKIT_METRICS_FILE (metrics.rank<R>.jsonl in the
// launcher's private folder). Lines are copied into the store as they complete, at most
// once a second; a line that is not a record is skipped with one warning per file; a line
// longer than 1 MiB is dropped.
class LaunchTracker {
 public:
  // `workers`: how many this node starts (its cost counts their memory).
  LaunchTracker(const TrackOptions& o, runs::NewRun run, std::string metrics_dir, int workers);
  const std::string& id() const { return id_; }
  const std::string& store_path() const { return store_->path(); }  // RKIT_RUN_STORE for the workers
  // Reads what the workers wrote since the last call (no more than once a second unless
  // `force`) and records it.
  void poll(bool force = false) noexcept;
  // Records the rest and ends the run: FINISHED for exit code 0, KILLED when the
  // launcher was interrupted, FAILED otherwise.
  void finish(int exit_code, bool interrupted, const Json& summary) noexcept;

 private:
  struct Source {
    std::string path, partial;
    std::uint64_t offset = 0, line = 0;
    bool warned = false;
  };
  void read(Source& s, std::vector<runs::Metric>& metrics, Json& params);
  void finish_run(int exit_code, bool interrupted, const Json& summary);
  std::unique_ptr<runs::Store> store_;
  std::string id_, dir_;
  std::map<int, Source> sources_;  // by local rank
  std::chrono::steady_clock::time_point start_, last_{};
  std::string price_sheet_;
  Json job_;
  int workers_ = 1;
  bool dropped_warned_ = false;
};

}  // namespace rkit::rtrain
