// File: rsub/commands/commands.cpp — the bodies of rsub's commands (commands.hpp).
#include "commands/commands.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "rkit/cgroup.hpp"
#include "rkit/cli.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/host.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {

namespace {

// The jobs the ids name, each id at least one (Error(NoInput) naming the first unknown).
// Each job once, however often the ids name it; at most kMaxResolved jobs per request.
std::vector<JobRecord> resolve_all(Store& store, const std::vector<std::string>& ids) {
  constexpr std::size_t kMaxResolved = 200000;
  std::vector<JobRecord> out;
  std::set<std::int64_t> seen;
  for (const std::string& text : std::set<std::string>(ids.begin(), ids.end())) {
    std::vector<JobRecord> found = store.resolve(text);
    if (found.empty()) throw Error(Exit::NoInput, "no job " + text, "rsub ls --all lists the jobs");
    for (JobRecord& j : found)
      if (seen.insert(j.id).second) out.push_back(std::move(j));
    if (out.size() > kMaxResolved)
      throw Error(Exit::Usage, fmt::format("the ids name more than {} jobs", kMaxResolved));
  }
  std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) { return a.id < b.id; });
  return out;
}

// The job is the caller's, or the caller is an admin; else Error(NoPerm) saying what
// only they may do ("cancel it", "read its output").
void check_owner(const Context& ctx, const JobRecord& j, std::string_view what) {
  if (j.uid != ctx.me.uid && !is_admin(ctx))
    throw Error(Exit::NoPerm,
                fmt::format("job {} belongs to {}: only its user or an admin can {}", j.display_id(), j.user, what),
                "admins are listed in rsub.admins");
}

// Whether the caller may charge `tenant`: its default tenant, a tenant whose users or
// groups name it, or any tenant for an admin and for the owner of a personal daemon
// (whose store holds nobody else's jobs).
bool may_use_tenant(const Context& ctx, const std::string& tenant, const std::string& default_tenant) {
  if (tenant == default_tenant || is_admin(ctx) || !ctx.settings.shared()) return true;
  const auto it = ctx.settings.tenant_access.find(tenant);
  if (it == ctx.settings.tenant_access.end()) return false;
  const TenantAccess& a = it->second;
  if (std::find(a.users.begin(), a.users.end(), ctx.me.user) != a.users.end()) return true;
  std::vector<char> buf(1 << 16);
  for (gid_t g : ctx.groups) {  // request threads: the reentrant lookup
    group gr{}, *found = nullptr;
    if (::getgrgid_r(g, &gr, buf.data(), buf.size(), &found) == 0 && found &&
        std::find(a.groups.begin(), a.groups.end(), found->gr_name) != a.groups.end())
      return true;
  }
  return false;
}

// A job's log file, opened for reading as the daemon may safely open it: through the
// directory's descriptor, no link followed, a regular file owned by the job's user
// (whoever made it: a task writes its logs as its user). Error(NoInput) when absent.
UniqueFd open_job_log(const std::string& dir, const std::string& name, std::uint32_t uid) {
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) throw system_error("open " + dir, errno);
  UniqueFd f(::openat(d.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!f) throw system_error("open " + dir + "/" + name, errno);
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) throw system_error("stat " + dir + "/" + name, errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != uid)
    throw Error(Exit::NoPerm, fmt::format("{}/{}: not a log file of the job's user", dir, name));
  return f;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Reads the states of every backend's active jobs, at most every refresh_s for all
// clients together; a backend that cannot be reached is a warning (the states last read
// are shown). Returns whether states were written.
bool refresh_all(Context& ctx) {
  bool wrote = false;
  for (const auto& b : ctx.settings.backends) wrote |= open_backend(ctx, b->name)->refresh(ctx, false, false);
  return wrote;
}

}  // namespace

std::vector<Column> job_columns() {
  auto duration = [](const Json& v) {
    return v.is_null() ? std::string("-") : format_duration(std::floor(v.get<double>()));
  };
  return {{"ID", "id"},        {"NAME", "name"},   {"TENANT", "tenant"},
          {"USER", "user"},    {"STATE", "state"}, {"TASKS", "tasks"},
          {"CPUS", "cpus"},    {"GPUS", "gpus"},   {"TIME", "elapsed_s", duration},
          {"REASON", "reason"}};
}

