#include "rkit/atomic_file.hpp"
#include "rkit/file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <iostream>
#include <sstream>

#include "rkit/error.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

using testing::TempDir;

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

Exit error_code(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no rkit::Error thrown";
  return Exit::Ok;
}

// Sets the umask for the scope.
class Umask {
 public:
  explicit Umask(mode_t m) : old_(::umask(m)) {}
  ~Umask() { ::umask(old_); }

 private:
  mode_t old_;
};

TEST(AtomicFile, WriteThenReadBack) {
  TempDir dir;
  std::string path = dir.file("out.bin");
  std::string data("binary\0data\n\xff", 13);
  atomic_write_file(path, data);
  EXPECT_EQ(read_file(path), data);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.bin"}) << "a temporary file was left behind";
}

TEST(AtomicFile, StreamedWritesAreConcatenated) {
  TempDir dir;
  std::string path = dir.file("manifest.json");
  AtomicFile out(path);
  EXPECT_EQ(out.path(), path);
  out.write("part1,");
  out.write("");
  out.write("part2");
  out.commit();
  EXPECT_EQ(read_file(path), "part1,part2");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"manifest.json"});
}

TEST(AtomicFile, LargeWrite) {
  TempDir dir;
  std::string path = dir.file("big");
  std::string data(3 << 20, 'x');
  for (std::size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>('a' + (i / 4096) % 26);
  atomic_write_file(path, data);
  EXPECT_EQ(read_file(path), data);
}

TEST(AtomicFile, TemporaryIsInTheSameDirectoryAndHidden) {
  TempDir dir;
  AtomicFile out(dir.file("state.json"));
  std::string temp = out.temp_path();
  EXPECT_EQ(temp.rfind(dir.path() + "/.state.json.tmp.", 0), 0u) << temp;
  EXPECT_TRUE(exists(temp));
}

TEST(AtomicFile, WithoutCommitTheTemporaryIsRemovedAndTargetNotCreated) {
  TempDir dir;
  std::string path = dir.file("out.txt");
  std::string temp;
  {
    AtomicFile out(path);
    out.write("never published");
    temp = out.temp_path();
    ASSERT_TRUE(exists(temp));
  }
  EXPECT_FALSE(exists(temp));
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, ExistingTargetIsUntouchedUntilCommit) {
  TempDir dir;
  std::string path = dir.file("jobs.json");
  testing::write(path, "old contents");
  {
    AtomicFile out(path);
    out.write("new contents");
    EXPECT_EQ(read_file(path), "old contents") << "target changed before commit()";
    out.commit();
    EXPECT_EQ(read_file(path), "new contents");
  }
  EXPECT_EQ(read_file(path), "new contents");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"jobs.json"});
}

TEST(AtomicFile, AbandonedWriteKeepsTheOldFile) {
  TempDir dir;
  std::string path = dir.file("jobs.json");
  testing::write(path, "old contents");
  {
    AtomicFile out(path);
    out.write("half");
  }
  EXPECT_EQ(read_file(path), "old contents");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"jobs.json"});
}

TEST(AtomicFile, CommitTwiceIsAnInternalError) {
  TempDir dir;
  AtomicFile out(dir.file("x"));
  out.commit();
  EXPECT_EQ(error_code([&] { out.commit(); }), Exit::Software);
  EXPECT_EQ(error_code([&] { out.write("late"); }), Exit::Software);
}

TEST(AtomicFile, InvalidPathIsAUsageError) {
  EXPECT_EQ(error_code([] { AtomicFile f(""); }), Exit::Usage);
  EXPECT_EQ(error_code([] { AtomicFile f("/tmp/"); }), Exit::Usage);
}

TEST(AtomicFile, MissingDirectoryIsNoInput) {
  TempDir dir;
  std::string path = dir.file("no/such/dir/out.txt");
  try {
    atomic_write_file(path, "x");
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_NE(std::string(e.what()).find(dir.file("no/such/dir")), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, RelativePathWritesIntoTheCurrentDirectory) {
  TempDir dir;
  char old_cwd[4096];
  ASSERT_NE(::getcwd(old_cwd, sizeof old_cwd), nullptr);
  ASSERT_EQ(::chdir(dir.path().c_str()), 0);
  try {
    atomic_write_file("plain.txt", "here");
  } catch (...) {
    (void)::chdir(old_cwd);
    throw;
  }
  ASSERT_EQ(::chdir(old_cwd), 0);
  EXPECT_EQ(read_file(dir.file("plain.txt")), "here");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"plain.txt"});
}

