// rbench's suite registry and run loop: names select suites as documented, and a suite
// that finds mid-run that it cannot run (Error(Unavailable)) is skipped while the others'
// results still count; any other error ends the run. The suites here are the test's own,
// not registered: rbench's registry is global.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rkit/error.hpp"
#include "suite.hpp"
#include "test_support.hpp"

namespace rkit::rbench {
namespace {

// A suite whose run() returns one measurement, or throws what it is given.
class FakeSuite : public Suite {
 public:
  FakeSuite(std::string name, Exit fails_with = Exit::Ok, std::string message = "")
      : name_(std::move(name)), fails_with_(fails_with), message_(std::move(message)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "a test's suite"; }
  std::vector<Measurement> run(const RunOptions&, const Progress&) override {
    ++runs;
    if (fails_with_ != Exit::Ok) throw Error(fails_with_, message_, "a hint");
    Measurement m;
    m.metric = "m";
    m.unit = "s";
    m.samples = {1};
    return {m};
  }
  int runs = 0;

 private:
  std::string name_;
  Exit fails_with_;
  std::string message_;
};

struct Log {
  std::vector<std::string> results, skipped;
};

std::size_t run_all(const std::vector<Suite*>& chosen, Log& log) {
  auto result = [&](const Suite& s, const Measurement& m) { log.results.push_back(s.name() + " " + m.metric); };
  auto skipped = [&](const Suite& s, const std::string& why) { log.skipped.push_back(s.name() + ": " + why); };
  return run_suites(chosen, RunOptions{}, nullptr, result, skipped);
}

TEST(RbenchSuites, OneUnavailableMidRunIsSkippedAndTheOthersStillRun) {
  FakeSuite a("test.a"), gone("test.gpu", Exit::Unavailable, "test.gpu: 1 GiB free of the 4 GiB it needs"), b("test.b");
  Log log;
  EXPECT_EQ(run_all({&a, &gone, &b}, log), 2u);
  EXPECT_EQ(log.results, (std::vector<std::string>{"test.a m", "test.b m"}));
  // The suite's own name is not said twice; the hint stays.
  EXPECT_EQ(log.skipped, (std::vector<std::string>{"test.gpu: 1 GiB free of the 4 GiB it needs (hint: a hint)"}));
}

TEST(RbenchSuites, NoneFinishingIsZeroAndOtherErrorsEndTheRun) {
  FakeSuite gone("test.gpu", Exit::Unavailable, "no NCCL");
  Log log;
  EXPECT_EQ(run_all({&gone}, log), 0u);
  EXPECT_EQ(log.skipped, (std::vector<std::string>{"test.gpu: no NCCL (hint: a hint)"}));

  FakeSuite a("test.a"), broken("test.io", Exit::IoErr, "test.io: disk full"), b("test.b");
  Log log2;
  EXPECT_EQ(testing::error_of([&] { run_all({&a, &broken, &b}, log2); }).code(), Exit::IoErr);
  EXPECT_EQ(log2.results, (std::vector<std::string>{"test.a m"}));
  EXPECT_EQ(b.runs, 0);
}

TEST(RbenchSuites, NamesSelectByFullNameOrPrefixInOrderEachOnce) {
  std::vector<std::string> got;
  for (Suite* s : select_suites({"io.seq", "cpu", "cpu.stream"})) got.push_back(s->name());
  EXPECT_EQ(got, (std::vector<std::string>{"io.seq", "cpu.gemm", "cpu.stream"}));
  Error e = testing::error_of([] { select_suites({"cpu.strea"}); });
  EXPECT_EQ(e.code(), Exit::Usage);
  EXPECT_NE(std::string(e.what()).find("unknown suite 'cpu.strea' (known: "), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("gpu.gemm"), std::string::npos) << e.what();  // the plug-in's, loaded or not
  got.clear();
  for (Suite* s : select_suites({"gpu"})) got.push_back(s->name());
  EXPECT_EQ(got, (std::vector<std::string>{"gpu.copy", "gpu.gemm", "gpu.nccl", "gpu.stream"}));
}

TEST(RbenchSuites, CommGlooChecksItsOptionsBeforeRunning) {
  Suite* gloo = find_suite("comm.gloo");
  ASSERT_NE(gloo, nullptr);
  testing::EnvGuard env({"RKIT_BENCH_GLOO_SIZES", "RKIT_BENCH_GLOO_TIMEOUT"});
  env.unset("RKIT_BENCH_GLOO_SIZES");
  env.unset("RKIT_BENCH_GLOO_TIMEOUT");
  RunOptions opt;
  EXPECT_NO_THROW(gloo->check_options(opt));
  opt.ranks = 1;
  EXPECT_EQ(testing::error_of([&] { gloo->check_options(opt); }).code(), Exit::Usage);
  opt.ranks = 2;
  env.set("RKIT_BENCH_GLOO_SIZES", "64Q");
  EXPECT_EQ(testing::error_of([&] { gloo->check_options(opt); }).code(), Exit::Usage);
  env.unset("RKIT_BENCH_GLOO_SIZES");
  env.set("RKIT_BENCH_GLOO_TIMEOUT", "0.01s");
  EXPECT_EQ(testing::error_of([&] { gloo->check_options(opt); }).code(), Exit::Usage);
}

}  // namespace
}  // namespace rkit::rbench
