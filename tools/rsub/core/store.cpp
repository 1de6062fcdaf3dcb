// File: rsub/core/store.cpp — the job store on SQLite (see store.hpp): opening and migrating
// it, submitting, reading jobs, cancel and hold, meta and usage. All SQL lives in the
// store's files: this one, store_attempts.cpp (the local jobs' lifecycle) and
// store_remote.cpp (the remote backends' jobs); store_sql.hpp is what they share.
#include "core/store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string_view>

#include "core/store_sql.hpp"
#include "rkit/error.hpp"
#include "rkit/process.hpp"

namespace rkit::rsub {

using store_sql::kJobColumns;

namespace {

// 2: jobs.backend and jobs.remote_id (jobs on Slurm and Kubernetes backends).
// 3: jobs.environ (the submitter's environment, captured at submit), and what the job's
//    cgroup measured (cpu_s, peak_memory_bytes).
// 4: the changes table, filled by a trigger: which local jobs changed, in commit order.
// 5: jobs.workflow (the workflow a job is a step of; null: none), indexed.
constexpr int kSchemaVersion = 5;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  array_parent INTEGER, array_index INTEGER,
  name TEXT NOT NULL, tenant TEXT NOT NULL, user TEXT NOT NULL, uid INTEGER NOT NULL,
  spec TEXT NOT NULL,
  state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', held INTEGER NOT NULL DEFAULT 0,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  submit_s REAL NOT NULL, eligible_s REAL NOT NULL, start_s REAL, end_s REAL,
  exit_code INTEGER, signal INTEGER, attempts INTEGER NOT NULL DEFAULT 0,
  alloc TEXT, host TEXT NOT NULL DEFAULT '', record_fields TEXT NOT NULL,
  backend TEXT NOT NULL DEFAULT 'local', remote_id TEXT,
  environ TEXT, cpu_s REAL, peak_memory_bytes INTEGER, workflow TEXT);
CREATE INDEX IF NOT EXISTS jobs_workflow ON jobs(workflow) WHERE workflow IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_active ON jobs(id) WHERE state IN ('PENDING', 'RUNNING');
CREATE INDEX IF NOT EXISTS jobs_array ON jobs(array_parent) WHERE array_parent IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_remote ON jobs(backend, remote_id) WHERE remote_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS tasks(
  job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, task INTEGER NOT NULL,
  pid INTEGER, start_s REAL, end_s REAL, exit_code INTEGER, signal INTEGER,
  PRIMARY KEY(job_id, attempt, task));
CREATE TABLE IF NOT EXISTS usage(tenant TEXT PRIMARY KEY, value REAL NOT NULL, updated_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- The daemon refreshes from this log: the trigger's columns must be every column of an
-- active job that the daemon keeps (a new command that changes another one, say the
-- priority, must add it here, or the running daemon does not see it).
CREATE TABLE IF NOT EXISTS changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS jobs_changed AFTER UPDATE OF state, held, cancel_requested, eligible_s, attempts ON jobs
  WHEN NEW.backend = 'local' BEGIN INSERT INTO changes(job_id) VALUES (NEW.id); END;
)sql";

// Version 1 stores, from before remote backends: the columns that version 2 added.
constexpr const char* kMigrateFrom1 = R"sql(
ALTER TABLE jobs ADD COLUMN backend TEXT NOT NULL DEFAULT 'local';
ALTER TABLE jobs ADD COLUMN remote_id TEXT;
)sql";
// Version 2 stores: the columns that version 3 added.
constexpr const char* kMigrateFrom2 = R"sql(
ALTER TABLE jobs ADD COLUMN environ TEXT;
ALTER TABLE jobs ADD COLUMN cpu_s REAL;
ALTER TABLE jobs ADD COLUMN peak_memory_bytes INTEGER;
)sql";
// Version 3 and 4 stores: the columns that version 5 added.
constexpr const char* kMigrateFrom4 = R"sql(
ALTER TABLE jobs ADD COLUMN workflow TEXT;
)sql";

}  // namespace

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

Store::Store(const std::string& dir)
    : dir_(dir), db_(dir + "/jobs.db", "job store", kSchemaVersion, [](sql::Db& db, int have) {
        if (have == 1) db.exec(kMigrateFrom1);
        if (have >= 1 && have <= 2) db.exec(kMigrateFrom2);
        if (have >= 1 && have <= 4) db.exec(kMigrateFrom4);
        db.exec(kSchema);
      }) {}

Store::~Store() = default;

namespace {

// The environment as stored: a JSON array of "K=V", each as bytes_json.
std::string environ_json_of(const std::vector<std::string>& environment) {
  Json out = Json::array();
  for (const std::string& kv : environment) out.push_back(bytes_json(kv));
  return out.dump();
}

}  // namespace

