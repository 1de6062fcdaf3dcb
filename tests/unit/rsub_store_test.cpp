// rsub's job store: ids unique under concurrent submitters, arrays, id resolution,
// cancel/hold/release by state, attempts and the retry policy, and the rkit.job.v1 record.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/store.hpp"
#include "rkit/error.hpp"
#include "rkit/process.hpp"
#include "test_support.hpp"

namespace rkit::rsub {
namespace {

JobSpec simple(const std::string& name = "sim") {
  JobSpec spec;
  spec.name = name;
  spec.tenant = "desk-a";
  spec.command = {"true"};
  spec.workdir = "/";
  return spec;
}

const Submitter kAlice{"alice", 1000};

// The times of the events a test stores: a fixed epoch, then one second later at each
// call (from any thread), never the real clock.
class TestClock {
 public:
  double operator()() { return kEpoch + static_cast<double>(++ticks_); }

 private:
  static constexpr double kEpoch = 1'700'000'000;
  std::atomic<std::int64_t> ticks_{0};
};

TEST(RsubStore, ConcurrentSubmittersGetUniqueIdsAndLoseNothing) {
  TestClock tick;
  testing::TempDir dir;
  Store(dir.path()).job(1);  // create the schema once, as the first client would
  constexpr int kThreads = 8, kEach = 100;
  std::vector<std::vector<std::int64_t>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Store store(dir.path());
      for (int i = 0; i < kEach; ++i) ids[t].push_back(store.submit(simple(), kAlice, tick()).front());
    });
  for (auto& th : threads) th.join();
  std::set<std::int64_t> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), std::size_t{kThreads * kEach});
  EXPECT_EQ(Store(dir.path()).jobs({}).size(), std::size_t{kThreads * kEach});
}

TEST(RsubStore, ArraysAreOneJobPerIndexNamedByTheFirst) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  store.submit(simple("before"), kAlice, tick());
  JobSpec spec = simple("arr");
  spec.array = ArraySpec{{0, 2, 4}, 2};
  const auto ids = store.submit(spec, kAlice, tick());
  ASSERT_EQ(ids.size(), 3u);
  const auto all = store.resolve(std::to_string(ids[0]));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].display_id(), fmt::format("{}_2", ids[0]));
  EXPECT_EQ(store.resolve(fmt::format("{}_4", ids[0])).at(0).id, ids[2]);
  EXPECT_TRUE(store.resolve(fmt::format("{}_3", ids[0])).empty());
  EXPECT_TRUE(store.resolve("999").empty());
  EXPECT_EQ(store.resolve("1").size(), 1u);
  EXPECT_THROW(store.resolve("x1"), Error);
}

TEST(RsubStore, CancelHoldAndReleaseFollowTheState) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  const auto a = store.submit(simple(), kAlice, tick()).front();
  const auto b = store.submit(simple(), kAlice, tick()).front();
  EXPECT_TRUE(store.set_held(a, true));
  EXPECT_TRUE(store.job(a)->held);
  EXPECT_FALSE(store.start_attempt(a, {TaskAlloc{}}, "h", tick()));  // held jobs do not start
  EXPECT_TRUE(store.set_held(a, false));
  EXPECT_TRUE(store.cancel(a, "alice", tick()));
  EXPECT_EQ(store.job(a)->state, JobState::Cancelled);
  EXPECT_FALSE(store.cancel(a, "alice", tick()));  // already over

  ASSERT_TRUE(store.start_attempt(b, {TaskAlloc{{0}, {0}, {}, 0}}, "h", tick()));
  EXPECT_FALSE(store.set_held(b, true));         // only pending jobs are held
  EXPECT_FALSE(store.cancel(b, "bob", tick()));  // running: marked for the supervisor
  EXPECT_TRUE(store.job(b)->cancel_requested);
  AttemptEnd end{AttemptEnd::How::Cancelled, std::nullopt, 15, tick()};
  EXPECT_EQ(store.end_attempt(b, 1, end), JobState::Cancelled);
  EXPECT_EQ(store.job(b)->reason, "cancelled by bob");
}

TEST(RsubStore, AttemptsRetryAsThePolicySaysAndEndOnce) {
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = simple();
  spec.retry = RetryPolicy{2, {75}, {9}, 5};
  const auto id = store.submit(spec, kAlice, 100).front();
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", 100));
  EXPECT_EQ(store.end_attempt(id, 1, {AttemptEnd::How::Exited, 75, std::nullopt, 110}), JobState::Pending);
  auto j = *store.job(id);
  EXPECT_DOUBLE_EQ(j.eligible_s, 115);  // 5 s backoff
  EXPECT_EQ(j.attempts, 1);
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", 120));
  EXPECT_EQ(store.end_attempt(id, 2, {AttemptEnd::How::Exited, 75, std::nullopt, 130}), JobState::Failed);
  EXPECT_EQ(store.job(id)->exit_code, 75);
  // A second report of an attempt (or a stale one) changes nothing.
  EXPECT_EQ(store.end_attempt(id, 2, {AttemptEnd::How::Exited, 0, std::nullopt, 140}), JobState::Failed);
  EXPECT_EQ(store.job(id)->exit_code, 75);
}

