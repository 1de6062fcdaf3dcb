// rbench io.seq: a quick run on a small file (RKIT_BENCH_IO_BYTES) measures both
// directions, reads back what it wrote and leaves nothing behind; a directory it cannot
// use is an rkit::Error with the documented exit code; the block pattern catches a page
// from another block or pass, and a changed byte.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "suite.hpp"
#include "suites/io_seq.hpp"
#include "test_support.hpp"

namespace rkit::rbench {
namespace {

RunOptions quick_in(const std::string& dir) {
  RunOptions opt;
  opt.quick = true;
  opt.reps = 1;
  opt.warmup = 0;
  opt.dir = dir;
  return opt;
}

Suite& io_seq() {
  Suite* suite = find_suite("io.seq");
  if (!suite) throw std::runtime_error("io.seq is not registered");
  return *suite;
}

TEST(RbenchIoSeq, QuickRunMeasuresBothDirectionsAndVerifies) {
  testing::TempDir dir;
  testing::EnvGuard env({"RKIT_BENCH_IO_BYTES"});
  env.set("RKIT_BENCH_IO_BYTES", "8M");
  EXPECT_EQ(io_seq().unavailable(), "");
  std::vector<std::string> progress;
  auto results = io_seq().run(quick_in(dir.path()), [&](const std::string& l) { progress.push_back(l); });

  ASSERT_EQ(results.size(), 4u);  // write and read, for 1 MiB and 4 MiB blocks
  EXPECT_EQ(progress.size(), 2u);
  const std::vector<std::string> metrics = {"write", "read", "write", "read"};
  const std::vector<int> blocks = {1 << 20, 1 << 20, 4 << 20, 4 << 20};
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Measurement& m = results[i];
    EXPECT_EQ(m.metric, metrics[i]);
    EXPECT_EQ(m.unit, "MB/s");
    ASSERT_EQ(m.samples.size(), 1u);
    EXPECT_GT(m.samples[0], 0.0);
    EXPECT_TRUE(m.correct) << m.check;
    EXPECT_NE(m.check.find("every block read back as written"), std::string::npos) << m.check;
    EXPECT_EQ(m.params["block_bytes"], blocks[i]);
    EXPECT_EQ(m.params["file_bytes"], 8 << 20);
    EXPECT_TRUE(m.params["direct"].is_boolean());
    EXPECT_TRUE(m.params["cache_dropped"].is_boolean());
    EXPECT_EQ(m.params["dir"], dir.path());
    EXPECT_FALSE(m.peak.has_value());
  }
  EXPECT_TRUE(dir.entries().empty()) << "the benchmark file was left behind";
}

TEST(RbenchIoSeq, BlockPatternCatchesMisplacedStaleAndChangedData) {
  const io::BlockPattern pat(64 << 10);
  ASSERT_EQ(pat.words(), std::size_t{8192});
  std::vector<std::uint64_t> buf(pat.words());
  pat.reset(buf.data());
  pat.stamp(buf.data(), 2, 7);
  EXPECT_TRUE(pat.stamps_ok(buf.data(), 2, 7));
  EXPECT_TRUE(pat.all_ok(buf.data(), 2, 7));
  EXPECT_FALSE(pat.stamps_ok(buf.data(), 2, 8));                        // another block's place
  EXPECT_FALSE(pat.stamps_ok(buf.data(), 3, 7));                        // left from an earlier pass
  EXPECT_FALSE(io::BlockPattern(1 << 20).stamps_ok(buf.data(), 2, 7));  // another block size's pass

  // One page of block 7 swapped with the same page of block 8: the stamps catch it.
  std::vector<std::uint64_t> other(pat.words());
  pat.reset(other.data());
  pat.stamp(other.data(), 2, 8);
  const std::size_t page = 5 * io::BlockPattern::kPageWords;
  std::vector<std::uint64_t> torn = buf;
  std::copy_n(other.begin() + page, io::BlockPattern::kPageWords, torn.begin() + page);
  EXPECT_FALSE(pat.stamps_ok(torn.data(), 2, 7));

  // A flipped bit away from the stamps passes the per-pass check, not the final one.
  buf[page + 3] ^= 1;
  EXPECT_TRUE(pat.stamps_ok(buf.data(), 2, 7));
  EXPECT_FALSE(pat.all_ok(buf.data(), 2, 7));
}

TEST(RbenchIoSeq, MissingDirectoryIsNoInput) {
  testing::TempDir dir;
  Error e = testing::error_of([&] { io_seq().run(quick_in(dir.file("missing")), nullptr); });
  EXPECT_EQ(e.code(), Exit::NoInput) << e.what();
}

TEST(RbenchIoSeq, ReadOnlyDirectoryIsNoPerm) {
  testing::TempDir dir;
  const std::string ro = dir.file("ro");
  ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
  if (::geteuid() != 0) {
    Error e = testing::error_of([&] { io_seq().run(quick_in(ro), nullptr); });
    EXPECT_EQ(e.code(), Exit::NoPerm) << e.what();
    return;
  }
  // Root writes anywhere: check as an unprivileged user, in a child process.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  EXPECT_EXIT(
      {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) std::_Exit(99);
        std::_Exit(static_cast<int>(testing::error_of([&] { io_seq().run(quick_in(ro), nullptr); }).code()));
      },
      ::testing::ExitedWithCode(static_cast<int>(Exit::NoPerm)), "");
}

TEST(RbenchIoSeq, MalformedSizeOverrideIsUsage) {
  testing::TempDir dir;
  testing::EnvGuard env({"RKIT_BENCH_IO_BYTES"});
  for (const char* bad : {"lots", "1K"}) {  // not a size; smaller than one 4 MiB block
    env.set("RKIT_BENCH_IO_BYTES", bad);
    Error e = testing::error_of([&] { io_seq().run(quick_in(dir.path()), nullptr); });
    EXPECT_EQ(e.code(), Exit::Usage) << bad << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("RKIT_BENCH_IO_BYTES"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(RbenchIoSeq, BlockSizesCanBeChosen) {
  testing::TempDir dir;
  testing::EnvGuard env({"RKIT_BENCH_IO_BYTES", "RKIT_BENCH_IO_BLOCKS"});
  env.set("RKIT_BENCH_IO_BYTES", "8M");
  env.set("RKIT_BENCH_IO_BLOCKS", "64K,2M");
  auto results = io_seq().run(quick_in(dir.path()), nullptr);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].params["block_bytes"], 64 << 10);
  EXPECT_EQ(results[3].params["block_bytes"], 2 << 20);
  for (const char* bad :
       {"4M,1M", "1000", "x", "128M", "1M,"}) {  // decreasing; not 4K-aligned; not a size; too big; empty
    env.set("RKIT_BENCH_IO_BLOCKS", bad);
    Error e = testing::error_of([&] { io_seq().check_options(quick_in(dir.path())); });
    EXPECT_EQ(e.code(), Exit::Usage) << bad << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("RKIT_BENCH_IO_BLOCKS"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace rkit::rbench
