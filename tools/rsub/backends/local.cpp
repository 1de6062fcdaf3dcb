// File: rsub/backends/local.cpp — the local backend (backend.hpp): jobs the daemon schedules on
// this machine (sched.hpp) and supervises (daemon.hpp). The store is its queue: the
// commands write a job's row and wake the daemon, which starts and ends it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <tuple>

#include "commands/commands.hpp"
#include "rkit/error.hpp"
#include "rkit/printer.hpp"

namespace rkit::rsub {

namespace {

// "1 core", "2 cores".
std::string count(long n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); }

class LocalBackend final : public Backend {
 public:
  explicit LocalBackend(const BackendConfig& config) : c_(config) {}

  void prepare(Context& ctx, JobSpec& spec) override {
    if (spec.workdir.empty()) spec.workdir = ctx.client_cwd;
    if (spec.resources.nodes > 1)
      throw Error(Exit::DataErr,
                  fmt::format("the job asks for {} nodes; the local backend is one machine", spec.resources.nodes),
                  "submit it to a Slurm backend (--backend)");
    Store& store = ctx.store();
    for (const Dependency& d : spec.depends) {  // the daemon sees local jobs' states only
      const std::vector<JobRecord> found =
          d.remote.empty() ? store.resolve(std::to_string(d.job)) : store.resolve(d.remote);
      if (!d.remote.empty() || (!found.empty() && found.front().backend != c_.name))
        throw Error(Exit::Usage, fmt::format("depends: job {} runs on {}; a local job can wait only for local jobs",
                                             d.remote.empty() ? std::to_string(d.job) : d.remote,
                                             found.empty() ? std::string("a remote backend") : found.front().backend));
    }
  }

  int submit(Context& ctx, JobSpec& spec, bool dry_run, const std::vector<std::string>& environment) override {
    Store& store = ctx.store();
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
    const Json have = capacity(ctx);
    const Resources& r = spec.resources;
    for (auto [key, what, need] : {std::tuple{"cpus", "cores", long{r.tasks} * r.cpus_per_task},
                                   std::tuple{"gpus", "GPUs", long{r.tasks} * r.gpus_per_task}})
      if (have[key].is_number() && need > have[key].get<long>())
        throw Error(Exit::DataErr,
                    fmt::format("the job needs {} {}, this machine has {}", need, what, have[key].get<long>()),
                    "see rsub status for what it has");
    const std::vector<std::int64_t> ids = store.submit(spec, ctx.me, preview.submit_s, environment);
    ctx.wake();
    if (ctx.format == Format::Table)
      *ctx.out << ids.front() << '\n';
    else
      print_jobs(ctx, ids);
    return 0;
  }

  bool refresh(Context&, bool, bool) override { return false; }  // the daemon writes the states

  void control(Context& ctx, const std::vector<JobRecord>& jobs, Control action) override {
    Store& store = ctx.store();
    bool wake = false;
    for (const JobRecord& j : jobs) {
      if (action == Control::Cancel) {
        wake = true;  // a running job's supervisor is signalled by the daemon
        if (!store.cancel(j.id, ctx.me.user, now_s()) && terminal(j.state) && !ctx.quiet)
          *ctx.err << fmt::format("rsub: note: job {} already ended ({})\n", j.display_id(), state_name(j.state));
        continue;
      }
      const bool changed = store.set_held(j.id, action == Control::Hold);
      wake |= changed;
      if (!changed && !ctx.quiet)
        *ctx.err << fmt::format("rsub: note: job {} is {}, not pending: nothing to {}\n", j.display_id(),
                                state_name(j.state), control_verb(action));
    }
    if (wake) ctx.wake();
  }

  LogFile log_file(const JobRecord& job, int task, bool err) const override {
    return {fmt::format("{}/{}", c_.log_dir, job.display_id()), fmt::format("task-{}.{}", task, err ? "err" : "out")};
  }

  double poll_s() const override { return 0.02; }

