// rtrain plan's command line (see plan_cli.hpp).
#include "plan_cli.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "plan.hpp"
#include "rkit/cpus.hpp"
#include "rkit/error.hpp"
#include "rkit/host.hpp"
#include "rkit/printer.hpp"
#include "rkit/units.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

PlanCli::PlanCli(Tool& tool) {
  cmd_ =
      tool.add_subcommand("plan", "Predict every strategy's step for the model on N ranks of a machine, fastest first");
  cmd_->add_option("config", config_, "Run configuration (TOML) of the model and batch")->type_name("CONFIG.toml");
  cmd_->add_option("--ranks", ranks_, "Ranks to split the work across")->type_name("N")->required();
  cmd_->add_option("--bench", bench_,
                   "This machine, from rbench run cpu.gemm cpu.stream comm.gloo --json (- for stdin)")
      ->type_name("FILE");
  cmd_->add_option("--machine", machine_, "A described machine (TOML; rtrain(1), PLANS)")->type_name("FILE");
  cmd_->add_option("--strategy", strategy_, "Only this strategy's plans")->type_name("NAME");
  cmd_->add_option("--layers", layers_, "Layer sizes, as rtrain run's")->type_name("LIST");
  cmd_->add_option("--batch-size", batch_, "Rows a rank, as rtrain run's")->type_name("N");
  cmd_->add_option("--micro-batches", micro_, "A pipeline's micro-batches, as rtrain run's")->type_name("N");
  cmd_->add_option("--schedule", schedule_, "A pipeline's schedule, as rtrain run's: 1f1b or gpipe")->type_name("NAME");
  cmd_->add_option("--threads", threads_,
                   "BLAS threads a rank on this machine (default: the cores shared among the ranks)")
      ->type_name("N");
}

int PlanCli::main(const CommonOptions& o) {
  TrainConfig c = config_.empty() ? TrainConfig{} : load_train_config(config_);
  if (!layers_.empty()) c.layers = parse_layers(layers_);
  if (batch_ > 0) c.batch_size = batch_;
  if (cmd_->count("--micro-batches") > 0) c.micro_batches = micro_;
  if (!schedule_.empty()) {
    if (schedule_ != "1f1b" && schedule_ != "gpipe")
      throw Error(Exit::Usage, fmt::format("unknown schedule '{}' (expected 1f1b or gpipe)", schedule_));
    c.schedule = schedule_;
  }
  if (!strategy_.empty()) check_strategy(strategy_);
  c.validate();
  if (ranks_ < 1 || ranks_ > (1 << 20)) throw Error(Exit::Usage, "--ranks must be 1 to 1048576");
  if (bench_.empty() == machine_.empty())
    throw Error(
        Exit::Usage, "give the machine: --bench FILE (this one, from rbench) or --machine FILE (a described one)",
        "rbench run cpu.gemm cpu.stream comm.gloo --json > machine.jsonl; rtrain plan --ranks 2 --bench machine.jsonl");
  Machine m;
  if (!machine_.empty()) {
    m = load_machine(machine_);
  } else {
    std::vector<Json> records;
    JsonLinesReader in(bench_);
    for (Json r; in.next(r);) records.push_back(std::move(r));
    const int threads = threads_ > 0 ? threads_ : std::max(1, static_cast<int>(usable_cpus()) / ranks_);
    m = machine_from_bench(records, threads, host_name());
  }
  const std::vector<Plan> plans = plan_strategies(c, ranks_, m, strategy_);
  if (plans.empty()) throw Error(Exit::Usage, fmt::format("no strategy splits this model on {} ranks", ranks_));
  const auto ms = [](const Json& v) { return fmt::format("{:.2f}", v.get<double>() * 1e3); };
  Printer out(std::cout, o.format(),
              {{"RANK", "rank"},
               {"STRATEGY", "strategy"},
               {"TPxPPxDP", "grid"},
               {"MICRO", "micro_batches"},
               {"STEP_MS", "step_time_s", ms},
               {"COMPUTE_MS", "compute_s", ms},
               {"EXPOSED_MS", "exposed_s", ms},
               {"BUBBLE_MS", "bubble_s", ms},
               {"SAMPLES/S", "samples_per_s", [](const Json& v) { return fmt::format("{:.0f}", v.get<double>()); }},
               {"MEMORY", "held_bytes", [](const Json& v) { return format_bytes(v.get<std::uint64_t>()); }},
               {"SENT", "sent_bytes", [](const Json& v) { return format_bytes(v.get<std::uint64_t>()); }},
               {"FITS", "fits", [](const Json& v) { return v.get<bool>() ? "yes" : "no"; }}});
  int rank = 0;
  for (const Plan& p : plans) {
    Json r = p.to_json(c, ranks_, m);
    r["rank"] = ++rank;
    if (o.format() != Format::Json) {  // the table's own columns
      r["grid"] = fmt::format("{}x{}x{}", p.tp, p.pp, p.dp);
      r["held_bytes"] = p.memory.params + p.memory.grads + p.memory.optimizer + p.memory.buffers;
      std::uint64_t sent = p.sent.send_recv;
      for (std::uint64_t b : p.sent.bytes) sent += b;
      r["sent_bytes"] = sent;
    }
    out.print(r);
  }
  out.finish();
  return 0;
}

}  // namespace rkit::rtrain