TEST(RsubStore, ACancelledJobIsNeverRetried) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = simple();
  spec.retry = RetryPolicy{3, {75}, {}, 1};
  const auto id = store.submit(spec, kAlice, tick()).front();
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", tick()));
  EXPECT_FALSE(store.cancel(id, "alice", tick()));  // running: marked for the supervisor
  // The task fails with a retry code before the supervisor hears of the cancel.
  EXPECT_EQ(store.end_attempt(id, 1, {AttemptEnd::How::Exited, 75, std::nullopt, tick()}), JobState::Cancelled);
  EXPECT_EQ(store.job(id)->reason, "cancelled by alice");
}

TEST(RsubStore, AnOutOfMemoryEndIsFinalAndKeepsWhatTheCgroupMeasured) {
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = simple();
  spec.retry = RetryPolicy{3, {}, {9}, 1};  // SIGKILL retries, an OOM kill does not
  const auto id = store.submit(spec, kAlice, 100).front();
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", 100));
  AttemptEnd end;
  end.how = AttemptEnd::How::OutOfMemory;
  end.signal = 9;
  end.end_s = 110;
  end.cpu_s = 1.5;
  end.peak_memory_bytes = 20u << 20;
  EXPECT_EQ(store.end_attempt(id, 1, end), JobState::OutOfMemory);
  const JobRecord j = *store.job(id);
  EXPECT_EQ(state_name(j.state), "OUT_OF_MEMORY");
  EXPECT_EQ(j.reason.rfind("OutOfMemory", 0), 0u) << j.reason;
  EXPECT_EQ(j.cpu_s, 1.5);
  EXPECT_EQ(j.peak_memory_bytes, 20 << 20);
  const Json rec = j.to_json();
  EXPECT_EQ(rec["cpu_used_s"], 1.5);
  EXPECT_EQ(rec["memory_peak_bytes"], 20 << 20);
}

TEST(RsubStore, AfterAttemptMapsEndsToStates) {
  JobSpec spec = simple();
  using How = AttemptEnd::How;
  EXPECT_EQ(after_attempt(spec, 1, {How::Exited, 0, std::nullopt, 1}).state, JobState::Completed);
  EXPECT_EQ(after_attempt(spec, 1, {How::Exited, 3, std::nullopt, 1}).reason, "NonZeroExitCode 3");
  EXPECT_EQ(after_attempt(spec, 1, {How::Signaled, std::nullopt, 9, 1}).reason, "Signal SIGKILL");
  EXPECT_EQ(after_attempt(spec, 1, {How::TimedOut, std::nullopt, std::nullopt, 1}).state, JobState::Timeout);
  spec.retry = RetryPolicy{5, {}, {9}, 100};
  const Transition t = after_attempt(spec, 4, {How::Signaled, std::nullopt, 9, 1000});
  EXPECT_EQ(t.state, JobState::Pending);
  EXPECT_DOUBLE_EQ(*t.retry_at_s, 1600);  // 100 × 2^3 = 800, capped at 600
  EXPECT_EQ(after_attempt(spec, 5, {How::Signaled, std::nullopt, 9, 1}).state, JobState::Failed);
}

TEST(RsubStore, UndoStartAndFinishOnlyTouchActiveJobs) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  const auto id = store.submit(simple(), kAlice, tick()).front();
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", tick()));
  EXPECT_FALSE(store.undo_start(id, 2));
  EXPECT_TRUE(store.undo_start(id, 1));
  EXPECT_EQ(store.job(id)->state, JobState::Pending);
  EXPECT_EQ(store.job(id)->attempts, 0);
  EXPECT_TRUE(store.finish(id, JobState::Failed, "DependencyNeverSatisfied", tick()));
  EXPECT_FALSE(store.finish(id, JobState::Lost, "x", tick()));
  EXPECT_EQ(store.job(id)->state, JobState::Failed);
}

TEST(RsubStore, ACancelSeenAsLostByAConcurrentRefreshEndsCancelled) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  const auto lost = store.submit(simple(), kAlice, tick()).front();
  const auto failed = store.submit(simple(), kAlice, tick()).front();
  EXPECT_FALSE(store.lost_was_cancelled(lost, "cancelled by alice"));  // still active
  ASSERT_TRUE(store.finish(lost, JobState::Lost, "no longer listed by Kubernetes", tick()));
  ASSERT_TRUE(store.finish(failed, JobState::Failed, "x", tick()));
  EXPECT_TRUE(store.lost_was_cancelled(lost, "cancelled by alice"));
  EXPECT_FALSE(store.lost_was_cancelled(failed, "cancelled by alice"));
  EXPECT_EQ(store.job(lost)->state, JobState::Cancelled);
  EXPECT_EQ(store.job(lost)->reason, "cancelled by alice");
  EXPECT_EQ(store.job(failed)->state, JobState::Failed);
}

