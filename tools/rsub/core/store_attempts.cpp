// File: rsub/core/store_attempts.cpp — the local jobs' lifecycle in the job store (store.hpp):
// the change feed the daemon reads, dependencies, and each attempt's start, tasks and end.
#include "core/store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/store_sql.hpp"
#include "rkit/error.hpp"
#include "rkit/process.hpp"

namespace rkit::rsub {

using store_sql::kJobColumns;

std::vector<JobRecord> Store::active_jobs_after(std::int64_t after_id) {
  static const std::string sql = fmt::format(
      "SELECT {} FROM jobs WHERE state IN ('PENDING', 'RUNNING') AND backend = 'local' AND id > ? ORDER BY id",
      kJobColumns);
  Stmt& s = stmt(sql.c_str());
  s.bind(after_id);
  std::vector<JobRecord> out;
  while (s.step()) out.push_back(read_job(s));
  return out;
}

std::int64_t Store::change_seq() {
  Stmt& s = stmt("SELECT seq FROM sqlite_sequence WHERE name = 'changes'");
  Stmt::Finish finish{s};
  return s.step() ? s.i64(0) : 0;
}

std::vector<Store::ActiveState> Store::changed_since(std::int64_t& seq) {
  Stmt& s = stmt(
      "SELECT c.seq, j.id, j.state, j.held, j.cancel_requested, j.eligible_s, j.attempts FROM changes c JOIN jobs j "
      "ON j.id = c.job_id WHERE c.seq > ? ORDER BY c.seq");
  s.bind(seq);
  std::vector<ActiveState> out;
  std::unordered_map<std::int64_t, std::size_t> at;  // a job changed twice: its row, once
  while (s.step()) {
    seq = std::max(seq, s.i64(0));
    const ActiveState st{
        s.i64(1), parse_state(s.text(2)).value_or(JobState::Lost), s.i32(3) != 0, s.i32(4) != 0, s.f64(5), s.i32(6)};
    auto [it, added] = at.try_emplace(st.id, out.size());
    if (added)
      out.push_back(st);
    else
      out[it->second] = st;
  }
  return out;
}

void Store::forget_changes(std::int64_t upto) { stmt("DELETE FROM changes WHERE seq <= ?").bind(upto).run(); }

std::vector<std::pair<std::int64_t, JobState>> Store::states_of(const std::vector<std::int64_t>& ids) {
  std::vector<std::pair<std::int64_t, JobState>> out;
  Stmt& s = stmt("SELECT state FROM jobs WHERE id = ?");
  Stmt::Finish finish{s};
  for (std::int64_t id : ids) {
    s.reset().bind(id);
    if (s.step()) out.emplace_back(id, parse_state(s.text(0)).value_or(JobState::Lost));
  }
  return out;
}

std::vector<std::pair<std::int64_t, std::vector<JobState>>> Store::dependency_states(
    const std::vector<std::int64_t>& ids) {
  std::vector<std::pair<std::int64_t, std::vector<JobState>>> out;
  Stmt& s = stmt("SELECT state FROM jobs WHERE array_parent = ?1 OR (id = ?1 AND array_parent IS NULL)");
  for (std::int64_t id : ids) {
    std::vector<JobState> states;
    s.reset().bind(id);
    while (s.step()) states.push_back(parse_state(s.text(0)).value_or(JobState::Lost));
    if (!states.empty()) out.emplace_back(id, std::move(states));
  }
  return out;
}

bool Store::start_attempt(std::int64_t id, const std::vector<TaskAlloc>& alloc, const std::string& host, double now) {
  bool started = false;
  transaction([&] {
    stmt(
        "UPDATE jobs SET state = 'RUNNING', reason = '', attempts = attempts + 1, start_s = ?, end_s = NULL, "
        "exit_code = NULL, signal = NULL, alloc = ?, host = ? WHERE id = ? AND state = 'PENDING' AND held = 0")
        .bind(now)
        .bind(alloc_to_json(alloc).dump())
        .bind(host)
        .bind(id)
        .run();
    started = db_.changes() > 0;
  });
  return started;
}

bool Store::undo_start(std::int64_t id, int attempt) {
  stmt(
      "UPDATE jobs SET state = 'PENDING', attempts = attempts - 1, start_s = NULL, alloc = NULL, host = '' "
      "WHERE id = ? AND state = 'RUNNING' AND attempts = ?")
      .bind(id)
      .bind(attempt)
      .run();
  return db_.changes() > 0;
}

void Store::set_reasons(const std::vector<std::pair<std::int64_t, std::string>>& reasons) {
  if (reasons.empty()) return;
  transaction([&] {
    Stmt& s = stmt("UPDATE jobs SET reason = ? WHERE id = ? AND state = 'PENDING'");
    for (const auto& [id, reason] : reasons) s.reset().bind(reason).bind(id).run();
  });
}

bool Store::finish(std::int64_t id, JobState state, const std::string& reason, double now) {
  Stmt& s = stmt("UPDATE jobs SET state = ?, reason = ?, end_s = ? WHERE id = ? AND state IN ('PENDING', 'RUNNING')");
  s.bind(state_name(state)).bind(reason).bind(now).bind(id).run();
  return db_.changes() > 0;
}

bool Store::lost_was_cancelled(std::int64_t id, const std::string& reason) {
  stmt("UPDATE jobs SET state = 'CANCELLED', reason = ? WHERE id = ? AND state = 'LOST'").bind(reason).bind(id).run();
  return db_.changes() > 0;
}

void Store::task_started(std::int64_t id, int attempt, int task, int pid, double now) {
  stmt("INSERT OR REPLACE INTO tasks(job_id, attempt, task, pid, start_s) VALUES(?, ?, ?, ?, ?)")
      .bind(id)
      .bind(attempt)
      .bind(task)
      .bind(pid)
      .bind(now)
      .run();
}

bool Store::attempt_started(std::int64_t id, int attempt) {
  Stmt& s = stmt("SELECT 1 FROM tasks WHERE job_id = ? AND attempt = ? LIMIT 1");
  Stmt::Finish finish{s};
  s.bind(id).bind(attempt);
  return s.step();
}

std::optional<int> Store::task_group(std::int64_t id, int attempt) {
  Stmt& s = stmt("SELECT pid FROM tasks WHERE job_id = ? AND attempt = ? AND task = 0");
  Stmt::Finish finish{s};
  s.bind(id).bind(attempt);
  if (!s.step() || s.null(0)) return std::nullopt;
  return s.i32(0);
}

void Store::task_ended(std::int64_t id, int attempt, int task, std::optional<int> exit_code, std::optional<int> signal,
                       double now) {
  stmt("UPDATE tasks SET end_s = ?, exit_code = ?, signal = ? WHERE job_id = ? AND attempt = ? AND task = ?")
      .bind(now)
      .bind(exit_code)
      .bind(signal)
      .bind(id)
      .bind(attempt)
      .bind(task)
      .run();
}

JobState Store::end_attempt(std::int64_t id, int attempt, const AttemptEnd& end) {
  JobState result = JobState::Lost;
  transaction([&] {
    const std::optional<JobRecord> job = this->job(id);
    if (!job || job->state != JobState::Running || job->attempts != attempt) {
      result = job ? job->state : JobState::Lost;
      return;  // already ended (declared LOST meanwhile): keep the first verdict
    }
    Transition t = after_attempt(job->spec, attempt, end);
    // A cancelled job is never retried, whichever way its last attempt happened to end.
    if (job->cancel_requested && (end.how == AttemptEnd::How::Cancelled || t.state == JobState::Pending))
      t = {JobState::Cancelled, job->reason, std::nullopt};
    stmt(
        "UPDATE jobs SET state = ?, reason = ?, end_s = ?, exit_code = ?, signal = ?, eligible_s = ?, "
        "cancel_requested = 0, cpu_s = ?, peak_memory_bytes = ? WHERE id = ?")
        .bind(state_name(t.state))
        .bind(t.reason)
        .bind(end.end_s)
        .bind(end.exit_code)
        .bind(end.signal)
        .bind(t.retry_at_s.value_or(job->eligible_s))
        .bind(end.cpu_s)
        .bind(end.peak_memory_bytes ? std::optional<std::int64_t>(static_cast<std::int64_t>(*end.peak_memory_bytes))
                                    : std::nullopt)
        .bind(id)
        .run();
    result = t.state;
  });
  return result;
}

Transition after_attempt(const JobSpec& spec, int attempts_made, const AttemptEnd& end) {
  using How = AttemptEnd::How;
  Transition t;
  switch (end.how) {
    case How::Cancelled: return {JobState::Cancelled, "cancelled", std::nullopt};
    case How::TimedOut: return {JobState::Timeout, "TimeLimit", std::nullopt};
    case How::OutOfMemory:  // not retried: the same limit would kill it again
      return {JobState::OutOfMemory, "OutOfMemory: over its memory limit, killed by the kernel", std::nullopt};
    case How::Exited:
      if (end.exit_code.value_or(0) == 0) return {JobState::Completed, "", std::nullopt};
      t = {JobState::Failed, fmt::format("NonZeroExitCode {}", *end.exit_code), std::nullopt};
      break;
    case How::Signaled: t = {JobState::Failed, "Signal " + signal_name(end.signal.value_or(0)), std::nullopt}; break;
  }
  const RetryPolicy& r = spec.retry;
  const bool qualifies =
      end.how == How::Exited
          ? std::find(r.on_exit_codes.begin(), r.on_exit_codes.end(), *end.exit_code) != r.on_exit_codes.end()
          : std::find(r.on_signals.begin(), r.on_signals.end(), end.signal.value_or(0)) != r.on_signals.end();
  if (qualifies && attempts_made < r.max_attempts) {
    const double backoff = std::min(600.0, r.backoff_s * std::pow(2.0, attempts_made - 1));
    return {JobState::Pending,
            fmt::format("BeginTime (retry {} of {} after {})", attempts_made + 1, r.max_attempts, t.reason),
            end.end_s + backoff};
  }
  return t;
}

}  // namespace rkit::rsub
