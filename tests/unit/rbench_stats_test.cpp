// rbench's statistics, records and run comparison (tools/rbench: stats, record, compare).
#include <gtest/gtest.h>

#include "compare.hpp"
#include "record.hpp"
#include "stats.hpp"
#include "test_support.hpp"

namespace rkit::rbench {
namespace {

TEST(Summarize, MedianMinMaxAndSpread) {
  Summary s = summarize({3, 1, 2, 10});
  EXPECT_EQ(s.n, 4u);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_NEAR(s.stddev, 4.0824829, 1e-6);  // sample standard deviation
  EXPECT_NEAR(s.cv, 4.0824829 / 4, 1e-6);
  EXPECT_DOUBLE_EQ(summarize({7}).median, 7);
  EXPECT_DOUBLE_EQ(summarize({7}).cv, 0);
  EXPECT_THROW(summarize({}), std::invalid_argument);
}

TEST(MannWhitney, SeparatesRealDifferencesFromNoise) {
  std::vector<double> a = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  std::vector<double> b = {20, 21, 22, 23, 24, 25, 26, 27, 28};
  // Complete separation of 9 and 9: the exact two-sided p is 2/48620; the normal
  // approximation with continuity correction gives about 4e-4.
  EXPECT_LT(mann_whitney_p(a, b), 1e-3);
  std::vector<double> c = {10, 20, 11, 21, 12, 22, 13, 23, 14};
  std::vector<double> d = {15, 24, 16, 25, 17, 26, 18, 27, 19};
  EXPECT_GT(mann_whitney_p(c, d), 0.05);
  EXPECT_DOUBLE_EQ(mann_whitney_p({5, 5, 5}, {5, 5, 5}), 1.0);
  EXPECT_NEAR(mann_whitney_p(a, b), mann_whitney_p(b, a), 1e-12);
}

Json record(const std::string& metric, const std::string& unit, std::vector<double> samples) {
  Json r = {{"schema", "rkit.bench.v1"},   {"suite", "cpu.test"}, {"metric", metric}, {"unit", unit},
            {"params", {{"bytes", 1024}}}, {"samples", samples}};
  r["median"] = summarize(samples).median;
  return r;
}

std::vector<double> around(double center, int n, double spread) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(center * (1 + spread * ((i % 5) - 2) / 2.0));
  return v;
}

TEST(CompareRuns, ARealTwentyPercentLossIsARegression) {
  std::vector<Json> base = {record("triad", "GB/s", around(100, 9, 0.02)), record("lat", "s", around(1, 9, 0.02))};
  std::vector<Json> same = {record("triad", "GB/s", around(100.5, 9, 0.02)), record("lat", "s", around(1, 9, 0.02))};
  std::vector<Json> worse = {record("triad", "GB/s", around(80, 9, 0.02)), record("lat", "s", around(1.25, 9, 0.02))};
  for (const auto& c : compare_runs(base, same, 0.95)) EXPECT_EQ(c.verdict, "same") << c.metric;
  auto rows = compare_runs(base, worse, 0.95);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].verdict, "regression");
  EXPECT_NEAR(*rows[0].ratio, 0.8, 1e-9);
  EXPECT_EQ(rows[1].verdict, "regression");  // a time: 25% longer is a ratio of 0.8 too
  EXPECT_NEAR(*rows[1].ratio, 0.8, 1e-9);
  ASSERT_TRUE(rows[0].p_value);
  EXPECT_LT(*rows[0].p_value, 0.05);
}

TEST(CompareRuns, FewRepetitionsDecideByTheRatioAlone) {
  auto rows = compare_runs({record("triad", "GB/s", {100, 101, 99})}, {record("triad", "GB/s", {80, 81, 79})}, 0.95);
  EXPECT_EQ(rows[0].verdict, "regression");
  EXPECT_FALSE(rows[0].p_value);
  auto better =
      compare_runs({record("triad", "GB/s", {100, 101, 99})}, {record("triad", "GB/s", {130, 131, 129})}, 0.95);
  EXPECT_EQ(better[0].verdict, "better");
}

TEST(CompareRuns, MetricsOnOneSideOnlyAreNamed) {
  auto rows = compare_runs({record("copy", "GB/s", {1})}, {record("triad", "GB/s", {1})}, 0.95);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].verdict, "only in base");
  EXPECT_EQ(rows[1].verdict, "only in new");
}

TEST(BenchRecords, ReadingRefusesMalformedRecords) {
  testing::TempDir dir;
  testing::write(dir.file("ok.jsonl"), to_json_line(record("triad", "GB/s", {1, 2})) + "\n");
  EXPECT_EQ(read_bench_records(dir.file("ok.jsonl")).size(), 1u);
  for (const char* bad :
       {R"({"schema":"rkit.bench.v2","suite":"a","metric":"b","unit":"s","median":1,"samples":[1]})",
        R"({"schema":"rkit.bench.v1","suite":"a","metric":"b","unit":"s","samples":[1]})",
        R"({"schema":"rkit.bench.v1","suite":"a","metric":"b","unit":"s","median":1,"samples":[]})",
        R"({"schema":"rkit.bench.v1","suite":"a","metric":"b","unit":"s","median":1,"samples":["x"]})", "not json"}) {
    testing::write(dir.file("bad.jsonl"), std::string(bad) + "\n");
    EXPECT_EQ(testing::error_of([&] { read_bench_records(dir.file("bad.jsonl")); }).code(), Exit::DataErr) << bad;
  }
  EXPECT_EQ(testing::error_of([&] { read_bench_records(dir.file("missing.jsonl")); }).code(), Exit::NoInput);
}

TEST(BenchRecords, HostFingerprintNamesTheMachine) {
  Json h = host_fingerprint();
  EXPECT_FALSE(h["cpu_model"].get<std::string>().empty());
  EXPECT_GE(h["cores"].get<unsigned>(), 1u);
  EXPECT_TRUE(higher_is_better("GB/s"));
  EXPECT_FALSE(higher_is_better("s"));
}

}  // namespace
}  // namespace rkit::rbench