void print_jobs(Context& ctx, const std::vector<std::int64_t>& ids) {
  Printer out(*ctx.out, ctx.format, job_columns());
  for (std::int64_t id : ids) out.print(ctx.store().job(id)->to_json());
  out.finish();
}

Submitter user_of(uid_t uid) {
  Submitter me;
  me.uid = uid;
  me.user = user_name(uid);
  return me;
}

bool is_admin(const Context& ctx) {
  return ctx.me.uid == 0 ||
         std::find(ctx.settings.admins.begin(), ctx.settings.admins.end(), ctx.me.user) != ctx.settings.admins.end();
}

int submit(Context& ctx, JobSpec spec, bool dry_run, const std::vector<std::string>& environment) {
  const auto mapped = ctx.settings.tenants_of_users.find(ctx.me.user);
  const std::string default_tenant = mapped != ctx.settings.tenants_of_users.end() ? mapped->second : ctx.me.user;
  if (spec.tenant.empty()) spec.tenant = default_tenant;
  if (!may_use_tenant(ctx, spec.tenant, default_tenant))
    throw Error(Exit::NoPerm, fmt::format("tenant {}: {} is not one of its users", spec.tenant, ctx.me.user),
                fmt::format("your tenant is {}; rsub.tenants.{}.users and .groups say who may use it", default_tenant,
                            spec.tenant));

  if (!spec.time_limit_s) spec.time_limit_s = ctx.settings.default_time_limit_s;
  if (spec.backend == "auto") {
    const Placement p = place_job(ctx, spec);
    if (dry_run && !ctx.quiet) {
      *ctx.err << fmt::format("rsub: --backend auto chose {}: {}\n", p.backend, p.reason);
      for (const auto& line : p.considered) *ctx.err << "  " << line << '\n';
    }
    spec.backend = p.backend;
  }
  const auto backend = open_backend(ctx, spec.backend);
  backend->prepare(ctx, spec);
  if (!spec.workdir.empty() && spec.workdir.front() != '/')
    throw Error(Exit::DataErr, "workdir " + spec.workdir + ": must be an absolute path");
  return backend->submit(ctx, spec, dry_run, environment);
}

int list(Context& ctx, JobFilter filter, bool cached) {
  Store& store = ctx.store();
  if (!cached) refresh_all(ctx);
  filter.light = true;
  if (ctx.format == Format::Json) {  // streamed: ls --all --json over a long history
    store.each_job(filter, [&](const JobRecord& j) { *ctx.out << j.to_json_line() << '\n'; });
    return 0;
  }
  Printer out(*ctx.out, ctx.format, job_columns());
  store.each_job(filter, [&](const JobRecord& j) { out.print(j.to_json()); });
  out.finish();
  return 0;
}

int show(Context& ctx, const std::vector<std::string>& ids) {
  Store& store = ctx.store();
  refresh_all(ctx);
  std::optional<Printer> csv;  // a row per job, a column per key of its record
  for (const JobRecord& j : resolve_all(store, ids)) {
    Json rec = j.to_json();
    // The environment the job was given is its owner's (and the admins') to read.
    const bool mine = j.uid == ctx.me.uid || is_admin(ctx);
    rec["env"] = mine ? Json::object() : Json(nullptr);
    if (mine)
      for (const auto& [k, v] : j.spec.env) rec["env"][k] = bytes_json(v);
    if (ctx.format == Format::Json) {
      *ctx.out << to_json_line(rec) << '\n';
      continue;
    }
    if (ctx.format == Format::Csv) {
      if (!csv) {
        std::vector<Column> columns;
        for (const auto& [key, _] : rec.items())
          if (key != "schema") columns.push_back({key, key});
        csv.emplace(*ctx.out, Format::Csv, std::move(columns));
      }
      csv->print(rec);
      continue;
    }
    for (const auto& [key, value] : rec.items())
      if (key != "schema") *ctx.out << fmt::format("{:>22}: {}\n", key, Printer::cell(value, "-"));
    *ctx.out << '\n';
  }
  if (csv) csv->finish();
  return 0;
}

