// rtrain run's strategies, rank by rank as threads of this process: every ZeRO stage
// follows data parallel's losses on the same global batch; the bytes each step sends are
// the textbook volumes; the memory held is the ZeRO paper's; the state moves between
// strategies and rank counts whole.
#include "strategy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device.hpp"
#include "rkit/rng.hpp"
#include "test_support.hpp"

namespace rkit::rtrain {
namespace {

using namespace std::chrono_literals;

// A model whose every layer block is a multiple of 4 floats (no pad on 2 or 4 ranks: Ψ
// is the model's own size): 16→32→32→4, 544 + 1056 + 132 = 1732 parameters.
TrainConfig small_config(const std::string& strategy, std::size_t batch) {
  TrainConfig c;
  c.layers = {16, 32, 32, 4};
  c.batch_size = batch;
  c.strategy = strategy;
  c.threads = 1;
  return c;
}

// Rows of a fixed regression problem; row i is the same whatever rank asks for it.
void fill_rows(std::size_t first, std::size_t rows, const TrainConfig& c, std::vector<float>& x,
               std::vector<float>& y) {
  const std::size_t in = c.layers.front(), out = c.layers.back();
  x.resize(rows * in);
  y.resize(rows * out);
  const CounterRng rng(7, 99);
  for (std::size_t r = 0; r < rows; ++r) {
    double t = 0;
    for (std::size_t j = 0; j < in; ++j) {
      const float v = static_cast<float>(2 * rng.uniform((first + r) * 64 + j) - 1);
      x[r * in + j] = v;
      t += v * static_cast<double>(j % 3);
    }
    for (std::size_t k = 0; k < out; ++k)
      y[r * out + k] = static_cast<float>(std::tanh(0.3 * t - 0.5 * static_cast<double>(k)));
  }
}

struct RankResult {
  std::vector<double> losses;  // the global batch's mean loss, per step
  std::vector<StepComm> comm;
  MemoryHeld memory;
  std::vector<float> params, exp_avg, exp_avg_sq;  // gathered at the end
};

// Steps [first, first + steps) of `strategy` on `world` ranks, global batch
// `global_batch` (each rank its slice of the same rows), from `start` (the whole state
// after step `first`) when given; `after` runs on every rank once they are done.
struct From {
  const RankResult* state = nullptr;
  int first = 0;
};
std::vector<RankResult> train(const std::string& strategy, int world, std::size_t global_batch, int steps,
                              From from = {}, const std::function<void(Strategy&, Communicator&)>& after = nullptr) {
  const int port = world > 1 ? rkit::testing::free_port() : 0;
  std::vector<RankResult> results(static_cast<std::size_t>(world));
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        DistEnv env;
        env.rank = r;
        env.world = world;
        env.master_port = port;
        auto comm = Communicator::connect(env, 10000ms);
        const std::size_t batch = global_batch / static_cast<std::size_t>(world);
        const TrainConfig c = small_config(strategy, batch);
        auto dev = make_device("cpu", 1, 0);
        auto s = make_strategy(strategy, {*dev, *comm, c});
        if (const RankResult* start = from.state)
          s->load_state(start->params.data(), start->exp_avg.data(), start->exp_avg_sq.data());
        else
          s->load_state(initial_params(s->net().slots(), 5).data(), nullptr, nullptr);
        RankResult& out = results[static_cast<std::size_t>(r)];
        std::vector<float> x, y;
        const float loss_scale = 1.0f / static_cast<float>(batch * c.outputs());
        for (int step = from.first; step < from.first + steps; ++step) {
          fill_rows(static_cast<std::size_t>(step) * global_batch + static_cast<std::size_t>(r) * batch, batch, c, x,
                    y);
          s->upload_batch(x.data(), y.data(), nullptr, batch);
          s->begin_step();
          double loss = s->forward_backward(batch, loss_scale);
          const double norm = std::sqrt(s->grad_norm_squared());
          const float clip = norm > 1.0 ? static_cast<float>(1.0 / (norm + 1e-6)) : 1.0f;
          s->optimizer_step(kernels::AdamwStep::make(1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, clip, step + 1));
          out.comm.push_back(s->end_step());
          comm->allreduce_sum(&loss, 1);
          out.losses.push_back(loss * loss_scale / world);
        }
        if (after) after(*s, *comm);
        out.memory = s->memory();
        const std::size_t n = s->net().parameters();
        out.params.resize(n);
        out.exp_avg.resize(n);
        out.exp_avg_sq.resize(n);
        s->gather_state(true, out.params.data(), out.exp_avg.data(), out.exp_avg_sq.data());
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << strategy << " rank " << r;
  return results;
}

double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / a[i]);
  return worst;
}

