// File: rsub/commands.hpp
//
// The bodies of rsub's commands, one function each, called by main.cpp once the command
// line is parsed. Each prints its output (table or rkit.job.v1 records) and returns the
// exit code; errors are thrown as rkit::Error (rsub(1), EXIT STATUS).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon.hpp"
#include "rkit/printer.hpp"
#include "store.hpp"

namespace rkit::rsub {

struct Context {
  Settings settings;
  Format format = Format::Table;
  bool quiet = false;
  std::string exe;          // this program (/proc/self/exe), to start the daemon
  std::string config_path;  // the configuration file in use ("" when none)
  Submitter me;             // who runs this command
};

// The caller: user name and uid.
Submitter current_user();

int submit(Context& ctx, JobSpec spec, bool dry_run);

// --backend auto (auto.cpp): local when the job fits there now; otherwise the backend
// with the shortest expected wait whose price for the job (time limit × the price sheet's
// hourly rate) stays within the tenant's max_job_cost. `considered` explains each one.
struct Placement {
  std::string backend;
  std::string reason;
  std::vector<std::string> considered;
};
Placement place_job(Context& ctx, const JobSpec& spec);
int list(Context& ctx, JobFilter filter);
int show(Context& ctx, const std::vector<std::string>& ids);
int logs(Context& ctx, const std::string& id, bool follow, int task, bool err);
int control(Context& ctx, const std::vector<std::string>& ids, Control action);
int wait(Context& ctx, const std::vector<std::string>& ids, std::optional<double> timeout_s);
int status(Context& ctx);
int why(Context& ctx, const std::string& id);

// The exit code `rsub wait` reports for a finished job: 0 COMPLETED, the exit code of a
// FAILED job (128 + signal when killed, 1 when it never ran), 124 TIMEOUT, 143 CANCELLED,
// 1 LOST.
int wait_code(const JobRecord& job);

// Benchmark helpers (hidden commands): store `jobs` pending one-core jobs of `tenants`
// tenants in one transaction; time one scheduling pass (prints milliseconds).
int bench_fill(Context& ctx, int jobs, int tenants);
int bench_pass(Context& ctx);

}  // namespace rkit::rsub