int logs(Context& ctx, const std::string& id, bool follow, int task, bool err) {
  Store& store = ctx.store();
  std::vector<JobRecord> jobs = resolve_all(store, {id});
  if (jobs.size() != 1) throw Error(Exit::Usage, fmt::format("{} is an array: name one element, as {}_N", id, id));
  const JobRecord& job = jobs.front();
  check_owner(ctx, job, "read its output");
  if (task < 0 || task >= job.spec.resources.tasks)
    throw Error(Exit::Usage,
                fmt::format("--task {}: job {} has tasks 0 to {}", task, id, job.spec.resources.tasks - 1));
  const auto backend = open_backend(ctx, job.backend);
  const LogFile file = backend->log_file(job, task, err);
  UniqueFd fd;
  auto open_log = [&] {
    try {
      fd = open_job_log(file.dir, file.name, job.uid);
    } catch (const Error& e) {
      if (e.code() != Exit::NoInput) throw;
    }
  };
  std::string buf(1 << 16, '\0');
  auto drain = [&] {  // whatever the file holds beyond what was printed
    if (!fd) open_log();
    if (!fd) return;
    for (;;) {
      const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n <= 0) break;
      ctx.out->write(buf.data(), n);
    }
    if (!ctx.out->flush()) throw Error(Exit::IoErr, "write stdout: the client went away");
  };
  drain();
  while (follow && !ctx.gone()) {
    backend->refresh(ctx, false, false);
    const auto now = store.job(job.id);
    const bool over = !now || terminal(now->state);
    if (!over) sleep_s(std::max(0.2, backend->poll_s()));
    drain();  // after the end too: what the last moment wrote
    if (over) break;
  }
  if (!fd && !follow && job.state == JobState::Pending)
    throw Error(Exit::NoInput, fmt::format("job {} has not started: no output yet", id));
  return 0;
}

int control(Context& ctx, const std::vector<std::string>& ids, Control action) {
  Store& store = ctx.store();
  const std::vector<JobRecord> jobs = resolve_all(store, ids);
  for (const JobRecord& j : jobs) check_owner(ctx, j, fmt::format("{} it", control_verb(action)));
  std::map<std::string, std::vector<JobRecord>> by_backend;
  for (const JobRecord& j : jobs)
    if (ctx.settings.backend(j.backend))
      by_backend[j.backend].push_back(j);
    else if (!j.remote_id.empty())
      open_backend(ctx, j.backend);  // Error(Usage) before anything is done
  // The local machine is the first backend: acted on last, so that a remote one that
  // fails (it is reached over the network) leaves the local jobs as they were.
  for (auto b = ctx.settings.backends.rbegin(); b != ctx.settings.backends.rend(); ++b)
    if (const auto mine = by_backend.find((*b)->name); mine != by_backend.end())
      open_backend(ctx, (*b)->name)->control(ctx, mine->second, action);
  return 0;
}

int wait_code(const JobRecord& j) {
  switch (j.state) {
    case JobState::Completed: return 0;
    case JobState::Failed:
      if (j.exit_code) return *j.exit_code;
      return j.signal ? 128 + *j.signal : 1;
    case JobState::Timeout: return 124;
    case JobState::Cancelled: return 143;
    case JobState::OutOfMemory: return 137;
    default: return 1;
  }
}

