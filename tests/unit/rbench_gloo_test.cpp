// rbench comm.gloo: nccl-tests' bus factors and size convention, the exact inputs and the
// wrong-value count (on right and on deliberately broken results), the worker's argument
// round trip, and whole sweeps of every collective with ranks as threads of this process
// (the suite itself runs them as processes; tests/cli/rbench.bats covers that).
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

TEST(comm_gloo, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Allreduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Allreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Allreduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Allgather, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Allgather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::ReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Broadcast, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Broadcast, 64), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Allreduce, 1), 0.0);  // one rank moves nothing
}

TEST(comm_gloo, SizesFollowNcclTests) {
  // allreduce, broadcast: bytes/4 elements in place.
  Shape s = collective_shape(Collective::Allreduce, 64 << 20, 2);
  EXPECT_EQ(s.bytes, 64u << 20);
  EXPECT_EQ(s.in, 16u << 20);
  EXPECT_EQ(s.out, 0u);
  EXPECT_EQ(collective_shape(Collective::Broadcast, 100, 3).in, 25u);
  EXPECT_EQ(collective_shape(Collective::Broadcast, 100, 3).bytes, 100u);
  // allgather: bytes is the gathered whole; each rank's block a multiple of 16 bytes.
  s = collective_shape(Collective::Allgather, 64 << 20, 4);
  EXPECT_EQ(s.block, 4u << 20);
  EXPECT_EQ(s.in, 4u << 20);
  EXPECT_EQ(s.out, 16u << 20);
  EXPECT_EQ(s.bytes, 64u << 20);
  s = collective_shape(Collective::Allgather, 4096, 3);  // 1024/3 = 341 -> 340 elements each
  EXPECT_EQ(s.block, 340u);
  EXPECT_EQ(s.bytes, 340u * 3 * 4);
  // reduce_scatter: bytes is the whole reduced array, the block one rank keeps.
  s = collective_shape(Collective::ReduceScatter, 1 << 20, 2);
  EXPECT_EQ(s.in, (1u << 20) / 4);
  EXPECT_EQ(s.block, (1u << 20) / 8);
  EXPECT_EQ(s.out, 0u);
  // Too small for a 16-byte block per rank: not run.
  EXPECT_EQ(collective_shape(Collective::ReduceScatter, 16, 2).bytes, 0u);
  EXPECT_EQ(collective_shape(Collective::Allgather, 16, 2).bytes, 0u);
  EXPECT_EQ(collective_shape(Collective::Allgather, 32, 2).bytes, 32u);
}

TEST(comm_gloo, SweepAndIterations) {
  std::vector<std::uint64_t> full = size_sweep(false), quick = size_sweep(true);
  EXPECT_EQ(full.front(), 16u);
  EXPECT_EQ(full.back(), 64u << 20);
  for (std::size_t i = 1; i < full.size(); ++i) EXPECT_EQ(full[i], 4 * full[i - 1]);
  EXPECT_EQ(quick.back(), 64u << 20);  // the size the fidelity goal is set at
  EXPECT_LT(quick.size(), full.size());
  EXPECT_EQ(iterations_per_sample(64 << 20), 1);
  EXPECT_EQ(iterations_per_sample(256 << 20), 1);
  EXPECT_EQ(iterations_per_sample(4 << 20), 16);
  EXPECT_EQ(iterations_per_sample(16), 20);
}

TEST(comm_gloo, InputsAreSmallIntegersThatDifferByRankAndSeed) {
  int same_rank = 0, same_seed = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    float v = input_value(3, i, kTimingSeed);
    EXPECT_EQ(v, std::floor(v));
    EXPECT_LE(std::fabs(v), 125.0f);
    same_rank += v == input_value(4, i, kTimingSeed);
    same_seed += v == input_value(3, i, kCheckSeed);
  }
  // 251 values: about 1 in 251 agree by chance, far from all of them.
  EXPECT_LT(same_rank, 200);
  EXPECT_LT(same_seed, 200);
}