TEST(RsubStore, RecordCarriesWhatCostReportsNeed) {
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = simple();
  spec.resources = Resources{2, 4, 1, "H100", 1 << 30};
  const auto id = store.submit(spec, kAlice, 1000).front();
  const Json rec = store.job(id)->to_json();
  EXPECT_EQ(rec["schema"], "rkit.job.v1");
  EXPECT_EQ(rec["id"], std::to_string(id));
  EXPECT_EQ(rec["tenant"], "desk-a");
  EXPECT_EQ(rec["user"], "alice");
  EXPECT_EQ(rec["state"], "PENDING");
  EXPECT_EQ(rec["cpus"], 8);
  EXPECT_EQ(rec["gpus"], 2);
  EXPECT_EQ(rec["gpu_type"], "H100");
  EXPECT_EQ(rec["submit_unix_s"], 1000.0);
  EXPECT_TRUE(rec["start_unix_s"].is_null());
}

TEST(RsubStore, UnusableDirectoryIsAClearError) {
  try {
    Store store("/proc/no-such/rsub");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/no-such/rsub"), std::string::npos) << e.what();
  }
}

// --- schema version 2: remote backends ------------------------------------------------

// The schema of version 1 stores, from before remote backends (no backend, remote_id).
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE jobs(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  array_parent INTEGER, array_index INTEGER,
  name TEXT NOT NULL, tenant TEXT NOT NULL, user TEXT NOT NULL, uid INTEGER NOT NULL,
  spec TEXT NOT NULL,
  state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', held INTEGER NOT NULL DEFAULT 0,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  submit_s REAL NOT NULL, eligible_s REAL NOT NULL, start_s REAL, end_s REAL,
  exit_code INTEGER, signal INTEGER, attempts INTEGER NOT NULL DEFAULT 0,
  alloc TEXT, host TEXT NOT NULL DEFAULT '', record_fields TEXT NOT NULL);
CREATE INDEX jobs_active ON jobs(id) WHERE state IN ('PENDING', 'RUNNING');
CREATE INDEX jobs_array ON jobs(array_parent) WHERE array_parent IS NOT NULL;
CREATE TABLE tasks(
  job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, task INTEGER NOT NULL,
  pid INTEGER, start_s REAL, end_s REAL, exit_code INTEGER, signal INTEGER,
  PRIMARY KEY(job_id, attempt, task));
CREATE TABLE usage(tenant TEXT PRIMARY KEY, value REAL NOT NULL, updated_s REAL NOT NULL);
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
PRAGMA journal_mode=WAL;
PRAGMA user_version=1;
)sql";

