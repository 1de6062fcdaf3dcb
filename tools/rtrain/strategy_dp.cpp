// Data parallelism (strategy.hpp): every rank holds the whole model, parameters,
// gradients and moments; the gradients are all-reduced in buckets of whole layers while
// the backward pass goes on (PyTorch DDP's scheme), on the CPU through the communicator
// (Gloo) and on a GPU through the device's reducer (NCCL).
#include <algorithm>

#include "device.hpp"
#include "run.hpp"
#include "strategy.hpp"

namespace rkit::rtrain {
namespace {

class DataParallel : public Strategy {
 public:
  explicit DataParallel(const StrategySetup& s)
      : comm_(s.comm), net_(s.dev, s.config.layers, s.config.activation, s.config.loss, s.config.batch_size) {
    // Buckets of whole layers, in backward order; a bucket is reduced once its layers are done.
    std::vector<std::size_t> layer_bytes;
    for (const LayerSlot& l : net_.slots()) layer_bytes.push_back((l.in * l.out + l.out) * sizeof(float));
    buckets_ = make_buckets(layer_bytes, s.config.bucket_mb * 1024 * 1024);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    bucket_of_.resize(layer_bytes.size());
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      const std::size_t lo = buckets_[b].back(), hi = buckets_[b].front();  // layers hi down to lo
      const LayerSlot &first = net_.slots()[lo], &last = net_.slots()[hi];
      ranges.emplace_back(first.weight, last.bias + last.out - first.weight);
      for (std::size_t l : buckets_[b]) bucket_of_[l] = b;
    }
    reducer_ = s.dev.make_reducer(comm_, net_.grads(), ranges, 1.0f / static_cast<float>(comm_.world()));
    pending_.resize(buckets_.size());
    net_.set_tracer(s.tracer);
    tracer_ = s.tracer;
  }

  ~DataParallel() override { comm_.drain(); }  // an error between a bucket's ready and wait
  DataShard data_shard() const override { return {comm_.rank(), comm_.world()}; }
  void upload_batch(const float* x, const float* y, const std::int32_t* labels, std::size_t rows) override {
    net_.upload_batch(x, y, labels, rows);
  }

  void load_state(const float* params, const float* exp_avg, const float* exp_avg_sq) override {
    Device& dev = net_.device();
    const std::size_t bytes = net_.parameters() * sizeof(float);
    dev.copy_in(net_.params(), params, bytes);
    const std::vector<float> zeros(exp_avg && exp_avg_sq ? 0 : net_.parameters(), 0.0f);
    dev.copy_in(net_.exp_avg(), exp_avg ? exp_avg : zeros.data(), bytes);
    dev.copy_in(net_.exp_avg_sq(), exp_avg_sq ? exp_avg_sq : zeros.data(), bytes);
  }

  void gather_state(bool moments, float* params, float* exp_avg, float* exp_avg_sq) override {
    Device& dev = net_.device();
    const std::size_t bytes = net_.parameters() * sizeof(float);
    if (params) dev.copy_out(params, net_.params(), bytes);
    if (moments && exp_avg) dev.copy_out(exp_avg, net_.exp_avg(), bytes);
    if (moments && exp_avg_sq) dev.copy_out(exp_avg_sq, net_.exp_avg_sq(), bytes);
  }

  void begin_step() override {
    reducer_->begin_step();
    for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].size();
  }

  double forward_backward(std::size_t rows, float loss_scale) override {
    const double sum = net_.forward_backward(rows, loss_scale, [&](std::size_t layer) {
      if (--pending_[bucket_of_[layer]] == 0) reducer_->ready(bucket_of_[layer]);
    });
    {
      const auto slice = tracer_ ? tracer_->slice("wait gradients", "wait") : Tracer::Slice();
      times_ = reducer_->wait();
    }
    return sum;
  }

  double grad_norm_squared() override { return net_.grad_norm_squared(); }  // the gradients are whole here
  void optimizer_step(const kernels::AdamwStep& s) override { net_.step(s); }

  StepComm end_step() override {
    StepComm c;
    c.comm_s = times_.comm_s;
    c.exposed_s = times_.exposed_s;
    c.sent[Collective::Allreduce] = times_.bytes_sent;
    return c;
  }

  std::pair<double, std::size_t> evaluate(std::size_t rows) override {
    if (rows == 0) return {0.0, 0};
    return net_.evaluate(rows);
  }

  MemoryHeld memory() const override {
    const std::uint64_t bytes = net_.parameters() * sizeof(float);
    return {bytes, bytes, 2 * bytes, 0};
  }

 private:
  Communicator& comm_;
  Mlp net_;
  std::vector<std::vector<std::size_t>> buckets_;
  std::vector<std::size_t> bucket_of_, pending_;
  std::unique_ptr<GradReducer> reducer_;
  CommTimes times_;
  Tracer* tracer_ = nullptr;
};

}  // namespace

RKIT_TRAIN_STRATEGY(dp, "dp", "data parallel: whole model on every rank, gradients all-reduced in buckets",
                    [](const StrategySetup& s) { return std::make_unique<DataParallel>(s); });

}  // namespace rkit::rtrain
