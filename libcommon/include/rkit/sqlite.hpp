// File: rkit/sqlite.hpp
//
// The embedded stores (rsub's job store, the run store and model registry) on SQLite in
// WAL mode: one connection with its prepared statements, write transactions, a schema
// version kept in PRAGMA user_version, and SQLite's errors as rkit errors.
//
//   sql::Db db("/home/a/.local/state/rkit/runs/runs.db", "run store", 1,
//              [](sql::Db& d, int have) { d.exec(kSchema); });
//   db.transaction([&] { db.stmt("INSERT INTO t VALUES (?)").bind(std::int64_t{1}).run(); });
//   sql::Stmt& s = db.stmt("SELECT v FROM t");
//   while (s.step()) use(s.i64(0));
//
// Durability: commits survive the death of any process (synchronous=NORMAL in WAL mode);
// a power loss may undo the last commits before it, unless the store is opened durable
// (synchronous=FULL: an fsync per commit). Concurrency: SQLite serialises
// writers; a writer retries every 50 µs (then every ms) for up to 30 s and then throws
// Error(TempFail). One Db per thread.
//
// Errors name the store: "job store: step: database is locked" with the exit code of
// its kind (TempFail busy, NoPerm read-only or unopenable, IoErr full disk or I/O,
// DataErr corrupt or not a database).
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace rkit::sql {

// Throws the rkit::Error for the last error of `db`: "<store>: <what>: <sqlite's message>".
[[noreturn]] void fail(sqlite3* db, std::string_view store, std::string_view what);

// A prepared statement, reset and cleared on each use (Db::stmt). A statement stepped to
// a row and not to its end keeps a read transaction open, which would freeze this
// connection's view of the database (and PRAGMA data_version): single-row readers hold a
// Finish guard.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql, std::string_view store);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    next_ = 1;
    return *this;
  }
  Stmt& bind(std::int64_t v) { return check(sqlite3_bind_int64(s_, next_++, v)); }
  Stmt& bind(int v) { return bind(std::int64_t{v}); }
  Stmt& bind(double v) { return check(sqlite3_bind_double(s_, next_++, v)); }
  Stmt& bind(std::string_view v) {
    return check(sqlite3_bind_text(s_, next_++, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& bind(const char* v) { return bind(std::string_view(v)); }
  Stmt& bind(const std::string& v) { return bind(std::string_view(v)); }
  Stmt& bind_null() { return check(sqlite3_bind_null(s_, next_++)); }
  template <typename T>
  Stmt& bind(const std::optional<T>& v) {
    return v ? bind(*v) : bind_null();
  }
  // One step: true while there is a row.
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail(db_, store_, "step");
    return false;
  }
  void run() {
    while (step()) {
    }
  }
  struct Finish {
    Stmt& s;
    ~Finish() { sqlite3_reset(s.s_); }
  };
  bool null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  std::int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
  int i32(int col) const { return sqlite3_column_int(s_, col); }
  double f64(int col) const { return sqlite3_column_double(s_, col); }
  std::string text(int col) const { return std::string(view(col)); }
  // The column's text, valid until the next step or reset.
  std::string_view view(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string_view();
  }
  int type(int col) const { return sqlite3_column_type(s_, col); }  // SQLITE_INTEGER ...
  template <typename T>
  std::optional<T> opt(int col) const {
    if (null(col)) return std::nullopt;
    if constexpr (std::is_same_v<T, double>)
      return f64(col);
    else if constexpr (std::is_same_v<T, std::string>)
      return text(col);
    else if constexpr (std::is_same_v<T, int>)
      return i32(col);
    else
      return static_cast<T>(i64(col));
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail(db_, store_, "bind");
    return *this;
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  std::string_view store_;
  int next_ = 1;
};

class Db {
 public:
  // Called inside a write transaction to bring a database at schema version `have` (0:
  // new) up to the version Db was opened with; CREATE ... IF NOT EXISTS for a new one,
  // ALTER TABLE for an old one.
  using Migrate = std::function<void(Db&, int have)>;

  // Opens `path` (creating it and, private (0700), the folders above it). `store` names
  // it in errors ("job store"). A database newer than `version` is Error(DataErr); an
  // older one is migrated and switched to WAL. Error(IoErr) or Error(NoPerm) when the
  // folder or the file cannot be used.
  struct Options {
    // Each commit is on disk when it returns (synchronous=FULL, an fsync per transaction);
    // otherwise a power cut may lose the last commits, though never corrupt the file
    // (synchronous=NORMAL).
    bool durable = false;
    // False for a reader: a database without this store's schema (an empty file, another
    // program's) is Error(DataErr) "not a <store>", left as it was.
    bool create = true;
  };
  Db(const std::string& path, std::string store, int version, const Migrate& migrate, const Options& options);
  Db(const std::string& path, std::string store, int version, const Migrate& migrate)
      : Db(path, std::move(store), version, migrate, Options{}) {}
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // The statement for `sql`, prepared once per connection and reset. `sql` must be a
  // string literal or otherwise outlive the Db: its address is the cache's key.
  Stmt& stmt(const char* sql);
  // A statement made at run time (a filtered query), prepared for this use only.
  std::unique_ptr<Stmt> prepare(const std::string& sql);
  void exec(const char* sql);
  void exec(const std::string& sql) { exec(sql.c_str()); }
  // Runs `fn` in one write transaction (BEGIN IMMEDIATE ... COMMIT; rolled back when it
  // throws). Nested calls join the outer transaction.
  void transaction(const std::function<void()>& fn);
  // Rows changed by the last statement, and the last rowid inserted.
  std::int64_t changes() const;
  std::int64_t last_rowid() const;
  // Changes whenever another connection commits (PRAGMA data_version).
  std::uint64_t data_version();
  const std::string& path() const { return path_; }
  const std::string& store() const { return store_; }

 private:
  std::string path_, store_;
  sqlite3* db_ = nullptr;
  int depth_ = 0;
  std::chrono::steady_clock::time_point busy_since_;  // when the write lock was first found taken
  std::vector<std::pair<const char*, std::unique_ptr<Stmt>>> cache_;
};

}  // namespace rkit::sql