// Runs SQL on the store's database through a connection of its own.
void sql(const std::string& dir, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/jobs.db").c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

int user_version(const std::string& dir) {
  sqlite3* db = nullptr;
  sqlite3_open((dir + "/jobs.db").c_str(), &db);
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, nullptr);
  const int v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int(s, 0) : -1;
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

// A version 1 store holding one finished local job (id 1).
void make_v1_store(const std::string& dir) {
  sql(dir, kSchemaV1);
  const JobSpec spec = simple("old");
  auto quote = [](const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  };
  sql(dir, fmt::format("INSERT INTO jobs(name, tenant, user, uid, spec, state, submit_s, eligible_s, start_s, end_s, "
                       "exit_code, attempts, host, record_fields) VALUES('old', 'desk-a', 'alice', 1000, {}, "
                       "'COMPLETED', 100, 100, 101, 102, 0, 1, 'h1', {})",
                       quote(spec.to_json().dump()), quote(spec_record_fields(spec))));
}

JobFilter all_jobs() {
  JobFilter f;
  f.all = true;
  return f;
}

JobSpec remote(const std::string& backend = "slurm", const std::string& name = "far") {
  JobSpec spec = simple(name);
  spec.backend = backend;
  return spec;
}

TEST(RsubStoreRemote, Version1StoreIsMigrated) {
  testing::TempDir dir;
  make_v1_store(dir.path());
  ASSERT_EQ(user_version(dir.path()), 1);
  {
    Store store(dir.path());
    const auto old = store.job(1);
    ASSERT_TRUE(old);
    EXPECT_EQ(old->spec.name, "old");
    EXPECT_EQ(old->state, JobState::Completed);
    EXPECT_EQ(old->host, "h1");
    EXPECT_EQ(old->backend, "local");
    EXPECT_EQ(old->remote_id, "");
    EXPECT_EQ(old->display_id(), "1");
    EXPECT_EQ(old->to_json()["backend"], "local");

    const auto ids = store.submit(remote(), kAlice, 200);
    ASSERT_EQ(ids, (std::vector<std::int64_t>{2}));
    store.set_remote_ids(ids, {"77"});
    EXPECT_EQ(store.resolve("slurm:77").at(0).id, 2);
    EXPECT_EQ(store.jobs(all_jobs()).size(), 2u);
  }
  EXPECT_EQ(user_version(dir.path()), 5);
  Store again(dir.path());  // a second open does not migrate again
  EXPECT_EQ(again.job(2)->backend, "slurm");
  EXPECT_EQ(again.job(1)->backend, "local");
}

TEST(RsubStoreRemote, NewerSchemaIsRefused) {
  testing::TempDir dir;
  Store(dir.path()).job(1);
  sql(dir.path(), "PRAGMA user_version=6");
  const Error e = testing::error_of([&] { Store store(dir.path()); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("schema version 6"), std::string::npos) << e.what();
}

// A version 2 store (before the captured environment and the cgroup's measures) gains
// their columns; its jobs read as before, with neither.
TEST(RsubStoreRemote, Version2StoreIsMigrated) {
  testing::TempDir dir;
  {
    Store store(dir.path());
    store.submit(simple("old"), kAlice, 100);
  }
  sql(dir.path(),
      "ALTER TABLE jobs DROP COLUMN environ; ALTER TABLE jobs DROP COLUMN cpu_s; "
      "ALTER TABLE jobs DROP COLUMN peak_memory_bytes; DROP INDEX jobs_workflow; ALTER TABLE jobs DROP COLUMN "
      "workflow; "
      "PRAGMA user_version=2");
  Store store(dir.path());
  EXPECT_EQ(user_version(dir.path()), 5);
  EXPECT_FALSE(store.environment(1));
  EXPECT_FALSE(store.job(1)->cpu_s);
  const auto ids = store.submit(simple("new"), kAlice, 200, {"PATH=/bin", "HOME=/home/alice"});
  EXPECT_EQ(*store.environment(ids.front()), (std::vector<std::string>{"PATH=/bin", "HOME=/home/alice"}));
}

// A version 4 store (before workflows) gains jobs.workflow; its jobs are in none, and a
// workflow's jobs are listed by it.
TEST(RsubStoreRemote, Version4StoreIsMigrated) {
  testing::TempDir dir;
  {
    Store store(dir.path());
    store.submit(simple("old"), kAlice, 100);
  }
  sql(dir.path(), "DROP INDEX jobs_workflow; ALTER TABLE jobs DROP COLUMN workflow; PRAGMA user_version=4");
  Store store(dir.path());
  EXPECT_EQ(user_version(dir.path()), 5);
  JobSpec step = simple("train");
  step.workflow = "pipeline";
  step.rule = "train";
  const auto ids = store.submit(step, kAlice, 200);
  JobFilter filter = all_jobs();
  filter.workflow = "pipeline";
  const auto jobs = store.jobs(filter);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, ids.front());
  const Json record = jobs[0].to_json();
  EXPECT_EQ(record["workflow"], "pipeline");
  EXPECT_EQ(record["rule"], "train");
  EXPECT_TRUE(store.job(1)->to_json()["workflow"].is_null());
  EXPECT_EQ(store.jobs(all_jobs()).size(), 2u);
}

// Counts the connections that have found SQLite's write lock taken (the WAL write lock,
// refused to them at least once), so that a test can wait until every client it started
// is waiting for a lock it holds. While it lives, the default VFS is one that forwards
// every call to the VFS it replaces and watches xShmLock.
class WriteLockWaiters {
 public:
  WriteLockWaiters() : real_(sqlite3_vfs_find(nullptr)) {
    current_ = this;
    vfs_ = *real_;  // its pAppData too, for the calls that go to it with our vfs_
    vfs_.zName = "rsub-test-lock-waiters";
    vfs_.szOsFile = static_cast<int>(sizeof(File)) + real_->szOsFile;
    vfs_.xOpen = open;
    methods_ = sqlite3_io_methods{
        3,
        [](sqlite3_file* f) { return real(f)->pMethods->xClose(real(f)); },
        [](sqlite3_file* f, void* buf, int n, sqlite3_int64 at) {
          return real(f)->pMethods->xRead(real(f), buf, n, at);
        },
        [](sqlite3_file* f, const void* buf, int n, sqlite3_int64 at) {
          return real(f)->pMethods->xWrite(real(f), buf, n, at);
        },
        [](sqlite3_file* f, sqlite3_int64 size) { return real(f)->pMethods->xTruncate(real(f), size); },
        [](sqlite3_file* f, int flags) { return real(f)->pMethods->xSync(real(f), flags); },
        [](sqlite3_file* f, sqlite3_int64* size) { return real(f)->pMethods->xFileSize(real(f), size); },
        [](sqlite3_file* f, int level) { return real(f)->pMethods->xLock(real(f), level); },
        [](sqlite3_file* f, int level) { return real(f)->pMethods->xUnlock(real(f), level); },
        [](sqlite3_file* f, int* out) { return real(f)->pMethods->xCheckReservedLock(real(f), out); },
        [](sqlite3_file* f, int op, void* arg) { return real(f)->pMethods->xFileControl(real(f), op, arg); },
        [](sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); },
        [](sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); },
        [](sqlite3_file* f, int page, int size, int extend, void volatile** out) {
          return real(f)->pMethods->xShmMap(real(f), page, size, extend, out);
        },
        shm_lock,
        [](sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); },
        [](sqlite3_file* f, int remove) { return real(f)->pMethods->xShmUnmap(real(f), remove); },
        [](sqlite3_file* f, sqlite3_int64 at, int n, void** out) {
          return real(f)->pMethods->xFetch(real(f), at, n, out);
        },
        [](sqlite3_file* f, sqlite3_int64 at, void* p) { return real(f)->pMethods->xUnfetch(real(f), at, p); },
    };
    sqlite3_vfs_register(&vfs_, 1);
  }
  ~WriteLockWaiters() {
    sqlite3_vfs_register(real_, 1);  // the default again
    sqlite3_vfs_unregister(&vfs_);
    current_ = nullptr;
  }
  WriteLockWaiters(const WriteLockWaiters&) = delete;
  WriteLockWaiters& operator=(const WriteLockWaiters&) = delete;

  // True once `n` connections have waited for the write lock; false after `timeout`.
  bool wait_for(int n, std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return waiting_ >= n; });
  }

 private:
  struct File {
    sqlite3_file base;   // our methods_
    sqlite3_file* real;  // the real VFS's file, just after this struct
    bool counted;
  };
  static sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

  static int open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
    File* file = reinterpret_cast<File*>(f);
    file->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(f) + sizeof(File));
    file->counted = false;
    file->real->pMethods = nullptr;
    const int rc = current_->real_->xOpen(current_->real_, name, file->real, flags, out_flags);
    // Only a real file with version 3 methods (the unix VFS's) is wrapped: the methods
    // above call them all.
    file->base.pMethods = file->real->pMethods ? &current_->methods_ : nullptr;
    if (file->real->pMethods && file->real->pMethods->iVersion < 3) {
      file->real->pMethods->xClose(file->real);
      file->base.pMethods = nullptr;
      return SQLITE_CANTOPEN;
    }
    return rc;
  }

  // Offset 0 is the WAL write lock: a writer asks for it exclusively.
  static int shm_lock(sqlite3_file* f, int offset, int n, int flags) {
    const int rc = real(f)->pMethods->xShmLock(real(f), offset, n, flags);
    File* file = reinterpret_cast<File*>(f);
    if (rc == SQLITE_BUSY && offset == 0 && (flags & SQLITE_SHM_LOCK) && (flags & SQLITE_SHM_EXCLUSIVE) &&
        !file->counted) {
      file->counted = true;
      std::lock_guard lock(current_->mu_);
      ++current_->waiting_;
      current_->changed_.notify_all();
    }
    return rc;
  }

  static inline WriteLockWaiters* current_ = nullptr;
  sqlite3_vfs* real_;
  sqlite3_vfs vfs_{};
  sqlite3_io_methods methods_{};
  std::mutex mu_;
  std::condition_variable changed_;
  int waiting_ = 0;
};

