// rbench comm.gloo: its sweep and collectives, where Gloo's buffers hold the result and
// what is poisoned before a run, the worker's argument round trip, and whole sweeps of
// every collective with ranks as threads of this process (the suite itself runs them as
// processes; tests/cli/rbench.bats covers that). The table itself (factors, counts,
// inputs, answers) is collectives_test.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include "rkit/error.hpp"
#include "suites/comm_gloo.hpp"
#include "test_support.hpp"

namespace rkit::rbench::comm {
namespace {

TEST(comm_gloo, SweepAndIterations) {
  std::vector<std::uint64_t> full = sweep_sizes(false), quick = sweep_sizes(true);
  EXPECT_EQ(full.front(), 16u);
  EXPECT_EQ(full.back(), 64u << 20);
  for (std::size_t i = 1; i < full.size(); ++i) EXPECT_EQ(full[i], 4 * full[i - 1]);
  EXPECT_EQ(quick,
            (std::vector<std::uint64_t>{1 << 10, 64 << 10, 4 << 20, 64 << 20}));  // 64 MiB: the fidelity goal's size
  EXPECT_EQ(iterations_per_sample(64 << 20), 1);
  EXPECT_EQ(iterations_per_sample(256 << 20), 1);
  EXPECT_EQ(iterations_per_sample(4 << 20), 16);
  EXPECT_EQ(iterations_per_sample(16), 20);
}

TEST(comm_gloo, RunsTheTableButAlltoall) {
  std::vector<Collective> gloo(std::begin(kGlooCollectives), std::end(kGlooCollectives));
  EXPECT_EQ(gloo, (std::vector<Collective>{Collective::Allreduce, Collective::Allgather, Collective::ReduceScatter,
                                           Collective::Broadcast}));
  EXPECT_EQ(gloo_collective_named("reduce_scatter"), Collective::ReduceScatter);
  EXPECT_THROW(gloo_collective_named("alltoall"), Error);
  EXPECT_THROW(gloo_collective_named("nope"), Error);
}

TEST(comm_gloo, ResultIsWhereGlooLeavesIt) {
  const unsigned ranks = 3, rank = 1;
  for (Collective c : kGlooCollectives) {
    SCOPED_TRACE(collective_name(c));
    const CollectiveCounts k = collective_counts(c, 4096, ranks);
    EXPECT_EQ(output_elements(c, k), c == Collective::Allgather ? k.recv : 0u);
    std::vector<float> in(k.send), out(output_elements(c, k));
    // In place but for allgather; reduce_scatter's block stays where it was, at rank * block.
    float* where = c == Collective::Allgather       ? out.data()
                   : c == Collective::ReduceScatter ? in.data() + rank * k.param
                                                    : in.data();
    EXPECT_EQ(gloo_result(c, rank, k, in.data(), out.data()), where);
    const std::vector<float>& holder = c == Collective::Allgather ? out : in;  // the result fits in its buffer
    EXPECT_LE(static_cast<std::size_t>(where - holder.data()) + k.recv, holder.size());
  }
}

TEST(comm_gloo, FillPoisonsWhatTheCollectiveMustWrite) {
  const CollectiveCounts s = collective_counts(Collective::Allgather, 1024, 2);
  std::vector<float> in(s.send), out(output_elements(Collective::Allgather, s));
  fill_buffers(Collective::Allgather, 1, s, kCheckSeed, in.data(), out.data());
  EXPECT_EQ(in[5], collective_input(1, 5, kCheckSeed));
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out.back()));
  const CollectiveCounts b = collective_counts(Collective::Broadcast, 1024, 2);
  std::vector<float> buf(b.send);
  fill_buffers(Collective::Broadcast, 1, b, kCheckSeed, buf.data(), nullptr);
  EXPECT_TRUE(std::isnan(buf[0]));  // a receiver's data must all come from the root
  fill_buffers(Collective::Broadcast, 0, b, kCheckSeed, buf.data(), nullptr);
  EXPECT_EQ(buf[0], collective_input(0, 0, kCheckSeed));
}

TEST(comm_gloo, PlanSurvivesTheWorkerCommandLine) {
  RankPlan plan;
  plan.rank = 2;
  plan.ranks = 3;
  plan.store_dir = "/tmp/x y";
  plan.collectives = {Collective::ReduceScatter, Collective::Broadcast};
  plan.sizes = {16, 1 << 20};
  plan.warmup = 0;
  plan.reps = 7;
  plan.timeout = std::chrono::milliseconds(2500);
  RankPlan back = plan_from_args(plan_to_args(plan));
  EXPECT_EQ(back.rank, 2u);
  EXPECT_EQ(back.ranks, 3u);
  EXPECT_EQ(back.store_dir, "/tmp/x y");
  EXPECT_EQ(back.collectives, plan.collectives);
  EXPECT_EQ(back.sizes, plan.sizes);
  EXPECT_EQ(back.warmup, 0);
  EXPECT_EQ(back.reps, 7);
  EXPECT_EQ(back.timeout.count(), 2500);
  EXPECT_THROW(plan_from_args({"rank=1", "ranks=2"}), Error);  // no store
  EXPECT_THROW(plan_from_args({"rank=2", "ranks=2", "store=/tmp"}), Error);
  EXPECT_THROW(plan_from_args({"store=/tmp", "reps=x"}), Error);
  EXPECT_THROW(plan_from_args({"store=/tmp", "collectives=alltoall"}), Error);
}

// Every collective over a few sizes, `ranks` ranks as threads meeting in a FileStore.
std::vector<Json> run_threads(unsigned ranks, std::vector<std::uint64_t> sizes) {
  testing::TempDir dir;
  std::vector<Json> events;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(ranks);
  for (unsigned r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankPlan plan;
      plan.rank = r;
      plan.ranks = ranks;
      plan.store_dir = dir.path();
      plan.collectives.assign(std::begin(kGlooCollectives), std::end(kGlooCollectives));
      plan.sizes = sizes;
      plan.warmup = 0;
      plan.reps = 2;
      plan.timeout = std::chrono::milliseconds(30000);
      try {
        run_rank(plan, [&](const Json& e) { events.push_back(e); });  // rank 0 only
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (unsigned r = 0; r < ranks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return events;
}

TEST(comm_gloo, EveryCollectiveIsRightOnTwoAndThreeRanks) {
  for (unsigned ranks : {2u, 3u}) {
    SCOPED_TRACE(ranks);
    std::vector<Json> events = run_threads(ranks, {64, 100000});
    std::map<std::string, int> rows;
    for (const Json& e : events) {
      const std::string kind = e.at("event");
      if (kind == "sample") continue;
      if (kind == "start") continue;
      ASSERT_EQ(kind, "row");
      SCOPED_TRACE(e.dump());
      ++rows[e.at("collective")];
      EXPECT_EQ(e.at("wrong"), 0);
      const CollectiveCounts s = collective_counts(gloo_collective_named(e.at("collective")), e.at("bytes"), ranks);
      EXPECT_EQ(e.at("bytes"), s.bytes);
      EXPECT_GT(e.at("checked").get<std::uint64_t>(), 0u);
      ASSERT_EQ(e.at("times_s").size(), 2u);
      for (const Json& t : e.at("times_s")) EXPECT_GT(t.get<double>(), 0);
    }
    for (Collective c : kGlooCollectives) EXPECT_EQ(rows[collective_name(c)], 2) << collective_name(c);
  }
}

}  // namespace
}  // namespace rkit::rbench::comm