constexpr std::uint64_t kPsi = 544 + 1056 + 132;  // the small model's parameters, no pad on 2 or 4 ranks

TEST(RtrainStrategy, RegisteredByName) {
  std::vector<std::string> names;
  for (const StrategyInfo& s : strategies()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"dp", "zero1", "zero2", "zero3"}));
  const Error e = rkit::testing::error_of([] { check_strategy("zero4"); });
  EXPECT_EQ(e.code(), Exit::Usage);
  EXPECT_EQ(std::string(e.what()), "unknown strategy 'zero4' (expected dp, zero1, zero2, zero3)");
}

TEST(RtrainStrategy, EveryZeroStageFollowsDataParallelsLosses) {
  const auto one = train("dp", 1, 64, 100);
  const auto dp = train("dp", 2, 64, 100);
  EXPECT_LT(max_relative(one[0].losses, dp[0].losses), 1e-5);
  EXPECT_LT(dp[0].losses.back(), 0.5 * dp[0].losses.front());  // it learns
  for (const std::string z : {"zero1", "zero2", "zero3"}) {
    const auto got = train(z, 2, 64, 100);
    EXPECT_LT(max_relative(dp[0].losses, got[0].losses), 1e-5) << z;
    // The gathered weights are data parallel's too.
    for (std::size_t i = 0; i < kPsi; i += 17)
      EXPECT_NEAR(got[0].params[i], dp[0].params[i], 1e-4 * (1 + std::fabs(dp[0].params[i]))) << z << " " << i;
  }
}

// Bytes a rank sends per step, for Ψ floats on N ranks: data parallel's ring all-reduce
// 2(N-1)/N Ψ; ZeRO-1 and 2 a reduce-scatter and an all-gather of (N-1)/N Ψ each, the same
// sum; ZeRO-3 a second all-gather, 1.5 times it. ZeRO's one extra all-reduce is the
// gradient norm's double.
TEST(RtrainStrategy, BytesSentAreTheTextbookVolumes) {
  for (int world : {2, 4}) {
    const std::uint64_t n = static_cast<std::uint64_t>(world), psi = kPsi * sizeof(float);
    const std::uint64_t ring = 2 * (n - 1) * psi / n, half = (n - 1) * psi / n, norm = 2 * (n - 1) * 8 / n;
    for (const std::string name : {"dp", "zero1", "zero2", "zero3"}) {
      const auto res = train(name, world, 64, 3);
      for (const RankResult& r : res)
        for (const StepComm& c : r.comm) {
          if (name == "dp") {
            EXPECT_EQ(c.sent[Collective::Allreduce], ring) << name;
            EXPECT_EQ(c.sent[Collective::ReduceScatter] + c.sent[Collective::Allgather], 0u) << name;
            continue;
          }
          EXPECT_EQ(c.sent[Collective::Allreduce], norm) << name;
          EXPECT_EQ(c.sent[Collective::ReduceScatter], half) << name;
          EXPECT_EQ(c.sent[Collective::Allgather], (name == "zero3" ? 2 : 1) * half) << name;
          const std::uint64_t grads_and_params = c.sent[Collective::ReduceScatter] + c.sent[Collective::Allgather];
          EXPECT_EQ(2 * grads_and_params, (name == "zero3" ? 3 : 2) * ring) << name;  // 1.5x for ZeRO-3
        }
    }
  }
}

