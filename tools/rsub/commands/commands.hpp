// File: rsub/commands/commands.hpp
//
// The bodies of rsub's commands, one function each; what depends on where a job runs is
// its backend's (backend.hpp). They run in the daemon, which alone
// opens the job store: a client sends its request over the daemon's socket
// (protocol.hpp), the daemon fills a Context with who asks, as the kernel says, and calls
// handle_request. Each prints its output (table or rkit.job.v1 records) to ctx.out and
// returns the exit code; errors are thrown as rkit::Error (rsub(1), EXIT STATUS).
//
// Every check of who may do what is made here, against the daemon's own settings:
// ownership (cancel, hold, release, logs, the env of show), admins, and tenants.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/store.hpp"
#include "daemon/daemon.hpp"
#include "rkit/printer.hpp"

namespace rkit::rsub {

struct Context {
  Settings settings;
  Format format = Format::Table;
  bool quiet = false;
  Submitter me;               // who asks: the peer's uid as the kernel reports it, and its name
  std::vector<gid_t> groups;  // the peer's groups, as the kernel reports them
  std::string client_cwd;     // the client's working directory: a job's default workdir
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;
  std::function<bool()> gone = [] { return false; };  // the client hung up: stop waiting
  std::function<void()> wake = [] {};                 // the store changed: a scheduling pass now
  // The running daemon's own pass, with details, for one job (rsub why); empty: a pass
  // made from the store (dry_pass).
  std::function<Explanation(std::int64_t job)> explain;
  // The running daemon's scheduling passes completed since it started (rsub status
  // --json: daemon_passes); empty: no daemon's (null).
  std::function<std::uint64_t()> passes;
  std::unique_ptr<Store> open_store;  // the request's connection to the store (lent by the daemon's pool)

  // The job store, opened on first use.
  Store& store() {
    if (!open_store || open_store->dir() != settings.dir) open_store = std::make_unique<Store>(settings.dir);
    return *open_store;
  }
};

// Who `uid` is: its name from the password database (the number when it has none).
Submitter user_of(uid_t uid);

// May `ctx.me` act on other users' jobs: root, or named in rsub.admins.
bool is_admin(const Context& ctx);

// The columns of a job's row (rsub ls), and the records of stored jobs printed in
// ctx.format (what submit prints for --json and --csv).
std::vector<Column> job_columns();
void print_jobs(Context& ctx, const std::vector<std::int64_t>& ids);

// Runs one client request ({"cmd": "submit", ...}, rsub(1) PROTOCOL) and returns its exit
// code. Error(Usage) for a request this daemon does not know; the commands' errors.
int handle_request(Context& ctx, const Json& request);

// The JSON request of `rsub submit`: the job spec as the client resolved it (its file
// read and flags applied by the client, as the user), and the environment and working
// directory the job gets.
Json submit_request(const JobSpec& spec, bool dry_run, const std::vector<std::string>& environment);

// `environment`: the submitter's, captured at submit ("K=V"), which the job's tasks get
// (plus RSUB_* variables and the spec's env), as sbatch --export=ALL does.
int submit(Context& ctx, JobSpec spec, bool dry_run, const std::vector<std::string>& environment = {});

// --backend auto (auto.cpp): local when the job fits there now; otherwise the backend
// with the shortest expected wait whose price for the job (time limit × the price sheet's
// hourly rate) stays within the tenant's max_job_cost. `considered` explains each one.
struct Placement {
  std::string backend;
  std::string reason;
  std::vector<std::string> considered;
};
Placement place_job(Context& ctx, const JobSpec& spec);
// `cached`: remote jobs' states as last read, without asking their backends.
int list(Context& ctx, JobFilter filter, bool cached = false);
int show(Context& ctx, const std::vector<std::string>& ids);
int logs(Context& ctx, const std::string& id, bool follow, int task, bool err);
int control(Context& ctx, const std::vector<std::string>& ids, Control action);
int wait(Context& ctx, const std::vector<std::string>& ids, std::optional<double> timeout_s);
// `workflow`: only that workflow's jobs (status); its first waiting job (why, instead of `id`).
int status(Context& ctx, const std::optional<std::string>& workflow = std::nullopt);
int why(Context& ctx, const std::string& id, const std::optional<std::string>& workflow = std::nullopt);

// The exit code `rsub wait` reports for a finished job: 0 COMPLETED, the exit code of a
// FAILED job (128 + signal when killed, 1 when it never ran), 124 TIMEOUT, 143 CANCELLED,
// 1 LOST.
int wait_code(const JobRecord& job);

// Benchmark helpers (hidden commands): store `jobs` pending one-core jobs of `tenants`
// tenants in one transaction (held: none runs); time one scheduling pass (prints
// milliseconds).
int bench_fill(Context& ctx, int jobs, int tenants, bool held);
int bench_pass(Context& ctx);
// The cost of a job's cgroup: `jobs` times create, a child entering it, kill, measure and
// remove, with a one-core, 1 GiB job's limits; prints the median and worst milliseconds.
int bench_cgroup(Context& ctx, int jobs);

}  // namespace rkit::rsub
