// File: rsub/backends/slurm.cpp — the Slurm backend (remote.hpp): the job spec as an sbatch
// script whose tasks start under srun, states from sacct, control with scancel/scontrol.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "backends/remote.hpp"
#include "rkit/error.hpp"
#include "rkit/process.hpp"
#include "rkit/time.hpp"

namespace rkit::rsub {

namespace {

// Slurm's time format, D-HH:MM:SS, rounded up to whole seconds.
std::string slurm_time(double seconds) {
  const auto s = static_cast<long long>(std::ceil(seconds));
  return fmt::format("{}-{:02}:{:02}:{:02}", s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
}

// "2026-11-30T18:19:23" (Slurm prints local time) → Unix seconds; "Unknown", "None" → nullopt.
std::optional<double> slurm_timestamp(std::string_view text) { return parse_local_time(text); }

// What Slurm's common pending reasons mean, for rsub why.
std::string slurm_reason_text(std::string_view reason) {
  static const std::pair<std::string_view, std::string_view> texts[] = {
      {"Resources", "the cores, memory or GPUs it asks for are in use"},
      {"Priority", "jobs of higher priority are ahead of it"},
      {"Dependency", "it waits for the jobs it depends on"},
      {"DependencyNeverSatisfied", "a job it depends on ended the wrong way"},
      {"JobHeldUser", "it is held (rsub release)"},
      {"JobHeldAdmin", "an administrator holds it"},
      {"BeginTime", "not before its begin time (a requeued attempt waits a little)"},
      {"JobArrayTaskLimit", "its array's max_concurrent is reached"},
      {"ReqNodeNotAvail", "the nodes it needs are down or reserved"},
      {"PartitionTimeLimit", "its time limit exceeds the partition's"}};
  for (const auto& [code, text] : texts)
    if (reason == code) return fmt::format(" ({})", text);
  if (reason.starts_with("QOS") || reason.starts_with("Assoc")) return " (a limit of its QOS or account)";
  return "";
}

std::string base_id(std::string_view id) { return std::string(id.substr(0, id.find('_'))); }

// "12,13": Slurm's job lists, each id once.
std::string comma_list(const std::set<std::string>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

// What Slurm's commands print, as rsub reads it: the one place their messages are
// matched (rsub's own errors are typed: BackendUnreachable, SubmitUnconfirmed). Each
// SlurmSays names one situation by the phrases of Slurm 22.05's stderr that mean it.
enum class SlurmSays {
  Unreachable,     // slurmctld did not answer: down, busy, or slow; worth another try
  MaybeDelivered,  // of those, the ones where the request may have reached slurmctld (it
                   // timed out rather than being refused): a submission may have happened
  NoAccounting,    // sacct without slurmdbd
  NoJobs,          // scontrol show job with an empty queue
  AlreadyEnded,    // scancel of a job that has just ended
  UnknownJob,      // squeue -j of a job slurmctld no longer holds
};

bool slurm_says(SlurmSays what, std::string_view err) {
  static const std::map<SlurmSays, std::vector<std::string_view>> kPhrases = {
      {SlurmSays::Unreachable,
       {"Unable to contact slurm controller", "Socket timed out", "Connection refused",
        "Resource temporarily unavailable", "Zero Bytes were transmitted", "temporarily unable",
        "Communication connection failure", "Connection timed out", "Transport endpoint"}},
      {SlurmSays::MaybeDelivered, {"timed out", "Zero Bytes were transmitted", "Communication connection failure"}},
      {SlurmSays::NoAccounting, {"accounting storage is disabled"}},
      {SlurmSays::NoJobs, {"No jobs in the system"}},
      {SlurmSays::AlreadyEnded, {"already completing or completed"}},
      {SlurmSays::UnknownJob, {"Invalid job id"}},
  };
  return mentions_any(err, kPhrases.at(what));
}

bool transient(const std::string& err) { return slurm_says(SlurmSays::Unreachable, err); }

// A value that goes into an #SBATCH line, double-quoted: sbatch reads quotes there, but
// not escapes, and a newline would end the line (and run the rest as shell).
std::string sbatch_value(const BackendCommon& c, std::string_view key, std::string_view v) {
  if (std::any_of(v.begin(), v.end(), [](char ch) {
        return ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
      }))
    throw Error(Exit::DataErr, fmt::format("slurm backend \"{}\": {} \"{}\" has a quote, backslash or control "
                                           "character, which an #SBATCH line cannot carry",
                                           c.name, key, v));
  return v.find_first_of(" \t") == std::string_view::npos ? std::string(v) : fmt::format("\"{}\"", v);
}

class SlurmBackend final : public RemoteBackend {
 public:
  SlurmBackend(const SlurmConfig& config, std::optional<std::uint32_t> run_as_uid) : c_(config), run_as_(run_as_uid) {}

  void prepare(JobSpec& spec, const std::string& client_cwd) const override {
    if (spec.workdir.empty()) spec.workdir = client_cwd;  // on a filesystem the nodes share
  }

  std::string render(const JobSpec& spec, const RemoteDeps& deps, const SubmitRef& ref) override {
    return slurm_script(spec, deps, c_, ref.store_tag.empty() ? "" : comment(ref.store_tag, ref.id));
  }

  std::vector<std::string> submit(const JobSpec& spec, const RemoteDeps& deps, const SubmitRef& ref) override {
    // sbatch's --output folder must exist: where the client runs, on a filesystem the
    // nodes share (the batch script makes each job's own folder).
    std::error_code ec;
    std::filesystem::create_directories(c_.log_dir, ec);
    if (ec)
      throw Error(Exit::IoErr, fmt::format("slurm backend \"{}\": create {}: {}", c_.name, c_.log_dir, ec.message()));
    const std::string script = render(spec, deps, ref);
    RunResult r;
    try {
      r = call({"sbatch", "--parsable"}, script, c_.submit_retry_s);
    } catch (const BackendUnreachable& e) {
      if (!e.timed_out && !slurm_says(SlurmSays::MaybeDelivered, e.client_says)) throw;
      // sbatch gave up waiting, but slurmctld may still take (or have taken) the job: it
      // is tagged with its rsub id, and a later refresh finds it (adopt).
      throw SubmitUnconfirmed(fmt::format("{}; it may still reach Slurm", e.what()));
    }
    if (!r.status.success()) refused("sbatch", r);
    const std::string line = r.out.substr(0, r.out.find('\n'));
    const std::string job = line.substr(0, line.find(';'));  // "1234" or "1234;cluster"
    if (job.empty() || !std::all_of(job.begin(), job.end(), ::isdigit))
      throw Error(Exit::Software,
                  fmt::format("slurm backend \"{}\": sbatch printed \"{}\", not a job id", c_.name, line));
    if (!spec.array) return {job};
    std::vector<std::string> ids;
    for (int index : spec.array->indices) ids.push_back(fmt::format("{}_{}", job, index));
    return ids;
  }

  std::map<std::int64_t, std::string> adopt(const std::string& store_tag, const std::string& user) override {
    // Jobs slurmctld still holds (pending, running, or ended within MinJobAge), with their
    // comment: %F is an array's id (a plain job's own id), %k the comment.
    const RunResult r = call({"squeue", "-h", "-t", "all", "-u", user, "-o", "%F|%k"}, {}, 0);
    if (!r.status.success()) refused("squeue", r);
    const std::string prefix = comment(store_tag, 0).substr(0, comment(store_tag, 0).rfind(':') + 1);
    std::map<std::int64_t, std::string> found;
    for (std::string_view line : split(r.out, '\n')) {
      const auto f = split(line, '|');
      if (f.size() == 2 && f[1].starts_with(prefix))
        found[std::atoll(std::string(f[1].substr(prefix.size())).c_str())] = std::string(f[0]);
    }
    return found;
  }

  std::vector<Store::RemoteState> query(const std::vector<std::string>& ids) override {
    std::set<std::string> bases;
    for (const auto& id : ids) bases.insert(base_id(id));
    const RunResult r = call({"sacct", "-X", "-D", "-n", "-P", "-j", comma_list(bases), "-o",
                              "JobID,State,ExitCode,Start,End,NodeList,Reason"},
                             {}, 0);
    std::vector<Store::RemoteState> states;
    if (r.status.success()) {
      states = parse_sacct(r.out, ids);
    } else if (slurm_says(SlurmSays::NoAccounting, r.err)) {
      // No slurmdbd: what slurmctld remembers (finished jobs for MinJobAge), all of it
      // in one call.
      const RunResult all = call({"scontrol", "-o", "show", "job"}, {}, 0);
      if (!all.status.success() && !slurm_says(SlurmSays::NoJobs, all.err)) refused("scontrol", all);
      states = parse_scontrol_jobs(all.out, ids);
    } else {
      refused("sacct", r);
    }
    // sacct learns of a job some time after its submission (slurmctld reports in
    // batches), and its pending reasons and states lag the scheduler's: squeue's for
    // those (every state: one just cancelled too), in one more call, when any job waits
    // or is not in sacct yet.
    std::map<std::string, Store::RemoteState*> by_id;
    for (auto& st : states) by_id[st.remote_id] = &st;
    std::set<std::string> ask;
    for (const auto& id : ids)
      if (auto it = by_id.find(id); it == by_id.end() || it->second->state == JobState::Pending)
        ask.insert(base_id(id));
    if (ask.empty()) return states;
    const RunResult q = call({"squeue", "-h", "-r", "-t", "all", "-j", comma_list(ask), "-o", "%i|%T|%r"}, {}, 0);
    if (!q.status.success()) return states;  // gone from the queue meanwhile: sacct's then
    std::vector<Store::RemoteState> added;
    for (std::string_view line : split(q.out, '\n')) {
      const auto f = split(line, '|');
      if (f.size() != 3) continue;
      const std::string id(f[0]);
      // squeue knows no exit codes or signals: an ended job's state is sacct's to give,
      // but for a cancel (slurmctld is ahead of sacct; it ends when rsub learns of it).
      const JobState said = slurm_state(f[1]);
      if (terminal(said) && said != JobState::Cancelled) continue;
      Store::RemoteState* st = by_id.count(id) ? by_id[id] : nullptr;
      if (!st) {
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) continue;
        st = &added.emplace_back();
        st->remote_id = id;
        st->state = said;
      }
      if (st->state != JobState::Pending) continue;
      if (said != JobState::Pending) {
        st->state = said;
        st->reason.clear();  // sacct's pending reason and hold are over
        st->held = false;
        continue;
      }
      st->reason = std::string(f[2]);
      st->held = st->reason.starts_with("JobHeld");
    }
    states.insert(states.end(), added.begin(), added.end());
    return states;
  }

  bool control(const std::vector<std::string>& ids, Control action) override {
    std::vector<std::string> argv;
    if (action == Control::Cancel)
      argv = {"scancel"};
    else
      argv = {"scontrol", action == Control::Hold ? "uhold" : "release"};  // uhold: its user may release it
    argv.insert(argv.end(), ids.begin(), ids.end());
    const RunResult r = call(argv, {}, 0);
    // Cancelling a job that has just ended is not an error worth stopping for.
    if (!r.status.success() && !slurm_says(SlurmSays::AlreadyEnded, r.err)) refused(argv.front(), r);
    return false;  // sacct keeps the job, CANCELLED
  }

  std::optional<double> expected_wait(const JobSpec& spec) override {
    // sbatch --test-only asks the scheduler without submitting: "sbatch: Job 12 to start
    // at 2026-11-30T18:30:00 using 2 processors on nodes vm in partition debug".
    const RunResult r = call({"sbatch", "--test-only"}, render(spec, {}, {}), 0);
    if (!r.status.success()) refused("sbatch --test-only", r);
    const std::string_view text = r.err;
    const std::size_t at = text.find(" to start at ");
    if (at == std::string_view::npos) return std::nullopt;
    const auto start = slurm_timestamp(text.substr(at + 13, 19));
    if (!start) return std::nullopt;
    return std::max(0.0, *start - static_cast<double>(std::time(nullptr)));
  }

  std::vector<std::string> explain(const JobRecord& job, std::string& reason) override {
    // squeue has the scheduler's current reason and start estimate (sacct's lag).
    const RunResult r = call({"squeue", "-h", "-j", job.remote_id, "-o", "%T|%r|%S"}, {}, 0);
    if (!r.status.success() && !slurm_says(SlurmSays::UnknownJob, r.err)) refused("squeue", r);
    const std::string line = r.out.substr(0, r.out.find('\n'));
    const auto f = split(line, '|');
    if (f.size() < 3) return {"Slurm no longer lists it in its queue"};
    reason = std::string(f[1]);
    std::vector<std::string> lines{fmt::format("Slurm's reason: {}{}", reason, slurm_reason_text(reason))};
    if (auto start = slurm_timestamp(f[2]))
      lines.push_back(fmt::format("Slurm expects it to start at {} (its backfill estimate)", f[2]));
    return lines;
  }

  std::string describe() override {
    // The controller's version (this asks slurmctld, so it also says whether it answers).
    // rsub reads sacct's and squeue's text output, which every version filters by job:
    // 22.05's squeue --json ignores -j and -t.
    const RunResult r = call({"scontrol", "show", "config"}, {}, 0);
    if (!r.status.success()) refused("scontrol show config", r);
    std::string version = "?";
    for (std::string_view line : split(r.out, '\n'))
      if (line.starts_with("SLURM_VERSION")) version = std::string(line.substr(line.rfind(' ') + 1));
    return fmt::format("Slurm {}{}{}; states from sacct and squeue", version,
                       c_.partition.empty() ? "" : ", partition " + c_.partition,
                       c_.qos.empty() ? "" : ", QOS " + c_.qos);
  }

  std::string log_path(const JobRecord& job, int task, bool err) const override {
    return fmt::format("{}/{}/task-{}.{}", c_.log_dir, job.remote_id, task, err ? "err" : "out");
  }

 private:
  RunResult call(std::vector<std::string> argv, const std::string& input, double retry_s) const {
    if (!c_.bin_dir.empty()) argv.front() = c_.bin_dir + "/" + argv.front();
    std::vector<std::pair<std::string, std::string>> env;
    if (!c_.slurm_conf.empty()) env.emplace_back("SLURM_CONF", c_.slurm_conf);
    return run_backend_command(how_, std::move(argv), env, input, retry_s);
  }
  [[noreturn]] void refused(const std::string& what, const RunResult& r) const { backend_refused(how_, what, r); }

  static std::string comment(const std::string& store_tag, std::int64_t id) {
    return fmt::format("rsub:{}:{}", store_tag, id);
  }

  SlurmConfig c_;
  std::optional<std::uint32_t> run_as_;
  BackendCall how_{fmt::format("slurm backend \"{}\"", c_.name), "Slurm", transient, run_as_};
};

}  // namespace

JobState slurm_state(std::string_view name) {
  name = name.substr(0, name.find(' '));  // "CANCELLED by 0"
  if (name == "PENDING" || name.starts_with("REQUEUE") || name == "RESV_DEL_HOLD") return JobState::Pending;
  if (name == "COMPLETED") return JobState::Completed;
  if (name == "CANCELLED") return JobState::Cancelled;
  if (name == "TIMEOUT") return JobState::Timeout;
  if (name == "NODE_FAIL") return JobState::Lost;
  if (name == "OUT_OF_MEMORY") return JobState::OutOfMemory;
  if (name == "FAILED" || name == "BOOT_FAIL" || name == "DEADLINE" || name == "PREEMPTED" || name == "REVOKED" ||
      name == "SPECIAL_EXIT")
    return JobState::Failed;
  return JobState::Running;  // RUNNING, COMPLETING, CONFIGURING, SUSPENDED, STAGE_OUT ...
}

std::vector<Store::RemoteState> parse_sacct(std::string_view text, const std::vector<std::string>& wanted) {
  std::map<std::string, Store::RemoteState> by_id;
  std::map<std::string, Store::RemoteState> pending_range;  // array base → its "1234_[...]" line
  for (std::string_view line : split(text, '\n')) {
    const auto f = split(line, '|');
    if (f.size() < 7) continue;
    Store::RemoteState s;
    s.remote_id = std::string(f[0]);
    s.state = slurm_state(f[1]);
    s.reason = f[6] == "None" ? std::string() : std::string(f[6]);
    s.held = s.reason.starts_with("JobHeld") || f[1] == "REQUEUE_HOLD" || f[1] == "RESV_DEL_HOLD";
    if (s.state != JobState::Pending) {
      s.start_s = slurm_timestamp(f[3]);
      s.end_s = terminal(s.state) ? slurm_timestamp(f[4]) : std::nullopt;
      s.host = f[5] == "None assigned" ? std::string() : std::string(f[5]);
    }
    const auto code = split(f[2], ':');  // "exit code:signal"
    if (terminal(s.state) && code.size() == 2) {
      const int sig = std::atoi(std::string(code[1]).c_str());
      if (sig > 0 && sig <= 64)
        s.signal = sig;  // OUT_OF_MEMORY's "0:125" is no signal of the job's
      else if (sig == 0)
        s.exit_code = std::atoi(std::string(code[0]).c_str());
    }
    // sacct keeps a finished job's last pending reason; say how it ended instead, as
    // local jobs do.
    if (s.state != JobState::Pending) s.reason.clear();
    if (s.state == JobState::Failed)
      s.reason = s.signal      ? "Signal " + signal_name(*s.signal)
                 : s.exit_code ? fmt::format("NonZeroExitCode {}", *s.exit_code)
                               : std::string(f[1]);  // OUT_OF_MEMORY, BOOT_FAIL ...
    else if (s.state == JobState::Timeout)
      s.reason = "TimeLimit";
    if (s.remote_id.find('[') != std::string::npos) {
      pending_range[base_id(s.remote_id)] = s;
      continue;
    }
    // With -D each attempt of a requeued job has a line, the latest last; a PENDING line
    // is one not started yet.
    const auto seen = by_id.find(s.remote_id);
    s.attempts = (seen == by_id.end() ? 0 : seen->second.attempts) + (f[1] != "PENDING");
    by_id[s.remote_id] = s;
  }
  std::vector<Store::RemoteState> out;
  for (const auto& id : wanted) {
    if (auto it = by_id.find(id); it != by_id.end()) {
      out.push_back(it->second);
    } else if (auto range = pending_range.find(base_id(id)); range != pending_range.end() && id != base_id(id)) {
      out.push_back(range->second);
      out.back().remote_id = id;
    }
  }
  return out;
}

std::vector<Store::RemoteState> parse_scontrol_jobs(std::string_view text, const std::vector<std::string>& wanted) {
  // Each job's line rewritten as sacct -D would print it (a REQUEUED line per restart),
  // so that one parser reads both.
  std::string lines;
  for (std::string_view line : split(text, '\n')) {
    std::map<std::string_view, std::string_view> v;
    for (std::string_view token : split(line, ' '))
      if (const auto eq = token.find('='); eq != std::string_view::npos) v[token.substr(0, eq)] = token.substr(eq + 1);
    if (!v.count("JobId") || !v.count("JobState")) continue;
    std::string id(v["JobId"]);
    if (v.count("ArrayJobId") && v.count("ArrayTaskId")) {
      const std::string_view task = v["ArrayTaskId"];
      const bool range = task.find_first_not_of("0123456789") != std::string_view::npos;
      id = range ? fmt::format("{}_[{}]", v["ArrayJobId"], task) : fmt::format("{}_{}", v["ArrayJobId"], task);
    }
    const auto field = [&](std::string_view key) { return v.count(key) ? std::string(v[key]) : std::string("None"); };
    for (int i = std::atoi(field("Restarts").c_str()); i > 0; --i) lines += id + "|REQUEUED|0:0|None|None|None|None\n";
    lines += fmt::format("{}|{}|{}|{}|{}|{}|{}\n", id, field("JobState"), field("ExitCode"), field("StartTime"),
                         field("EndTime"), field("NodeList"), field("Reason"));
  }
  return parse_sacct(lines, wanted);
}

std::string slurm_script(const JobSpec& spec, const RemoteDeps& deps, const SlurmConfig& c,
                         const std::string& comment) {
  const std::string& log_dir = c.log_dir;
  const Resources& r = spec.resources;
  const int per_node = r.tasks / r.nodes;
  std::string s = "#!/bin/sh\n";
  auto opt = [&](const std::string& o) { s += "#SBATCH " + o + "\n"; };
  opt("--job-name=" + sbatch_value(c, "job name", spec.name));
  opt(fmt::format("--nodes={}", r.nodes));
  opt(fmt::format("--ntasks-per-node={}", per_node));
  opt(fmt::format("--cpus-per-task={}", r.cpus_per_task));
  if (r.memory_bytes > 0)  // --mem is per node, in MiB
    opt(fmt::format("--mem={}M", (r.memory_bytes + (1 << 20) - 1) / (1 << 20) * per_node));
  if (r.gpus_per_task > 0) {
    if (r.gpu_type.find_first_of(":, ") != std::string::npos)
      throw Error(Exit::DataErr,
                  fmt::format("slurm backend \"{}\": GPU type \"{}\" is not a GRES type", c.name, r.gpu_type));
    opt(fmt::format("--gres=gpu:{}{}", r.gpu_type.empty() ? "" : sbatch_value(c, "GPU type", r.gpu_type) + ":",
                    r.gpus_per_task * per_node));
  }
  if (spec.time_limit_s) opt("--time=" + slurm_time(*spec.time_limit_s));
  const std::string partition = spec.slurm.partition.empty() ? c.partition : spec.slurm.partition;
  const std::string qos = spec.slurm.qos.empty() ? c.qos : spec.slurm.qos;
  std::string account = spec.slurm.account;
  if (auto it = c.tenant_map.find(spec.tenant); account.empty() && it != c.tenant_map.end()) account = it->second;
  if (!partition.empty()) opt("--partition=" + sbatch_value(c, "partition", partition));
  if (!qos.empty()) opt("--qos=" + sbatch_value(c, "QOS", qos));
  if (!account.empty()) opt("--account=" + sbatch_value(c, "account", account));
  if (spec.array) {
    opt(fmt::format("--array={}", fmt::join(spec.array->indices, ",")) +
        (spec.array->max_concurrent > 0 ? fmt::format("%{}", spec.array->max_concurrent) : ""));
  }
  if (!deps.empty()) {
    std::string list;
    for (const auto& [type, id] : deps)
      list += fmt::format("{}{}:{}", list.empty() ? "" : ",", dep_type_name(type), id);
    opt("--dependency=" + list);
    opt("--kill-on-invalid-dep=yes");  // a dependency that can never be met ends the job, as locally
  }
  opt(spec.retry.max_attempts > 1 ? "--requeue" : "--no-requeue");
  if (spec.slurm.switches > 0)
    opt(fmt::format("--switches={}{}", spec.slurm.switches,
                    spec.slurm.switch_wait_s > 0 ? "@" + slurm_time(spec.slurm.switch_wait_s) : ""));
  if (spec.hold) opt("--hold");
  if (spec.priority < 0) opt(fmt::format("--nice={}", -spec.priority));  // only admins may raise priority
  if (!spec.workdir.empty()) opt("--chdir=" + sbatch_value(c, "working directory", spec.workdir));
  opt("--output=" + sbatch_value(c, "log_dir", log_dir + "/%j.batch.out"));
  if (!comment.empty()) opt("--comment=" + comment);  // finds the job again when sbatch's answer is lost
  opt("--open-mode=append");
  s += fmt::format("# Written by rsub for the {} backend \"{}\". The tasks start together under srun;\n", "Slurm",
                   c.name);
  s += "# a task that fails ends the others (--kill-on-bad-exit), as a local gang does.\n";
  for (const auto& [k, v] : spec.env) {
    if (k.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos ||
        std::isdigit(static_cast<unsigned char>(k.front())))
      throw Error(Exit::DataErr, fmt::format("slurm backend \"{}\": env {}: not a shell variable name, which the batch "
                                             "script must export",
                                             c.name, k));
    s += fmt::format("export {}={}\n", k, sh_quote(v));
  }
  s += "id=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}\n";
  s += "id=${id:-$SLURM_JOB_ID}\n";
  s += fmt::format("export RSUB_JOB_ID={}:\"$id\" RSUB_NTASKS=\"$SLURM_NTASKS\"\n", sh_quote(c.name));
  if (spec.array) s += "export RSUB_ARRAY_INDEX=\"$SLURM_ARRAY_TASK_ID\"\n";
  s += fmt::format("logs={}/\"$id\"\nmkdir -p \"$logs\"\n", sh_quote(log_dir));
  // --cpus-per-task again: since 22.05 srun does not inherit it from sbatch.
  s += fmt::format(
      "srun --kill-on-bad-exit=1 --cpus-per-task={} --open-mode=append --output=\"$logs/task-%t.out\" "
      "--error=\"$logs/task-%t.err\" /bin/sh -c 'RSUB_TASK_ID=$SLURM_PROCID; export RSUB_TASK_ID; exec \"$@\"' "
      "rsub-task",
      r.cpus_per_task);
  for (const auto& arg : spec.command) s += " " + sh_quote(arg);
  s += "\nrc=$?\n";
  // The retry policy: a listed exit code or signal (srun reports 128 + signal) requeues
  // the job until it has had max_attempts; Slurm counts them in SLURM_RESTART_COUNT.
  std::set<int> retry(spec.retry.on_exit_codes.begin(), spec.retry.on_exit_codes.end());
  for (int sig : spec.retry.on_signals) retry.insert(128 + sig);
  if (spec.retry.max_attempts > 1 && !retry.empty()) {
    s += fmt::format("case \" {} \" in *\" $rc \"*)\n", fmt::join(retry, " "));
    s += fmt::format(
        "  if [ \"${{SLURM_RESTART_COUNT:-0}}\" -lt {} ] && scontrol requeue \"$SLURM_JOB_ID\"; then exit 0; fi;;\n",
        spec.retry.max_attempts - 1);
    s += "esac\n";
  }
  // A task killed by a signal: end the same way, so that Slurm records the signal; only
  // signals whose default action ends a process (SIGSTOP would leave the script stopped).
  s +=
      "case $((rc - 128)) in 1|2|3|4|5|6|7|8|9|10|11|12|13|14|15|24|25|26|27|29|30|31) kill -$((rc - 128)) $$;; esac\n";
  s += "exit \"$rc\"\n";
  return s;
}

std::unique_ptr<RemoteBackend> SlurmConfig::remote(std::optional<std::uint32_t> run_as_uid) const {
  return std::make_unique<SlurmBackend>(*this, run_as_uid);
}

BackendKind slurm_backend_kind() {
  return {"slurm",
          {"accounts", "slurm_conf", "bin_dir", "partition", "qos"},
          [](const Config& c, const std::string& key, const BackendCommon& common) -> std::shared_ptr<BackendConfig> {
            auto b = std::make_shared<SlurmConfig>();
            static_cast<BackendCommon&>(*b) = common;
            b->tenant_map = c.get_string_map(key + ".accounts");
            b->slurm_conf = c.get_string(key + ".slurm_conf").value_or("");
            b->bin_dir = c.get_string(key + ".bin_dir").value_or("");
            b->partition = c.get_string(key + ".partition").value_or("");
            b->qos = c.get_string(key + ".qos").value_or("");
            return b;
          }};
}

}  // namespace rkit::rsub
