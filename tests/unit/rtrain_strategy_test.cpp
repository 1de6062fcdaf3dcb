// rtrain run's strategies, rank by rank as threads of this process: every ZeRO stage
// follows data parallel's losses on the same global batch; the bytes each step sends are
// the textbook volumes; the memory held is the ZeRO paper's; the state moves between
// strategies and rank counts whole.
#include "strategy.hpp"

#include <fmt/format.h>
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
                              From from = {}, const std::function<void(Strategy&, Communicator&)>& after = nullptr,
                              const std::function<void(TrainConfig&)>& tune = nullptr) {
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
        TrainConfig c = small_config(strategy, batch);
        if (tune) tune(c);
        auto dev = make_device("cpu", 1, 0);
        auto s = make_strategy(strategy, {*dev, *comm, c});
        if (const RankResult* start = from.state)
          s->load_state(start->params.data(), start->exp_avg.data(), start->exp_avg_sq.data());
        else
          s->load_state(initial_params(layer_slots(c.layers), 5).data(), nullptr, nullptr);
        RankResult& out = results[static_cast<std::size_t>(r)];
        std::vector<float> x, y;
        // The replica's rows: the ranks of one read the same
        const DataShard shard = s->data_shard();
        const std::size_t rows = global_batch / static_cast<std::size_t>(shard.world);
        const float loss_scale = 1.0f / static_cast<float>(rows * c.outputs());
        for (int step = from.first; step < from.first + steps; ++step) {
          fill_rows(static_cast<std::size_t>(step) * global_batch + static_cast<std::size_t>(shard.rank) * rows, rows,
                    c, x, y);
          s->upload_batch(x.data(), y.data(), nullptr, rows);
          s->begin_step();
          double loss = s->forward_backward(rows, loss_scale);
          if (!s->reports_loss()) loss = 0;
          const double norm = std::sqrt(s->grad_norm_squared());
          const float clip = norm > 1.0 ? static_cast<float>(1.0 / (norm + 1e-6)) : 1.0f;
          s->optimizer_step(kernels::AdamwStep::make(1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, clip, step + 1));
          out.comm.push_back(s->end_step());
          comm->allreduce_sum(&loss, 1);
          out.losses.push_back(loss / static_cast<double>(global_batch * c.outputs()));
        }
        if (after) after(*s, *comm);
        out.memory = s->memory();
        const std::size_t n = parameter_count(layer_slots(c.layers));
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
  EXPECT_EQ(names, (std::vector<std::string>{"3d", "dp", "pp", "tp", "zero1", "zero2", "zero3"}));
  const Error e = rkit::testing::error_of([] { check_strategy("zero4"); });
  EXPECT_EQ(e.code(), Exit::Usage);
  EXPECT_EQ(std::string(e.what()), "unknown strategy 'zero4' (expected 3d, dp, pp, tp, zero1, zero2, zero3)");
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

// Tensor, pipeline and both with data parallel: data parallel's losses, whatever the
// grid, the schedule or the micro-batches.
TEST(RtrainStrategy, EveryModelParallelGridFollowsDataParallelsLosses) {
  const auto dp = train("dp", 2, 64, 100);
  const auto dp4 = train("dp", 4, 64, 100);
  struct Case {
    std::string name;
    int world;
    unsigned tp, pp, micro;
    std::string schedule;
  };
  for (const Case& k :
       {Case{"tp", 2, 0, 0, 0, "1f1b"}, Case{"pp", 2, 0, 0, 4, "1f1b"}, Case{"pp", 2, 0, 0, 3, "gpipe"},
        Case{"3d", 4, 2, 2, 4, "1f1b"}, Case{"3d", 4, 2, 1, 0, "1f1b"}, Case{"3d", 4, 1, 2, 2, "gpipe"}}) {
    const auto got = train(k.name, k.world, 64, 100, {}, nullptr, [&](TrainConfig& c) {
      c.tensor_parallel = k.tp;
      c.pipeline_parallel = k.pp;
      c.micro_batches = k.micro;
      c.schedule = k.schedule;
    });
    const std::string what = fmt::format("{} tp {} pp {} micro {} {}", k.name, k.tp, k.pp, k.micro, k.schedule);
    const RankResult& ref = (k.world == 2 ? dp : dp4)[0];
    EXPECT_LT(max_relative(ref.losses, got[0].losses), 1e-5) << what;
    for (std::size_t i = 0; i < kPsi; i += 13)
      EXPECT_NEAR(got[0].params[i], ref.params[i], 1e-4 * (1 + std::fabs(ref.params[i]))) << what << " " << i;
  }
}

// Tensor parallel: two all-reduces a column/row pair a micro-batch, of the pair's output
// (forward) and of its input's gradient (backward; none for the model's first layer),
// rows x width floats each. Pipeline parallel: each boundary's activations forward and
// their gradients back, rows x width floats a step whatever the micro-batches.
TEST(RtrainStrategy, ModelParallelBytesAreTheTextbookVolumes) {
  const auto ring = [](std::uint64_t floats, std::uint64_t n) { return 2 * (n - 1) * floats * sizeof(float) / n; };
  const std::uint64_t rows = 64, norm2 = ring(2, 2), norm4 = ring(2, 4);  // the norm's double: 2 floats' bytes
  // 16→32→32→32→4 on 2 tensor ranks: pairs (0, 1) and (2, 3); widths 32 out, 4 out; 32 in back.
  const auto tp = train("tp", 2, 64, 2, {}, nullptr, [](TrainConfig& c) { c.layers = {16, 32, 32, 32, 4}; });
  for (const RankResult& r : tp)
    for (const StepComm& c : r.comm) {
      EXPECT_EQ(c.sent[Collective::Allreduce], ring(rows * (32 + 4 + 32), 2) + norm2);
      EXPECT_EQ(c.sent.send_recv, 0u);
    }
  // 16→32→32→4 in 2 stages of 6 micro-batches: the cut after layer 0 (work 2·512 | 3·1024 + 3·128).
  const auto pp = train("pp", 2, 64, 2, {}, nullptr, [](TrainConfig& c) { c.micro_batches = 6; });
  for (const RankResult& r : pp)
    for (const StepComm& c : r.comm) {
      EXPECT_EQ(c.sent.send_recv, rows * 32 * sizeof(float));
      EXPECT_EQ(c.sent[Collective::Allreduce], norm2);
    }
  // The grid: 2 replicas of 2 stages; each replica's stage all-reduces its gradients.
  const auto grid = train("3d", 4, 64, 2, {}, nullptr, [](TrainConfig& c) { c.pipeline_parallel = 2; });
  for (std::size_t r = 0; r < grid.size(); ++r) {
    const std::uint64_t stage_params = r % 2 == 0 ? 16 * 32 + 32 : 32 * 32 + 32 + 32 * 4 + 4;
    for (const StepComm& c : grid[r].comm) {
      EXPECT_EQ(c.sent.send_recv, rows / 2 * 32 * sizeof(float)) << r;
      EXPECT_EQ(c.sent[Collective::Allreduce], ring(stage_params, 2) + norm4) << r;
    }
  }
}

// What a rank holds: its share of the parameters, their gradients and moments; 1F1B
// keeps at most pp - s micro-batches' activations on stage s, GPipe all of them.
TEST(RtrainStrategy, ModelParallelMemoryIsTheRanksShare) {
  const std::uint64_t f = sizeof(float);
  const auto tp = train("tp", 2, 64, 1);  // pair (0, 1) split, layer 2 whole on both
  for (const RankResult& r : tp) {
    EXPECT_EQ(r.memory.params, (kPsi - 132 - 32) / 2 * f + 132 * f + 32 * f);  // layer 1's bias whole
    EXPECT_EQ(r.memory.optimizer, 2 * r.memory.params);
  }
  const auto with = [](const std::string& schedule) {
    return [schedule](TrainConfig& c) {
      c.micro_batches = 8;
      c.schedule = schedule;
    };
  };
  const auto ofb = train("pp", 2, 64, 1, {}, nullptr, with("1f1b"));
  const auto gpipe = train("pp", 2, 64, 1, {}, nullptr, with("gpipe"));
  EXPECT_EQ(ofb[0].memory.params, 544 * f);
  EXPECT_EQ(ofb[1].memory.params, (1056 + 132) * f);
  EXPECT_LT(ofb[0].memory.buffers, gpipe[0].memory.buffers);
  EXPECT_EQ(ofb[1].memory.buffers, gpipe[1].memory.buffers - 7 * 8 * (32 + 32 + 4 + 32 + 32 + 4) * f);
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
  const auto on_tp = train("tp", 2, 64, 20, {&first[0], 20});
  const auto on_pp = train("pp", 2, 64, 20, {&first[0], 20});
  const std::vector<double> tail(whole[0].losses.begin() + 20, whole[0].losses.end());
  EXPECT_LT(max_relative(tail, on_one[0].losses), 1e-5);
  EXPECT_LT(max_relative(tail, on_four[0].losses), 1e-5);
  EXPECT_LT(max_relative(tail, on_tp[0].losses), 1e-5);
  EXPECT_LT(max_relative(tail, on_pp[0].losses), 1e-5);
  for (const std::string name : {"tp", "pp"}) {  // and back, bit for bit
    const auto none = train(name, 2, 64, 0, {&first[0], 20});
    EXPECT_EQ(none[1].params, first[0].params) << name;
    EXPECT_EQ(none[0].exp_avg_sq, first[0].exp_avg_sq) << name;
  }
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
