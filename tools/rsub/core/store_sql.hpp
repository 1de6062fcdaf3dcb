// File: rsub/core/store_sql.hpp — internal to the job store's files (store*.cpp): the
// prepared statement they all use, the columns of a job row (Store::read_job reads them in
// this order), and the mapping of an SQLite error to an rkit::Error.
#pragma once

#include <fmt/format.h>
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/store.hpp"
#include "rkit/error.hpp"

namespace rkit::rsub::store_sql {

inline constexpr const char* kJobColumns =
    "id, array_parent, array_index, spec, user, uid, state, reason, held, cancel_requested, submit_s, eligible_s, "
    "start_s, end_s, exit_code, signal, attempts, alloc, host, record_fields, backend, remote_id, cpu_s, "
    "peak_memory_bytes";

[[noreturn]] inline void fail(sqlite3* db, std::string_view what) {
  const int code = sqlite3_extended_errcode(db);
  const std::string message = fmt::format("job store: {}: {}", what, sqlite3_errmsg(db));
  if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED)
    throw Error(Exit::TempFail, message, "another rsub holds the job store; try again");
  if ((code & 0xff) == SQLITE_READONLY || (code & 0xff) == SQLITE_PERM || (code & 0xff) == SQLITE_CANTOPEN)
    throw Error(Exit::NoPerm, message);
  if ((code & 0xff) == SQLITE_FULL) throw Error(Exit::IoErr, message, "the state directory's disk is full");
  if ((code & 0xff) == SQLITE_CORRUPT || (code & 0xff) == SQLITE_NOTADB) throw Error(Exit::DataErr, message);
  throw Error(Exit::IoErr, message);
}

}  // namespace rkit::rsub::store_sql

namespace rkit::rsub {

// A prepared statement, reset and cleared on each use. A statement stepped to a row and
// not to its end keeps a read transaction open, which would freeze this connection's view
// of the database (and PRAGMA data_version): single-row readers hold a Finish guard.
class Store::Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s_, nullptr) != SQLITE_OK)
      store_sql::fail(db, "prepare");
  }
  ~Stmt() { sqlite3_finalize(s_); }
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
  template <typename T>
  Stmt& bind(const std::optional<T>& v) {
    return v ? bind(*v) : check(sqlite3_bind_null(s_, next_++));
  }
  // One step: true while there is a row.
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) store_sql::fail(db_, "step");
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
  std::string text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string();
  }
  template <typename T>
  std::optional<T> opt(int col) const {
    if (null(col)) return std::nullopt;
    if constexpr (std::is_same_v<T, double>)
      return f64(col);
    else if constexpr (std::is_same_v<T, int>)
      return i32(col);
    else
      return static_cast<T>(i64(col));
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) store_sql::fail(db_, "bind");
    return *this;
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int next_ = 1;
};

}  // namespace rkit::rsub