TEST(AtomicFile, ReadOnlyDirectoryIsNoPerm) {
  TempDir dir;
  std::string ro = dir.file("ro");
  ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  std::string path = ro + "/out.txt";

  if (::geteuid() != 0) {
    EXPECT_EQ(error_code([&] { atomic_write_file(path, "x"); }), Exit::NoPerm);
    EXPECT_FALSE(exists(path));
    return;
  }
  // Root ignores directory permissions: try from a child that gives up root.
  constexpr int kCannotDropRoot = 200;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0 || ::geteuid() == 0) ::_exit(kCannotDropRoot);
    int code = 0;
    try {
      atomic_write_file(path, "x");
    } catch (const Error& e) {
      code = static_cast<int>(e.code());
    } catch (...) {
      code = 100;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == kCannotDropRoot)
    GTEST_SKIP() << "running as root and cannot switch to uid 65534: root bypasses directory permissions";
  EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(Exit::NoPerm));
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(ro));
}

TEST(AtomicFile, ModeIsAppliedUnderTheUmask) {
  TempDir dir;
  {
    Umask u(022);
    atomic_write_file(dir.file("default"), "x");
    atomic_write_file(dir.file("private"), "x", 0600);
    atomic_write_file(dir.file("group"), "x", 0640);
    atomic_write_file(dir.file("exec"), "x", 0755);
  }
  EXPECT_EQ(mode_of(dir.file("default")), 0644u);
  EXPECT_EQ(mode_of(dir.file("private")), 0600u);
  EXPECT_EQ(mode_of(dir.file("group")), 0640u);
  EXPECT_EQ(mode_of(dir.file("exec")), 0755u);
  {
    Umask u(077);
    atomic_write_file(dir.file("masked"), "x", 0644);
  }
  EXPECT_EQ(mode_of(dir.file("masked")), 0600u);
}

TEST(AtomicFile, ReplacingKeepsTheNewMode) {
  TempDir dir;
  Umask u(022);
  std::string path = dir.file("f");
  atomic_write_file(path, "a", 0644);
  atomic_write_file(path, "b", 0600);
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(read_file(path), "b");
}

TEST(ReadFile, MissingFileIsNoInput) {
  TempDir dir;
  std::string path = dir.file("missing");
  try {
    read_file(path);
    FAIL() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(ReadFile, DirectoryIsNoInput) {
  TempDir dir;
  try {
    read_file(dir.path());
    FAIL() << "read a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_NE(std::string(e.what()).find(dir.path()), std::string::npos) << e.what();
  }
}

TEST(ReadFile, EmptyFile) {
  TempDir dir;
  testing::write(dir.file("empty"), "");
  EXPECT_EQ(read_file(dir.file("empty")), "");
}

TEST(ReadFile, DashReadsStdin) {
  // read_file("-") reads file descriptor 0, so point it at a file for the test.
  TempDir dir;
  std::string path = dir.path() + "/stdin.bin";
  testing::write(path, std::string("from\0stdin\n", 11));
  int file = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(file, 0);
  int saved = ::dup(STDIN_FILENO);
  ::dup2(file, STDIN_FILENO);
  ::close(file);
  std::string got;
  try {
    got = read_file("-");
  } catch (...) {
    ::dup2(saved, STDIN_FILENO);
    ::close(saved);
    throw;
  }
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  EXPECT_EQ(got, std::string("from\0stdin\n", 11));
}

TEST(ReadFile, RefusesInputsOverTheLimit) {
  try {
    read_file("/dev/zero", 1 << 20);
    ADD_FAILURE() << "read all of /dev/zero";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_NE(std::string(e.what()).find("larger than 1 MiB"), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, ALiveTemporaryIsHeldAnAbandonedOneIsNot) {
  testing::TempDir dir;
  std::string held;
  {
    AtomicFile f(dir.file("x.rkpt"));
    held = f.temp_path();
    EXPECT_TRUE(is_atomic_temp_name(held.substr(held.rfind('/') + 1)));
    EXPECT_FALSE(remove_if_abandoned(held));  // its writer is alive
    EXPECT_TRUE(std::filesystem::exists(held));
  }
  testing::write(dir.file(".y.rkpt.tmp.Ab12Cd"), "left by a killed writer");
  EXPECT_TRUE(remove_if_abandoned(dir.file(".y.rkpt.tmp.Ab12Cd")));
  EXPECT_FALSE(std::filesystem::exists(dir.file(".y.rkpt.tmp.Ab12Cd")));
  EXPECT_FALSE(remove_if_abandoned(dir.file("missing")));
  EXPECT_FALSE(is_atomic_temp_name("x.rkpt"));
  EXPECT_FALSE(is_atomic_temp_name(".x.tmp.12345"));
}

}  // namespace
}  // namespace rkit
