// rsub's daemon keeps its jobs between passes and reads only what changed (the store's
// change log): after any change, its plan must be the one a fresh load makes.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>

#include "core/store.hpp"
#include "daemon/daemon.hpp"
#include "rkit/config.hpp"
#include "test_support.hpp"

namespace rkit::rsub {
namespace {

JobSpec job(const std::string& tenant, int cpus = 1) {
  JobSpec s;
  s.command = {"true"};
  s.name = "j";
  s.tenant = tenant;
  s.workdir = "/";
  s.resources.cpus_per_task = cpus;
  return s;
}

Machine four_cores() {
  Machine m;
  ProbeOptions options;
  options.synthetic = "core:4 pu:1";
  m.topology = probe(options);
  m.memory_bytes = 0;
  return m;
}

// The times of the events a test stores: a fixed epoch, then one second later at each
// call. (The passes themselves, dry_pass and pass_after, schedule at the real clock's now,
// as the daemon does: to them these events are long past.)
class TestClock {
 public:
  double operator()() { return kEpoch + static_cast<double>(++ticks_); }

 private:
  static constexpr double kEpoch = 1'700'000'000;
  std::int64_t ticks_ = 0;
};

// The plan's every fact a pass acts on or shows, as text, in job order.
std::string describe(SchedPlan plan) {
  std::sort(plan.verdicts.begin(), plan.verdicts.end(),
            [](const Verdict& a, const Verdict& b) { return a.job < b.job; });
  std::string out;
  for (const Start& s : plan.starts) out += fmt::format("start {} on {} tasks\n", s.job, s.tasks.size());
  for (const Verdict& v : plan.verdicts)
    out += fmt::format("{} {} {} pos {} never {}\n", v.job, v.reason, v.detail, v.position, v.never);
  return out;
}

TEST(RsubDaemon, PassAfterChangesIsTheFreshPass) {
  testing::TempDir dir;
  Settings settings;
  settings.dir = dir.path() + "/rsub";
  const Submitter alice{"alice", 1000};
  const Machine machine = four_cores();
  TestClock tick;
  std::vector<std::int64_t> ids;
  {
    Store store(settings.dir);
    for (int i = 0; i < 12; ++i) ids.push_back(store.submit(job(i % 2 ? "a" : "b", 1 + i % 3), alice, tick()).front());
  }
  Store store(settings.dir);
  std::int64_t late = 0;
  const SchedPlan incremental = pass_after(settings, machine, [&] {
    store.set_held(ids[0], true);           // held
    store.cancel(ids[1], "alice", tick());  // ended while pending
    store.set_held(ids[2], true);
    store.set_held(ids[2], false);                                                  // held and released
    ASSERT_TRUE(store.start_attempt(ids[3], {{{0}, {0}, {}, 0}}, "host", tick()));  // now running
    ASSERT_TRUE(store.start_attempt(ids[4], {{{1}, {1}, {}, 0}}, "host", tick()));
    AttemptEnd end;
    end.exit_code = 0;
    end.end_s = tick();
    store.end_attempt(ids[4], 1, end);                     // started and ended
    late = store.submit(job("c"), alice, tick()).front();  // submitted meanwhile
  });
  const SchedPlan fresh = dry_pass(settings, machine);
  EXPECT_EQ(describe(incremental), describe(fresh));
  const std::string text = describe(fresh);
  EXPECT_NE(text.find(fmt::format("{} JobHeldUser", ids[0])), std::string::npos) << text;
  EXPECT_EQ(text.find(fmt::format("\n{} ", ids[1])), std::string::npos) << "a cancelled job is gone: " << text;
  EXPECT_NE(text.find(fmt::format("{} ", late)), std::string::npos) << "the late job is there: " << text;
}

}  // namespace
}  // namespace rkit::rsub
