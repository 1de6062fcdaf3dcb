// rtrain run's model, schedule, buckets and configuration: the gradients of the MLP
// against central finite differences of its loss (in double around float parameters),
// for both losses and both activations; the learning-rate schedule; bucketing; the
// run configuration's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <regex>
#include <vector>

#include "device.hpp"
#include "model.hpp"
#include "rkit/error.hpp"
#include "rkit/options.hpp"
#include "rkit/rng.hpp"
#include "run.hpp"
#include "test_support.hpp"
#include "train_config.hpp"

namespace {

using namespace rkit;
using namespace rkit::rtrain;

struct Case {
  kernels::Activation act;
  Loss loss;
};

class RtrainModelGrad : public ::testing::TestWithParam<Case> {};

// Every parameter's gradient against (L(p + h) - L(p - h)) / 2h, with L the batch's
// loss sum (grad_scale 1). float parameters: h = 1e-2 keeps rounding small against the
// difference; the tolerance covers the third-order term of the central difference.
// (evaluate() is the forward pass alone: the gradients from backward stay as they were.)
TEST_P(RtrainModelGrad, MatchesFiniteDifferences) {
  const Case c = GetParam();
  const std::vector<std::size_t> layers = {5, 7, 6, c.loss == Loss::Mse ? 2u : 3u};
  const std::size_t rows = 9;
  auto dev = make_device("cpu", 1, 0);
  Mlp net(*dev, layers, c.act, c.loss, rows);
  net.init(3);
  CounterRng rng(11, 0);
  std::vector<float> x(rows * layers.front()), y(rows * layers.back());
  std::vector<std::int32_t> labels(rows);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(2 * rng.uniform(i) - 1);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(2 * rng.uniform(1000 + i) - 1);
  for (std::size_t i = 0; i < rows; ++i) labels[i] = static_cast<std::int32_t>(i % layers.back());
  net.upload_batch(x.data(), y.data(), labels.data(), rows);

  std::vector<std::size_t> order;
  net.forward_backward(rows, 1.0f, [&](std::size_t l) { order.push_back(l); });
  EXPECT_EQ(order, (std::vector<std::size_t>{2, 1, 0}));  // the last layer's gradients are ready first
  const std::vector<float> grad(net.grads(), net.grads() + net.parameters());
  float* p = net.params();
  // ReLU has kinks: a step that carries a pre-activation across 0 breaks the difference,
  // so there a smaller step may vouch for the gradient too.
  const std::vector<float> steps =
      c.act == kernels::Activation::Relu ? std::vector<float>{1e-2f, 1e-3f} : std::vector<float>{1e-2f};
  double worst = 0;
  for (std::size_t i = 0; i < net.parameters(); ++i) {
    double best = INFINITY, best_fd = 0;
    for (float h : steps) {
      const float saved = p[i];
      p[i] = saved + h;
      const double up = net.evaluate(rows).first;
      p[i] = saved - h;
      const double down = net.evaluate(rows).first;
      p[i] = saved;
      const double fd = (up - down) / (static_cast<double>(saved + h) - static_cast<double>(saved - h));
      const double err = std::fabs(fd - grad[i]) / (1e-2 + std::fabs(fd));
      if (err < best) best = err, best_fd = fd;
    }
    worst = std::max(worst, best);
    EXPECT_LT(best, 2e-2) << "parameter " << i << ": backward " << grad[i] << ", finite difference " << best_fd;
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Cases, RtrainModelGrad,
                         ::testing::Values(Case{kernels::Activation::Gelu, Loss::Mse},
                                           Case{kernels::Activation::Relu, Loss::Mse},
                                           Case{kernels::Activation::Gelu, Loss::CrossEntropy}));

TEST(RtrainModel, InitIsPyTorchsUniformAndDeterministic) {
  auto dev = make_device("cpu", 1, 0);
  Mlp a(*dev, {100, 50, 1}, kernels::Activation::Gelu, Loss::Mse, 4);
  Mlp b(*dev, {100, 50, 1}, kernels::Activation::Gelu, Loss::Mse, 4);
  a.init(5);
  b.init(5);
  EXPECT_EQ(0, std::memcmp(a.params(), b.params(), a.parameters() * sizeof(float)));
  const float bound = 0.1f;  // 1/sqrt(100)
  double sum_sq = 0;
  for (std::size_t i = 0; i < 100 * 50; ++i) {
    ASSERT_LE(std::fabs(a.params()[i]), bound);
    sum_sq += a.params()[i] * a.params()[i];
  }
  EXPECT_NEAR(sum_sq / 5000, bound * bound / 3, 0.1 * bound * bound / 3);  // variance of U(-b, b)
  b.init(6);
  EXPECT_NE(0, std::memcmp(a.params(), b.params(), a.parameters() * sizeof(float)));
  const auto t = a.tensors();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].name, "layers.0.weight");
  EXPECT_EQ(t[0].shape, (std::vector<std::uint64_t>{50, 100}));
  EXPECT_EQ(t[3].name, "layers.1.bias");
  EXPECT_EQ(t[3].offset + t[3].count, a.parameters());
}