// What a correct collective leaves on `rank`, built from the definition.
void correct_result(Collective c, unsigned rank, unsigned ranks, const Shape& s, std::vector<float>& in,
                    std::vector<float>& out) {
  in.assign(s.in, 0);
  out.assign(s.out, 0);
  for (std::size_t i = 0; i < s.in; ++i) {
    switch (c) {
      case Collective::Allreduce:
        for (unsigned r = 0; r < ranks; ++r) in[i] += input_value(r, i, kCheckSeed);
        break;
      case Collective::Broadcast: in[i] = input_value(0, i, kCheckSeed); break;
      case Collective::Allgather: in[i] = input_value(rank, i, kCheckSeed); break;
      case Collective::ReduceScatter:  // in place: this rank's block of the sum, where it was
        if (i >= rank * s.block && i < (rank + 1) * s.block)
          for (unsigned r = 0; r < ranks; ++r) in[i] += input_value(r, i, kCheckSeed);
        break;
    }
  }
  for (std::size_t i = 0; i < s.out; ++i) out[i] = input_value(static_cast<unsigned>(i / s.block), i % s.block, kCheckSeed);
}

TEST(comm_gloo, WrongCountFindsEveryBrokenElement) {
  const unsigned ranks = 3, rank = 1;
  for (Collective c : kCollectives) {
    SCOPED_TRACE(collective_name(c));
    const Shape s = collective_shape(c, 4096, ranks);
    std::vector<float> in, out;
    correct_result(c, rank, ranks, s, in, out);
    float* result = c == Collective::Allgather       ? out.data()
                    : c == Collective::ReduceScatter ? in.data() + rank * s.block
                                                     : in.data();
    EXPECT_EQ(count_wrong(c, rank, ranks, s, in.data(), out.data(), kCheckSeed), 0u);
    EXPECT_EQ(checked_elements(c, s), c == Collective::ReduceScatter ? s.block : c == Collective::Allgather ? s.out : s.in);
    result[0] += 1;                                         // off by one
    result[7] = std::numeric_limits<float>::quiet_NaN();    // never written
    result[checked_elements(c, s) - 1] = -result[checked_elements(c, s) - 1] - 1;
    EXPECT_EQ(count_wrong(c, rank, ranks, s, in.data(), out.data(), kCheckSeed), 3u);
    // The right answer of another seed (a stale result) is wrong nearly everywhere.
    EXPECT_GT(count_wrong(c, rank, ranks, s, in.data(), out.data(), kTimingSeed), checked_elements(c, s) * 9 / 10);
  }
  // allgather: two ranks' blocks swapped.
  const Shape s = collective_shape(Collective::Allgather, 4096, ranks);
  std::vector<float> in, out;
  correct_result(Collective::Allgather, rank, ranks, s, in, out);
  std::swap_ranges(out.begin(), out.begin() + static_cast<long>(s.block), out.begin() + static_cast<long>(s.block));
  EXPECT_GT(count_wrong(Collective::Allgather, rank, ranks, s, in.data(), out.data(), kCheckSeed), s.block);
}

TEST(comm_gloo, FillPoisonsWhatTheCollectiveMustWrite) {
  const Shape s = collective_shape(Collective::Allgather, 1024, 2);
  std::vector<float> in(s.in), out(s.out);
  fill_buffers(Collective::Allgather, 1, s, kCheckSeed, in.data(), out.data());
  EXPECT_EQ(in[5], input_value(1, 5, kCheckSeed));
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out.back()));
  const Shape b = collective_shape(Collective::Broadcast, 1024, 2);
  std::vector<float> buf(b.in);
  fill_buffers(Collective::Broadcast, 1, b, kCheckSeed, buf.data(), nullptr);
  EXPECT_TRUE(std::isnan(buf[0]));  // a receiver's data must all come from the root
  fill_buffers(Collective::Broadcast, 0, b, kCheckSeed, buf.data(), nullptr);
  EXPECT_EQ(buf[0], input_value(0, 0, kCheckSeed));
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
  EXPECT_THROW(plan_from_args({"rank=1", "ranks=2"}), Error);            // no store
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
      plan.collectives.assign(std::begin(kCollectives), std::end(kCollectives));
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
      const Shape s = collective_shape([&] {
        for (Collective c : kCollectives)
          if (e.at("collective") == collective_name(c)) return c;
        return Collective::Allreduce;
      }(), e.at("bytes"), ranks);
      EXPECT_EQ(e.at("bytes"), s.bytes);
      EXPECT_GT(e.at("checked").get<std::uint64_t>(), 0u);
      ASSERT_EQ(e.at("times_s").size(), 2u);
      for (const Json& t : e.at("times_s")) EXPECT_GT(t.get<double>(), 0);
    }
    for (Collective c : kCollectives) EXPECT_EQ(rows[collective_name(c)], 2) << collective_name(c);
  }
}

}  // namespace
}  // namespace rkit::rbench::comm
