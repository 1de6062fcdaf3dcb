// File: rsub/core/store.hpp
//
// The job store: one SQLite database in WAL mode, `<state>/rsub/jobs.db`, shared by the
// clients (submit, ls, cancel ...), the daemon and the per-job supervisors. Every change
// is one transaction, so a client, the daemon or a supervisor killed at any point leaves
// the store as it was before or after the change, never between. WAL lets clients read
// and submit while the daemon writes, and while no daemon runs at all.
//
//   Store store(state_dir() + "/rsub");
//   std::vector<std::int64_t> ids = store.submit(spec, {"alice", 1000}, now_s());
//   std::optional<JobRecord> job = store.job(ids[0]);
//
// Durability: commits survive the death of any process (synchronous=NORMAL in WAL mode);
// a power loss may undo the last commits before it.
//
// Concurrency: SQLite serialises writers; a writer waits up to 30 s for the lock
// (busy_timeout) and then throws Error(TempFail). Ids come from AUTOINCREMENT, so they are
// unique across concurrent submitters and never reused. One Store per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/job.hpp"
#include "core/spec.hpp"
#include "rkit/sqlite.hpp"

namespace rkit::rsub {

struct Submitter {
  std::string user;
  std::uint32_t uid = 0;
};

// One job (an array element is a job of its own) as stored.
struct JobRecord {
  std::int64_t id = 0;
  std::optional<std::int64_t> array_parent;  // the id of the array's first element
  std::optional<int> array_index;
  JobSpec spec;
  std::string user;
  std::uint32_t uid = 0;
  JobState state = JobState::Pending;
  std::string reason;  // PENDING: why it waits; terminal: what ended it
  bool held = false;
  bool cancel_requested = false;
  double submit_s = 0;
  double eligible_s = 0;                 // not before (a retry's backoff)
  std::optional<double> start_s, end_s;  // of the last attempt
  std::optional<int> exit_code, signal;
  int attempts = 0;              // attempts started
  std::vector<TaskAlloc> alloc;  // the last attempt's
  std::string host;              // where it ran
  // As stored: the spec's part of the record and the allocation, as JSON text (empty for
  // a job not from the store). A light read (JobFilter::light) fills these, not spec and
  // alloc, so that listing many jobs parses nothing.
  std::string record_fields, alloc_text;
  // What the job's cgroup measured over its last attempt (local jobs under a root daemon).
  std::optional<double> cpu_s;
  std::optional<std::int64_t> peak_memory_bytes;
  std::string backend = "local";  // where it runs: "local" or a configured backend's name
  std::string remote_id;          // that backend's id ("1234", "1234_5"); empty for local jobs

  // "12", or "12_3" for element 3 of array 12; a remote job's "slurm:1234".
  std::string display_id() const;
  // The rkit.job.v1 record (rkit(7) lists its fields), as one JSON line and as JSON.
  std::string to_json_line() const;
  Json to_json() const;
};

// The spec's part of rkit.job.v1, as JSON text (stored with the job at submit).
std::string spec_record_fields(const JobSpec& spec);

struct JobFilter {
  bool all = false;  // also finished jobs
  std::optional<std::string> tenant, user, workflow;
  std::optional<JobState> state;
  bool light = false;  // records for output only: no spec, no alloc
};

// How one attempt of a job ended, as its supervisor saw it.
struct AttemptEnd {
  enum class How { Exited, Signaled, TimedOut, Cancelled, OutOfMemory };
  How how = How::Exited;
  std::optional<int> exit_code;  // the first failing task's (or 0)
  std::optional<int> signal;
  double end_s = 0;
  std::optional<double> cpu_s = std::nullopt;  // the cgroup's measure, when there was one
  std::optional<std::uint64_t> peak_memory_bytes = std::nullopt;
};

class Store {
 public:
  // Opens the database in `dir` (created, with the schema, when missing). Error(IoErr)
  // or Error(NoPerm) when the directory or the database cannot be used.
  explicit Store(const std::string& dir);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& dir() const { return dir_; }