std::vector<std::int64_t> Store::submit(const JobSpec& spec, const Submitter& who, double now,
                                        const std::vector<std::string>& environment) {
  std::vector<std::int64_t> ids;
  const std::string spec_json = spec.to_json().dump();
  const std::string fields = spec_record_fields(spec);
  const std::optional<std::string> workflow =
      spec.workflow.empty() ? std::nullopt : std::optional<std::string>(spec.workflow);
  const std::optional<std::string> environ_json =
      environment.empty() ? std::nullopt : std::optional<std::string>(environ_json_of(environment));
  transaction([&] {
    Stmt& insert = stmt(
        "INSERT INTO jobs(array_parent, array_index, name, tenant, user, uid, spec, state, reason, held, submit_s, "
        "eligible_s, record_fields, backend, environ, workflow) "
        "VALUES(?, ?, ?, ?, ?, ?, ?, 'PENDING', ?, ?, ?, ?, ?, ?, ?, ?)");
    auto add = [&](std::optional<std::int64_t> parent, std::optional<int> index) {
      insert.reset()
          .bind(parent)
          .bind(index)
          .bind(spec.name)
          .bind(spec.tenant)
          .bind(who.user)
          .bind(std::int64_t{who.uid})
          .bind(spec_json)
          .bind(std::string_view(spec.hold ? "JobHeldUser" : ""))
          .bind(spec.hold ? 1 : 0)
          .bind(now)
          .bind(now)
          .bind(fields)
          .bind(spec.backend)
          .bind(environ_json)
          .bind(workflow)
          .run();
      ids.push_back(db_.last_rowid());
    };
    if (!spec.array) {
      add(std::nullopt, std::nullopt);
      return;
    }
    // The first element's id names the array; it learns it right after its insert.
    const auto& indices = spec.array->indices;
    add(std::nullopt, indices.front());
    stmt("UPDATE jobs SET array_parent = id WHERE id = ?").bind(ids.front()).run();
    for (std::size_t i = 1; i < indices.size(); ++i) add(ids.front(), indices[i]);
  });
  return ids;
}

JobRecord Store::read_job(Stmt& s, bool light) {
  JobRecord r;
  r.id = s.i64(0);
  r.array_parent = s.opt<std::int64_t>(1);
  r.array_index = s.opt<int>(2);
  if (!light) r.spec = JobSpec::from_json(parse_json(s.text(3), fmt::format("job {} spec", r.id)));
  r.user = s.text(4);
  r.uid = static_cast<std::uint32_t>(s.i64(5));
  r.state = parse_state(s.text(6)).value_or(JobState::Lost);
  r.reason = s.text(7);
  r.held = s.i32(8) != 0;
  r.cancel_requested = s.i32(9) != 0;
  r.submit_s = s.f64(10);
  r.eligible_s = s.f64(11);
  r.start_s = s.opt<double>(12);
  r.end_s = s.opt<double>(13);
  r.exit_code = s.opt<int>(14);
  r.signal = s.opt<int>(15);
  r.attempts = s.i32(16);
  r.alloc_text = s.null(17) ? "[]" : s.text(17);
  if (!light) r.alloc = alloc_from_json(parse_json(r.alloc_text, fmt::format("job {} allocation", r.id)));
  r.host = s.text(18);
  r.record_fields = s.text(19);
  r.backend = s.text(20);
  r.remote_id = s.text(21);
  r.cpu_s = s.opt<double>(22);
  r.peak_memory_bytes = s.opt<std::int64_t>(23);
  return r;
}

std::optional<std::vector<std::string>> Store::environment(std::int64_t id) {
  Stmt& s = stmt("SELECT environ FROM jobs WHERE id = ?");
  Stmt::Finish finish{s};
  s.bind(id);
  if (!s.step() || s.null(0)) return std::nullopt;
  std::vector<std::string> out;
  for (const Json& kv : parse_json(s.text(0), fmt::format("job {} environment", id)))
    out.push_back(bytes_of(kv, fmt::format("job {} environment", id)));
  return out;
}

std::optional<JobRecord> Store::job(std::int64_t id) {
  static const std::string sql = fmt::format("SELECT {} FROM jobs WHERE id = ?", kJobColumns);
  Stmt& s = stmt(sql.c_str());
  Stmt::Finish finish{s};
  s.bind(id);
  if (!s.step()) return std::nullopt;
  return read_job(s);
}