// Clients of a new rsub that open a version 1 store at the same moment: one migrates,
// the others must find it migrated. DISABLED: fails today, see the report (the version is
// read before the write transaction, so a second client runs ALTER TABLE again and fails
// with "duplicate column name: backend").
TEST(RsubStoreRemote, ConcurrentFirstOpensOfAVersion1StoreAllSucceed) {
  testing::TempDir dir;
  make_v1_store(dir.path());
  WriteLockWaiters waiters;
  // Hold the write lock so that every client has read version 1 before any migrates.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/jobs.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  constexpr int kClients = 4;
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      try {
        Store store(dir.path());
        store.job(1);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  // Each client waits for the write lock once it has read the version (the migration
  // takes the lock); a client that failed before never does.
  EXPECT_TRUE(waiters.wait_for(kClients, std::chrono::seconds(30))) << "the clients never waited for the lock";
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(user_version(dir.path()), 5);
}

TEST(RsubStoreRemote, DaemonIgnoresRemoteJobs) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  const auto local = store.submit(simple(), kAlice, tick()).front();
  const auto far = store.submit(remote(), kAlice, tick()).front();
  const auto job = store.job(far);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->backend, "slurm");
  EXPECT_EQ(job->remote_id, "");
  EXPECT_EQ(job->state, JobState::Pending);
  const auto active = store.active_jobs_after(0);
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].id, local);
  std::int64_t seq = store.change_seq();
  store.set_held(local, true);
  store.set_held(far, true);
  const auto changed = store.changed_since(seq);
  ASSERT_EQ(changed.size(), 1u) << "the change log is the daemon's: local jobs only";
  EXPECT_EQ(changed[0].id, local);
  EXPECT_EQ(store.jobs({}).size(), 2u) << "clients list both";
  EXPECT_TRUE(store.remote_active("slurm").empty()) << "no remote id yet";

  store.set_remote_ids({far}, {"77"});
  EXPECT_EQ(store.active_jobs_after(0).size(), 1u);
  const auto found = store.resolve("slurm:77");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].id, far);
  EXPECT_EQ(found[0].display_id(), "slurm:77");
  const Json rec = found[0].to_json();
  EXPECT_EQ(rec["id"], "slurm:77");
  EXPECT_EQ(rec["backend"], "slurm");
  EXPECT_EQ(rec["remote_id"], "77");
  EXPECT_EQ(rec["job_id"], far);
  EXPECT_TRUE(store.job(local)->to_json()["remote_id"].is_null());
  EXPECT_EQ(store.remote_active("slurm"), (std::vector<std::pair<std::int64_t, std::string>>{{far, "77"}}));
  EXPECT_TRUE(store.remote_active("local").empty());
  EXPECT_TRUE(store.resolve("kube:77").empty()) << "another backend's 77";
  EXPECT_TRUE(store.resolve("slurm:7").empty());
  EXPECT_EQ(store.resolve(std::to_string(far)).at(0).id, far) << "rsub's own id still names it";
}

