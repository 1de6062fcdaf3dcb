// File: rsub/backends/remote.cpp — what every remote backend does with its kind's primitives
// (remote.hpp): store a job before handing it on, adopt a submission whose answer was
// lost, read the states in one query; and how their commands run.
#include "backends/remote.hpp"

#include <fmt/format.h>
#include <pwd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "commands/commands.hpp"
#include "rkit/error.hpp"
#include "rkit/process.hpp"
#include "rkit/units.hpp"

namespace rkit::rsub {

namespace {

// The first line of a command's complaint, without its "sbatch: error: " prefix.
std::string message_of(const std::string& program, std::string_view text) {
  text = text.substr(0, text.find('\n'));
  for (std::string_view prefix : {program + ": ", std::string("error: ")})
    if (text.starts_with(prefix)) text.remove_prefix(prefix.size());
  return std::string(text.empty() ? "(no message)" : text);
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
      const bool ok =
          std::all_of(found.begin(), found.end(), [](const JobRecord& f) { return f.state == JobState::Completed; });
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

// The commands' Backend for a remote one: rsub's part of its jobs (the store) around the
// kind's primitives. What changes a job (submit, control) and what the caller asks about
// one job (why, auto's wait) runs as the caller (`r_`); what every user's jobs are read
// from (the batched query, adopting lost submissions, status' line) runs as the daemon's
// user (`daemon_`), so that no caller's view of the backend (another context, Slurm's
// PrivateData) decides the states of other users' jobs.
class RemoteJobs final : public Backend {
 public:
  RemoteJobs(const RemoteConfig& config, std::unique_ptr<RemoteBackend> as_caller,
             std::unique_ptr<RemoteBackend> as_daemon)
      : c_(config), r_(std::move(as_caller)), daemon_(std::move(as_daemon)) {}

  void prepare(Context& ctx, JobSpec& spec) override { r_->prepare(spec, ctx.client_cwd); }

  int submit(Context& ctx, JobSpec& spec, bool dry_run, const std::vector<std::string>&) override {
    Store& store = ctx.store();
    const RemoteDeps deps = remote_deps(store, spec);
    const SubmitRef ref{0, ctx.me.user, store.tag()};
    if (dry_run) {
      const std::string text = r_->render(spec, deps, ref);
      if (ctx.format == Format::Table)
        *ctx.out << text;
      else
        *ctx.out << to_json_line(Json{{"schema", "rkit.job.submission.v1"},
                                      {"backend", spec.backend},
                                      {"spec", spec.to_json()},
                                      {"submission", bytes_json(text)}})
                 << '\n';
      return 0;
    }
    // Stored first: its rsub id names it there.
    const std::vector<std::int64_t> ids = store.submit(spec, ctx.me, now_s());
    std::vector<std::string> remote;
    try {
      remote = r_->submit(spec, deps, {ids.front(), ctx.me.user, ref.store_tag});
    } catch (const SubmitUnconfirmed& e) {
      // It may be there: kept, and found there (or LOST) by a later refresh.
      if (!e.ids.empty()) store.set_remote_ids(ids, e.ids);
      throw Error(Exit::Unavailable, e.what(),
                  fmt::format("kept as job {}: rsub finds it when {} answers, or marks it LOST", ids.front(), c_.name));
    } catch (...) {
      store.discard(ids);  // refused there, or never sent: nothing is kept here either
      throw;
    }
    store.set_remote_ids(ids, remote);
    if (ctx.format != Format::Table) print_jobs(ctx, ids);
    // Slurm names a whole array by its id (1234); a Kubernetes array is one Job per element.
    else if (spec.array && remote.front().find('_') != std::string::npos)
      *ctx.out << fmt::format("{}:{}\n", c_.name, remote.front().substr(0, remote.front().find('_')));
    else
      for (std::int64_t id : ids) *ctx.out << store.job(id)->display_id() << '\n';
    return 0;
  }

  bool refresh(Context& ctx, bool strict, bool force) override {
    Store& store = ctx.store();
    auto active = store.remote_active(c_.name);
    const auto waiting = store.unsubmitted(c_.name);
    if (active.empty() && waiting.empty()) return false;
    if (!store.claim_refresh(c_.name, now_s(), force ? 0 : c_.refresh_s)) return false;
    try {
      if (adopt_unsubmitted(store, waiting)) active = store.remote_active(c_.name);
      std::vector<std::string> ids;
      for (const auto& a : active) ids.push_back(a.second);
      if (!ids.empty()) store.update_remote(c_.name, daemon_->query(ids), now_s());
    } catch (const Error& e) {
      if (strict) throw;
      if (!ctx.quiet) warn("rsub", fmt::format("{} (showing the states last read)", e.what()), *ctx.err);
    }
    return true;  // it may have written (a job adopted, or LOST)
  }

  void control(Context& ctx, const std::vector<JobRecord>& jobs, Control action) override {
    std::vector<std::string> ids;
    for (const JobRecord& j : jobs)
      if (!j.remote_id.empty()) ids.push_back(j.remote_id);
    if (ids.empty()) return;
    Store& store = ctx.store();
    if (r_->control(ids, action)) {  // the backend forgot them
      const std::string reason = "cancelled by " + ctx.me.user;
      for (const JobRecord& j : jobs)  // active when asked: LOST now only if a refresh saw it deleted
        if (!store.finish(j.id, JobState::Cancelled, reason, now_s()) && !terminal(j.state))
          store.lost_was_cancelled(j.id, reason);
    }
    refresh(ctx, false, true);  // what they are now
  }

  LogFile log_file(const JobRecord& job, int task, bool err) const override {
    const std::string path = r_->log_path(job, task, err);
    return {path.substr(0, path.rfind('/')), path.substr(path.rfind('/') + 1)};
  }

  double poll_s() const override { return 0.5; }

  void explain(Context& ctx, const JobRecord& job, Json& rec, std::vector<std::string>& lines) override {
    refresh(ctx, true, true);
    const JobRecord now = *ctx.store().job(job.id);
    rec["state"] = state_name(now.state);
    rec["reason"] = now.reason;
    if (now.state == JobState::Pending) {
      std::string reason;
      lines = r_->explain(now, reason);
      rec["reason"] = reason;
    } else
      lines.push_back(now.state == JobState::Running ? "it is running on " + now.host : "it has ended");
  }

  std::string describe(Context&) override {
    try {
      return fmt::format("backend {}: {}", c_.name, daemon_->describe());
    } catch (const Error& e) {
      return fmt::format("backend {}: unreachable: {}", c_.name, e.what());
    }
  }

  Json capacity(Context&) override { return Json{{"cpus", nullptr}, {"gpus", nullptr}}; }

  Offer offer(Context&, const JobSpec& spec) override {
    Offer o;
    try {
      o.wait_s = r_->expected_wait(spec);  // also: can it take the job at all?
    } catch (const Error& e) {
      return {Offer::Never, std::nullopt, e.what()};
    }
    if (!o.wait_s) o.wait_s = c_.assumed_wait_s;
    o.why = o.wait_s ? "expected wait " + format_duration(std::round(*o.wait_s)) : "no wait estimate";
    return o;
  }

 private:
  // The remote ids of jobs whose submission was not confirmed, when the backend has them
  // now; such jobs still unknown after the retry window (and 5 minutes more) are LOST:
  // they may run there, so they are never submitted again. Returns whether any job
  // learnt its id.
  bool adopt_unsubmitted(Store& store, const std::vector<Store::Unsubmitted>& waiting) {
    if (waiting.empty()) return false;
    bool adopted = false;
    std::map<std::string, std::map<std::int64_t, std::string>> found;  // by user
    for (const auto& u : waiting) {
      if (!found.count(u.user)) found[u.user] = daemon_->adopt(store.tag(), u.user);
      const auto& mine = found[u.user];
      if (auto it = mine.find(u.array_id); it != mine.end()) {
        store.set_remote_ids({u.id}, {u.array_index ? fmt::format("{}_{}", it->second, *u.array_index) : it->second});
        adopted = true;
      }
    }
    const double now = now_s();
    store.lose_unsubmitted(c_.name, now - c_.submit_retry_s - 300, now);
    return adopted;
  }

  const RemoteConfig& c_;
  std::unique_ptr<RemoteBackend> r_, daemon_;
};

}  // namespace

std::unique_ptr<Backend> RemoteConfig::open(std::optional<std::uint32_t> run_as_uid) const {
  return std::make_unique<RemoteJobs>(*this, remote(run_as_uid), remote(std::nullopt));
}

RunResult run_backend_command(const BackendCall& how, std::vector<std::string> argv,
                              const std::vector<std::pair<std::string, std::string>>& env, const std::string& input,
                              double retry_s) {
  SpawnOptions o;
  const std::string program = argv.front();
  if (how.run_as_uid) {
    passwd pw{}, *found = nullptr;  // the daemon's request threads: the reentrant lookup
    char buf[4096];
    if (::getpwuid_r(*how.run_as_uid, &pw, buf, sizeof buf, &found) != 0 || !found)
      throw Error(Exit::NoPerm, fmt::format("{}: uid {} has no user name", how.who, *how.run_as_uid));
    argv.insert(argv.begin(), {"setpriv", fmt::format("--reuid={}", found->pw_uid),
                               fmt::format("--regid={}", found->pw_gid), "--init-groups", "--"});
    // The user's command gets none of the daemon's environment: a plain PATH, who it
    // is, and what the backend sets (SLURM_CONF ...).
    o.clear_env = true;
    o.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
             {"HOME", found->pw_dir},
             {"USER", found->pw_name},
             {"LOGNAME", found->pw_name}};
  }
  o.argv = std::move(argv);
  o.env.insert(o.env.end(), env.begin(), env.end());
  o.in = input.empty() ? Redirect::null() : Redirect::pipe();
  o.out = Redirect::pipe();
  o.err = Redirect::pipe();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(retry_s);
  for (double pause = 0.25;; pause = std::min(pause * 2, 4.0)) {
    RunResult r;
    try {
      r = run(o, 120.0, 5.0, input);
    } catch (const Error& e) {
      throw Error(Exit::Unavailable, fmt::format("{}: {}", how.who, e.what()), "is its client installed and in PATH?");
    }
    if (r.status.success() || !(r.timed_out || how.unreachable(r.err))) return r;
    if (std::chrono::steady_clock::now() + std::chrono::duration<double>(pause) > deadline) {
      const std::string says = r.timed_out ? std::string() : message_of(program, r.err);
      throw BackendUnreachable(
          fmt::format("{}: cannot reach {} ({}: {})", how.who, how.peer, program, r.timed_out ? "timed out" : says),
          "nothing was changed there; try again when it is back", r.timed_out, says);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
  }
}

bool mentions_any(std::string_view text, const std::vector<std::string_view>& phrases) {
  return std::any_of(phrases.begin(), phrases.end(),
                     [&](std::string_view p) { return text.find(p) != std::string_view::npos; });
}

void backend_refused(const BackendCall& how, const std::string& what, const RunResult& r) {
  const std::string message = message_of(what.substr(0, what.find(' ')), r.err.empty() ? r.out : r.err);
  throw Error(Exit::DataErr, fmt::format("{}: {} failed: {}", how.who, what, message));
}

}  // namespace rkit::rsub
