// rtrain: launch distributed training runs that survive faults, and train an MLP natively.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

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

// rtrain run's flags, each over the configuration file's value when given.
struct RunFlags {
  std::string config;
  std::optional<std::uint64_t> steps, epochs, rows, seed, eval_every, log_every, warmup_steps, ckpt_every;
  std::optional<std::size_t> batch_size;
  std::optional<double> lr, weight_decay, clip_grad_norm, bucket_mb, target_loss;
  std::optional<int> threads;
  std::optional<std::string> layers, activation, loss, data, device, ckpt_dir;
  bool no_pack = false;
  std::string resume_from, output, events;

  void add(CLI::App* cmd) {
    cmd->add_option("config", config, "Run configuration (TOML); flags override it")->type_name("CONFIG.toml");
    cmd->add_option("--steps", steps, "Optimizer steps (default 1000)")->type_name("N");
    cmd->add_option("--epochs", epochs, "Passes over the training rows, instead of --steps")->type_name("N");
    cmd->add_option("--batch-size", batch_size, "Rows per rank per step (default 512)")->type_name("N");
    cmd->add_option("--layers", layers, "Layer sizes, inputs to outputs (default 256,1024,1024,1)")->type_name("LIST");
    cmd->add_option("--activation", activation, "gelu or relu (default gelu)")->type_name("ACT");
    cmd->add_option("--loss", loss, "mse (regression) or cross_entropy (classes) (default mse)")->type_name("LOSS");
    cmd->add_option("--data", data, "synthetic, or a .csv, .npy or .safetensors file (default synthetic)")
        ->type_name("FILE");
    cmd->add_option("--rows", rows, "Rows of synthetic data (default 100000)")->type_name("N");
    cmd->add_option("--seed", seed, "Seed of weights, data and shuffling (default 0)")->type_name("N");
    cmd->add_option("--lr", lr, "Peak learning rate of AdamW (default 0.001)")->type_name("X");
    cmd->add_option("--weight-decay", weight_decay, "AdamW weight decay (default 0.01)")->type_name("X");
    cmd->add_option("--warmup-steps", warmup_steps, "Linear warm-up steps before the cosine decay (default 100)")
        ->type_name("N");
    cmd->add_option("--clip-grad-norm", clip_grad_norm, "Clip the gradient's L2 norm to this (0: off; default 1)")
        ->type_name("X");
    cmd->add_option("--eval-every", eval_every, "Evaluate on the held-out rows every N steps (default: at the end)")
        ->type_name("N");
    cmd->add_option("--log-every", log_every, "Report a step record every N steps (default 10)")->type_name("N");
    cmd->add_option("--target-loss", target_loss, "Report the time until the evaluation loss first reaches this")
        ->type_name("X");
    cmd->add_option("--device", device, "cpu or cuda (default cpu)")->type_name("DEV");
    cmd->add_option("--threads", threads,
                    "CPU threads for the matrix products (default: the usable cores shared among this node's ranks)")
        ->type_name("N");
    cmd->add_option("--bucket-mb", bucket_mb, "Gradient all-reduce bucket size in MiB (default 1)")->type_name("MB");
    cmd->add_option("--ckpt-every", ckpt_every, "Checkpoint every N steps and at the end (default 0: never)")
        ->type_name("N");
    cmd->add_option("--ckpt-dir", ckpt_dir, "Checkpoint folder (default $RKIT_CKPT_DIR)")->type_name("D");
    cmd->add_flag("--no-pack", no_pack, "Keep checkpoints as step-N/ folders: do not rckpt pack them");
    cmd->add_option("--resume-from", resume_from,
                    "Resume from this step-N/ folder or .rkpt (default: the newest in the checkpoint folder, else "
                    "$RKIT_RESUME_FROM)")
        ->type_name("PATH");
    cmd->add_option("--output", output, "Write the final weights here (safetensors)")->type_name("FILE");
    cmd->add_option("--events", events, "Also write every rkit.train.event.v1 record here (- for stdout)")
        ->type_name("FILE");
  }

  TrainConfig resolve() const {
    TrainConfig c = config.empty() ? TrainConfig{} : load_train_config(config);
    if (steps) c.steps = *steps;
    if (epochs) {
      c.epochs = *epochs;
      if (!steps) c.steps = 0;
    }
    if (batch_size) c.batch_size = *batch_size;
    if (layers) c.layers = parse_layers(*layers);
    if (activation) c.activation = parse_activation(*activation);
    if (loss) c.loss = parse_loss(*loss);
    if (data) c.data = *data;
    if (rows) c.rows = *rows;
    if (seed) c.seed = *seed;
    if (lr) c.lr = *lr;
    if (weight_decay) c.weight_decay = *weight_decay;
    if (warmup_steps) c.warmup_steps = *warmup_steps;
    if (clip_grad_norm) c.clip_grad_norm = *clip_grad_norm;
    if (eval_every) c.eval_every = *eval_every;
    if (log_every) c.log_every = *log_every;
    if (target_loss) c.target_loss = *target_loss;
    if (device) c.device = *device;
    if (threads) c.threads = *threads;
    if (bucket_mb) c.bucket_mb = *bucket_mb;
    if (ckpt_every) c.ckpt_every = *ckpt_every;
    if (ckpt_dir) c.ckpt_dir = *ckpt_dir;
    if (c.ckpt_dir.empty()) {
      if (const char* d = std::getenv("RKIT_CKPT_DIR"); d && *d) c.ckpt_dir = d;
    }
    if (no_pack) c.pack = false;
    c.resume_from = resume_from;
    c.output = output;
    c.events = events;
    c.min_lr = std::min(c.min_lr, c.lr);
    c.validate();
    return c;
  }
};

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

int run_main(Tool& tool, const RunFlags& flags) {
  const TrainConfig c = flags.resolve();
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
  RunFlags run_flags;
  run_flags.add(run_cmd);
  return tool.run(argc, argv, [&]() -> int {
    if (*run_cmd) return run_main(tool, run_flags);
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
