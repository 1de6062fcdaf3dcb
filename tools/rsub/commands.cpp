// File: rsub/commands.cpp — the bodies of rsub's commands (commands.hpp).
#include "commands.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
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
#include "rkit/units.hpp"

namespace rkit::rsub {

namespace {

std::vector<Column> job_columns() {
  auto duration = [](const Json& v) { return v.is_null() ? std::string("-") : format_duration(std::floor(v.get<double>())); };
  return {{"ID", "id"},           {"NAME", "name"},       {"TENANT", "tenant"},   {"USER", "user"},
          {"STATE", "state"},     {"TASKS", "tasks"},     {"CPUS", "cpus"},       {"GPUS", "gpus"},
          {"TIME", "elapsed_s", duration}, {"REASON", "reason"}};
}

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
    throw Error(Exit::NoPerm, fmt::format("job {} belongs to {}: only its user or an admin can {}", j.display_id(),
                                          j.user, what),
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

// The remote ids of jobs whose submission was not confirmed, when the backend has them
// now; such jobs still unknown after their backend's retry window (and 5 minutes more)
// are LOST: they may run there, so they are never submitted again.
// Returns whether any job learnt its id.
bool adopt_unsubmitted(Store& store, const BackendConfig& config, Backend& backend,
                       const std::vector<Store::Unsubmitted>& waiting) {
  if (waiting.empty()) return false;
  bool adopted = false;
  std::map<std::string, std::map<std::int64_t, std::string>> found;  // by user
  for (const auto& u : waiting) {
    if (!found.count(u.user)) found[u.user] = backend.adopt(store.tag(), u.user);
    const auto& mine = found[u.user];
    if (auto it = mine.find(u.array_id); it != mine.end()) {
      store.set_remote_ids({u.id}, {u.array_index ? fmt::format("{}_{}", it->second, *u.array_index) : it->second});
      adopted = true;
    }
  }
  const double now = now_s();
  store.lose_unsubmitted(config.name, now - config.submit_retry_s - 300, now);
  return adopted;
}

// Reads the states of the remote backends' active jobs (of `only`, or of all), at most
// every refresh_s for all clients together (`force`: now). A backend that cannot be
// reached is an error when `strict`, else a warning: the states last read are shown.
void refresh_remote(Context& ctx, Store& store, bool strict, bool force = false, const std::string& only = {}) {
  for (const auto& [name, config] : ctx.settings.backends) {
    if (!only.empty() && name != only) continue;
    auto active = store.remote_active(name);
    const auto waiting = store.unsubmitted(name);
    if (active.empty() && waiting.empty()) continue;
    if (!store.claim_refresh(name, now_s(), force ? 0 : config.refresh_s)) continue;
    try {
      auto backend = make_backend(config);
      if (adopt_unsubmitted(store, config, *backend, waiting)) active = store.remote_active(name);
      std::vector<std::string> ids;
      for (const auto& a : active) ids.push_back(a.second);
      if (!ids.empty()) store.update_remote(name, backend->query(ids));
    } catch (const Error& e) {
      if (strict) throw;
      if (!ctx.quiet) *ctx.err << fmt::format("rsub: warning: {} (showing the states last read)\n", e.what());
    }
  }
}

// A remote job's dependencies as its backend names them; each must run there too.
RemoteDeps remote_deps(Store& store, JobSpec& spec) {
  RemoteDeps out;
  for (Dependency& d : spec.depends) {
    const std::string text = d.remote.empty() ? std::to_string(d.job) : d.remote;
    const std::vector<JobRecord> found = store.resolve(text);
    if (found.empty()) throw Error(Exit::NoInput, "depends: no job " + text, "rsub ls --all lists the jobs");
    const JobRecord& j = found.front();
    if (j.backend != spec.backend || j.remote_id.empty())
      throw Error(Exit::Usage, fmt::format("depends: job {} runs on {}; a job on {} can wait only for jobs there",
                                           j.display_id(), j.backend, spec.backend));
    // A backend may forget finished jobs (Slurm after MinJobAge) and then take a
    // dependency on them as met: decide on ended ones here, as the local scheduler does.
    if (std::all_of(found.begin(), found.end(), [](const JobRecord& f) { return terminal(f.state); })) {
      const bool ok = std::all_of(found.begin(), found.end(), [](const JobRecord& f) { return f.state == JobState::Completed; });
      if (d.type == DepType::AfterOk ? !ok : d.type == DepType::AfterNotOk ? ok : false)
        throw Error(Exit::DataErr, fmt::format("depends: {}:{} can never be satisfied: job {} has ended {}",
                                               dep_type_name(d.type), text, j.display_id(), state_name(j.state)));
      d.remote.clear();
      d.job = -1;  // met: dropped below
      continue;
    }
    // A whole array by its array id (1234), one element by its own (1234_5).
    out.emplace_back(d.type, found.size() > 1 ? j.remote_id.substr(0, j.remote_id.find('_')) : j.remote_id);
    d.job = j.array_parent && found.size() > 1 ? *j.array_parent : j.id;
    d.remote.clear();
  }
  std::erase_if(spec.depends, [](const Dependency& d) { return d.job == -1; });
  return out;
}

int submit_remote(Context& ctx, JobSpec& spec, bool dry_run) {
  const BackendConfig config = backend_config(ctx, spec.backend);
  auto backend = make_backend(config);
  Store& store = ctx.store();
  const RemoteDeps deps = remote_deps(store, spec);
  const SubmitRef ref{0, ctx.me.user, store.tag()};
  if (dry_run) {
    const std::string text = backend->render(spec, deps, ref);
    if (ctx.format == Format::Table) *ctx.out << text;
    else *ctx.out << to_json_line(Json{{"schema", "rkit.job.submission.v1"}, {"backend", spec.backend},
                                        {"spec", spec.to_json()}, {"submission", text}})
                   << '\n';
    return 0;
  }
  // Stored first: its rsub id names it there.
  const std::vector<std::int64_t> ids = store.submit(spec, ctx.me, now_s());
  std::vector<std::string> remote;
  try {
    remote = backend->submit(spec, deps, {ids.front(), ctx.me.user, ref.store_tag});
  } catch (const SubmitUnconfirmed& e) {
    // It may be there: kept, and found there (or LOST) by a later refresh.
    if (!e.ids.empty()) store.set_remote_ids(ids, e.ids);
    throw Error(Exit::Unavailable, e.what(),
                fmt::format("kept as job {}: rsub finds it when {} answers, or marks it LOST", ids.front(), spec.backend));
  } catch (...) {
    store.discard(ids);  // refused there, or never sent: nothing is kept here either
    throw;
  }
  store.set_remote_ids(ids, remote);
  if (ctx.format == Format::Table) {
    // Slurm names a whole array by its id (1234); a Kubernetes array is one Job per element.
    if (spec.array && remote.front().find('_') != std::string::npos)
      *ctx.out << fmt::format("{}:{}\n", spec.backend, remote.front().substr(0, remote.front().find('_')));
    else
      for (std::int64_t id : ids) *ctx.out << store.job(id)->display_id() << '\n';
    return 0;
  }
  Printer out(*ctx.out, ctx.format, job_columns());
  for (std::int64_t id : ids) out.print(store.job(id)->to_json());
  out.finish();
  return 0;
}

}  // namespace

Submitter user_of(uid_t uid) {
  Submitter me;
  me.uid = uid;
  passwd pw{}, *found = nullptr;
  char buf[4096];
  me.user = ::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found ? found->pw_name : std::to_string(uid);
  return me;
}

BackendConfig backend_config(const Context& ctx, const std::string& name) {
  const auto it = ctx.settings.backends.find(name);
  if (it != ctx.settings.backends.end()) {
    BackendConfig c = it->second;
    if (::geteuid() == 0 && ctx.me.uid != 0) c.run_as_uid = ctx.me.uid;
    return c;
  }
  std::string known = "local";
  for (const auto& [n, _] : ctx.settings.backends) known += ", " + n;
  throw Error(Exit::Usage, fmt::format("backend \"{}\" is not configured (configured: {}, and auto)", name, known),
              "backends are [rsub.backends.NAME] tables of the configuration (rsub(1), BACKENDS)");
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
  // The client's directory, where it exists for the tasks too: not in a container image.
  const bool kube = spec.backend != "local" && backend_config(ctx, spec.backend).kind == BackendKind::Kubernetes;
  if (spec.workdir.empty() && !kube) spec.workdir = ctx.client_cwd;
  if (!spec.workdir.empty() && spec.workdir.front() != '/')
    throw Error(Exit::DataErr, "workdir " + spec.workdir + ": must be an absolute path");
  if (spec.backend != "local") return submit_remote(ctx, spec, dry_run);
  if (spec.resources.nodes > 1)
    throw Error(Exit::DataErr, fmt::format("the job asks for {} nodes; the local backend is one machine",
                                           spec.resources.nodes), "submit it to a Slurm backend (--backend)");
  Store& store = ctx.store();
  for (const Dependency& d : spec.depends) {  // the daemon sees local jobs' states only
    const std::vector<JobRecord> found = d.remote.empty() ? store.resolve(std::to_string(d.job)) : store.resolve(d.remote);
    if (!d.remote.empty() || (!found.empty() && found.front().backend != "local"))
      throw Error(Exit::Usage, fmt::format("depends: job {} runs on {}; a local job can wait only for local jobs",
                                           d.remote.empty() ? std::to_string(d.job) : d.remote,
                                           found.empty() ? std::string("a remote backend") : found.front().backend));
  }
  JobRecord preview;
  preview.spec = spec;
  preview.user = ctx.me.user;
  preview.uid = ctx.me.uid;
  preview.held = spec.hold;
  preview.submit_s = now_s();
  if (dry_run) {
    Printer out(*ctx.out, ctx.format == Format::Table ? Format::Json : ctx.format, job_columns());
    out.print(preview.to_json());
    out.finish();
    return 0;
  }
  // The daemon records what the machine has; a job that can never fit is refused now (a
  // dry run prints it anyway: it stores nothing).
  if (auto cap = store.meta("capacity")) {
    const Json c = parse_json(*cap, "capacity");
    const Resources& r = spec.resources;
    auto refuse = [&](const std::string& what, long need, long have) {
      throw Error(Exit::DataErr, fmt::format("the job needs {} {}, this machine has {}", need, what, have),
                  "see rsub status for what it has");
    };
    if (long need = long{r.tasks} * r.cpus_per_task; need > c.value("cpus", 0L)) refuse("cores", need, c.value("cpus", 0L));
    if (long need = long{r.tasks} * r.gpus_per_task; need > c.value("gpus", 0L)) refuse("GPUs", need, c.value("gpus", 0L));
  }
  const std::vector<std::int64_t> ids = store.submit(spec, ctx.me, preview.submit_s, environment);
  ctx.wake();
  if (ctx.format == Format::Table) {
    *ctx.out << ids.front() << '\n';
    return 0;
  }
  Printer out(*ctx.out, ctx.format, job_columns());
  for (std::int64_t id : ids) out.print(store.job(id)->to_json());
  out.finish();
  return 0;
}

int list(Context& ctx, JobFilter filter, bool cached) {
  Store& store = ctx.store();
  if (!cached) refresh_remote(ctx, store, false);
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
  refresh_remote(ctx, store, false);
  for (const JobRecord& j : resolve_all(store, ids)) {
    Json rec = j.to_json();
    // The environment the job was given is its owner's (and the admins') to read.
    const bool mine = j.uid == ctx.me.uid || is_admin(ctx);
    rec["env"] = mine ? Json(j.spec.env) : Json(nullptr);
    if (ctx.format != Format::Table) {
      *ctx.out << to_json_line(rec) << '\n';
      continue;
    }
    for (const auto& [key, value] : rec.items())
      if (key != "schema") *ctx.out << fmt::format("{:>22}: {}\n", key, Printer::cell(value, "-"));
    *ctx.out << '\n';
  }
  return 0;
}

int logs(Context& ctx, const std::string& id, bool follow, int task, bool err) {
  Store& store = ctx.store();
  std::vector<JobRecord> jobs = resolve_all(store, {id});
  if (jobs.size() != 1) throw Error(Exit::Usage, fmt::format("{} is an array: name one element, as {}_N", id, id));
  const JobRecord& job = jobs.front();
  check_owner(ctx, job, "read its output");
  if (task < 0 || task >= job.spec.resources.tasks)
    throw Error(Exit::Usage, fmt::format("--task {}: job {} has tasks 0 to {}", task, id, job.spec.resources.tasks - 1));
  const std::string name = fmt::format("task-{}.{}", task, err ? "err" : "out");
  std::string path;
  if (job.backend != "local") {
    const BackendConfig config = backend_config(ctx, job.backend);
    path = make_backend(config)->log_path(job, task, err);
  }
  UniqueFd fd;
  auto open_log = [&] {
    try {
      if (job.backend == "local")
        fd = open_job_log(fmt::format("{}/logs/{}", ctx.settings.dir, job.display_id()), name, job.uid);
      else
        fd = open_job_log(path.substr(0, path.rfind('/')), path.substr(path.rfind('/') + 1), job.uid);
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
    if (job.backend != "local") refresh_remote(ctx, store, false);
    const auto now = store.job(job.id);
    const bool over = !now || terminal(now->state);
    if (!over) sleep_s(job.backend == "local" ? 0.2 : 1.0);
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
  static const char* verbs[] = {"cancel", "hold", "release"};
  const char* verb = verbs[static_cast<int>(action)];
  for (const JobRecord& j : jobs) check_owner(ctx, j, fmt::format("{} it", verb));
  // Remote jobs: one command per backend, then their states are read again.
  std::map<std::string, std::vector<std::string>> remote;
  for (const JobRecord& j : jobs)
    if (j.backend != "local" && !j.remote_id.empty()) remote[j.backend].push_back(j.remote_id);
  for (const auto& [name, remote_ids] : remote)
    if (make_backend(backend_config(ctx, name))->control(remote_ids, action))  // the backend forgot them
      for (const JobRecord& j : jobs)
        if (j.backend == name) store.finish(j.id, JobState::Cancelled, "cancelled by " + ctx.me.user, now_s());
  for (const auto& [name, _] : remote) refresh_remote(ctx, store, false, true, name);
  bool wake = false;
  for (const JobRecord& j : jobs) {
    if (j.backend != "local") continue;
    bool changed = false;
    if (action == Control::Cancel) {
      changed = store.cancel(j.id, ctx.me.user, now_s());
      wake = true;  // a running job's supervisor is signalled by the daemon
      if (!changed && terminal(j.state) && !ctx.quiet)
        *ctx.err << fmt::format("rsub: note: job {} already ended ({})\n", j.display_id(), state_name(j.state));
    } else {
      changed = store.set_held(j.id, action == Control::Hold);
      wake |= changed;
      if (!changed && !ctx.quiet)
        *ctx.err << fmt::format("rsub: note: job {} is {}, not pending: nothing to {}\n", j.display_id(),
                                 state_name(j.state), verb);
    }
  }
  if (wake) ctx.wake();
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
  bool remote = false;
  for (const auto& j : jobs) {
    waiting.push_back(j.id);
    remote |= j.backend != "local";
  }
  int code = 0;
  while (!waiting.empty()) {
    if (remote) refresh_remote(ctx, store, false);  // at most every refresh_s; our own writes
    const std::uint64_t version = store.data_version();  // do not change data_version
    if (version != seen || seen == 0 || remote) {
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
    if (ctx.gone()) return 75;
    sleep_s(remote ? 0.5 : 0.02);
  }
  return code;
}

int status(Context& ctx) {
  Store& store = ctx.store();
  refresh_remote(ctx, store, false);
  struct Row {
    int pending = 0, running = 0, cpus = 0, gpus = 0;
    double oldest_submit = INFINITY;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;  // (backend, tenant)
  Row total;
  const double now = now_s();
  store.each_job({}, [&](const JobRecord& j) {
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
  Json capacity = Json::object();
  if (auto cap = store.meta("capacity")) capacity = parse_json(*cap, "capacity");
  auto record = [&](const std::string& backend, const std::string& tenant, const Row& r) {
    const bool local = backend == "local" || backend == "*";  // they carry the local machine's capacity
    return Json{{"schema", "rkit.queue.v1"},
                {"backend", backend},
                {"tenant", tenant},
                {"pending", r.pending},
                {"running", r.running},
                {"cpus_in_use", r.cpus},
                {"gpus_in_use", r.gpus},
                {"cpus_total", local ? capacity.value("cpus", Json(nullptr)) : Json(nullptr)},
                {"gpus_total", local ? capacity.value("gpus", Json(nullptr)) : Json(nullptr)},
                {"oldest_pending_s", std::isfinite(r.oldest_submit) ? Json(now - r.oldest_submit) : Json(nullptr)}};
  };
  auto age = [](const Json& v) { return v.is_null() ? std::string("-") : format_duration(std::floor(v.get<double>())); };
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
  auto size = [&](const char* key) {
    const auto it = capacity.find(key);
    return it != capacity.end() && it->is_number() ? it->dump() : std::string("?");
  };
  if (ctx.format == Format::Table && !ctx.quiet)
    *ctx.out << fmt::format("machine: {} cores, {} GPUs{}\n", size("cpus"), size("gpus"),
                            ctx.settings.shared() ? "; shared daemon" : "");
  if (ctx.format == Format::Table && !ctx.quiet)
    for (const auto& [name, config] : ctx.settings.backends) {
      try {
        *ctx.out << fmt::format("backend {}: {}\n", name, make_backend(config)->describe());
      } catch (const Error& e) {
        *ctx.out << fmt::format("backend {}: unreachable: {}\n", name, e.what());
      }
    }
  return 0;
}

int why(Context& ctx, const std::string& id) {
  Store& store = ctx.store();
  std::vector<JobRecord> jobs = resolve_all(store, {id});
  if (jobs.size() != 1) throw Error(Exit::Usage, fmt::format("{} is an array: name one element, as {}_N", id, id));
  const JobRecord& job = jobs.front();
  Json rec{{"schema", "rkit.job.why.v1"}, {"id", job.display_id()}, {"state", state_name(job.state)},
           {"reason", job.reason}};
  std::vector<std::string> lines;
  if (job.backend != "local") {
    refresh_remote(ctx, store, true, true, job.backend);
    const JobRecord now = *store.job(job.id);
    rec["state"] = state_name(now.state);
    rec["reason"] = now.reason;
    if (now.state == JobState::Pending) {
      std::string reason;
      lines = make_backend(backend_config(ctx, now.backend))->explain(now, reason);
      rec["reason"] = reason;
    } else
      lines.push_back(now.state == JobState::Running ? "it is running on " + now.host : "it has ended");
  } else if (job.state == JobState::Pending) {
    const Explanation x =
        ctx.explain ? ctx.explain(job.id) : explain_job(dry_pass(ctx.settings, local_machine(ctx.settings)), job.id);
    if (x.starts) {
      rec["reason"] = "None";
      lines.push_back("nothing holds it back: it starts at the daemon's next pass");
    } else if (x.verdict) {
      const Verdict& v = *x.verdict;
      const int pending = x.pending;
      rec["reason"] = v.reason;
      rec["detail"] = v.detail;
      rec["priority"] = {{"score", v.priority.score},
                         {"fairshare", v.priority.fairshare},
                         {"age", v.priority.age},
                         {"priority", v.priority.priority}};
      rec["position"] = v.position;
      rec["pending"] = pending;
      rec["expected_start_unix_s"] = v.expected_start_s ? Json(*v.expected_start_s) : Json(nullptr);
      rec["waits_for"] = v.waits_for;
      lines.push_back(v.detail);
      const auto& c = ctx.settings.sched;
      lines.push_back(fmt::format("priority {:.1f} = fair share {:.3f} × {} + age {:.3f} × {} + priority {} × {}",
                                  v.priority.score, v.priority.fairshare, c.weight_fairshare, v.priority.age,
                                  c.weight_age, v.priority.priority, c.weight_priority));
      if (v.position > 0) lines.push_back(fmt::format("position {} of {} pending", v.position, pending));
      if (!v.waits_for.empty()) {
        std::string ids;
        for (auto w : v.waits_for) {
          const auto other = store.job(w);
          ids += (ids.empty() ? "" : ", ") + (other ? other->display_id() : std::to_string(w));
        }
        lines.push_back("must finish first: " + ids);
      }
    }
  } else {
    lines.push_back(job.state == JobState::Running ? "it is running" : "it has ended");
  }
  if (ctx.format != Format::Table) {
    *ctx.out << to_json_line(rec) << '\n';
    return 0;
  }
  *ctx.out << fmt::format("job {}: {}{}\n", job.display_id(), rec["state"].get<std::string>(),
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
  *ctx.out << to_json_line(Json{{"jobs", jobs}, {"median_ms", ms[ms.size() / 2]}, {"max_ms", ms.back()},
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
  return Json{{"cmd", "submit"}, {"spec", spec.to_json()}, {"dry_run", dry_run}, {"environ", environment}};
}

int handle_request(Context& ctx, const Json& request) {
  if (!request.is_object()) throw Error(Exit::DataErr, "request: not a JSON object");
  const RequestReader r{request};
  const std::string format = r.get<std::string>("format", "table");
  const auto f = std::find(std::begin(kFormats), std::end(kFormats), format);
  if (f == std::end(kFormats)) throw Error(Exit::DataErr, "request: format " + format + ": not table, json or csv");
  ctx.format = static_cast<Format>(f - std::begin(kFormats));
  ctx.quiet = r.get<bool>("quiet", false);
  ctx.client_cwd = r.get<std::string>("cwd", "");
  const std::string cmd = r.get<std::string>("cmd", "");
  if (cmd == "submit") {
    const auto spec_it = request.find("spec");
    if (spec_it == request.end()) throw Error(Exit::DataErr, "request: submit without a spec");
    auto environment = r.get<std::vector<std::string>>("environ", {});
    std::erase_if(environment, [](const std::string& kv) { return kv.find('=') == std::string::npos; });
    // What one submit may store: each array element is a row holding the spec (twice:
    // spec and record) and the environment.
    const std::size_t spec_bytes = spec_it->dump().size();
    std::size_t env_bytes = 0;
    for (const auto& kv : environment) env_bytes += kv.size() + 1;
    if (spec_bytes > kMaxRequestSpecBytes || env_bytes > kMaxRequestSpecBytes)
      throw Error(Exit::DataErr, fmt::format("request: the job's spec ({} bytes) or environment ({} bytes) is over {} bytes",
                                             spec_bytes, env_bytes, kMaxRequestSpecBytes));
    JobSpec spec = JobSpec::from_json(*spec_it);
    const std::size_t rows = spec.array ? spec.array->indices.size() : 1;
    if ((2 * spec_bytes + env_bytes) * rows > kMaxSubmitBytes)
      throw Error(Exit::DataErr, fmt::format("the job would store {} MiB ({} elements of {} bytes): at most {} MiB",
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
  if (cmd == "status") return status(ctx);
  if (cmd == "why") return why(ctx, r.get<std::string>("id", ""));
  throw Error(Exit::Usage, "request: unknown command \"" + cmd + "\"", "the client is newer than the daemon?");
}

}  // namespace rkit::rsub
