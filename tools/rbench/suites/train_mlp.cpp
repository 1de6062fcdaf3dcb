// train.mlp and train.mlp_cuda: the platform's reference training workload, rtrain
// run's native MLP (256→1024→1024→1, GELU, MSE, AdamW, batch 512, synthetic
// factor-model data), run as `rtrain run --json` on the CPU (train.mlp) or on the GPU
// (train.mlp_cuda, where NVML sees one). Each repetition is one run of `steps`
// optimizer steps; the metric is the training loop's samples per second as rtrain's
// summary reports it (process start and data set-up not counted). The check: the loss
// is finite and the held-out loss fell below 0.9, under the targets' variance (~1).
#include <fmt/format.h>

#include <cmath>

#include "rkit/error.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/nvml.hpp"
#include "rkit/process.hpp"
#include "suite.hpp"

namespace rkit::rbench {
namespace {

class TrainMlp : public Suite {
 public:
  explicit TrainMlp(std::string device) : device_(std::move(device)) {}
  std::string name() const override { return device_ == "cpu" ? "train.mlp" : "train.mlp_" + device_; }
  std::string description() const override {
    return fmt::format("rtrain run's reference MLP 256-1024-1024-1 at batch 512: training samples/s on the {}",
                       device_ == "cpu" ? "CPU" : "GPU");
  }
  std::string unavailable() const override {
    if (device_ == "cpu") return {};
    std::string why;
    const auto nvml = Nvml::load(why);
    if (!nvml) return "no NVIDIA driver: " + why;
    return nvml->device_count() > 0 ? "" : "no GPU visible";
  }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    const int steps = opt.quick ? 20 : 60;
    if (progress) progress(fmt::format("{} {} steps", name(), steps));
    Measurement m;
    m.metric = "samples_per_s";
    m.unit = "samples/s";
    m.params = {{"layers", "256,1024,1024,1"}, {"batch", 512}, {"steps", steps}, {"device", device_}};
    if (device_ == "cpu") m.params["threads"] = opt.threads;
    m.check = "loss finite and held-out loss < 0.9 (the targets' variance is ~1)";
    for (int i = 0; i < opt.warmup + opt.reps; ++i) {
      const Json summary = run_rtrain(steps, opt.threads);
      const double loss = summary.value("loss", NAN), eval = summary.value("eval_loss", NAN);
      if (!std::isfinite(loss) || !(eval < 0.9)) m.correct = false;
      if (i >= opt.warmup) m.samples.push_back(summary.at("samples_per_s").get<double>());
    }
    return {m};
  }

 private:
  // One `rtrain run`, its summary record. On the GPU a failure is Unavailable: rbench
  // reports the suite skipped, with rtrain's reason, and goes on.
  Json run_rtrain(int steps, unsigned threads) const {
    SpawnOptions o;
    o.argv = {rkit_program("rtrain"),
              "run",
              "--json",
              "-q",
              "--steps",
              std::to_string(steps),
              "--warmup-steps",
              "5",
              "--rows",
              "60000",
              "--device",
              device_,
              "--threads",
              std::to_string(threads),
              "--no-track"};  // a measurement, not an experiment: nothing in the user's run store
    o.out = Redirect::pipe();
    o.err = Redirect::pipe();
    RunResult r = rkit::run(o);
    if (!r.status.success())
      throw Error(
          device_ == "cpu" ? Exit::Software : Exit::Unavailable,
          fmt::format("{}: rtrain run: {}: {}", name(), r.status.describe(), r.err.substr(0, r.err.find('\n'))));
    try {
      return parse_json(r.out.substr(0, r.out.find('\n')), "rtrain run");
    } catch (const Error& e) {
      throw Error(Exit::Software, fmt::format("{}: {}", name(), e.what()));
    }
  }
  std::string device_;
};

struct TrainMlpCpu : TrainMlp {
  TrainMlpCpu() : TrainMlp("cpu") {}
};
struct TrainMlpCuda : TrainMlp {
  TrainMlpCuda() : TrainMlp("cuda") {}
};
RKIT_BENCH_SUITE(TrainMlpCpu);
RKIT_BENCH_SUITE(TrainMlpCuda);

}  // namespace
}  // namespace rkit::rbench