TEST(RsubStoreRemote, ResolveArraysByTheBackendsId) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = remote();
  spec.array = ArraySpec{{0, 1, 5}, 0};
  const auto ids = store.submit(spec, kAlice, tick());
  ASSERT_EQ(ids.size(), 3u);
  store.set_remote_ids(ids, {"80_0", "80_1", "80_5"});
  const auto other = store.submit(remote(), kAlice, tick());
  store.set_remote_ids(other, {"8"});
  const auto all = store.resolve("slurm:80");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, ids[0]);
  EXPECT_EQ(all[2].id, ids[2]);
  EXPECT_EQ(all[1].display_id(), "slurm:80_1");
  const auto one = store.resolve("slurm:80_1");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id, ids[1]);
  EXPECT_EQ(one[0].array_index, 1);
  const auto eight = store.resolve("slurm:8");
  ASSERT_EQ(eight.size(), 1u) << "a prefix of 80 must not name 80_*";
  EXPECT_EQ(eight[0].id, other[0]);
  EXPECT_TRUE(store.resolve("slurm:80_2").empty());
  EXPECT_TRUE(store.resolve("slurm:0_1").empty());
  EXPECT_TRUE(store.resolve("slurm:8_0").empty());
  for (const char* bad : {"slurm:", ":80", "slurm:8 0", "slurm:80;x"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(testing::error_of([&] { store.resolve(bad); }).code(), Exit::Usage);
  }
}

TEST(RsubStoreRemote, SetRemoteIdsNeedsOnePerJob) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  const auto ids = store.submit(remote(), kAlice, tick());
  EXPECT_EQ(testing::error_of([&] { store.set_remote_ids(ids, {"1", "2"}); }).code(), Exit::Software);
  EXPECT_EQ(store.job(ids[0])->remote_id, "");
}

