// ZeRO stages 1, 2 and 3 (strategy.hpp; Rajbhandari et al., "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", 2020), over the device's collectives (Gloo
// on the CPU, NCCL on a GPU: device_comm.hpp).
// Each layer's block is cut in equal shards, one a rank (ShardLayout); rank r keeps and
// updates AdamW's moments of its shard only (stage 1), and its shard of the gradients
// (stage 2), and of the parameters (stage 3):
//
//   stage 1  each layer's gradients reduce-scattered as soon as the backward pass made
//            them (overlapped), the optimizer on the rank's shard, then each layer's
//            parameters all-gathered, overlapped with the next forward pass, which waits
//            for layer l only as it reaches it. Sent: (N-1)/N Ψ twice, all-reduce's 2(N-1)/N Ψ.
//   stage 2  as stage 1, but the gradients are made in one of two staging buffers and
//            only the rank's shard is kept once reduce-scattered.
//   stage 3  no whole parameters kept: each layer's are all-gathered into one of two
//            staging buffers ahead of its forward pass and again ahead of its backward
//            pass (one layer prefetched while the one before computes), then dropped;
//            the optimizer updates the parameter shard. Sent: 3 (N-1)/N Ψ, 1.5 times
//            all-reduce's.
//
// Ψ here is the padded size (each layer a multiple of N floats; the pad is zeros, which
// AdamW leaves zero). The gradient's norm for clipping: each rank's shard's squared
// norm, summed by an all-reduce of one double.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "device.hpp"
#include "device_comm.hpp"
#include "rkit/error.hpp"
#include "strategy.hpp"

namespace rkit::rtrain {
namespace {

class Zero : public Strategy, private LayerStore {
 public:
  Zero(const StrategySetup& s, int stage)
      : stage_(stage),
        comm_(s.comm),
        dev_(s.dev),
        coll_(s.dev.collectives(s.comm)),
        net_(s.dev, s.config.layers, s.config.activation, s.config.loss, s.config.batch_size, /*own_state=*/false),
        layout_(net_.slots(), static_cast<unsigned>(s.comm.world())),
        rank_(static_cast<std::size_t>(s.comm.rank())),
        world_(static_cast<std::size_t>(s.comm.world())) {
    const std::size_t shards = layout_.shard_total, whole = layout_.padded_total, widest = layout_.widest_padded;
    if (stage_ < 3)
      params_ = dev_.alloc(whole);
    else
      param_shard_ = dev_.alloc(shards);
    if (stage_ == 1)
      grads_ = dev_.alloc(whole);
    else {
      grad_shard_ = dev_.alloc(shards);
      staging_[0] = dev_.alloc(widest);
      staging_[1] = dev_.alloc(widest);
    }
    if (stage_ == 3) {
      gathered_[0] = dev_.alloc(widest);
      gathered_[1] = dev_.alloc(widest);
    }
    exp_avg_ = dev_.alloc(shards);
    exp_avg_sq_ = dev_.alloc(shards);
    params_ready_.assign(layout_.layers.size(), 0);
    scattered_.assign(layout_.layers.size(), 0);
    net_.set_store(this);
    net_.set_tracer(s.tracer);
    tracer_ = s.tracer;
  }

  // An error can leave gathers and reduce-scatters in flight on this rank's buffers
  // (the next forward pass waits for the parameters' only as it reaches them).
  ~Zero() override { coll_->drain(); }

  DataShard data_shard() const override { return {comm_.rank(), comm_.world()}; }
  void upload_batch(const float* x, const float* y, const std::int32_t* labels, std::size_t rows) override {
    net_.upload_batch(x, y, labels, rows);
  }

  void load_state(const float* params, const float* exp_avg, const float* exp_avg_sq) override {
    wait_params();
    std::vector<float> host(layout_.widest_padded);
    for (std::size_t l = 0; l < layout_.layers.size(); ++l) {
      const ShardLayout::Layer& L = layout_.layers[l];
      if (stage_ < 3) {
        std::fill(std::copy_n(params + L.unpadded, L.count, host.begin()), host.begin() + L.shard * world_, 0.0f);
        dev_.copy_in(params_ + L.padded, host.data(), L.shard * world_ * sizeof(float));
      } else {
        take_shard(L, params, host.data(), param_shard_ + L.sharded);
      }
      take_shard(L, exp_avg, host.data(), exp_avg_ + L.sharded);
      take_shard(L, exp_avg_sq, host.data(), exp_avg_sq_ + L.sharded);
    }
  }

