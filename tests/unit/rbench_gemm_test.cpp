// cpu.gemm end to end on this machine: the quick sweep, both precisions, checked results.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "suite.hpp"

namespace rkit::rbench {
namespace {

TEST(CpuGemm, QuickSweepMeasuresBothPrecisionsCorrectly) {
  Suite* suite = find_suite("cpu.gemm");
  ASSERT_NE(suite, nullptr);
  EXPECT_EQ(suite->unavailable(), "");

  RunOptions opt;
  opt.quick = true;
  opt.reps = 2;
  opt.warmup = 0;
  std::vector<std::string> progress;
  std::vector<Measurement> results = suite->run(opt, [&](const std::string& line) { progress.push_back(line); });

  std::map<std::string, std::set<long long>> sizes;  // metric -> sizes measured
  for (const Measurement& m : results) {
    SCOPED_TRACE(m.metric + " " + m.params.dump());
    ASSERT_TRUE(m.metric == "sgemm" || m.metric == "dgemm");
    EXPECT_EQ(m.unit, "GFLOP/s");
    ASSERT_EQ(m.samples.size(), 2u);
    for (double s : m.samples) EXPECT_GT(s, 0);
    EXPECT_TRUE(m.correct) << m.check;
    EXPECT_FALSE(m.check.empty());
    for (const char* key : {"m", "n", "k", "threads"}) ASSERT_TRUE(m.params.contains(key)) << key;
    long long n = m.params["m"].get<long long>();
    EXPECT_GT(n, 0);
    EXPECT_EQ(m.params["n"].get<long long>(), n);
    EXPECT_EQ(m.params["k"].get<long long>(), n);
    EXPECT_GE(m.params["threads"].get<long long>(), 1);
    if (m.peak) {
      EXPECT_GT(*m.peak, 0);
      EXPECT_NE(m.peak_source.find("FLOP/cycle"), std::string::npos);
    }
    EXPECT_TRUE(sizes[m.metric].insert(n).second) << "size measured twice";
  }
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_FALSE(sizes["sgemm"].empty());
  EXPECT_EQ(sizes["sgemm"], sizes["dgemm"]);  // two metrics per size
  EXPECT_EQ(progress.size(), results.size());
  EXPECT_EQ(progress.front(), "cpu.gemm sgemm " + std::to_string(*sizes["sgemm"].begin()));
}

TEST(CpuGemm, ThreadsOptionIsRecorded) {
  RunOptions opt;
  opt.quick = true;
  opt.reps = 1;
  opt.warmup = 0;
  opt.threads = 1;
  for (const Measurement& m : find_suite("cpu.gemm")->run(opt, nullptr)) {
    EXPECT_EQ(m.params["threads"].get<long long>(), 1);
    if (m.peak) {
      EXPECT_EQ(m.peak_source.rfind("1 core x ", 0), 0u) << m.peak_source;
    }
  }
}

}  // namespace
}  // namespace rkit::rbench
