// rtrain run's command body (see run_cli.hpp).
#include "run_cli.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <fstream>
#include <iostream>

#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/printer.hpp"
#include "run.hpp"

namespace rkit::rtrain {
namespace {

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

}  // namespace

RunCommandResult run_command(const CommonOptions& o, const TrainConfig& c, const TrackOptions& t,
                             const std::function<void(runs::NewRun&)>& describe) {
  std::ofstream events_file;
  std::ostream* events = nullptr;
  if (c.events == "-")
    events = &std::cout;
  else if (!c.events.empty()) {
    events_file.open(c.events, std::ios::app);
    if (!events_file) throw system_error("open " + c.events, errno);
    events = &events_file;
  }
  // Only rank 0 keeps the record (the others' would be the same run).
  const char* rank = std::getenv("RANK");
  TrackOptions track = t;
  if (rank && *rank && std::string_view(rank) != "0") track.enabled = false;
  runs::NewRun description;
  if (track.enabled) {
    c.validate();  // a bad run is refused before it is recorded
    description = describe_run(c);
    if (describe) describe(description);
  }
  RunTracker tracker(track, std::move(description));
  Printer printer(std::cout, o.format(), run_columns(), /*streaming=*/true);
  RunCommandResult result;
  result.run_id = tracker.id();
  try {
    result.summary = run_training(c, tracker.provenance(), [&](const Json& fields) {
      Json rec{{"schema", "rkit.train.event.v1"}};
      rec.update(fields);
      if (tracker.enabled()) {
        rec["run_id"] = tracker.id();
        tracker.record(rec);
      }
      if (events) *events << to_json_line(rec) << '\n' << std::flush;
      const std::string event = rec.value("event", "");
      if (events == &std::cout) return;  // already there
      if (o.format() == Format::Json) {
        if (!o.quiet || event == "summary") printer.print(rec);
      } else if (!o.quiet && (event == "step" || event == "eval")) {  // a table's rows (or CSV's)
        printer.print(rec);
      }
    });
  } catch (const Error& e) {
    tracker.finish(interrupt_signal() != 0 ? "KILLED" : "FAILED", e.what());
    throw;
  } catch (const std::exception& e) {
    tracker.finish("FAILED", e.what());
    throw;
  }
  tracker.finish("FINISHED");
  printer.finish();
  const Json& summary = result.summary;
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
    if (tracker.enabled()) std::cout << fmt::format("; run {}", tracker.id());
    std::cout << std::endl;
  }
  return result;
}

}  // namespace rkit::rtrain