  void explain(Context& ctx, const JobRecord& job, Json& rec, std::vector<std::string>& lines) override {
    if (job.state != JobState::Pending) {
      lines.push_back(job.state == JobState::Running ? "it is running" : "it has ended");
      return;
    }
    const Explanation x =
        ctx.explain ? ctx.explain(job.id) : explain_job(dry_pass(ctx.settings, local_machine(ctx.settings)), job.id);
    if (x.starts) {
      rec["reason"] = "None";
      lines.push_back("nothing holds it back: it starts at the daemon's next pass");
      return;
    }
    if (!x.verdict) return;
    const Verdict& v = *x.verdict;
    rec["reason"] = v.reason;
    rec["detail"] = v.detail;
    rec["priority"] = {{"score", v.priority.score},
                       {"fairshare", v.priority.fairshare},
                       {"age", v.priority.age},
                       {"priority", v.priority.priority}};
    rec["position"] = v.position;
    rec["pending"] = x.pending;
    rec["expected_start_unix_s"] = v.expected_start_s ? Json(*v.expected_start_s) : Json(nullptr);
    rec["waits_for"] = v.waits_for;
    lines.push_back(v.detail);
    const auto& c = ctx.settings.sched;
    lines.push_back(fmt::format("priority {:.1f} = fair share {:.3f} × {} + age {:.3f} × {} + priority {} × {}",
                                v.priority.score, v.priority.fairshare, c.weight_fairshare, v.priority.age,
                                c.weight_age, v.priority.priority, c.weight_priority));
    if (v.position > 0) lines.push_back(fmt::format("position {} of {} pending", v.position, x.pending));
    if (!v.waits_for.empty()) {
      std::vector<std::string> ids;
      for (auto w : v.waits_for) {
        const auto other = ctx.store().job(w);
        ids.push_back(other ? other->display_id() : std::to_string(w));
      }
      lines.push_back(fmt::format("must finish first: {}", fmt::join(ids, ", ")));
    }
  }

  std::string describe(Context& ctx) override {
    const Json c = capacity(ctx);
    auto size = [&](const char* key) { return c[key].is_number() ? c[key].dump() : std::string("?"); };
    return fmt::format("machine: {} cores, {} GPUs{}", size("cpus"), size("gpus"),
                       ctx.settings.shared() ? "; shared daemon" : "");
  }

  // What the daemon recorded of the machine when it started.
  Json capacity(Context& ctx) override {
    Json out{{"cpus", nullptr}, {"gpus", nullptr}};
    if (auto cap = ctx.store().meta("capacity")) {
      const Json c = parse_json(*cap, "capacity");
      for (const char* key : {"cpus", "gpus"})
        if (c.contains(key) && c[key].is_number()) out[key] = c[key];
    }
    return out;
  }

  // Now: nothing waits here and enough cores and GPUs are free; Never: the job is too big
  // for the machine.
  Offer offer(Context& ctx, const JobSpec& spec) override {
    Store& store = ctx.store();
    const Json have = capacity(ctx);
    long cpus = 0, gpus = 0;
    if (have["cpus"].is_number()) {
      cpus = have["cpus"].get<long>();
      gpus = have["gpus"].is_number() ? have["gpus"].get<long>() : 0;
    } else {  // no daemon has started yet
      const Machine m = local_machine(ctx.settings);
      cpus = static_cast<long>(m.topology.cores.size());
      gpus = static_cast<long>(m.topology.gpus.size());
    }
    const Resources& r = spec.resources;
    const long need_cpus = long{r.tasks} * r.cpus_per_task, need_gpus = long{r.tasks} * r.gpus_per_task;
    if (r.nodes > 1) return {Offer::Never, {}, fmt::format("the job asks for {} nodes; this is one machine", r.nodes)};
    if (need_cpus > cpus || need_gpus > gpus)
      return {Offer::Never,
              {},
              fmt::format("too big: needs {} and {}, the machine has {} and {}", count(need_cpus, "core"),
                          count(need_gpus, "GPU"), cpus, gpus)};
    long used_cpus = 0, used_gpus = 0, pending = 0;
    store.each_job({}, [&](const JobRecord& j) {
      if (j.backend != c_.name) return;
      if (j.state == JobState::Pending)
        pending += !j.held;
      else {
        used_cpus += long{j.spec.resources.tasks} * j.spec.resources.cpus_per_task;
        used_gpus += long{j.spec.resources.tasks} * j.spec.resources.gpus_per_task;
      }
    });
    if (pending > 0) return {Offer::Later, {}, fmt::format("{} job(s) already wait there", pending)};
    if (need_cpus > cpus - used_cpus || need_gpus > gpus - used_gpus)
      return {Offer::Later,
              {},
              fmt::format("busy: needs {} and {}, {} and {} are free now", count(need_cpus, "core"),
                          count(need_gpus, "GPU"), cpus - used_cpus, gpus - used_gpus)};
    return {Offer::Now, 0.0,
            fmt::format("fits now ({} of {} cores and {} of {} GPUs free)", cpus - used_cpus, cpus, gpus - used_gpus,
                        gpus)};
  }

 private:
  const BackendConfig& c_;
};

struct LocalConfig final : BackendConfig {
  std::unique_ptr<Backend> open(std::optional<std::uint32_t>) const override {
    return std::make_unique<LocalBackend>(*this);
  }
};

}  // namespace

std::shared_ptr<const BackendConfig> local_backend_config(const std::string& state_dir) {
  auto c = std::make_shared<LocalConfig>();
  c->name = c->kind = "local";
  c->log_dir = state_dir + "/logs";
  return c;
}

}  // namespace rkit::rsub