TEST(RsubStoreRemote, UpdateRemoteChangesOnlyActiveJobsOfTheBackend) {
  testing::TempDir dir;
  Store store(dir.path());
  const auto a = store.submit(remote(), kAlice, 100).front();
  const auto b = store.submit(remote(), kAlice, 100).front();
  const auto c = store.submit(remote("kube"), kAlice, 100).front();
  store.set_remote_ids({a, b}, {"77", "78"});
  store.set_remote_ids({c}, {"77"});
  ASSERT_TRUE(store.cancel(b, "alice", 150));  // over already: a late report changes nothing

  Store::RemoteState run{"77", JobState::Running, "", false, 200, std::nullopt, std::nullopt, std::nullopt, 1, "vm"};
  Store::RemoteState done{"78", JobState::Completed, "", false, 200, 260, 0, std::nullopt, 1, "vm"};
  Store::RemoteState unknown{"79", JobState::Failed, "x", false, 1, 2, 1, std::nullopt, 1, "vm"};
  store.update_remote("slurm", {run, done, unknown}, 500);
  auto ja = *store.job(a);
  EXPECT_EQ(ja.state, JobState::Running);
  EXPECT_EQ(ja.start_s, 200);
  EXPECT_EQ(ja.end_s, std::nullopt);
  EXPECT_EQ(ja.attempts, 1);
  EXPECT_EQ(ja.host, "vm");
  auto jb = *store.job(b);
  EXPECT_EQ(jb.state, JobState::Cancelled);
  EXPECT_EQ(jb.reason, "cancelled by alice");
  EXPECT_EQ(jb.start_s, std::nullopt);
  EXPECT_EQ(store.job(c)->state, JobState::Pending) << "kube's 77 is another job";

  Store::RemoteState failed{"77", JobState::Failed, "Signal SIGKILL", false, 300, 360, std::nullopt, 9, 3, "vm2"};
  store.update_remote("slurm", {failed}, 500);
  ja = *store.job(a);
  EXPECT_EQ(ja.state, JobState::Failed);
  EXPECT_EQ(ja.reason, "Signal SIGKILL");
  EXPECT_EQ(ja.start_s, 300);
  EXPECT_EQ(ja.end_s, 360);
  EXPECT_EQ(ja.signal, 9);
  EXPECT_EQ(ja.exit_code, std::nullopt);
  EXPECT_EQ(ja.attempts, 3);
  EXPECT_EQ(ja.host, "vm2");
  EXPECT_TRUE(store.remote_active("slurm").empty());
  EXPECT_EQ(store.remote_active("kube").size(), 1u);

  // A terminal job stays as it ended.
  store.update_remote("slurm", {run}, 500);
  EXPECT_EQ(store.job(a)->state, JobState::Failed);

  // Held, as the backend says.
  const auto h = store.submit(remote(), kAlice, 100).front();
  store.set_remote_ids({h}, {"90"});
  store.update_remote(
      "slurm",
      {{"90", JobState::Pending, "JobHeldUser", true, std::nullopt, std::nullopt, std::nullopt, std::nullopt, 0, ""}},
      500);
  EXPECT_TRUE(store.job(h)->held);
  EXPECT_EQ(store.job(h)->reason, "JobHeldUser");

  // Ended, but with no end time yet (sacct's End "Unknown" just after a cancel): it ends
  // when rsub learned of it.
  store.update_remote(
      "slurm", {{"90", JobState::Cancelled, "", false, std::nullopt, std::nullopt, std::nullopt, std::nullopt, 0, ""}},
      700);
  EXPECT_EQ(store.job(h)->state, JobState::Cancelled);
  EXPECT_EQ(store.job(h)->end_s, 700);
}

TEST(RsubStoreRemote, DiscardRemovesTheJobs) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = remote();
  spec.array = ArraySpec{{0, 1}, 0};
  const auto ids = store.submit(spec, kAlice, tick());
  const auto keep = store.submit(remote(), kAlice, tick()).front();
  store.discard(ids);
  EXPECT_FALSE(store.job(ids[0]));
  EXPECT_FALSE(store.job(ids[1]));
  EXPECT_TRUE(store.job(keep));
  EXPECT_EQ(store.jobs(all_jobs()).size(), 1u);
  EXPECT_GT(store.submit(remote(), kAlice, tick()).front(), keep) << "ids are never reused";
}

TEST(RsubStoreRemote, LoseUnsubmittedMarksOnlyStaleJobsWithoutRemoteId) {
  testing::TempDir dir;
  Store store(dir.path());
  const auto stale = store.submit(remote(), kAlice, 100).front();
  const auto fresh = store.submit(remote(), kAlice, 500).front();
  const auto submitted = store.submit(remote(), kAlice, 100).front();
  store.set_remote_ids({submitted}, {"77"});
  const auto other = store.submit(remote("kube"), kAlice, 100).front();
  const auto local = store.submit(simple(), kAlice, 100).front();
  const auto cancelled = store.submit(remote(), kAlice, 100).front();
  ASSERT_TRUE(store.cancel(cancelled, "alice", 120));

  store.lose_unsubmitted("slurm", 400, 1000);
  const auto s = *store.job(stale);
  EXPECT_EQ(s.state, JobState::Lost);
  EXPECT_EQ(s.reason, "SubmitInterrupted");
  EXPECT_EQ(s.end_s, 1000);
  EXPECT_EQ(store.job(fresh)->state, JobState::Pending) << "its submitter may still be waiting for sbatch";
  EXPECT_EQ(store.job(submitted)->state, JobState::Pending);
  EXPECT_EQ(store.job(other)->state, JobState::Pending);
  EXPECT_EQ(store.job(local)->state, JobState::Pending);
  EXPECT_EQ(store.job(cancelled)->state, JobState::Cancelled);
}

// --- the change log the daemon refreshes from ---------------------------------------------

