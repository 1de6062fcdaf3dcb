// File: rtrain/plan_cli.hpp
//
// `rtrain plan [CONFIG.toml] --ranks N (--bench FILE | --machine FILE)`: the plans of
// plan.hpp as a table, fastest first, or rkit.train.plan.v1 records (--json).
//
//   PlanCli plan(tool);                  // adds the subcommand and its flags
//   if (plan.active()) return plan.main(tool.options());
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "rkit/cli.hpp"

namespace rkit::rtrain {

class PlanCli {
 public:
  explicit PlanCli(Tool& tool);
  bool active() const { return cmd_->parsed(); }
  int main(const CommonOptions& o);

 private:
  CLI::App* cmd_ = nullptr;
  std::string config_, layers_, schedule_, bench_, machine_, strategy_;
  int ranks_ = 0, threads_ = 0;
  std::size_t batch_ = 0;
  unsigned micro_ = 0;
};

}  // namespace rkit::rtrain
