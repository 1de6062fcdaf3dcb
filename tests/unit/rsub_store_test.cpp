// rsub's job store: ids unique under concurrent submitters, arrays, id resolution,
// cancel/hold/release by state, attempts and the retry policy, and the rkit.job.v1 record.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <thread>

#include "rkit/error.hpp"
#include "store.hpp"
#include "test_support.hpp"

namespace rkit::rsub {
namespace {

JobSpec simple(const std::string& name = "sim") {
  JobSpec spec;
  spec.name = name;
  spec.tenant = "desk-a";
  spec.command = {"true"};
  spec.workdir = "/";
  return spec;
}

const Submitter kAlice{"alice", 1000};

TEST(RsubStore, ConcurrentSubmittersGetUniqueIdsAndLoseNothing) {
  testing::TempDir dir;
  Store(dir.path()).job(1);  // create the schema once, as the first client would
  constexpr int kThreads = 8, kEach = 100;
  std::vector<std::vector<std::int64_t>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Store store(dir.path());
      for (int i = 0; i < kEach; ++i) ids[t].push_back(store.submit(simple(), kAlice, now_s()).front());
    });
  for (auto& th : threads) th.join();
  std::set<std::int64_t> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), std::size_t{kThreads * kEach});
  EXPECT_EQ(Store(dir.path()).jobs({}).size(), std::size_t{kThreads * kEach});
}

TEST(RsubStore, ArraysAreOneJobPerIndexNamedByTheFirst) {
  testing::TempDir dir;
  Store store(dir.path());
  store.submit(simple("before"), kAlice, now_s());
  JobSpec spec = simple("arr");
  spec.array = ArraySpec{{0, 2, 4}, 2};
  const auto ids = store.submit(spec, kAlice, now_s());
  ASSERT_EQ(ids.size(), 3u);
  const auto all = store.resolve(std::to_string(ids[0]));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].display_id(), fmt::format("{}_2", ids[0]));
  EXPECT_EQ(store.resolve(fmt::format("{}_4", ids[0])).at(0).id, ids[2]);
  EXPECT_TRUE(store.resolve(fmt::format("{}_3", ids[0])).empty());
  EXPECT_TRUE(store.resolve("999").empty());
  EXPECT_EQ(store.resolve("1").size(), 1u);
  EXPECT_THROW(store.resolve("x1"), Error);
}

TEST(RsubStore, CancelHoldAndReleaseFollowTheState) {
  testing::TempDir dir;
  Store store(dir.path());
  const auto a = store.submit(simple(), kAlice, now_s()).front();
  const auto b = store.submit(simple(), kAlice, now_s()).front();
  EXPECT_TRUE(store.set_held(a, true));
  EXPECT_TRUE(store.job(a)->held);
  EXPECT_FALSE(store.start_attempt(a, {TaskAlloc{}}, "h", now_s()));  // held jobs do not start
  EXPECT_TRUE(store.set_held(a, false));
  EXPECT_TRUE(store.cancel(a, "alice", now_s()));
  EXPECT_EQ(store.job(a)->state, JobState::Cancelled);
  EXPECT_FALSE(store.cancel(a, "alice", now_s()));  // already over

  ASSERT_TRUE(store.start_attempt(b, {TaskAlloc{{0}, {0}, {}, 0}}, "h", now_s()));
  EXPECT_FALSE(store.set_held(b, true));            // only pending jobs are held
  EXPECT_FALSE(store.cancel(b, "bob", now_s()));    // running: marked for the supervisor
  EXPECT_TRUE(store.job(b)->cancel_requested);
  AttemptEnd end{AttemptEnd::How::Cancelled, std::nullopt, 15, now_s()};
  EXPECT_EQ(store.end_attempt(b, 1, end), JobState::Cancelled);
  EXPECT_EQ(store.job(b)->reason, "cancelled by bob");
}

TEST(RsubStore, AttemptsRetryAsThePolicySaysAndEndOnce) {
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = simple();
  spec.retry = RetryPolicy{2, {75}, {9}, 5};
  const auto id = store.submit(spec, kAlice, 100).front();
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", 100));
  EXPECT_EQ(store.end_attempt(id, 1, {AttemptEnd::How::Exited, 75, std::nullopt, 110}), JobState::Pending);
  auto j = *store.job(id);
  EXPECT_DOUBLE_EQ(j.eligible_s, 115);  // 5 s backoff
  EXPECT_EQ(j.attempts, 1);
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", 120));
  EXPECT_EQ(store.end_attempt(id, 2, {AttemptEnd::How::Exited, 75, std::nullopt, 130}), JobState::Failed);
  EXPECT_EQ(store.job(id)->exit_code, 75);
  // A second report of an attempt (or a stale one) changes nothing.
  EXPECT_EQ(store.end_attempt(id, 2, {AttemptEnd::How::Exited, 0, std::nullopt, 140}), JobState::Failed);
  EXPECT_EQ(store.job(id)->exit_code, 75);
}

