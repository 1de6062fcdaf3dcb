// File: rsub/commands.cpp — the bodies of rsub's commands (commands.hpp).
#include "commands.hpp"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

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
std::vector<JobRecord> resolve_all(Store& store, const std::vector<std::string>& ids) {
  std::vector<JobRecord> out;
  for (const std::string& text : ids) {
    std::vector<JobRecord> found = store.resolve(text);
    if (found.empty()) throw Error(Exit::NoInput, "no job " + text, "rsub ls --all lists the jobs");
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

bool is_admin(const Context& ctx) {
  return ctx.me.uid == 0 ||
         std::find(ctx.settings.admins.begin(), ctx.settings.admins.end(), ctx.me.user) != ctx.settings.admins.end();
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

Submitter current_user() {
  Submitter me;
  me.uid = ::getuid();
  const passwd* pw = ::getpwuid(me.uid);
  me.user = pw ? pw->pw_name : std::to_string(me.uid);
  return me;
}

int submit(Context& ctx, JobSpec spec, bool dry_run) {
  if (spec.tenant.empty()) {
    auto it = ctx.settings.tenants_of_users.find(ctx.me.user);
    spec.tenant = it != ctx.settings.tenants_of_users.end() ? it->second : ctx.me.user;
  }
  if (spec.workdir.empty()) {
    char cwd[4096];
    if (!::getcwd(cwd, sizeof cwd)) throw system_error("getcwd", errno);
    spec.workdir = cwd;
  }
  if (!spec.time_limit_s) spec.time_limit_s = ctx.settings.default_time_limit_s;
  if (spec.backend == "auto") spec.backend = "local";
  if (spec.backend != "local")
    throw Error(Exit::Usage, fmt::format("backend \"{}\" is not configured", spec.backend),
                "this rsub knows the local backend");
  Store store(ctx.settings.dir);
  // The daemon records what the machine has; a job that can never fit is refused now.
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
  JobRecord preview;
  preview.spec = spec;
  preview.user = ctx.me.user;
  preview.uid = ctx.me.uid;
  preview.held = spec.hold;
  preview.submit_s = now_s();
  if (dry_run) {
    Printer out(std::cout, ctx.format == Format::Table ? Format::Json : ctx.format, job_columns());
    out.print(preview.to_json());
    out.finish();
    return 0;
  }
  const std::vector<std::int64_t> ids = store.submit(spec, ctx.me, preview.submit_s);
  ensure_daemon(ctx.exe, ctx.config_path, ctx.settings.dir);
  if (ctx.format == Format::Table) {
    std::cout << ids.front() << '\n';
    return 0;
  }
  Printer out(std::cout, ctx.format, job_columns());
  for (std::int64_t id : ids) out.print(store.job(id)->to_json());
  out.finish();
  return 0;
}

int list(Context& ctx, JobFilter filter) {
  Store store(ctx.settings.dir);
  filter.light = true;
  if (ctx.format == Format::Json) {  // streamed: ls --all --json over a long history
    store.each_job(filter, [](const JobRecord& j) { std::cout << j.to_json_line() << '\n'; });
    return 0;
  }
  Printer out(std::cout, ctx.format, job_columns());
  store.each_job(filter, [&](const JobRecord& j) { out.print(j.to_json()); });
  out.finish();
  return 0;
}

int show(Context& ctx, const std::vector<std::string>& ids) {
  Store store(ctx.settings.dir);
  for (const JobRecord& j : resolve_all(store, ids)) {
    const Json rec = j.to_json();
    if (ctx.format != Format::Table) {
      std::cout << to_json_line(rec) << '\n';
      continue;
    }
    for (const auto& [key, value] : rec.items())
      if (key != "schema") std::cout << fmt::format("{:>22}: {}\n", key, Printer::cell(value, "-"));
    std::cout << '\n';
  }
  return 0;
}

int logs(Context& ctx, const std::string& id, bool follow, int task, bool err) {
  Store store(ctx.settings.dir);
  std::vector<JobRecord> jobs = resolve_all(store, {id});
  if (jobs.size() != 1) throw Error(Exit::Usage, fmt::format("{} is an array: name one element, as {}_N", id, id));
  const JobRecord& job = jobs.front();
  if (task < 0 || task >= job.spec.resources.tasks)
    throw Error(Exit::Usage, fmt::format("--task {}: job {} has tasks 0 to {}", task, id, job.spec.resources.tasks - 1));
  const std::string path =
      fmt::format("{}/logs/{}/task-{}.{}", ctx.settings.dir, job.display_id(), task, err ? "err" : "out");
  std::ifstream in;
  std::string buf(1 << 16, '\0');
  auto drain = [&] {  // whatever the file holds beyond what was printed
    if (!in.is_open()) in.open(path, std::ios::binary);
    if (!in.is_open()) return;
    in.clear();
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
      std::cout.write(buf.data(), in.gcount());
    check_stdout();
  };
  drain();
  while (follow) {
    const auto now = store.job(job.id);
    const bool over = !now || terminal(now->state);
    if (!over) sleep_s(0.2);
    drain();  // after the end too: what the last moment wrote
    if (over) break;
  }
  if (!in.is_open() && !follow && job.state == JobState::Pending)
    throw Error(Exit::NoInput, fmt::format("job {} has not started: no output yet", id));
  return 0;
}

int control(Context& ctx, const std::vector<std::string>& ids, Control action) {
  Store store(ctx.settings.dir);
  const std::vector<JobRecord> jobs = resolve_all(store, ids);
  static const char* verbs[] = {"cancel", "hold", "release"};
  const char* verb = verbs[static_cast<int>(action)];
  for (const JobRecord& j : jobs)
    if (j.uid != ctx.me.uid && !is_admin(ctx))
      throw Error(Exit::NoPerm, fmt::format("job {} belongs to {}: only its user or an admin can {} it", j.display_id(),
                                            j.user, verb),
                  "admins are listed in rsub.admins");
  bool wake = false;
  for (const JobRecord& j : jobs) {
    bool changed = false;
    if (action == Control::Cancel) {
      changed = store.cancel(j.id, ctx.me.user, now_s());
      wake = true;  // a running job's supervisor is signalled by the daemon
      if (!changed && terminal(j.state) && !ctx.quiet)
        std::cerr << fmt::format("rsub: note: job {} already ended ({})\n", j.display_id(), state_name(j.state));
    } else {
      changed = store.set_held(j.id, action == Control::Hold);
      wake |= changed;
      if (!changed && !ctx.quiet)
        std::cerr << fmt::format("rsub: note: job {} is {}, not pending: nothing to {}\n", j.display_id(),
                                 state_name(j.state), verb);
    }
  }
  if (wake) ensure_daemon(ctx.exe, ctx.config_path, ctx.settings.dir);
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
    default: return 1;
  }
}

int wait(Context& ctx, const std::vector<std::string>& ids, std::optional<double> timeout_s) {
  Store store(ctx.settings.dir);
  std::vector<JobRecord> jobs = resolve_all(store, ids);
  const double deadline = timeout_s ? now_s() + *timeout_s : INFINITY;
  std::uint64_t seen = 0;
  std::vector<std::int64_t> waiting;
  for (const auto& j : jobs) waiting.push_back(j.id);
  int code = 0;
  while (!waiting.empty()) {
    const std::uint64_t version = store.data_version();
    if (version != seen || seen == 0) {
      seen = version;
      std::vector<std::int64_t> still;
      for (const auto& [id, state] : store.states_of(waiting)) {
        if (!terminal(state)) {
          still.push_back(id);
          continue;
        }
        const JobRecord j = *store.job(id);
        code = std::max(code, wait_code(j));
        if (ctx.format != Format::Table) std::cout << j.to_json_line() << '\n';
      }
      waiting = std::move(still);
      if (waiting.empty()) break;
    }
    if (now_s() > deadline)
      throw Error(Exit::TempFail, fmt::format("{} job(s) still active after --timeout", waiting.size()));
    sleep_s(0.02);
  }
  return code;
}

int status(Context& ctx) {
  Store store(ctx.settings.dir);
  struct Row {
    int pending = 0, running = 0, cpus = 0, gpus = 0;
    double oldest_submit = INFINITY;
  };
  std::map<std::string, Row> rows;
  Row total;
  const double now = now_s();
  store.each_job({}, [&](const JobRecord& j) {
    for (Row* r : {&rows[j.spec.tenant], &total}) {
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
  auto record = [&](const std::string& tenant, const Row& r) {
    return Json{{"schema", "rkit.queue.v1"},
                {"backend", "local"},
                {"tenant", tenant},
                {"pending", r.pending},
                {"running", r.running},
                {"cpus_in_use", r.cpus},
                {"gpus_in_use", r.gpus},
                {"cpus_total", capacity.value("cpus", Json(nullptr))},
                {"gpus_total", capacity.value("gpus", Json(nullptr))},
                {"oldest_pending_s", std::isfinite(r.oldest_submit) ? Json(now - r.oldest_submit) : Json(nullptr)}};
  };
  auto age = [](const Json& v) { return v.is_null() ? std::string("-") : format_duration(std::floor(v.get<double>())); };
  Printer out(std::cout, ctx.format,
              {{"TENANT", "tenant"},
               {"PENDING", "pending"},
               {"RUNNING", "running"},
               {"CPUS", "cpus_in_use"},
               {"GPUS", "gpus_in_use"},
               {"OLDEST PENDING", "oldest_pending_s", age}});
  for (const auto& [tenant, r] : rows) out.print(record(tenant, r));
  out.print(record("*", total));
  out.finish();
  if (ctx.format == Format::Table && !ctx.quiet)
    std::cout << fmt::format("machine: {} cores, {} GPUs{}\n", capacity.value("cpus", Json("?")).dump(),
                             capacity.value("gpus", Json("?")).dump(),
                             wake_daemon(ctx.settings.dir) ? "; daemon running" : "; no daemon running");
  return 0;
}

int why(Context& ctx, const std::string& id) {
  Store store(ctx.settings.dir);
  std::vector<JobRecord> jobs = resolve_all(store, {id});
  if (jobs.size() != 1) throw Error(Exit::Usage, fmt::format("{} is an array: name one element, as {}_N", id, id));
  const JobRecord& job = jobs.front();
  Json rec{{"schema", "rkit.job.why.v1"}, {"id", job.display_id()}, {"state", state_name(job.state)},
           {"reason", job.reason}};
  std::vector<std::string> lines;
  if (job.state == JobState::Pending) {
    const SchedPlan plan = dry_pass(ctx.settings, local_machine(ctx.settings));
    const auto it = std::find_if(plan.verdicts.begin(), plan.verdicts.end(), [&](const Verdict& v) { return v.job == job.id; });
    const bool starts = std::any_of(plan.starts.begin(), plan.starts.end(), [&](const Start& s) { return s.job == job.id; });
    if (starts) {
      rec["reason"] = "None";
      lines.push_back("nothing holds it back: it starts at the daemon's next pass");
    } else if (it != plan.verdicts.end()) {
      const Verdict& v = *it;
      int pending = 0;
      for (const Verdict& w : plan.verdicts) pending += w.position > 0;
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
    std::cout << to_json_line(rec) << '\n';
    return 0;
  }
  std::cout << fmt::format("job {}: {}{}\n", job.display_id(), state_name(job.state),
                           rec["reason"].get<std::string>().empty() ? "" : " (" + rec["reason"].get<std::string>() + ")");
  for (const auto& l : lines) std::cout << "  " << l << '\n';
  return 0;
}

int bench_fill(Context& ctx, int jobs, int tenants) {
  Store store(ctx.settings.dir);
  JobSpec spec;
  spec.command = {"true"};
  spec.name = "bench";
  spec.workdir = "/";
  store.transaction([&] {
    for (int i = 0; i < jobs; ++i) {
      spec.tenant = fmt::format("tenant{:02}", i % std::max(1, tenants));
      spec.priority = i % 7;
      store.submit(spec, ctx.me, now_s() - (jobs - i));
    }
  });
  return 0;
}

int bench_pass(Context& ctx) {
  const PassTiming t = time_pass(ctx.settings, local_machine(ctx.settings));
  std::cout << to_json_line(Json{{"load_ms", t.load_ms},
                                 {"pass_ms", t.pass_ms},
                                 {"starts", t.plan.starts.size()},
                                 {"verdicts", t.plan.verdicts.size()}})
            << '\n';
  return 0;
}

}  // namespace rkit::rsub