TEST(RtrainSchedule, WarmsUpThenFollowsACosine) {
  TrainConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10, 110), 1.0);
  EXPECT_NEAR(learning_rate(c, 60, 110), 0.55, 1e-12);  // half way: the mean of lr and min_lr
  EXPECT_NEAR(learning_rate(c, 110, 110), 0.1, 1e-12);
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0, 100), 1.0);
}

TEST(RtrainBuckets, WholeLayersInBackwardOrderUntilFull) {
  EXPECT_EQ(make_buckets({100, 400, 10}, 200), (std::vector<std::vector<std::size_t>>{{2, 1}, {0}}));
  EXPECT_EQ(make_buckets({100, 400, 10}, 1e9), (std::vector<std::vector<std::size_t>>{{2, 1, 0}}));
  EXPECT_EQ(make_buckets({100, 400, 10}, 1), (std::vector<std::vector<std::size_t>>{{2}, {1}, {0}}));
}

TEST(RtrainConfig, FileOverDefaultsWithErrorsNamingTheLine) {
  rkit::testing::TempDir dir;
  rkit::testing::write(dir.file("ok.toml"),
                       "[model]\nlayers = [8, 4, 3]\nloss = \"cross_entropy\"\n[train]\nepochs = 2\n");
  TrainConfig c = load_train_config(dir.file("ok.toml"));
  EXPECT_EQ(c.layers, (std::vector<std::size_t>{8, 4, 3}));
  EXPECT_EQ(c.loss, Loss::CrossEntropy);
  EXPECT_EQ(c.epochs, 2u);
  EXPECT_EQ(c.steps, 0u);  // epochs alone
  rkit::testing::write(dir.file("bad.toml"), "[model]\nlayers = [8, 0]\n");
  EXPECT_THROW(
      {
        try {
          load_train_config(dir.file("bad.toml"));
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Exit::Config);
          EXPECT_NE(std::string(e.what()).find("bad.toml:2:"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  rkit::testing::write(dir.file("table.toml"), "[optimizer]\nlr = 1\n");
  EXPECT_THROW(load_train_config(dir.file("table.toml")), Error);
  rkit::testing::write(dir.file("ce.toml"), "[model]\nlayers = [8, 1]\nloss = \"cross_entropy\"\n");
  EXPECT_THROW(load_train_config(dir.file("ce.toml")), Error);  // one class
  EXPECT_THROW(parse_layers("8"), Error);
  EXPECT_THROW(parse_layers("8,,1"), Error);
  EXPECT_EQ(parse_layers("8,1"), (std::vector<std::size_t>{8, 1}));
}

// The run as `rtrain run [file] args` describes it.
TrainConfig run_config(const std::string& args, const std::string& file = "") {
  CLI::App app("run");
  const OptionFlags flags = run_options().add_to(app);
  app.parse(args, false);
  return resolve_run_config(file, flags);
}

TEST(RtrainConfig, FlagsOverTheFileOverTheDefaults) {
  rkit::testing::TempDir dir;
  rkit::testing::EnvGuard env({"RKIT_CKPT_DIR"});
  env.unset("RKIT_CKPT_DIR");
  rkit::testing::write(dir.file("run.toml"),
                       "[model]\nlayers = [16, 32, 1]\n[train]\nsteps = 30\nlr = 0.002\nthreads = 9999\n"
                       "[checkpoint]\npack = false\n");
  const TrainConfig c = run_config("--steps 12 --layers 16,8,1 --no-pack --output w.safetensors", dir.file("run.toml"));
  EXPECT_EQ(c.steps, 12u) << "the flag";
  EXPECT_EQ(c.layers, (std::vector<std::size_t>{16, 8, 1})) << "the flag";
  EXPECT_EQ(c.lr, 0.002) << "the file";
  EXPECT_EQ(c.threads, 4096) << "the file's, at most 4096";
  EXPECT_FALSE(c.pack);
  EXPECT_EQ(c.output, "w.safetensors");
  EXPECT_EQ(c.batch_size, 512u) << "the default";
  EXPECT_EQ(c.ckpt_dir, "");
  EXPECT_EQ(run_config("--epochs 2").steps, 0u) << "--epochs alone: epochs";
  EXPECT_EQ(run_config("--epochs 2 --steps 5").steps, 5u);
  env.set("RKIT_CKPT_DIR", "/ck");
  EXPECT_EQ(run_config("").ckpt_dir, "/ck");
  EXPECT_EQ(run_config("--ckpt-dir mine").ckpt_dir, "mine");
  EXPECT_EQ(run_config("--lr 0.0001").min_lr, 0.0) << "min_lr at most lr";
  Error e1 = rkit::testing::error_of([] { run_config("--activation tanh"); });
  EXPECT_EQ(e1.code(), Exit::Usage);
  EXPECT_STREQ(e1.what(), "unknown activation 'tanh' (expected gelu or relu)");
  Error e2 = rkit::testing::error_of([] { run_config("--lr 0"); });
  EXPECT_STREQ(e2.what(), "lr must be > 0");
  Error e3 = rkit::testing::error_of([] { run_config("--batch-size -3"); });
  EXPECT_EQ(e3.code(), Exit::Usage);
  EXPECT_STREQ(e3.what(), "--batch-size must be a whole number, 0 or more");
}

TEST(RtrainConfig, FileErrorsNameTheValue) {
  rkit::testing::TempDir dir;
  auto error = [&](const std::string& text) {
    rkit::testing::write(dir.file("r.toml"), text);
    Error e = rkit::testing::error_of([&] { load_train_config(dir.file("r.toml")); });
    EXPECT_EQ(e.code(), Exit::Config) << e.what();
    return std::string(e.what()).substr(dir.file("").size());
  };
  EXPECT_EQ(error("[train]\nstepz = 3\n"), "r.toml:2:1: unknown key 'train.stepz'");
  EXPECT_EQ(error("[optimizer]\nlr = 1\n"),
            "r.toml:1:1: unknown table 'optimizer' (expected [model], [data], [train] or [checkpoint])");
  EXPECT_EQ(error("[train]\nlr = \"fast\"\n"), "r.toml:2:6: 'train.lr' must be a number");
  EXPECT_EQ(error("[train]\nsteps = -5\n"), "r.toml:2:9: 'train.steps' must be a whole number, 0 or more");
  EXPECT_EQ(error("[model]\nlayers = \"8,1\"\n"), "r.toml:2:10: 'model.layers' must be an array of sizes");
  EXPECT_EQ(error("[model]\nlayers = [8, \"x\", 1]\n"),
            "r.toml:2:10: layers '8,?,1': each size must be a whole number from 1 to 1048576");
  EXPECT_EQ(error("[model]\nactivation = \"tanh\"\n"),
            "r.toml:2:14: unknown activation 'tanh' (expected gelu or relu)");
  EXPECT_EQ(error("[train]\nlr = 0\n"), "r.toml: lr must be > 0");
  EXPECT_EQ(error("[checkpoint]\npack = 1\n"), "r.toml:2:8: 'checkpoint.pack' must be a boolean");
}

// The docs checks of the one table: --help lists every flag with its sentence, and the
// reference configuration (examples/train.toml, which rtrain(1) follows) every key.
TEST(RtrainConfig, HelpAndTheReferenceConfigurationCoverEveryOption) {
  CLI::App app("run");
  const OptionFlags flags = run_options().add_to(app);
  const std::string help = app.help();
  const std::string example = rkit::testing::slurp(std::string(RKIT_FIXTURES) + "/../../examples/train.toml");
  for (const OptionSpec& s : run_options().specs()) {
    if (!s.flag.empty()) {
      EXPECT_NE(help.find(s.flag), std::string::npos) << s.flag;
      EXPECT_NE(help.find(s.help), std::string::npos) << s.flag;
    }
    if (s.key.empty()) continue;
    const auto dot = s.key.find('.');
    const std::string table = "[" + s.key.substr(0, dot) + "]", name = s.key.substr(dot + 1);
    const auto at = example.find(table);
    ASSERT_NE(at, std::string::npos) << table;
    const auto next = example.find("\n[", at + 1);
    const std::string section = example.substr(at, next == std::string::npos ? std::string::npos : next - at);
    // As a key, or in a comment ("# target_loss = 0.2", "steps = 1000  # or epochs = N").
    EXPECT_TRUE(std::regex_search(section, std::regex("(^|[^a-z_])" + name + " = ")))
        << s.key << " is not in examples/train.toml";
  }
}

}  // namespace
