// rsub: submit jobs to the embedded local scheduler, and follow and control them.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "commands/commands.hpp"
#include "daemon/protocol.hpp"
#include "rkit/cli.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/host.hpp"
#include "rkit/units.hpp"
#include "workflow/snakemake.hpp"

namespace {

// The submit flags, on `rsub` itself (rsub [opts] -- CMD) and on `rsub submit`.
void add_submit_options(CLI::App* app, rkit::rsub::SpecOverrides& o, bool& dry_run) {
  app->add_option("-n,--name", o.name, "Job name (default: the command's name)")->type_name("NAME");
  app->add_option("-t,--tenant", o.tenant, "Tenant (desk) charged (default: from rsub.users, else the user)")
      ->type_name("T");
  app->add_option("--project", o.project, "Project label, for cost reports")->type_name("P");
  app->add_option("--workflow", o.workflow, "Workflow the job is a step of (set by the Snakemake profile)")
      ->type_name("W");
  app->add_option("--rule", o.rule, "The workflow's rule the job runs")->type_name("R");
  app->add_option("-C,--workdir", o.workdir, "Working directory (default: the current one)")->type_name("DIR");
  app->add_option("-e,--env", o.env, "Set an environment variable (repeatable)")
      ->type_name("K=V")
      ->allow_extra_args(false);
  app->add_option("--tasks", o.tasks, "Tasks, started together (gang)")->type_name("N");
  app->add_option("-N,--nodes", o.nodes, "Nodes the tasks spread over (Slurm)")->type_name("N");
  app->add_option("-c,--cpus-per-task", o.cpus_per_task, "Cores per task")->type_name("N");
  app->add_option("-g,--gpus-per-task", o.gpus_per_task, "GPUs per task")->type_name("N");
  app->add_option("--gpu-type", o.gpu_type, "GPU model, matched in GPU names (e.g. H100)")->type_name("T");
  app->add_option("--mem", o.memory, "Memory per task (e.g. 16G)")->type_name("SIZE");
  app->add_option("--time", o.time_limit, "Time limit (e.g. 2h; 0: none)")->type_name("D");
  app->add_option("--priority", o.priority, "Priority hint, -1000 to 1000")->type_name("N");
  app->add_option("--retries", o.retries, "Attempts after the first when it fails as --retry-on says")->type_name("N");
  app->add_option("--retry-on", o.retry_on, "Exit codes and signals that retry (e.g. 75,SIGKILL)")->type_name("LIST");
  app->add_option("--array", o.array, "Array indices, Slurm's syntax (e.g. 0-99%10)")->type_name("RANGE");
  app->add_option("-d,--depends", o.depends, "Dependency (afterok|afterany|afternotok:ID[:ID...])")
      ->type_name("DEP")
      ->allow_extra_args(false);
  app->add_flag(
      "--hold", [&o](std::int64_t) { o.hold = true; }, "Submit held (rsub release starts it)");
  app->add_option("-b,--backend", o.backend, "Where it runs: local, a configured backend's name, or auto")
      ->type_name("B");
  app->add_option("-p,--partition", o.partition, "Slurm partition (default: the backend's)")->type_name("P");
  app->add_option("--qos", o.qos, "Slurm QOS (default: the backend's)")->type_name("Q");
  app->add_option("-A,--account", o.account, "Slurm account (default: the tenant's, from the backend)")->type_name("A");
  app->add_option("--image", o.image, "Container image (Kubernetes; default: the backend's)")->type_name("IMAGE");
  app->add_flag("--dry-run", dry_run, "Print the job record; store nothing");
}

// The absolute path of a configuration file that a daemon can read again later, or ""
// for none (no file, or a pipe such as /dev/stdin).
std::string regular_file_path(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

// Sends the request to the daemon and relays its answer. A personal daemon is started
// when none answers; a shared one never is (exit 69: nothing was done).
int call_daemon(const rkit::rsub::Settings& settings, const std::string& exe, const std::string& config_path,
                const std::string& request, const rkit::rsub::OutputSink& sink = rkit::rsub::write_to_own) {
  using namespace rkit;
  using namespace rkit::rsub;
  const std::string path = settings.socket_path();
  const uid_t who = settings.shared() ? 0 : ::geteuid();  // only root can start jobs as their users
  int fd = connect_daemon(path, who);
  if (fd < 0 && settings.shared())
    throw Error(Exit::Unavailable,
                fmt::format("the shared rsub daemon does not answer on {}: {}", path, std::strerror(errno)),
                "nothing was done; an admin starts it (rsub(1), SERVICE)");
  if (fd < 0 && errno != ENOENT && errno != ECONNREFUSED)  // EACCES: another user's daemon
    throw Error(errno == EACCES ? Exit::NoPerm : Exit::Unavailable,
                fmt::format("the rsub daemon's socket {}: {}", path, std::strerror(errno)),
                errno == EACCES ? "that state directory is another user's (RKIT_STATE_DIR, rsub.state_dir)" : "");
  if (fd < 0) {
    start_daemon(exe, regular_file_path(config_path), settings.dir);
    for (int wait_us = 500; fd < 0; wait_us = std::min(wait_us * 2, 20000)) {
      static const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(Exit::Unavailable, "the rsub daemon did not start within 10 s",
                    "see " + settings.dir + "/daemon.log");
      ::usleep(static_cast<useconds_t>(wait_us));
      fd = connect_daemon(path, who);
    }
  }
  UniqueFd conn(fd);
  return exchange(conn.get(), request, sink);
}

// This program, for the daemon to run: its own path, else "rsub" from PATH.
std::string rsub_exe() {
  const std::filesystem::path exe = rkit::self_exe();
  return exe.empty() ? std::string("rsub") : exe.string();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rkit;
  using namespace rkit::rsub;
  // The daemon's launcher (`rsub _launcher DIR FD`, started by the daemon alone) before
  // anything else: the supervisors it forks start from its small, clean memory.
  if (argc == 4 && std::string_view(argv[1]) == "_launcher") {
    try {
      return run_launcher(argv[2], std::stoi(argv[3]));
    } catch (const std::exception& e) {
      std::cerr << "rsub launcher: " << e.what() << '\n';
      return static_cast<int>(Exit::Software);
    }
  }
  // `rsub workflow ARGS...`: every argument is snakemake's (the subcommand below is its help).
  if (argc >= 2 && std::string_view(argv[1]) == "workflow" &&
      !(argc == 3 && (std::string_view(argv[2]) == "--help" || std::string_view(argv[2]) == "-h"))) {
    try {
      run_workflow(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      return report_error("rsub", e, std::cerr);
    }
  }
  Tool tool("rsub", "Submit jobs to the embedded scheduler (or: rsub [options] -- COMMAND); follow and control them");
  CLI::App& app = tool.app();

  // One set of overrides: flags given before `submit` count as much as those after it.
  SpecOverrides over;
  bool dry_run = false;
  add_submit_options(&app, over, dry_run);
  app.add_option("command", over.command, "The command to run, after --")->type_name("CMD");

  auto* submit_cmd = tool.add_subcommand("submit", "Submit a job spec (TOML); flags override it");
  std::string spec_file;
  submit_cmd->add_option("spec", spec_file, "Job spec file (- for stdin)")->type_name("JOB.toml");
  add_submit_options(submit_cmd, over, dry_run);
  submit_cmd->add_option("command", over.command, "Command replacing the spec's, after --")->type_name("CMD");

  auto* ls_cmd = tool.add_subcommand("ls", "List pending and running jobs (--all: finished ones too)");
  JobFilter filter;
  std::string state;
  ls_cmd->add_flag("-a,--all", filter.all, "Include finished jobs");
  ls_cmd->add_option("--tenant", filter.tenant, "Only this tenant's jobs")->type_name("T");
  ls_cmd->add_option("-u,--user", filter.user, "Only this user's jobs")->type_name("USER");
  ls_cmd->add_option("--workflow", filter.workflow, "Only this workflow's jobs")->type_name("W");
  ls_cmd->add_option("--state", state, "Only jobs in this state (PENDING, RUNNING, COMPLETED, ...)")->type_name("S");
  bool cached = false;
  ls_cmd->add_flag("--cached", cached, "Remote jobs as last read: do not ask their backends now");

  std::vector<std::string> ids;
  auto* show_cmd = tool.add_subcommand("show", "Print jobs in full");
  show_cmd->add_option("id", ids, "Job ids (12, or 12_3 for an array element)")->required()->type_name("ID");

  auto* logs_cmd = tool.add_subcommand("logs", "Print a task's output");
  std::string one_id;
  int task = 0;
  bool follow = false, err = false;
  logs_cmd->add_option("id", one_id, "Job id")->required()->type_name("ID");
  logs_cmd->add_flag("-f,--follow", follow, "Keep printing until the job ends");
  logs_cmd->add_option("--task", task, "Task number (default 0)")->type_name("N");
  logs_cmd->add_flag("--err", err, "Its standard error instead of its output");

  auto* cancel_cmd = tool.add_subcommand("cancel", "Cancel jobs (running ones get SIGTERM, then SIGKILL)");
  cancel_cmd->add_option("id", ids, "Job ids")->required()->type_name("ID");
  auto* hold_cmd = tool.add_subcommand("hold", "Keep pending jobs from starting");
  hold_cmd->add_option("id", ids, "Job ids")->required()->type_name("ID");
  auto* release_cmd = tool.add_subcommand("release", "Let held jobs start");
  release_cmd->add_option("id", ids, "Job ids")->required()->type_name("ID");

  auto* wait_cmd = tool.add_subcommand("wait", "Wait for jobs to end; exit with the job's exit code (the highest)");
  std::string wait_timeout;
  wait_cmd->add_option("id", ids, "Job ids")->required()->type_name("ID");
  wait_cmd->add_option("--timeout", wait_timeout, "Give up after this long (exit 75)")->type_name("D");

  auto* status_cmd = tool.add_subcommand("status", "Queue pressure: pending and running jobs per tenant");
  std::string workflow;
  status_cmd->add_option("--workflow", workflow, "Only this workflow's jobs")->type_name("W");
  auto* why_cmd = tool.add_subcommand("why", "Why a pending job is not running");
  why_cmd->add_option("id", one_id, "Job id")->type_name("ID");
  why_cmd->add_option("--workflow", workflow, "Why this workflow's next rule waits (instead of an id)")->type_name("W");

  auto* smk_cmd = tool.add_subcommand("snakemake", "Snakemake's cluster commands, as rkit's profile runs them");
  smk_cmd->require_subcommand(1);
  std::string jobscript;
  auto* smk_submit = smk_cmd->add_subcommand("submit", "Submit a Snakemake job script; print its job id");
  smk_submit->add_option("jobscript", jobscript, "The job script Snakemake wrote")->required()->type_name("SCRIPT");
  auto* smk_status = smk_cmd->add_subcommand("status", "Print running, success or failed for a job; exit 0");
  smk_status->add_option("id", one_id, "Job id")->required()->type_name("ID");
  auto* smk_cancel = smk_cmd->add_subcommand("cancel", "Cancel a workflow's jobs");
  smk_cancel->add_option("id", ids, "Job ids")->required()->type_name("ID");
  auto* smk_sidecar =
      smk_cmd->add_subcommand("sidecar", "Answer status from one query of the workflow's jobs per polling round");

  auto* workflow_cmd = tool.add_subcommand("workflow", "Run snakemake with rkit's profile: each rule an rsub job");
  workflow_cmd->footer("Every argument after workflow is snakemake's (e.g. rsub workflow --cores 2 all).");

  auto* daemon_cmd = tool.add_subcommand("daemon", "Run the scheduler (started by the first submit)");
  bool foreground = false, once = false;
  daemon_cmd->add_flag("--foreground", foreground, "Stay in the foreground (for a service manager)");
  daemon_cmd->add_flag("--once", once, "One scheduling pass, then exit");

  // Hidden: benchmark helpers.
  auto* fill_cmd = app.add_subcommand("_bench-fill")->group("");
  int fill_jobs = 0, fill_tenants = 1;
  fill_cmd->add_option("jobs", fill_jobs)->required();
  fill_cmd->add_option("tenants", fill_tenants);
  bool fill_held = false;
  fill_cmd->add_flag("--held", fill_held);
  auto* pass_cmd = app.add_subcommand("_bench-pass")->group("");
  auto* cgroup_cmd = app.add_subcommand("_bench-cgroup")->group("");
  int cgroup_jobs = 200;
  cgroup_cmd->add_option("jobs", cgroup_jobs);

  return tool.run(argc, argv, [&]() -> int {
    // After `--`, CLI11 fills submit's positionals in order, so with no spec file before it
    // (`rsub submit -n x -- cmd args`) the command's first word lands in `spec`: it was
    // when that word is the first after `--` and appears nowhere before it.
    if (*submit_cmd && !spec_file.empty()) {
      const auto dashes =
          std::find_if(argv + 1, argv + argc, [](const char* a) { return std::string_view(a) == "--"; });
      if (dashes + 1 < argv + argc && spec_file == dashes[1] &&
          std::find_if(argv + 1, dashes, [&](const char* a) { return spec_file == a; }) == dashes) {
        over.command.insert(over.command.begin(), spec_file);
        spec_file.clear();
      }
    }
    if (!over.command.empty() && !*submit_cmd && !app.get_subcommands().empty())
      usage_error("a command after -- is a job's: only rsub [options] -- COMMAND and rsub submit take one");
    const CommonOptions& opts = tool.options();
    const Settings settings = load_settings(tool.config());
    if (*daemon_cmd) {
      if (!foreground && !once) {
        if (settings.shared())
          usage_error("a shared daemon is started by its service manager: rsub daemon --foreground");
        start_daemon(rsub_exe(), tool.config().path, settings.dir);
        return 0;
      }
      run_daemon(settings, {once});
      return 0;
    }
    if (*fill_cmd || *pass_cmd || *cgroup_cmd) {  // benchmarks: the store itself, as its owner
      Context ctx;
      ctx.settings = settings;
      ctx.me = user_of(::getuid());
      if (*cgroup_cmd) return bench_cgroup(ctx, cgroup_jobs);
      return *fill_cmd ? bench_fill(ctx, fill_jobs, fill_tenants, fill_held) : bench_pass(ctx);
    }
    // Everything else is a request to the daemon, which alone opens the job store.
    // A personal daemon follows its user's configuration file (a regular one: not a pipe).
    const std::string config = regular_file_path(tool.config().path);
    auto finish = [&](Json& request) {
      static const char* formats[] = {"table", "json", "csv"};
      if (!request.contains("format")) request["format"] = formats[static_cast<int>(opts.format())];
      request["quiet"] = opts.quiet;
      request["verbose"] = opts.verbose;
      if (!config.empty()) request["config"] = bytes_json(config);
      char cwd[PATH_MAX];
      if (::getcwd(cwd, sizeof cwd)) request["cwd"] = bytes_json(cwd);
    };
    if (*smk_cmd) {
      const AskDaemon ask = [&](Json request) {
        finish(request);
        Answer a;
        a.code = call_daemon(settings, rsub_exe(), tool.config().path, to_json_line(request),
                             [&a](int stream, std::string_view bytes) { (stream == 1 ? a.out : a.err) += bytes; });
        return a;
      };
      if (*smk_submit) return snakemake_submit(jobscript, ask, std::cout);
      if (*smk_status) return snakemake_status(one_id, ask, std::cout);
      if (*smk_cancel) return snakemake_cancel(ids, ask);
      if (*smk_sidecar) return snakemake_sidecar(ask, std::cout);
    }
    Json request;
    if (*submit_cmd || app.get_subcommands().empty()) {
      if (*submit_cmd && spec_file.empty() && over.command.empty())
        usage_error("submit needs a job spec file or -- COMMAND");
      if (!*submit_cmd && over.command.empty())
        usage_error("nothing to run: rsub [options] -- COMMAND, or a subcommand (see --help)");
      JobSpec spec;
      if (!spec_file.empty()) spec = load_spec(spec_file);  // read here, as the user
      apply_overrides(spec, over);
      std::vector<std::string> environment;
      for (char** e = environ; *e; ++e) environment.emplace_back(*e);
      request = submit_request(spec, dry_run, environment);
    } else if (*ls_cmd) {
      if (!state.empty() && !parse_state(state))
        usage_error("--state " + state +
                    ": not a job state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, LOST, OUT_OF_MEMORY)");
      request = {{"cmd", "ls"}, {"all", filter.all}, {"state", state}, {"cached", cached}};
      if (filter.tenant) request["tenant"] = *filter.tenant;
      if (filter.user) request["user"] = *filter.user;
      if (filter.workflow) request["workflow"] = *filter.workflow;
    } else if (*show_cmd) {
      request = {{"cmd", "show"}, {"ids", ids}};
    } else if (*logs_cmd) {
      request = {{"cmd", "logs"}, {"id", one_id}, {"follow", follow}, {"task", task}, {"err", err}};
    } else if (*cancel_cmd || *hold_cmd || *release_cmd) {
      request = {{"cmd", *cancel_cmd ? "cancel" : *hold_cmd ? "hold" : "release"}, {"ids", ids}};
    } else if (*wait_cmd) {
      request = {{"cmd", "wait"}, {"ids", ids}};
      if (!wait_timeout.empty()) request["timeout_s"] = parse_duration(wait_timeout);
    } else if (*status_cmd) {
      request = {{"cmd", "status"}};
      if (!workflow.empty()) request["workflow"] = workflow;
    } else if (*why_cmd) {
      if (one_id.empty() == workflow.empty()) usage_error("why needs a job id or --workflow W (not both)");
      request = {{"cmd", "why"}, {"id", one_id}};
      if (!workflow.empty()) request["workflow"] = workflow;
    }
    finish(request);
    // Ids and names that are not UTF-8 go with U+FFFD for their bad bytes (no job has
    // them); paths and what a job runs with go as bytes_json.
    return call_daemon(settings, rsub_exe(), tool.config().path, to_json_line(request));
  });
}