  void gather_state(bool moments, float* params, float* exp_avg, float* exp_avg_sq) override {
    wait_params();
    // Between steps, the whole gradients (stage 1) or a staging buffer (2, 3) are free.
    float* whole = stage_ == 1 ? grads_ : staging_[0];
    for (std::size_t l = 0; l < layout_.layers.size(); ++l) {
      const ShardLayout::Layer& L = layout_.layers[l];
      if (stage_ < 3) {
        if (params) dev_.copy_out(params + L.unpadded, params_ + L.padded, L.count * sizeof(float));
      } else {
        gather_layer(L, param_shard_ + L.sharded, whole, params);
      }
      if (moments) {
        gather_layer(L, exp_avg_ + L.sharded, whole, exp_avg);
        gather_layer(L, exp_avg_sq_ + L.sharded, whole, exp_avg_sq);
      }
    }
  }

  void begin_step() override {
    start_ = coll_->counters();
    exposed_ = 0;
    if (stage_ == 3) plan_gathers(/*backward=*/true);
  }

  double forward_backward(std::size_t rows, float loss_scale) override {
    backward_index_ = 0;
    const float scale = 1.0f / static_cast<float>(world_);
    const double sum = net_.forward_backward(rows, loss_scale, [&](std::size_t l) {
      const ShardLayout::Layer& L = layout_.layers[l];
      const std::string what = fmt::format("layer {} gradients", l);
      float* made = stage_ == 1 ? grads_ + L.padded : current_staging_;  // the layer's whole gradients
      scattered_[l] = coll_->start_reduce_scatter(made, L.shard, scale, grad_block(L), what);
    });
    if (!scattered_.empty()) exposed_ += wait(scattered_.front(), "wait gradients");  // layer 0's, the last queued
    return sum;
  }

  double grad_norm_squared() override {
    double sum = 0;
    for (const ShardLayout::Layer& L : layout_.layers) sum += dev_.sum_squares(L.shard, grad_block(L));
    const auto slice = tracer_ ? tracer_->slice("gradient norm", "wait") : Tracer::Slice();
    const auto t0 = std::chrono::steady_clock::now();
    comm_.allreduce_sum(&sum, 1);
    exposed_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return sum;
  }

  void optimizer_step(const kernels::AdamwStep& s) override {
    for (std::size_t l = 0; l < layout_.layers.size(); ++l) {
      const ShardLayout::Layer& L = layout_.layers[l];
      dev_.adamw(L.shard, param_block(L), grad_block(L), exp_avg_ + L.sharded, exp_avg_sq_ + L.sharded, s);
      if (stage_ < 3)  // the next forward pass waits for layer l's only when it reaches it
        params_ready_[l] = coll_->start_allgather(params_ + L.padded, L.shard, fmt::format("layer {} parameters", l));
    }
  }

  StepComm end_step() override {
    StepComm c;
    c.sent = coll_->counters() - start_;
    c.comm_s = c.sent.busy_s;
    c.exposed_s = exposed_;
    return c;
  }

  std::pair<double, std::size_t> evaluate(std::size_t rows) override {
    if (stage_ == 3) plan_gathers(/*backward=*/false);
    if (rows > 0) return net_.evaluate(rows);
    if (stage_ == 3)  // no rows here, but the other ranks' gathers need this rank's shards
      for (std::size_t l = 0; l < layout_.layers.size(); ++l) next_gathered();
    return {0.0, 0};
  }

  MemoryHeld memory() const override {
    const std::uint64_t whole = layout_.padded_total * sizeof(float), shard = layout_.shard_total * sizeof(float);
    const std::uint64_t staging = 2 * layout_.widest_padded * sizeof(float);
    return {stage_ < 3 ? whole : shard, stage_ == 1 ? whole : shard, 2 * shard,
            (stage_ >= 2 ? staging : 0) + (stage_ == 3 ? staging : 0)};
  }

 private:
  // --- LayerStore: what the passes use --------------------------------------------------
  const float* params(std::size_t l, Pass pass) override {
    if (stage_ < 3) {
      if (pass == Pass::Forward) {
        exposed_ += wait(params_ready_[l], "wait parameters");
        params_ready_[l] = 0;
      }
      return params_ + layout_.layers[l].padded;
    }
    if (pass == Pass::Backward) return backward_params_;  // gathered as layer l's backward began
    return next_gathered();
  }

  float* grads(std::size_t l) override {
    const ShardLayout::Layer& L = layout_.layers[l];
    if (stage_ == 3) backward_params_ = next_gathered();
    const std::size_t k = backward_index_++;
    if (stage_ == 1) return grads_ + L.padded;
    // Staging buffer k % 2, last used by the layer two before this one in the backward pass.
    if (k >= 2) exposed_ += wait(scattered_[l + 2], "wait staging buffer");
    current_staging_ = staging_[k % 2];
    dev_.fill_zero(current_staging_ + L.count, L.shard * world_ - L.count);  // the pad sums to zero
    return current_staging_;
  }

