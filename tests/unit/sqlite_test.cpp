// The stores' SQLite connection (rkit/sqlite.hpp): durability as asked, no links, and
// root's refusal of folders that other users control.
#include "rkit/sqlite.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "rkit/error.hpp"
#include "test_support.hpp"

namespace rkit::sql {
namespace {

void schema(Db& db, int) { db.exec("CREATE TABLE t(v INTEGER)"); }

int synchronous(Db& db) {
  Stmt& s = db.stmt("PRAGMA synchronous");
  Stmt::Finish done{s};
  return s.step() ? s.i32(0) : -1;
}

Exit code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return Exit::Ok;
}

TEST(SqliteDb, DurableCommitsAreSynchronousFull) {
  testing::TempDir dir;
  Db normal(dir.file("a.db"), "test store", 1, schema);
  EXPECT_EQ(synchronous(normal), 1);  // NORMAL
  Db durable(dir.file("b.db"), "test store", 1, schema, Db::Options{.durable = true});
  EXPECT_EQ(synchronous(durable), 2);  // FULL
}

// A reader given an empty file or another program's database refuses it and leaves it
// as it was: no tables added, not switched to WAL.
TEST(SqliteDb, AReaderLeavesADatabaseWithoutItsSchemaAlone) {
  testing::TempDir dir;
  testing::write(dir.file("empty.db"), "");
  EXPECT_EQ(code_of([&] { Db db(dir.file("empty.db"), "test store", 1, schema, Db::Options{.create = false}); }),
            Exit::DataErr);
  EXPECT_EQ(std::filesystem::file_size(dir.file("empty.db")), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir.file("empty.db-wal")));
  { Db made(dir.file("ok.db"), "test store", 1, schema); }
  EXPECT_EQ(code_of([&] { Db db(dir.file("ok.db"), "test store", 1, schema, Db::Options{.create = false}); }),
            Exit::Ok);
}

TEST(SqliteDb, ADatabaseThatIsALinkIsRefusedAndItsTargetUntouched) {
  testing::TempDir dir;
  testing::write(dir.file("precious"), "precious\n");
  std::filesystem::create_symlink(dir.file("precious"), dir.file("s.db"));
  EXPECT_EQ(code_of([&] { Db db(dir.file("s.db"), "test store", 1, schema); }), Exit::NoPerm);
  std::ifstream in(dir.file("precious"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious\n");
}

TEST(SqliteDb, RootOpensNoStoreInAFolderAnotherUserControls) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the check is root's";
  testing::TempDir dir;
  const std::string theirs = dir.file("theirs"), open = dir.file("open"), sticky = dir.file("sticky");
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  ASSERT_EQ(::mkdir(sticky.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  EXPECT_EQ(code_of([&] { Db db(theirs + "/x.db", "test store", 1, schema); }), Exit::NoPerm);
  EXPECT_EQ(code_of([&] { Db db(open + "/x.db", "test store", 1, schema); }), Exit::NoPerm);
  // A sticky folder on the way is fine (as /tmp is); as the store's own it is not.
  EXPECT_EQ(code_of([&] { Db db(sticky + "/x.db", "test store", 1, schema); }), Exit::NoPerm);
  ASSERT_EQ(::mkdir((sticky + "/mine").c_str(), 0700), 0);
  EXPECT_EQ(code_of([&] { Db db(sticky + "/mine/x.db", "test store", 1, schema); }), Exit::Ok);
  // A link to root's own folder is refused too when another user's folder holds it: they
  // could point it elsewhere.
  ASSERT_EQ(::mkdir((dir.file("real")).c_str(), 0700), 0);
  std::filesystem::create_symlink(dir.file("real"), theirs + "/link");
  EXPECT_EQ(code_of([&] { Db db(theirs + "/link/x.db", "test store", 1, schema); }), Exit::NoPerm);
  EXPECT_FALSE(std::filesystem::exists(dir.file("real") + "/x.db"));
  // Root's own link to root's own folder is fine.
  std::filesystem::create_symlink(dir.file("real"), dir.file("mylink"));
  EXPECT_EQ(code_of([&] { Db db(dir.file("mylink") + "/x.db", "test store", 1, schema); }), Exit::Ok);
  EXPECT_TRUE(std::filesystem::exists(dir.file("real") + "/x.db"));
}

}  // namespace
}  // namespace rkit::sql