std::vector<JobRecord> Store::resolve(const std::string& text) {
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    // A backend's id: slurm:1234 (the job, or every element of array 1234), slurm:1234_5.
    static const std::string sql = fmt::format(
        "SELECT {} FROM jobs WHERE backend = ?1 AND (remote_id = ?2 OR (instr(?2, '_') = 0 AND "
        "substr(remote_id, 1, length(?2) + 1) = ?2 || '_')) ORDER BY id",
        kJobColumns);
    const std::string_view remote = std::string_view(text).substr(colon + 1);
    if (colon == 0 || remote.empty() || !std::all_of(remote.begin(), remote.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
        }))
      throw Error(Exit::Usage,
                  fmt::format("\"{}\" is not a job id (12, 12_3, or BACKEND:ID such as slurm:1234)", text));
    Stmt& s = stmt(sql.c_str());
    s.bind(std::string_view(text).substr(0, colon)).bind(remote);
    std::vector<JobRecord> out;
    while (s.step()) out.push_back(read_job(s));
    return out;
  }
  auto number = [&](std::string_view digits) {
    std::int64_t v = 0;
    if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
      throw Error(Exit::Usage, fmt::format("\"{}\" is not a job id (12, or 12_3 for an array element)", text));
    for (char c : digits) v = v * 10 + (c - '0');
    return v;
  };
  std::vector<JobRecord> out;
  const auto underscore = text.find('_');
  if (underscore != std::string::npos) {
    const std::int64_t parent = number(std::string_view(text).substr(0, underscore));
    const std::int64_t index = number(std::string_view(text).substr(underscore + 1));
    static const std::string sql =
        fmt::format("SELECT {} FROM jobs WHERE array_parent = ? AND array_index = ?", kJobColumns);
    Stmt& s = stmt(sql.c_str());
    s.bind(parent).bind(index);
    while (s.step()) out.push_back(read_job(s));
    return out;
  }
  const std::int64_t id = number(text);
  static const std::string sql = fmt::format(
      "SELECT {} FROM jobs WHERE array_parent = ?1 OR (id = ?1 AND array_parent IS NULL) ORDER BY id", kJobColumns);
  Stmt& s = stmt(sql.c_str());
  s.bind(id);
  while (s.step()) out.push_back(read_job(s));
  return out;
}

void Store::each_job(const JobFilter& filter, const std::function<void(const JobRecord&)>& fn) {
  static const std::string active = fmt::format(
      "SELECT {} FROM jobs WHERE state IN ('PENDING', 'RUNNING') AND (?1 IS NULL OR tenant = ?1) AND "
      "(?2 IS NULL OR user = ?2) AND (?3 IS NULL OR state = ?3) AND (?4 IS NULL OR workflow = ?4) ORDER BY id",
      kJobColumns);
  static const std::string all = fmt::format(
      "SELECT {} FROM jobs WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR user = ?2) AND "
      "(?3 IS NULL OR state = ?3) AND (?4 IS NULL OR workflow = ?4) ORDER BY id",
      kJobColumns);
  Stmt& s = stmt((filter.all || filter.state ? all : active).c_str());
  s.bind(filter.tenant).bind(filter.user);
  if (filter.state)
    s.bind(state_name(*filter.state));
  else
    s.bind(std::optional<int>());
  s.bind(filter.workflow);
  while (s.step()) fn(read_job(s, filter.light));
}

std::vector<JobRecord> Store::jobs(const JobFilter& filter) {
  std::vector<JobRecord> out;
  each_job(filter, [&](const JobRecord& r) { out.push_back(r); });
  return out;
}

bool Store::cancel(std::int64_t id, const std::string& by, double now) {
  bool done = false;
  transaction([&] {
    Stmt& pending =
        stmt("UPDATE jobs SET state = 'CANCELLED', reason = ?, end_s = ? WHERE id = ? AND state = 'PENDING'");
    pending.bind("cancelled by " + by).bind(now).bind(id).run();
    done = db_.changes() > 0;
    if (!done)
      stmt("UPDATE jobs SET cancel_requested = 1, reason = ? WHERE id = ? AND state = 'RUNNING'")
          .bind("cancelled by " + by)
          .bind(id)
          .run();
  });
  return done;
}

bool Store::set_held(std::int64_t id, bool held) {
  Stmt& s = stmt(
      "UPDATE jobs SET held = ?, reason = CASE WHEN ? THEN 'JobHeldUser' ELSE '' END WHERE id = ? AND "
      "state = 'PENDING'");
  s.bind(held ? 1 : 0).bind(held ? 1 : 0).bind(id).run();
  return db_.changes() > 0;
}

std::optional<std::string> Store::meta(const std::string& key) {
  Stmt& s = stmt("SELECT value FROM meta WHERE key = ?");
  Stmt::Finish finish{s};
  s.bind(key);
  if (!s.step()) return std::nullopt;
  return s.text(0);
}

void Store::set_meta(const std::string& key, const std::string& value) {
  stmt("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)").bind(key).bind(value).run();
}

std::vector<std::pair<std::string, std::pair<double, double>>> Store::usage() {
  Stmt& s = stmt("SELECT tenant, value, updated_s FROM usage ORDER BY tenant");
  std::vector<std::pair<std::string, std::pair<double, double>>> out;
  while (s.step()) out.push_back({s.text(0), {s.f64(1), s.f64(2)}});
  return out;
}

void Store::set_usage(const std::vector<std::pair<std::string, std::pair<double, double>>>& usage) {
  transaction([&] {
    Stmt& s = stmt("INSERT OR REPLACE INTO usage(tenant, value, updated_s) VALUES(?, ?, ?)");
    for (const auto& [tenant, v] : usage) s.reset().bind(tenant).bind(v.first).bind(v.second).run();
  });
}

std::string Store::tag() {
  if (auto t = meta("tag")) return *t;
  std::random_device random;
  const std::string made = fmt::format("{:08x}", random());
  stmt("INSERT OR IGNORE INTO meta(key, value) VALUES('tag', ?)").bind(made).run();  // a concurrent client may win
  return *meta("tag");
}

}  // namespace rkit::rsub