  // --- stage 3's gathers: the forward pass's layers in order, then the backward pass's ---
  void plan_gathers(bool backward) {
    schedule_.clear();
    const std::size_t n = layout_.layers.size();
    for (std::size_t l = 0; l < n; ++l) schedule_.push_back(l);
    if (backward)
      for (std::size_t l = n; l-- > 0;) schedule_.push_back(l);
    tickets_.assign(schedule_.size(), 0);
    cursor_ = 0;
    if (!schedule_.empty()) start_gather(0);
  }
  // Entry i's layer gathered into buffer i % 2, whose previous entry (i - 2) is done with.
  void start_gather(std::size_t i) {
    const ShardLayout::Layer& L = layout_.layers[schedule_[i]];
    float* buf = gathered_[i % 2];
    dev_.copy(buf + rank_ * L.shard, param_shard_ + L.sharded, L.shard * sizeof(float));
    tickets_[i] = coll_->start_allgather(buf, L.shard, fmt::format("layer {} parameters", schedule_[i]));
  }
  // The next entry's parameters, once gathered; the one after it is started meanwhile.
  float* next_gathered() {
    if (cursor_ >= schedule_.size()) throw Error(Exit::Software, "zero3: a layer asked for out of the plan");
    const std::size_t i = cursor_++;
    exposed_ += wait(tickets_[i], "wait parameters");
    if (i + 1 < schedule_.size()) start_gather(i + 1);
    return gathered_[i % 2];
  }

  // --- shards ----------------------------------------------------------------------------
  // This rank's shard of the whole flat array `whole` (null: zeros) into `dst` on the
  // device, through `host` (a shard's floats at least).
  void take_shard(const ShardLayout::Layer& L, const float* whole, float* host, float* dst) {
    for (std::size_t i = 0; i < L.shard; ++i) {
      const std::size_t j = rank_ * L.shard + i;
      host[i] = whole && j < L.count ? whole[L.unpadded + j] : 0.0f;
    }
    dev_.copy_in(dst, host, L.shard * sizeof(float));
  }
  // Collective: every rank's shard `mine` of layer L gathered in `buf` (device memory);
  // into `out` (the flat layout, host memory) when not null.
  void gather_layer(const ShardLayout::Layer& L, const float* mine, float* buf, float* out) {
    dev_.copy(buf + rank_ * L.shard, mine, L.shard * sizeof(float));
    coll_->wait_for(coll_->start_allgather(buf, L.shard, "checkpoint state"));
    if (out) dev_.copy_out(out + L.unpadded, buf, L.count * sizeof(float));
  }
  float* param_block(const ShardLayout::Layer& L) {
    return stage_ < 3 ? params_ + L.padded + rank_ * L.shard : param_shard_ + L.sharded;
  }
  float* grad_block(const ShardLayout::Layer& L) {
    return stage_ == 1 ? grads_ + L.padded + rank_ * L.shard : grad_shard_ + L.sharded;
  }
  // Waits for a queued collective: the time it blocked, a slice of the trace.
  double wait(DeviceComm::Ticket t, const char* what) {
    if (t == 0) return 0;
    const auto slice = tracer_ ? tracer_->slice(what, "wait") : Tracer::Slice();
    return coll_->wait_for(t);
  }
  void wait_params() {
    for (DeviceComm::Ticket& t : params_ready_) {
      coll_->wait_for(t);
      t = 0;
    }
  }

  int stage_;
  Communicator& comm_;  // the gradient norm's sum, on the host
  Device& dev_;
  std::unique_ptr<DeviceComm> coll_;
  Mlp net_;
  ShardLayout layout_;
  std::size_t rank_, world_;
  float *params_ = nullptr, *param_shard_ = nullptr, *grads_ = nullptr, *grad_shard_ = nullptr;
  float *exp_avg_ = nullptr, *exp_avg_sq_ = nullptr;
  float* staging_[2] = {nullptr, nullptr};   // stages 2 and 3: gradients before their reduce-scatter
  float* gathered_[2] = {nullptr, nullptr};  // stage 3: parameters gathered ahead of use
  float* current_staging_ = nullptr;
  const float* backward_params_ = nullptr;
  std::vector<DeviceComm::Ticket> params_ready_, scattered_, tickets_;
  std::vector<std::size_t> schedule_;
  std::size_t cursor_ = 0, backward_index_ = 0;
  CommCounters start_;
  double exposed_ = 0;
  Tracer* tracer_ = nullptr;
};

}  // namespace

RKIT_TRAIN_STRATEGY(zero1, "zero1", "ZeRO stage 1: optimizer state sharded across ranks",
                    [](const StrategySetup& s) { return std::make_unique<Zero>(s, 1); });
RKIT_TRAIN_STRATEGY(zero2, "zero2", "ZeRO stage 2: optimizer state and gradients sharded",
                    [](const StrategySetup& s) { return std::make_unique<Zero>(s, 2); });
RKIT_TRAIN_STRATEGY(zero3, "zero3", "ZeRO stage 3: optimizer state, gradients and parameters sharded (FSDP)",
                    [](const StrategySetup& s) { return std::make_unique<Zero>(s, 3); });

}  // namespace rkit::rtrain
