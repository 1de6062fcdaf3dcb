// File: rtrain/runs_cli.hpp
//
// rtrain runs: the run store's commands. ls (filtered by experiment, status, tags,
// parameters and final metrics), show, metrics (the time series, rkit.metric.v1), compare
// (parameter differences, final and best metrics, and with --html a self-contained page
// of the curves), and reproduce (train again from the recorded configuration, data and
// revision; the final weights must be bitwise those recorded).
//
//   RunsCli runs(tool);                 // registers `rtrain runs ...` on the tool
//   ...parse...
//   if (runs.active()) return runs.main(tool.options());
#pragma once

#include <string>
#include <vector>

#include "rkit/cli.hpp"
#include "rkit/runs.hpp"

namespace rkit::rtrain {

class RunsCli {
 public:
  explicit RunsCli(Tool& tool);
  bool active() const;
  int main(const CommonOptions& o);

 private:
  int ls(const CommonOptions& o);
  int show(const CommonOptions& o);
  int metrics(const CommonOptions& o);
  int compare(const CommonOptions& o);
  int reproduce(const CommonOptions& o);

  Tool& tool_;  // its configuration prices a reproduction
  CLI::App *runs_ = nullptr, *ls_ = nullptr, *show_ = nullptr, *metrics_ = nullptr, *compare_ = nullptr,
           *reproduce_ = nullptr;
  std::string project_, experiment_, status_, html_, ckpt_dir_, output_;
  std::vector<std::string> tags_, params_, metric_filters_, show_params_, show_metrics_, ids_, keys_;
  std::size_t last_ = 0;
  bool all_ = false;
};

}  // namespace rkit::rtrain