TEST(RsubStore, ACancelledJobIsNeverRetried) {
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = simple();
  spec.retry = RetryPolicy{3, {75}, {}, 1};
  const auto id = store.submit(spec, kAlice, now_s()).front();
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", now_s()));
  EXPECT_FALSE(store.cancel(id, "alice", now_s()));  // running: marked for the supervisor
  // The task fails with a retry code before the supervisor hears of the cancel.
  EXPECT_EQ(store.end_attempt(id, 1, {AttemptEnd::How::Exited, 75, std::nullopt, now_s()}), JobState::Cancelled);
  EXPECT_EQ(store.job(id)->reason, "cancelled by alice");
}

TEST(RsubStore, AfterAttemptMapsEndsToStates) {
  JobSpec spec = simple();
  using How = AttemptEnd::How;
  EXPECT_EQ(after_attempt(spec, 1, {How::Exited, 0, std::nullopt, 1}).state, JobState::Completed);
  EXPECT_EQ(after_attempt(spec, 1, {How::Exited, 3, std::nullopt, 1}).reason, "NonZeroExitCode 3");
  EXPECT_EQ(after_attempt(spec, 1, {How::Signaled, std::nullopt, 9, 1}).reason, "Signal SIGKILL");
  EXPECT_EQ(after_attempt(spec, 1, {How::TimedOut, std::nullopt, std::nullopt, 1}).state, JobState::Timeout);
  spec.retry = RetryPolicy{5, {}, {9}, 100};
  const Transition t = after_attempt(spec, 4, {How::Signaled, std::nullopt, 9, 1000});
  EXPECT_EQ(t.state, JobState::Pending);
  EXPECT_DOUBLE_EQ(*t.retry_at_s, 1600);  // 100 × 2^3 = 800, capped at 600
  EXPECT_EQ(after_attempt(spec, 5, {How::Signaled, std::nullopt, 9, 1}).state, JobState::Failed);
}

TEST(RsubStore, UndoStartAndFinishOnlyTouchActiveJobs) {
  testing::TempDir dir;
  Store store(dir.path());
  const auto id = store.submit(simple(), kAlice, now_s()).front();
  ASSERT_TRUE(store.start_attempt(id, {TaskAlloc{}}, "h", now_s()));
  EXPECT_FALSE(store.undo_start(id, 2));
  EXPECT_TRUE(store.undo_start(id, 1));
  EXPECT_EQ(store.job(id)->state, JobState::Pending);
  EXPECT_EQ(store.job(id)->attempts, 0);
  EXPECT_TRUE(store.finish(id, JobState::Failed, "DependencyNeverSatisfied", now_s()));
  EXPECT_FALSE(store.finish(id, JobState::Lost, "x", now_s()));
  EXPECT_EQ(store.job(id)->state, JobState::Failed);
}

TEST(RsubStore, RecordCarriesWhatCostReportsNeed) {
  testing::TempDir dir;
  Store store(dir.path());
  JobSpec spec = simple();
  spec.resources = Resources{2, 4, 1, "H100", 1 << 30};
  const auto id = store.submit(spec, kAlice, 1000).front();
  const Json rec = store.job(id)->to_json();
  EXPECT_EQ(rec["schema"], "rkit.job.v1");
  EXPECT_EQ(rec["id"], std::to_string(id));
  EXPECT_EQ(rec["tenant"], "desk-a");
  EXPECT_EQ(rec["user"], "alice");
  EXPECT_EQ(rec["state"], "PENDING");
  EXPECT_EQ(rec["cpus"], 8);
  EXPECT_EQ(rec["gpus"], 2);
  EXPECT_EQ(rec["gpu_type"], "H100");
  EXPECT_EQ(rec["submit_unix_s"], 1000.0);
  EXPECT_TRUE(rec["start_unix_s"].is_null());
}

TEST(RsubStore, UnusableDirectoryIsAClearError) {
  try {
    Store store("/proc/no-such/rsub");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/no-such/rsub"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rkit::rsub
