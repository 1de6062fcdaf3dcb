// The embedded stores' SQLite connection (see rkit/sqlite.hpp).
#include "rkit/sqlite.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>

#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::sql {
namespace {

// SQLite's own busy timeout sleeps 1, 2, 5, 10 ms... between tries: far longer than the
// stores' transactions (well under a millisecond), so a writer that finds the lock taken
// would wait milliseconds for nothing, and every writer behind it. Tries again every
// 50 µs, every millisecond after 100 tries; gives up after 30 s.
int retry_busy(void* arg, int tries) {
  auto& since = *static_cast<std::chrono::steady_clock::time_point*>(arg);
  const auto now = std::chrono::steady_clock::now();
  if (tries == 0)
    since = now;
  else if (now - since > std::chrono::seconds(30))
    return 0;
  ::usleep(tries < 100 ? 50 : 1000);
  return 1;
}

// Root keeps a store only where no other user can reach in: every folder on the way
// root's, none that others may write unless sticky, the store's own writable by root
// alone. Elsewhere another user could swap the database, or its -wal and -shm files, for
// links to files of root's. Checked for the path as given (a link on it must be root's
// too) and for the folders it leads to (`dir` absolute). `store_dir`: `dir` is the
// store's own folder, not one to make it in.
void check_root_may_use(const std::string& dir, std::string_view store, bool store_dir) {
  for (std::size_t end = 1;; end = dir.find('/', end + 1)) {
    const std::string at = end == std::string::npos ? dir : dir.substr(0, end);
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) throw system_error(fmt::format("{}: {}", store, at), errno);
    const bool last = end == std::string::npos;
    // A link's own mode bits mean nothing; its owner, and where it leads, do.
    const bool others_write = !S_ISLNK(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (st.st_uid != 0 || (others_write && ((last && store_dir) || (st.st_mode & S_ISVTX) == 0)))
      throw Error(Exit::NoPerm,
                  fmt::format("{}: {} is {}: root keeps no store where another user could replace its files", store, at,
                              st.st_uid != 0 ? "another user's" : "writable by others"),
                  "keep root's stores in root's own folders");
    if (last) return;
  }
}

}  // namespace

void fail(sqlite3* db, std::string_view store, std::string_view what) {
  const int code = sqlite3_extended_errcode(db) & 0xff;
  const std::string message = fmt::format("{}: {}: {}", store, what, sqlite3_errmsg(db));
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    throw Error(Exit::TempFail, message, fmt::format("another process holds the {}; try again", store));
  if (code == SQLITE_READONLY || code == SQLITE_PERM || code == SQLITE_CANTOPEN) throw Error(Exit::NoPerm, message);
  if (code == SQLITE_FULL) throw Error(Exit::IoErr, message, fmt::format("the {}'s disk is full", store));
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) throw Error(Exit::DataErr, message);
  throw Error(Exit::IoErr, message);
}

Stmt::Stmt(sqlite3* db, const char* sql, std::string_view store) : db_(db), store_(store) {
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s_, nullptr) != SQLITE_OK) fail(db, store, "prepare");
}

Stmt::~Stmt() { sqlite3_finalize(s_); }