  // --- clients ---------------------------------------------------------------------
  // Stores the job (an array: one job per index, all in one transaction) and returns the
  // ids. PENDING, or PENDING and held when spec.hold. A job already submitted to a remote
  // backend (spec.backend) is stored with it, and learns its ids there with set_remote_ids.
  // `environment`: the submitter's ("K=V"), kept for the job's tasks (environment()).
  std::vector<std::int64_t> submit(const JobSpec& spec, const Submitter& who, double now,
                                   const std::vector<std::string>& environment = {});
  // The environment captured at submit; nullopt for a job stored without one.
  std::optional<std::vector<std::string>> environment(std::int64_t id);
  std::optional<JobRecord> job(std::int64_t id);
  // "12" (a job, or every element of array 12), "12_3" (one element), "slurm:1234" (by
  // the backend's id, also an array's), "slurm:1234_5". Empty when unknown; Error(Usage)
  // when the text is not an id.
  std::vector<JobRecord> resolve(const std::string& text);
  // Jobs by id; active ones (PENDING, RUNNING) unless filter.all.
  void each_job(const JobFilter& filter, const std::function<void(const JobRecord&)>& fn);
  std::vector<JobRecord> jobs(const JobFilter& filter);
  // A pending job becomes CANCELLED at once (true); a running one is marked for its
  // supervisor, which the daemon signals (false); a finished one is left alone (false).
  bool cancel(std::int64_t id, const std::string& by, double now);
  // Holds or releases a pending job; false when it is not pending.
  bool set_held(std::int64_t id, bool held);
  // Changes whenever another connection commits (PRAGMA data_version).
  std::uint64_t data_version() { return db_.data_version(); }

  // --- the daemon -----------------------------------------------------------------------
  // The daemon's cheap refresh: it loads the active jobs once (active_jobs_after), then
  // reads only what changed. Every update of a local job's state, hold, cancel request,
  // eligibility or attempts is logged (the changes table, filled by a trigger, whoever
  // writes): change_seq() is the log's last number, changed_since(seq) the jobs changed
  // after `seq` (each once, as it is now, terminal ones too), advancing `seq`;
  // forget_changes drops the log up to a number (the daemon, once it has read it).
  struct ActiveState {
    std::int64_t id;
    JobState state;
    bool held, cancel_requested;
    double eligible_s;
    int attempts;
  };
  std::int64_t change_seq();
  std::vector<ActiveState> changed_since(std::int64_t& seq);
  void forget_changes(std::int64_t upto);
  std::vector<JobRecord> active_jobs_after(std::int64_t after_id);
  // The state of each job of `ids`; unknown ids are left out.
  std::vector<std::pair<std::int64_t, JobState>> states_of(const std::vector<std::int64_t>& ids);
  // For dependencies: the states of each of `ids` read as `resolve` reads an id (the job,
  // or every element of the array it names). Unknown ids are left out.
  std::vector<std::pair<std::int64_t, std::vector<JobState>>> dependency_states(const std::vector<std::int64_t>& ids);
  // PENDING → RUNNING for the next attempt with this allocation; false (and no change)
  // when the job is no longer pending and releasable (cancelled or held meanwhile).
  bool start_attempt(std::int64_t id, const std::vector<TaskAlloc>& alloc, const std::string& host, double now);
  // RUNNING → PENDING for an attempt whose supervisor never started (the attempt does
  // not count). False when the job is no longer in that attempt.
  bool undo_start(std::int64_t id, int attempt);
  // Pending reasons, in one transaction.
  void set_reasons(const std::vector<std::pair<std::int64_t, std::string>>& reasons);
  // Ends an active job without running it further (FAILED DependencyNeverSatisfied,
  // LOST ...). False when it was no longer active.
  bool finish(std::int64_t id, JobState state, const std::string& reason, double now);
  // LOST → CANCELLED: a remote job whose cancel a concurrent refresh saw as gone. False
  // when it is not LOST.
  bool lost_was_cancelled(std::int64_t id, const std::string& reason);

