// File: rtrain/run_cli.hpp
//
// rtrain run's command body: trains (run.hpp), prints the step table or the records, and
// keeps the run's record in the run store (tracking.hpp). rtrain runs reproduce trains
// through it too.
//
//   TrackOptions t;  t.resolve();
//   int code = run_command(tool.options(), config, t);
#pragma once

#include "rkit/cli.hpp"
#include "rkit/jsonl.hpp"
#include "tracking.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

struct RunCommandResult {
  Json summary;        // rank 0's summary record (null on other ranks)
  std::string run_id;  // the run store's id ("" when not tracking)
};

// Trains `c` as `rtrain run` does. `describe` adjusts the run's description before it is
// recorded (reproduce names the run it reproduces). A failure or Ctrl-C ends the run
// FAILED or KILLED in the store and is rethrown.
RunCommandResult run_command(const CommonOptions& o, const TrainConfig& c, const TrackOptions& t,
                             const std::function<void(runs::NewRun&)>& describe = {});

}  // namespace rkit::rtrain