Db::Db(const std::string& path, std::string store, int version, const Migrate& migrate, const Options& options)
    : path_(path), store_(std::move(store)) {
  // The folder and its parents may not exist yet (~/.local/state on a fresh account):
  // create them, private.
  const std::string dir = parent_dir(path);
  const bool root = ::geteuid() == 0;
  auto check_as_root = [&](const std::string& d, bool store_dir) {  // the path as given, then as it resolves
    char* real = ::realpath(d.c_str(), nullptr);
    if (!real) throw system_error(fmt::format("{}: {}", store_, d), errno);
    const std::string real_dir = real;
    ::free(real);
    check_root_may_use(std::filesystem::absolute(d).lexically_normal().string(), store_, store_dir);
    check_root_may_use(real_dir, store_, store_dir);
    return real_dir;
  };
  if (root) {  // before root makes any folder: where it would make them must be root's alone
    std::string base = dir;
    struct stat st {};
    while (::stat(base.c_str(), &st) != 0 && base != "/" && base != ".") base = parent_dir(base);
    if (base != dir) check_as_root(base, /*store_dir=*/false);
  }
  for (std::size_t slash = dir.find('/', 1); slash != std::string::npos; slash = dir.find('/', slash + 1))
    ::mkdir(dir.substr(0, slash).c_str(), 0700);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) throw system_error("create " + dir, errno);
  // The folder as it is now, links resolved, is where the database is opened: a link on
  // the way cannot be pointed elsewhere between the check and the open.
  std::string open_path = path;
  if (root) {
    const std::string real_dir = check_as_root(dir, /*store_dir=*/true);
    open_path = (real_dir == "/" ? real_dir : real_dir + "/") + base_name(path);
  }
  // The database itself is never a link (SQLITE_OPEN_NOFOLLOW).
  struct stat link {};
  if (::lstat(open_path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
    throw Error(Exit::NoPerm, fmt::format("{}: {} is a symbolic link; a store must be a file", store_, path));
  if (sqlite3_open_v2(open_path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
                      nullptr) != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(::access(dir.c_str(), W_OK) == 0 ? Exit::IoErr : Exit::NoPerm,
                fmt::format("{}: open {}: {}", store_, path, message));
  }
  try {
    sqlite3_busy_handler(db_, retry_busy, &busy_since_);
    // A database file is data, not code: its schema may not call functions with side
    // effects, nor may SQL write the schema or the file's pages directly.
    sqlite3_db_config(db_, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
    sqlite3_db_config(db_, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
    exec(options.durable ? "PRAGMA synchronous=FULL"
                         : "PRAGMA synchronous=NORMAL");  // per connection; WAL is the file's
    auto user_version = [this] {
      Stmt& v = stmt("PRAGMA user_version");
      const int have = v.step() ? v.i32(0) : 0;
      v.reset();
      return have;
    };
    const int have = user_version();
    if (have > version)
      throw Error(
          Exit::DataErr,
          fmt::format("{} {}: schema version {} is newer than this program's ({})", store_, path, have, version),
          "use the rkit that created it");
    if (have == 0 && !options.create)
      throw Error(Exit::DataErr, fmt::format("{} {}: not a {} (it has no schema of rkit's)", store_, path, store_));
    if (have < version) {
      // Switching a new database to WAL takes a lock that SQLite does not wait for, so
      // processes that create the store at the same moment retry here.
      for (int tries = 0;; ++tries) {
        try {
          exec("PRAGMA journal_mode=WAL");
          break;
        } catch (const Error& e) {
          if (e.code() != Exit::TempFail || tries == 3000) throw;
          ::usleep(10000);
        }
      }
      transaction([&] {
        // Read again under the write lock: another process may have upgraded it meanwhile
        // (ALTER TABLE cannot run twice, unlike CREATE ... IF NOT EXISTS).
        const int now = user_version();
        if (now >= version) return;
        migrate(*this, now);
        exec(fmt::format("PRAGMA user_version={}", version));
      });
    }
  } catch (...) {
    cache_.clear();
    sqlite3_close(db_);
    throw;
  }
}

Db::~Db() {
  cache_.clear();  // statements before the connection
  sqlite3_close(db_);
}

void Db::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);
    fail(db_, store_, "exec");
  }
}

Stmt& Db::stmt(const char* sql) {
  for (auto& [key, s] : cache_)
    if (key == sql) return s->reset();
  cache_.emplace_back(sql, std::make_unique<Stmt>(db_, sql, store_));
  return cache_.back().second->reset();
}

std::unique_ptr<Stmt> Db::prepare(const std::string& sql) { return std::make_unique<Stmt>(db_, sql.c_str(), store_); }

void Db::transaction(const std::function<void()>& fn) {
  if (depth_ > 0) {
    fn();
    return;
  }
  exec("BEGIN IMMEDIATE");
  depth_ = 1;
  try {
    fn();
    depth_ = 0;
    exec("COMMIT");
  } catch (...) {
    depth_ = 0;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::int64_t Db::changes() const { return sqlite3_changes(db_); }
std::int64_t Db::last_rowid() const { return sqlite3_last_insert_rowid(db_); }

std::uint64_t Db::data_version() {
  Stmt& s = stmt("PRAGMA data_version");
  Stmt::Finish done{s};
  return s.step() ? static_cast<std::uint64_t>(s.i64(0)) : 0;
}

}  // namespace rkit::sql