// fp32 weights, gradients and AdamW's two moments (4 + 4 + 8 bytes a parameter): data
// parallel 16Ψ; ZeRO-1 4Ψ + 4Ψ + 8Ψ/N; ZeRO-2 4Ψ + 12Ψ/N; ZeRO-3 16Ψ/N.
TEST(RtrainStrategy, MemoryHeldIsTheZeroPapers) {
  const int world = 4;
  const std::uint64_t psi = kPsi * sizeof(float), shard = psi / world;
  const auto held = [&](const std::string& name) { return train(name, world, 64, 1)[1].memory; };
  const MemoryHeld dp = held("dp"), z1 = held("zero1"), z2 = held("zero2"), z3 = held("zero3");
  EXPECT_EQ(dp.params + dp.grads + dp.optimizer, 4 * psi);  // 16 bytes a parameter
  EXPECT_EQ(dp.buffers, 0u);
  EXPECT_EQ(z1.params, psi);
  EXPECT_EQ(z1.grads, psi);
  EXPECT_EQ(z1.optimizer, 2 * shard);
  EXPECT_EQ(z2.params, psi);
  EXPECT_EQ(z2.grads + z2.optimizer, 3 * shard);
  EXPECT_EQ(z3.params + z3.grads + z3.optimizer, 4 * shard);
  // The staging buffers: two of the widest layer (1056 floats) for gradients, two more for
  // gathered parameters.
  EXPECT_EQ(z2.buffers, 2 * 1056 * sizeof(float));
  EXPECT_EQ(z3.buffers, 4 * 1056 * sizeof(float));
}

// A layer whose size is no multiple of the rank count is padded with zeros that stay zero.
TEST(RtrainStrategy, APaddedLayerTrainsAsTheWholeOne) {
  ShardLayout layout(std::vector<LayerSlot>{{3, 5, 0, 15}, {5, 1, 20, 25}}, 4);
  ASSERT_EQ(layout.layers.size(), 2u);
  EXPECT_EQ(layout.layers[0].count, 20u);
  EXPECT_EQ(layout.layers[0].shard, 5u);
  EXPECT_EQ(layout.layers[1].count, 6u);
  EXPECT_EQ(layout.layers[1].shard, 2u);
  EXPECT_EQ(layout.layers[1].padded, 20u);
  EXPECT_EQ(layout.layers[1].sharded, 5u);
  EXPECT_EQ(layout.layers[1].unpadded, 20u);
  EXPECT_EQ(layout.padded_total, 28u);
  EXPECT_EQ(layout.widest_padded, 20u);
}

// The state gathered from any strategy on any rank count, loaded into another, trains on
// to the same losses: a checkpoint is strategy-independent.
TEST(RtrainStrategy, StateMovesBetweenStrategiesAndRankCounts) {
  const auto first = train("zero1", 2, 64, 20);
  const auto whole = train("dp", 1, 64, 40);
  const auto on_one = train("dp", 1, 64, 20, {&first[0], 20});
  const auto on_four = train("zero3", 4, 64, 20, {&first[1], 20});  // rank 1's gathered copy: the same
  const std::vector<double> tail(whole[0].losses.begin() + 20, whole[0].losses.end());
  EXPECT_LT(max_relative(tail, on_one[0].losses), 1e-5);
  EXPECT_LT(max_relative(tail, on_four[0].losses), 1e-5);
  // Loading then gathering gives back the very bits.
  const auto none = train("zero2", 2, 64, 0, {&first[0], 20});
  EXPECT_EQ(none[1].params, first[0].params);
  EXPECT_EQ(none[1].exp_avg, first[0].exp_avg);
  EXPECT_EQ(none[0].exp_avg_sq, first[0].exp_avg_sq);
}

// Evaluation under ZeRO-3 is collective; a rank with no rows left still takes part.
TEST(RtrainStrategy, Zero3EvaluatesWithARankThatHasNoRows) {
  std::vector<double> losses(2, -1);
  train("zero3", 2, 64, 1, {}, [&](Strategy& s, Communicator& comm) {
    std::vector<float> x, y;
    const TrainConfig c = small_config("zero3", 32);
    const std::size_t rows = comm.rank() == 0 ? 32 : 0;
    if (rows > 0) {
      fill_rows(0, rows, c, x, y);
      s.upload_batch(x.data(), y.data(), nullptr, rows);
    }
    losses[static_cast<std::size_t>(comm.rank())] = s.evaluate(rows).first;
  });
  EXPECT_GT(losses[0], 0);
  EXPECT_EQ(losses[1], 0);
}

}  // namespace
}  // namespace rkit::rtrain