TEST(RsubStoreChanges, LogsEachChangedJobOnceInCommitOrder) {
  TestClock tick;
  testing::TempDir dir;
  Store store(dir.path());
  const auto a = store.submit(simple(), kAlice, tick()).front();
  const auto b = store.submit(simple(), kAlice, tick()).front();
  std::int64_t seq = store.change_seq();
  EXPECT_TRUE(store.changed_since(seq).empty()) << "a submit is not a change: the daemon loads new jobs whole";
  store.set_held(b, true);
  store.set_held(a, true);
  store.set_held(a, false);
  store.set_reasons({{b, "Priority"}});  // the daemon's own reasons are not changes
  const std::int64_t before = seq;
  auto changed = store.changed_since(seq);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0].id, b);
  EXPECT_TRUE(changed[0].held);
  EXPECT_EQ(changed[1].id, a);
  EXPECT_FALSE(changed[1].held) << "a job changed twice is there once, as it is now";
  EXPECT_GT(seq, before);
  EXPECT_TRUE(store.changed_since(seq).empty()) << "read up to seq";

  store.cancel(a, "alice", tick());
  changed = store.changed_since(seq);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].state, JobState::Cancelled) << "terminal states are logged too";

  // Dropping the whole log must not restart its numbering (the daemon reads seq > its own).
  store.forget_changes(seq);
  store.set_held(b, false);
  const std::int64_t dropped_at = seq;
  changed = store.changed_since(seq);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].id, b);
  EXPECT_GT(seq, dropped_at);
  EXPECT_EQ(store.change_seq(), seq);
}

// --- the record's text -----------------------------------------------------------------------

// What Json::dump writes for the record, field by field: to_json_line writes it without
// building the object, and must write the same text.
std::string record_as_json_dumps_it(const JobRecord& r) {
  auto opt = [](const auto& v) { return v ? Json(*v) : Json(nullptr); };
  std::optional<double> elapsed;
  if (r.start_s) elapsed = r.end_s.value_or(now_s()) - *r.start_s;
  Json j{{"schema", "rkit.job.v1"},
         {"id", r.display_id()},
         {"backend", r.backend},
         {"remote_id", r.remote_id.empty() ? Json(nullptr) : Json(r.remote_id)},
         {"job_id", r.id},
         {"array_parent", opt(r.array_parent)},
         {"array_index", opt(r.array_index)}};
  const Json fields = parse_json(spec_record_fields(r.spec), "fields");
  for (auto& [k, v] : fields.items()) j[k] = v;
  const Json tail{{"user", r.user},
                  {"uid", r.uid},
                  {"state", state_name(r.state)},
                  {"reason", r.reason},
                  {"held", r.held},
                  {"exit_code", opt(r.exit_code)},
                  {"signal", r.signal ? Json(signal_name(*r.signal)) : Json(nullptr)},
                  {"attempts", r.attempts},
                  {"submit_unix_s", r.submit_s},
                  {"start_unix_s", opt(r.start_s)},
                  {"end_unix_s", opt(r.end_s)},
                  {"elapsed_s", opt(elapsed)},
                  {"host", r.host.empty() ? Json(nullptr) : Json(r.host)},
                  {"cpu_used_s", opt(r.cpu_s)},
                  {"memory_peak_bytes", opt(r.peak_memory_bytes)}};
  for (auto& [k, v] : tail.items()) j[k] = v;
  j["alloc"] = alloc_to_json(r.alloc);
  return to_json_line(j);
}

TEST(RsubRecord, LineIsWhatJsonWouldWrite) {
  JobRecord r;
  r.id = 42;
  r.spec = simple("a \"quoted\" name\twith a tab, é and \x01");
  r.user = "alice";
  r.uid = 1000;
  r.state = JobState::Failed;
  r.reason = "NonZeroExitCode";
  r.submit_s = 1796072689.4727328;
  r.start_s = 1796072690.0;  // integral: Json writes 1796072690.0
  r.end_s = 1796072700.25;
  r.exit_code = 3;
  r.signal = 9;
  r.attempts = 2;
  r.host = "node-1";
  r.cpu_s = 0.000012;  // below 1e-4: Json's exponent form
  r.peak_memory_bytes = 1 << 20;
  EXPECT_EQ(r.to_json_line(), record_as_json_dumps_it(r));
  r.array_parent = 40;
  r.array_index = 2;
  r.cpu_s = 2e16;
  r.start_s = std::nullopt;
  r.end_s = std::nullopt;
  r.signal = std::nullopt;
  r.host = "";
  r.reason = "bad byte \xff here";
  r.submit_s = 0.5;
  EXPECT_EQ(r.to_json_line(), record_as_json_dumps_it(r));
  EXPECT_EQ(parse_json(r.to_json_line(), "line")["reason"], "bad byte \xef\xbf\xbd here") << "invalid UTF-8 replaced";
  std::mt19937_64 random(7);
  for (int i = 0; i < 2000; ++i) {  // doubles of every magnitude: the same digits as Json's
    r.submit_s =
        std::ldexp(std::uniform_real_distribution<double>(-1, 1)(random), static_cast<int>(random() % 200) - 100);
    ASSERT_EQ(r.to_json_line(), record_as_json_dumps_it(r)) << r.submit_s;
  }
}

}  // namespace
}  // namespace rkit::rsub
