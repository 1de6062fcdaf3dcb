// rtrain: launch distributed training runs that survive faults, and train an MLP natively.
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "launch.hpp"
#include "rkit/cli.hpp"
#include "rkit/error.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/printer.hpp"
#include "run.hpp"
#include "train_config.hpp"

namespace {

using namespace rkit;
using namespace rkit::rtrain;

// The table rtrain run prints: a row per step record, the evaluation beside it.
std::vector<Column> run_columns() {
  auto num = [](const char* spec, double scale) {  // a number cell, as `spec` formats value * scale
    return [spec, scale](const Json& v) -> std::string {
      return v.is_number() ? fmt::format(fmt::runtime(spec), v.get<double>() * scale) : "-";
    };
  };
  // The first row, a step's, fixes the widths: room for steps up to 999999 and for the
  // evaluation's loss, which step rows leave empty.
  return {{"STEP", "step", nullptr, 6},
          {"LOSS", "loss", num("{:.6f}", 1)},
          {"EVAL", "eval_loss", num("{:.6f}", 1), 8},
          {"LR", "lr", num("{:.2e}", 1)},
          {"SAMPLES/S", "samples_per_s", num("{:.0f}", 1)},
          {"STEP_TIME", "step_time_s", num("{:.2f}ms", 1e3)},
          {"COMM_TIME", "comm_s", num("{:.2f}ms", 1e3)},
          {"HIDDEN", "comm_hidden", num("{:.0f}%", 100)},
          {"GRAD_NORM", "grad_norm", num("{:.4g}", 1)}};
}

int run_main(Tool& tool, const TrainConfig& c) {
  const CommonOptions& o = tool.options();
  std::ofstream events_file;
  std::ostream* events = nullptr;
  if (c.events == "-")
    events = &std::cout;
  else if (!c.events.empty()) {
    events_file.open(c.events, std::ios::app);
    if (!events_file) throw system_error("open " + c.events, errno);
    events = &events_file;
  }
  Printer printer(std::cout, o.format(), run_columns(), /*streaming=*/true);
  Json summary = run_training(c, [&](const Json& fields) {
    Json rec{{"schema", "rkit.train.event.v1"}};
    rec.update(fields);
    if (events) *events << to_json_line(rec) << '\n' << std::flush;
    const std::string event = rec.value("event", "");
    if (events == &std::cout) return;  // already there
    if (o.format() == Format::Json) {
      if (!o.quiet || event == "summary") printer.print(rec);
    } else if (!o.quiet && (event == "step" || event == "eval")) {  // a table's rows (or CSV's)
      printer.print(rec);
    }
  });
  printer.finish();
  if (summary.is_object() && o.format() == Format::Table && !o.quiet && events != &std::cout) {  // rank 0 only
    const auto steps = summary.at("steps").get<std::uint64_t>(), start = summary.at("start_step").get<std::uint64_t>();
    std::cout << fmt::format("\n{} steps on {}, {} rank{}: {:.0f} samples/s, loss {:.6g}, eval loss {:.6g}",
                             steps > start ? steps - start : 0, summary.at("device").get<std::string>(),
                             summary.at("world_size").get<int>(), summary.at("world_size").get<int>() == 1 ? "" : "s",
                             summary.at("samples_per_s").get<double>(), summary.value("loss", 0.0),
                             summary.value("eval_loss", 0.0));
    if (summary.at("checkpoints").get<int>() > 0)
      std::cout << fmt::format(", checkpoint stall {:.1f} ms in all",
                               summary.at("checkpoint_stall_s").get<double>() * 1e3);
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace

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
  launch_cmd->add_option("command", o.command, "The training command, after --")->type_name("CMD");
  auto* run_cmd =
      tool.add_subcommand("run", "Train an MLP natively, data parallel under rtrain launch, with checkpoints");
  std::string run_config;
  run_cmd->add_option("config", run_config, "Run configuration (TOML); flags override it")->type_name("CONFIG.toml");
  const OptionFlags run_flags = run_options().add_to(*run_cmd);
  return tool.run(argc, argv, [&]() -> int {
    if (*run_cmd) return run_main(tool, resolve_run_config(run_config, run_flags));
    if (*launch_cmd) {
      o.nproc = nproc_per_node(nproc);
      slurm_defaults(o, nnodes_opt->count() > 0, node_rank_opt->count() > 0, master_addr_opt->count() > 0);
      if (!placement.empty()) o.placement = load_placement(placement, o.nproc);
      if (!o.ckpt_dir.empty())
        o.ckpt_dir = std::filesystem::absolute(o.ckpt_dir).string();  // the workers' cwd may differ
      return launch(o);
    }
    usage_error("a subcommand is needed: rtrain launch [options] -- COMMAND");
  });
}