int wait(Context& ctx, const std::vector<std::string>& ids, std::optional<double> timeout_s) {
  Store& store = ctx.store();
  std::vector<JobRecord> jobs = resolve_all(store, ids);
  const double deadline = timeout_s ? now_s() + *timeout_s : INFINITY;
  std::uint64_t seen = 0;
  std::vector<std::int64_t> waiting;
  std::map<std::string, std::unique_ptr<Backend>> backends;  // of the jobs, where still configured
  double poll = 0;                                           // the slowest of theirs: each pass reads every one of them
  for (const auto& j : jobs) {
    waiting.push_back(j.id);
    if (!backends.count(j.backend) && ctx.settings.backend(j.backend)) {
      auto& b = backends[j.backend] = open_backend(ctx, j.backend);
      poll = std::max(poll, b->poll_s());
    }
  }
  if (backends.empty()) poll = 0.5;
  int code = 0;
  while (!waiting.empty()) {
    bool wrote = false;                                                    // our own writes do not change data_version
    for (auto& [_, b] : backends) wrote |= b->refresh(ctx, false, false);  // at most every refresh_s
    const std::uint64_t version = store.data_version();
    if (version != seen || seen == 0 || wrote) {
      seen = version;
      std::vector<std::int64_t> still;
      for (const auto& [id, state] : store.states_of(waiting)) {
        if (!terminal(state)) {
          still.push_back(id);
          continue;
        }
        const JobRecord j = *store.job(id);
        code = std::max(code, wait_code(j));
        if (ctx.format != Format::Table) *ctx.out << j.to_json_line() << '\n';
      }
      waiting = std::move(still);
      if (waiting.empty()) break;
    }
    if (now_s() > deadline)
      throw Error(Exit::TempFail, fmt::format("{} job(s) still active after --timeout", waiting.size()));
    if (ctx.gone()) throw Error(Exit::TempFail, "the client went away before the jobs ended");  // nobody reads it
    sleep_s(poll);
  }
  return code;
}

