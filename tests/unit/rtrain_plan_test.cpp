// rtrain plan's model: the simulated pipeline's bubble is the textbook's when the stages
// are equal and communication free; the link fitted from rbench records gives back the
// latency and bandwidth they were made of; the plans rank fastest first, those that fit
// before those that do not.
#include "plan.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "test_support.hpp"

namespace rkit::rtrain {
namespace {

// Free communication and optimizer: a step is its passes alone.
Machine ideal() {
  Machine m;
  m.name = "ideal";
  m.gemm_flops = 1e12;
  m.memory_bandwidth = 1e18;
  for (Machine::Link& l : m.links) l = {0, 1e18};
  m.p2p = {0, 1e18};
  return m;
}

TEST(RtrainPlan, TheSimulatedBubbleIsTheTextbooksForEqualStages) {
  // 1→512→512→512: stage 0 holds the tiny first layer and a 512×512 one, stage 1 the
  // other 512×512: equal forward and backward passes (to 1/512).
  TrainConfig c;
  c.layers = {1, 512, 512, 512};
  c.batch_size = 256;
  for (const std::string schedule : {"gpipe", "1f1b"})
    for (unsigned m : {2u, 4u, 8u}) {
      c.micro_batches = m;
      c.schedule = schedule;
      const std::vector<Plan> plans = plan_strategies(c, 2, ideal(), "pp");
      ASSERT_EQ(plans.size(), 1u);
      const Plan& p = plans[0];
      EXPECT_EQ(p.micro_batches, m);
      EXPECT_NEAR(p.bubble_s / p.step_s, 1.0 / (m + 1), 5e-3) << schedule << " m " << m;
    }
  // Stages of equal work but unequal passes (768→512→512→512→512: layer 0 has no dX, so
  // stage 0's forward is heavier and its backward lighter): more bubble than the formula,
  // the more micro-batches the more (stage 0 keeps waiting for stage 1's backward).
  c.layers = {768, 512, 512, 512, 512};
  c.schedule = "gpipe";
  double excess = 0;
  for (unsigned m : {2u, 8u}) {
    c.micro_batches = m;
    const Plan p = plan_strategies(c, 2, ideal(), "pp")[0];
    EXPECT_GT(p.bubble_s / p.step_s - 1.0 / (m + 1), excess) << m;
    excess = p.bubble_s / p.step_s - 1.0 / (m + 1);
  }
}

TEST(RtrainPlan, TheLinkFromRbenchRecordsIsTheOneTheyWereMadeOf) {
  // comm.gloo's times for 100 µs + bytes / 2 GB/s.
  std::vector<Json> records;
  const auto add = [&](const std::string& suite, const std::string& metric, Json params, double median) {
    records.push_back(Json{
        {"schema", "rkit.bench.v1"}, {"suite", suite}, {"metric", metric}, {"params", params}, {"median", median}});
  };
  for (double bytes = 64; bytes <= 64 * 1048576.0; bytes *= 4) {
    double t = 100e-6 + bytes / 2e9;
    add("comm.gloo", "allreduce", Json{{"bytes", bytes}, {"busbw_factor", 1.0}, {"ranks", 2}}, bytes / t / 1e9);
  }
  add("cpu.gemm", "sgemm", Json{{"m", 512}, {"threads", 2}}, 200);
  add("cpu.gemm", "sgemm", Json{{"m", 1024}, {"threads", 2}}, 400);
  add("cpu.stream", "triad", Json{{"threads", 2}}, 30);
  const Machine m = machine_from_bench(records, 1, "here");
  const Machine::Link& l = m.links[static_cast<std::size_t>(Collective::Allreduce)];
  EXPECT_NEAR(l.latency_s, 100e-6, 1e-7);
  EXPECT_NEAR(l.busbw, 2e9, 0.01 * 2e9);
  EXPECT_DOUBLE_EQ(m.memory_bandwidth, 15e9);  // per thread, one thread a rank
  EXPECT_DOUBLE_EQ(m.gemm_rate(512), 100e9);
  EXPECT_NEAR(m.gemm_rate(std::sqrt(512.0 * 1024)), std::sqrt(100e9 * 200e9), 1e3);  // log-log between
  EXPECT_DOUBLE_EQ(m.gemm_rate(4096), 200e9);                                        // clamped
  const Error e = rkit::testing::error_of([] { machine_from_bench({}, 1, "here"); });
  EXPECT_EQ(e.code(), Exit::DataErr);
}

TEST(RtrainPlan, PlansRankTheOnesThatFitFirstThenTheFastest) {
  TrainConfig c;  // the reference model: 1.3M parameters, 21 MB of state under dp
  Machine m = ideal();
  m.memory_bytes = 18e6;  // the sharded ones fit, dp does not
  const std::vector<Plan> plans = plan_strategies(c, 4, m);
  ASSERT_GE(plans.size(), 5u);
  bool seen_unfit = false;
  std::size_t fitting = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    EXPECT_FALSE(plans[i].fits && seen_unfit) << plans[i].strategy << ": fits, after one that does not";
    seen_unfit = seen_unfit || !plans[i].fits;
    fitting += plans[i].fits ? 1 : 0;
    if (i > 0 && plans[i].fits == plans[i - 1].fits) {
      EXPECT_LE(plans[i - 1].step_s, plans[i].step_s);
    }
  }
  EXPECT_GT(fitting, 0u);
  EXPECT_LT(fitting, plans.size());
  for (const Plan& p : plans) {
    if (p.strategy == "dp") {
      EXPECT_FALSE(p.fits);
    }
  }
}

}  // namespace
}  // namespace rkit::rtrain
