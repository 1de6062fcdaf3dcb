// rtrain: launch distributed training runs that survive faults, and train an MLP natively.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "launch.hpp"
#include "plan_cli.hpp"
#include "rkit/cli.hpp"
#include "rkit/error.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/printer.hpp"
#include "run_cli.hpp"
#include "runs_cli.hpp"
#include "trace.hpp"
#include "tracking.hpp"
#include "train_config.hpp"

int main(int argc, char** argv) {
  using namespace rkit;
  using namespace rkit::rtrain;
  Tool tool("rtrain",
            "Launch training workers as torchrun does, restarting the group when one fails; train an MLP natively");
  auto* launch_cmd = tool.add_subcommand("launch", "Start NPROC workers of COMMAND on this node");
  LaunchOptions o;
  std::string nproc = "1";
  launch_cmd
      ->add_option("--nproc-per-node", nproc,
                   "Workers on this node, 1 to 64, or auto: one per GPU, else per core (default 1)")
      ->type_name("K|auto");
  auto* nnodes_opt = launch_cmd->add_option("--nnodes", o.nnodes, "Nodes, one rtrain agent each (default 1)")
                         ->type_name("N")
                         ->check(CLI::Range(1, 4096));
  auto* node_rank_opt = launch_cmd
                            ->add_option("--node-rank", o.node_rank,
                                         "This node's rank, 0 to N-1 (node 0 hosts the rendezvous; default 0)")
                            ->type_name("R")
                            ->check(CLI::Range(0, 4095));
  auto* master_addr_opt = launch_cmd
                              ->add_option("--master-addr", o.master_addr,
                                           "Address of rank 0, the only one its stores listen on (default 127.0.0.1)")
                              ->type_name("A");
  launch_cmd
      ->add_option(
          "--master-port", o.master_port,
          "One node: the workers' MASTER_PORT (default 0: a free one). Several: node 0's rendezvous (required)")
      ->type_name("P")
      ->check(CLI::Range(0, 65535));
  launch_cmd
      ->add_option("--secret-file", o.secret_file,
                   "The run's secret, the same file on every node (mode 0600; default $RKIT_RUN_SECRET, else one node "
                   "makes one)")
      ->type_name("FILE");
  launch_cmd->add_option("--max-restarts", o.max_restarts, "Restarts of the group after failures (default 0)")
      ->type_name("M")
      ->check(CLI::Range(0, 1000000));
  launch_cmd
      ->add_option("--restart-on", o.restart_on, "Exit codes that restart (default: any failure; 128+N for signal N)")
      ->type_name("CODES")
      ->delimiter(',');
  launch_cmd
      ->add_option("--heartbeat-timeout", o.heartbeat_timeout_s,
                   "A worker that leaves $RKIT_HEARTBEAT_FILE untouched this long has hung (seconds; 0: off)")
      ->type_name("S")
      ->check(CLI::NonNegativeNumber);
  launch_cmd
      ->add_option("--kill-grace", o.kill_grace_s,
                   "Seconds between SIGTERM and SIGKILL when the group stops (default 10)")
      ->type_name("S")
      ->check(CLI::NonNegativeNumber);
  launch_cmd
      ->add_option(
          "--min-uptime", o.min_uptime_s,
          "A generation failing sooner after its start crashed at start; 3 in a row end the run (seconds; 0: off)")
      ->type_name("S")
      ->check(CLI::NonNegativeNumber);
  std::string placement;
  launch_cmd
      ->add_option("--placement", placement,
                   "Bind each worker to its CPUs and GPUs: rtop place --json records (- for stdin)")
      ->type_name("FILE");
  launch_cmd
      ->add_option("--ckpt-dir", o.ckpt_dir,
                   "Checkpoint folder: RKIT_CKPT_DIR, and RKIT_RESUME_FROM its newest complete .rkpt")
      ->type_name("D");
  launch_cmd->add_option("--log-dir", o.log_dir, "One log file per rank and attempt here")->type_name("D");
  launch_cmd->add_option("--events", o.events_path, "Write rkit.train.event.v1 records here (- for stdout)")
      ->type_name("FILE");
  launch_cmd->add_option("--run-id", o.run_id, "TORCHELASTIC_RUN_ID (default: made up)")->type_name("ID");
  add_track_flags(*launch_cmd, o.track, /*opt_in=*/true);
  launch_cmd->add_option("command", o.command, "The training command, after --")->type_name("CMD");
  auto* run_cmd =
      tool.add_subcommand("run", "Train an MLP natively, data parallel under rtrain launch, with checkpoints");
  std::string run_config;
  run_cmd->add_option("config", run_config, "Run configuration (TOML); flags override it")->type_name("CONFIG.toml");
  const OptionFlags run_flags = run_options().add_to(*run_cmd);
  TrackOptions track;
  add_track_flags(*run_cmd, track);
  auto* trace_cmd = tool.add_subcommand("trace", "Work with the timelines of rtrain run --trace");
  auto* merge_cmd = trace_cmd->add_subcommand("merge", "One timeline of every rank's trace in DIR, a track per rank");
  std::string trace_dir, trace_out;
  merge_cmd->add_option("dir", trace_dir, "The --trace folder of a run")->type_name("DIR")->required();
  merge_cmd->add_option("-o,--output", trace_out, "The merged trace (default DIR/trace.json.gz)")->type_name("FILE");
  trace_cmd->require_subcommand(1);
  RunsCli runs(tool);
  PlanCli plan(tool);
  return tool.run(argc, argv, [&]() -> int {
    if (plan.active()) return plan.main(tool.options());
    if (*run_cmd) {
      track.resolve(tool.config());
      run_command(tool.options(), resolve_run_config(run_config, run_flags), track);
      return 0;
    }
    if (runs.active()) return runs.main(tool.options());
    if (*merge_cmd) {
      if (trace_out.empty()) trace_out = trace_dir + "/trace.json.gz";
      const auto [ranks, events] = merge_traces(trace_dir, trace_out);
      if (tool.options().format() == Format::Json)
        std::cout << to_json_line({{"schema", "rkit.trace.merge.v1"},
                                   {"output", trace_out},
                                   {"ranks", ranks},
                                   {"events", events}})
                  << '\n';
      else if (!tool.options().quiet)
        std::cout << fmt::format("{}: {} rank{}, {} events\n", trace_out, ranks, ranks == 1 ? "" : "s", events);
      return 0;
    }
    if (*launch_cmd) {
      o.nproc = nproc_per_node(nproc);
      slurm_defaults(o, nnodes_opt->count() > 0, node_rank_opt->count() > 0, master_addr_opt->count() > 0);
      if (!placement.empty()) o.placement = load_placement(placement, o.nproc);
      if (o.track.enabled) o.track.resolve(tool.config());
      if (!o.ckpt_dir.empty())
        o.ckpt_dir = std::filesystem::absolute(o.ckpt_dir).string();  // the workers' cwd may differ
      return launch(o);
    }
    usage_error("a subcommand is needed: rtrain launch [options] -- COMMAND");
  });
}
