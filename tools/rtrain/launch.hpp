// File: rtrain/launch.hpp
//
// rtrain launch on one node: starts `nproc` workers of a training command with the
// environment torchrun gives them, prefixes their output with the rank, keeps one log
// per rank and attempt, watches exits and heartbeats, and restarts the whole group when a
// worker fails, while restarts remain. Its workers get a secret of the run
// (RKIT_RUN_SECRET) that rtrain run's store demands. On several nodes, one agent per
// node: node 0's hosts a rendezvous (an authenticated TcpStore, tcp_store.hpp, on
// --master-addr:--master-port) where the others join, proving the run's secret
// (--secret-file); it decides each generation's ranks and port and when the run restarts
// or ends, for all nodes at once.
//
//   LaunchOptions o;
//   o.nproc = 2;
//   o.command = {"python3", "train.py"};
//   int code = launch(o);  // the highest worker exit code, or 128 + signal
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tracking.hpp"

namespace rkit::rtrain {

// Where one worker runs: its CPUs (OS PU indices, its affinity) and GPUs
// (CUDA_VISIBLE_DEVICES), from an rkit.placement.v1 record (rtop place --json).
struct WorkerPlacement {
  std::vector<int> pus, gpus;
};

struct LaunchOptions {
  int nproc = 1;
  int nnodes = 1;  // agents, one per node; node 0's hosts the rendezvous
  int node_rank = 0;
  double join_timeout_s = 300;  // how long agents wait for each other
  int max_restarts = 0;
  std::vector<int> restart_on;     // exit codes that restart (128 + N for signal N); empty: any failure
  double min_uptime_s = 0;         // a generation failing sooner than this after its start is a
                                   // crash at start; kCrashLoopLimit of them in a row end the run
  double heartbeat_timeout_s = 0;  // 0: no heartbeat watch
  double kill_grace_s = 10;        // SIGTERM, then SIGKILL after this
  std::string master_addr = "127.0.0.1";
  int master_port = 0;      // one node: the workers' MASTER_PORT (0: a free one);
                            // several: node 0's rendezvous (workers get a free port), required
  std::string secret_file;  // the run's secret ("": RKIT_RUN_SECRET(_FILE), else one node makes one)
  std::string log_dir;      // "" : no log files
  std::string ckpt_dir;     // RKIT_CKPT_DIR ("" : none); RKIT_RESUME_FROM is its newest complete .rkpt
  std::string events_path;  // rkit.train.event.v1 records ("" : none; "-" : stdout)
  std::string run_id;       // "" : made up
  std::vector<std::string> command;
  std::vector<WorkerPlacement> placement;  // by local rank; empty: no binding
  // --track: a run record of the launch, with the workers' metrics (off unless asked).
  TrackOptions track = [] {
    TrackOptions t;
    t.enabled = false;
    return t;
  }();
  // Set by launch() when tracking: what the workers' environment names (RKIT_RUN_RECORD,
  // RKIT_RUN_STORE, the database holding it; RKIT_METRICS_FILE in metrics_dir, a private
  // folder; RKIT_PROJECT_DIR).
  std::string run_record, run_store, metrics_dir, project_dir;
};

// Workers per node, and in all (kMaxNproc × the most nodes, 4096).
constexpr int kMaxNproc = 64;  // SignalForwarder's worker groups
constexpr int kMaxNodes = 4096;
constexpr int kMaxWorld = kMaxNproc * kMaxNodes;

// --nproc-per-node: a number 1 to 64, or "auto": one worker per GPU of this node, else
// one per core (as torchrun's auto), at most 64. Error(Usage) for anything else.
int nproc_per_node(const std::string& text);

// Consecutive crashes at start (see min_uptime_s) after which the run ends, restarts left or not.
constexpr int kCrashLoopLimit = 3;

// The newest complete checkpoint in `dir`: the .rkpt archive with the latest modification
// time that opens whole (not truncated, its incremental bases present); "" when none.
std::string newest_checkpoint(const std::string& dir);

// Reads rkit.placement.v1 records ("-": stdin), one per local rank 0..nproc-1.
// Error(DataErr) naming the file when one is missing or malformed; Error(NoInput) when
// it cannot be read.
std::vector<WorkerPlacement> load_placement(const std::string& path, int nproc);

// Runs the workers to the end. Returns 0 when every worker of a generation exited 0,
// else the failing generation's highest exit code (128 + signal for a signal).
// Error(Usage) for several nodes without --master-port or without a secret (secret_file,
// RKIT_RUN_SECRET_FILE or RKIT_RUN_SECRET), a node rank out of range; Error(NoPerm) when
// the rendezvous refuses this agent's secret or its listener does not prove it.
int launch(const LaunchOptions& options);

// Where this node's workers sit in a generation.
struct Layout {
  int node_rank = 0, nnodes = 1;
  int world = 0;        // workers of all nodes
  int offset = 0;       // the global rank of this node's first worker
  int master_port = 0;  // the workers' MASTER_PORT
};

// Under Slurm (SLURM_NNODES, SLURM_NODEID and SLURM_JOB_NODELIST set, as srun sets them):
// the node count, this node's rank and node 0's address from Slurm, where the options
// did not give them. Error(Unavailable) when node 0's address cannot be found.
void slurm_defaults(LaunchOptions& options, bool nnodes_given, bool node_rank_given, bool master_addr_given);

// The environment of local worker `local_rank` of generation `restart_count` (torchrun's names).
std::vector<std::pair<std::string, std::string>> worker_env(
    const LaunchOptions& options, int local_rank, const Layout& layout, int restart_count, const std::string& run_id,
    const std::string& heartbeat_file, const std::string& resume_from, const std::string& run_secret);

}  // namespace rkit::rtrain