int status(Context& ctx, const std::optional<std::string>& workflow) {
  Store& store = ctx.store();
  std::vector<std::unique_ptr<Backend>> backends;
  for (const auto& b : ctx.settings.backends) {
    backends.push_back(open_backend(ctx, b->name));
    backends.back()->refresh(ctx, false, false);
  }
  struct Row {
    int pending = 0, running = 0, cpus = 0, gpus = 0;
    double oldest_submit = INFINITY;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;  // (backend, tenant)
  Row total;
  const double now = now_s();
  const Json passes = ctx.passes ? Json(ctx.passes()) : Json(nullptr);  // before the jobs are read
  JobFilter of_workflow;
  of_workflow.workflow = workflow;
  store.each_job(of_workflow, [&](const JobRecord& j) {
    for (Row* r : {&rows[{j.backend, j.spec.tenant}], &total}) {
      if (j.state == JobState::Pending) {
        ++r->pending;
        r->oldest_submit = std::min(r->oldest_submit, j.submit_s);
      } else {
        ++r->running;
        r->cpus += j.spec.resources.tasks * j.spec.resources.cpus_per_task;
        r->gpus += j.spec.resources.tasks * j.spec.resources.gpus_per_task;
      }
    }
  });
  // What each backend has ("*": all that say), as {"cpus": N, "gpus": N}.
  std::map<std::string, Json> capacity;
  Json& all = capacity["*"] = Json{{"cpus", nullptr}, {"gpus", nullptr}};
  for (std::size_t i = 0; i < backends.size(); ++i) {
    const Json c = capacity[ctx.settings.backends[i]->name] = backends[i]->capacity(ctx);
    for (const char* key : {"cpus", "gpus"})
      if (c[key].is_number()) all[key] = (all[key].is_number() ? all[key].get<long>() : 0L) + c[key].get<long>();
  }
  auto record = [&](const std::string& backend, const std::string& tenant, const Row& r) {
    const auto cap = capacity.find(backend);  // none for a backend no longer configured
    auto total = [&](const char* key) { return cap == capacity.end() ? Json(nullptr) : cap->second[key]; };
    return Json{{"schema", "rkit.queue.v1"},
                {"backend", backend},
                {"tenant", tenant},
                {"pending", r.pending},
                {"running", r.running},
                {"cpus_in_use", r.cpus},
                {"gpus_in_use", r.gpus},
                {"cpus_total", total("cpus")},
                {"gpus_total", total("gpus")},
                {"oldest_pending_s", std::isfinite(r.oldest_submit) ? Json(now - r.oldest_submit) : Json(nullptr)},
                {"daemon_passes", backend == "*" ? passes : Json(nullptr)},
                {"workflow", workflow ? Json(*workflow) : Json(nullptr)}};
  };
  auto age = [](const Json& v) {
    return v.is_null() ? std::string("-") : format_duration(std::floor(v.get<double>()));
  };
  Printer out(*ctx.out, ctx.format,
              {{"BACKEND", "backend"},
               {"TENANT", "tenant"},
               {"PENDING", "pending"},
               {"RUNNING", "running"},
               {"CPUS", "cpus_in_use"},
               {"GPUS", "gpus_in_use"},
               {"OLDEST PENDING", "oldest_pending_s", age}});
  for (const auto& [key, r] : rows) out.print(record(key.first, key.second, r));
  out.print(record("*", "*", total));
  out.finish();
  if (ctx.format == Format::Table && !ctx.quiet)
    for (const auto& b : backends) *ctx.out << b->describe(ctx) << '\n';
  return 0;
}

int why(Context& ctx, const std::string& id, const std::optional<std::string>& workflow) {
  Store& store = ctx.store();
  if (workflow) {  // its next rule: the first of its jobs that waits
    JobFilter f;
    f.workflow = workflow;
    f.state = JobState::Pending;
    const std::vector<JobRecord> waiting = store.jobs(f);
    if (waiting.empty()) {
      f.state = JobState::Running;
      const std::size_t running = store.jobs(f).size();
      *ctx.out << fmt::format("workflow {}: no job waits ({} running)\n", *workflow, running);
      return 0;
    }
    if (ctx.format == Format::Table)
      *ctx.out << fmt::format("workflow {}: {} {}; the first is rule {}\n", *workflow, waiting.size(),
                              waiting.size() == 1 ? "job waits" : "jobs wait",
                              waiting.front().spec.rule.empty() ? "-" : waiting.front().spec.rule);
    return why(ctx, waiting.front().display_id(), std::nullopt);
  }
  std::vector<JobRecord> jobs = resolve_all(store, {id});
  if (jobs.size() != 1) throw Error(Exit::Usage, fmt::format("{} is an array: name one element, as {}_N", id, id));
  const JobRecord& job = jobs.front();
  Json rec{{"schema", "rkit.job.why.v1"},
           {"id", job.display_id()},
           {"state", state_name(job.state)},
           {"reason", job.reason}};
  std::vector<std::string> lines;
  if (ctx.settings.backend(job.backend) || job.state == JobState::Pending)
    open_backend(ctx, job.backend)->explain(ctx, job, rec, lines);
  else  // its backend is no longer configured: what the store last read
    lines.push_back(job.state == JobState::Running ? "it is running on " + job.host : "it has ended");
  if (ctx.format == Format::Json) {
    *ctx.out << to_json_line(rec) << '\n';
    return 0;
  }
  if (ctx.format == Format::Csv) {
    Printer out(*ctx.out, Format::Csv,
                {{"id", "id"},
                 {"state", "state"},
                 {"reason", "reason"},
                 {"detail", "detail"},
                 {"priority", "/priority/score"},
                 {"position", "position"},
                 {"pending", "pending"},
                 {"expected_start_unix_s", "expected_start_unix_s"},
                 {"waits_for", "waits_for"}});
    out.print(rec);
    out.finish();
    return 0;
  }
  *ctx.out << fmt::format(
      "job {}: {}{}\n", job.display_id(), rec["state"].get<std::string>(),
      rec["reason"].get<std::string>().empty() ? "" : " (" + rec["reason"].get<std::string>() + ")");
  for (const auto& l : lines) *ctx.out << "  " << l << '\n';
  return 0;
}

int bench_fill(Context& ctx, int jobs, int tenants, bool held) {
  Store& store = ctx.store();
  JobSpec spec;
  spec.command = {"true"};
  spec.name = "bench";
  spec.workdir = "/";
  spec.hold = held;
  store.transaction([&] {
    for (int i = 0; i < jobs; ++i) {
      spec.tenant = fmt::format("tenant{:02}", i % std::max(1, tenants));
      spec.priority = i % 7;
      store.submit(spec, ctx.me, now_s() - (jobs - i));
    }
  });
  return 0;
}

int bench_cgroup(Context& ctx, int jobs) {
  if (cgroup_version() == CgroupVersion::None)
    throw Error(Exit::Unavailable, "no cgroups to measure (not root, or no cgroup hierarchy)");
  const Machine machine = local_machine(ctx.settings);
  CgroupLimits limits;  // what a one-core job of 1 GiB gets
  limits.cpus = {machine.topology.cores.empty() ? 0 : machine.topology.cores.front().pus.front()};
  limits.memory_bytes = std::uint64_t{1} << 30;
  limits.pids_max = ctx.settings.job_pids_max;
  std::vector<double> ms;
  for (int i = 0; i < jobs; ++i) {
    const auto t = std::chrono::steady_clock::now();
    JobCgroup cg = JobCgroup::create("rkit/bench", fmt::format("job-{}.1", i), limits);
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(cg.enter_child() == 0 ? 0 : 126);
    int status = 0;
    ::waitpid(pid, &status, 0);
    cg.kill_all(std::chrono::seconds(5));
    (void)cg.usage();
    cg.remove();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  JobCgroup::remove_parent("rkit/bench");
  std::sort(ms.begin(), ms.end());
  *ctx.out << to_json_line(Json{{"jobs", jobs},
                                {"median_ms", ms[ms.size() / 2]},
                                {"max_ms", ms.back()},
                                {"version", cgroup_version() == CgroupVersion::V2 ? "v2" : "v1"}})
           << '\n';
  return 0;
}

int bench_pass(Context& ctx) {
  const PassTiming t = time_pass(ctx.settings, local_machine(ctx.settings));
  *ctx.out << to_json_line(Json{{"load_ms", t.load_ms},
                                {"pass_ms", t.pass_ms},
                                {"refresh_ms", t.refresh_ms},
                                {"input_ms", t.input_ms},
                                {"starts", t.plan.starts.size()},
                                {"verdicts", t.plan.verdicts.size()}})
           << '\n';
  return 0;
}

}  // namespace rkit::rsub

namespace rkit::rsub {

namespace {

// A request's fields, read strictly: a field of the wrong type is Error(DataErr).
struct RequestReader {
  const Json& j;
  template <typename T>
  T get(const char* key, T fallback) const {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    try {
      return it->get<T>();
    } catch (const std::exception&) {
      throw Error(Exit::DataErr, fmt::format("request: {} has the wrong type", key));
    }
  }
  std::vector<std::string> ids(const char* key) const {
    auto v = get<std::vector<std::string>>(key, {});
    if (v.empty() || v.size() > 100000) throw Error(Exit::DataErr, fmt::format("request: {}: 1 to 100000 ids", key));
    return v;
  }
};

constexpr const char* kFormats[] = {"table", "json", "csv"};
constexpr std::size_t kMaxRequestSpecBytes = 1 << 20;  // a spec, an environment
constexpr std::size_t kMaxSubmitBytes = 256u << 20;    // all rows one submit stores

}  // namespace

Json submit_request(const JobSpec& spec, bool dry_run, const std::vector<std::string>& environment) {
  Json environ = Json::array();
  for (const std::string& kv : environment) environ.push_back(bytes_json(kv));
  return Json{{"cmd", "submit"}, {"spec", spec.to_json()}, {"dry_run", dry_run}, {"environ", environ}};
}

int handle_request(Context& ctx, const Json& request) {
  if (!request.is_object()) throw Error(Exit::DataErr, "request: not a JSON object");
  const RequestReader r{request};
  const std::string format = r.get<std::string>("format", "table");
  const auto f = std::find(std::begin(kFormats), std::end(kFormats), format);
  if (f == std::end(kFormats)) throw Error(Exit::DataErr, "request: format " + format + ": not table, json or csv");
  ctx.format = static_cast<Format>(f - std::begin(kFormats));
  ctx.quiet = r.get<bool>("quiet", false);
  if (const auto cwd = request.find("cwd"); cwd != request.end() && !cwd->is_null())
    ctx.client_cwd = bytes_of(*cwd, "request: cwd");
  const std::string cmd = r.get<std::string>("cmd", "");
  if (cmd == "submit") {
    const auto spec_it = request.find("spec");
    if (spec_it == request.end()) throw Error(Exit::DataErr, "request: submit without a spec");
    std::vector<std::string> environment;
    if (const auto e = request.find("environ"); e != request.end() && !e->is_null()) {
      if (!e->is_array()) throw Error(Exit::DataErr, "request: environ has the wrong type");
      for (const Json& kv : *e) environment.push_back(bytes_of(kv, "request: environ"));
    }
    std::erase_if(environment, [](const std::string& kv) { return kv.find('=') == std::string::npos; });
    // What one submit may store: each array element is a row holding the spec (twice:
    // spec and record) and the environment.
    const std::size_t spec_bytes = spec_it->dump().size();
    std::size_t env_bytes = 0;
    for (const auto& kv : environment) env_bytes += kv.size() + 1;
    if (spec_bytes > kMaxRequestSpecBytes || env_bytes > kMaxRequestSpecBytes)
      throw Error(Exit::DataErr,
                  fmt::format("request: the job's spec ({} bytes) or environment ({} bytes) is over {} bytes",
                              spec_bytes, env_bytes, kMaxRequestSpecBytes));
    JobSpec spec = JobSpec::from_json(*spec_it);
    const std::size_t rows = spec.array ? spec.array->indices.size() : 1;
    if ((2 * spec_bytes + env_bytes) * rows > kMaxSubmitBytes)
      throw Error(Exit::DataErr,
                  fmt::format("the job would store {} MiB ({} elements of {} bytes): at most {} MiB",
                              (2 * spec_bytes + env_bytes) * rows >> 20, rows, 2 * spec_bytes + env_bytes,
                              kMaxSubmitBytes >> 20),
                  "a smaller array, or a shorter command and environment");
    return submit(ctx, std::move(spec), r.get<bool>("dry_run", false), environment);
  }
  if (cmd == "ls") {
    JobFilter filter;
    filter.all = r.get<bool>("all", false);
    if (auto t = r.get<std::string>("tenant", ""); !t.empty()) filter.tenant = t;
    if (auto u = r.get<std::string>("user", ""); !u.empty()) filter.user = u;
    if (auto w = r.get<std::string>("workflow", ""); !w.empty()) filter.workflow = w;
    if (auto st = r.get<std::string>("state", ""); !st.empty()) {
      filter.state = parse_state(st);
      if (!filter.state) throw Error(Exit::DataErr, "request: state " + st + ": not a job state");
    }
    return list(ctx, filter, r.get<bool>("cached", false));
  }
  if (cmd == "show") return show(ctx, r.ids("ids"));
  if (cmd == "logs")
    return logs(ctx, r.get<std::string>("id", ""), r.get<bool>("follow", false), r.get<int>("task", 0),
                r.get<bool>("err", false));
  if (cmd == "cancel") return control(ctx, r.ids("ids"), Control::Cancel);
  if (cmd == "hold") return control(ctx, r.ids("ids"), Control::Hold);
  if (cmd == "release") return control(ctx, r.ids("ids"), Control::Release);
  if (cmd == "wait") {
    std::optional<double> timeout;
    if (const double t = r.get<double>("timeout_s", -1); t >= 0) timeout = t;
    return wait(ctx, r.ids("ids"), timeout);
  }
  const std::string workflow = r.get<std::string>("workflow", "");
  const auto of_workflow = workflow.empty() ? std::nullopt : std::optional(workflow);
  if (cmd == "status") return status(ctx, of_workflow);
  if (cmd == "why") return why(ctx, r.get<std::string>("id", ""), of_workflow);
  throw Error(Exit::Usage, "request: unknown command \"" + cmd + "\"", "the client is newer than the daemon?");
}

}  // namespace rkit::rsub