  // --- supervisors ----------------------------------------------------------------------
  void task_started(std::int64_t id, int attempt, int task, int pid, double now);
  void task_ended(std::int64_t id, int attempt, int task, std::optional<int> exit_code, std::optional<int> signal,
                  double now);
  // Whether any task of the attempt was recorded as started.
  bool attempt_started(std::int64_t id, int attempt);
  // The process group of the attempt's tasks (task 0's pid), when recorded.
  std::optional<int> task_group(std::int64_t id, int attempt);
  // Records the attempt's end: the job becomes terminal, or PENDING again when the retry
  // policy asks for another attempt (eligible after the backoff) and no cancel was asked
  // for. Returns the new state.
  JobState end_attempt(std::int64_t id, int attempt, const AttemptEnd& end);

  // --- remote backends (the daemon schedules local jobs only) ---------------------------
  // What a backend's queue says of one job.
  struct RemoteState {
    std::string remote_id;
    JobState state = JobState::Pending;
    std::string reason;
    bool held = false;
    std::optional<double> start_s, end_s;
    std::optional<int> exit_code, signal;
    int attempts = 0;
    std::string host;
  };
  // A remote job is stored before it is handed to its backend (so that its rsub id can
  // name it there); then it learns its ids there, or is discarded when the backend refuses.
  void set_remote_ids(const std::vector<std::int64_t>& ids, const std::vector<std::string>& remote_ids);
  void discard(const std::vector<std::int64_t>& ids);
  // Jobs of `backend` stored before `before_s` that never learnt a remote id (their
  // submitter died before the backend answered) become LOST: they may run there.
  void lose_unsubmitted(const std::string& backend, double before_s, double now);
  // Pending jobs of `backend` that have no remote id yet: (rsub id, array parent or own
  // id, array index) — submissions whose answer was lost.
  struct Unsubmitted {
    std::int64_t id, array_id;
    std::optional<int> array_index;
    std::string user;
  };
  std::vector<Unsubmitted> unsubmitted(const std::string& backend);
  // This store's tag: 8 random hex digits made with the store. It makes the names rsub
  // gives jobs on remote backends unique across stores.
  std::string tag();
  // Claims the refresh of `backend`: true (and the time recorded) when nobody refreshed
  // it in the last `interval_s` seconds. One transaction, so concurrent clients do not
  // all query the backend at once.
  bool claim_refresh(const std::string& backend, double now, double interval_s);
  // Active jobs of `backend` (rsub id, remote id).
  std::vector<std::pair<std::int64_t, std::string>> remote_active(const std::string& backend);
  // Applies the states to the active jobs of `backend`, in one transaction. A job the
  // backend calls ended but gives no end time for (sacct prints End "Unknown" for a
  // moment after a cancel) ends at `now`, when rsub learned of it: an ended job always
  // has an end.
  void update_remote(const std::string& backend, const std::vector<RemoteState>& states, double now);

  // --- shared bookkeeping ---------------------------------------------------------------
  std::optional<std::string> meta(const std::string& key);
  void set_meta(const std::string& key, const std::string& value);
  // Tenant → decayed usage and when it was last decayed.
  std::vector<std::pair<std::string, std::pair<double, double>>> usage();
  void set_usage(const std::vector<std::pair<std::string, std::pair<double, double>>>& usage);

  // Runs `fn` in one write transaction (BEGIN IMMEDIATE ... COMMIT; rolled back when it
  // throws). Nested calls join the outer transaction.
  void transaction(const std::function<void()>& fn) { db_.transaction(fn); }

 private:
  using Stmt = sql::Stmt;
  Stmt& stmt(const char* sql) { return db_.stmt(sql); }
  JobRecord read_job(Stmt& s, bool light = false);
  void exec(const char* sql) { db_.exec(sql); }

  std::string dir_;
  sql::Db db_;
};

// Seconds since the Unix epoch, as stored.
double now_s();

// What the retry policy makes of an attempt's end: the next state, its reason, and for
// a retry the time it may start.
struct Transition {
  JobState state = JobState::Completed;
  std::string reason;
  std::optional<double> retry_at_s;
};
Transition after_attempt(const JobSpec& spec, int attempts_made, const AttemptEnd& end);

}  // namespace rkit::rsub
