// File: rtrain/model.hpp
//
// The multilayer perceptron rtrain run trains, on a Device: parameters, gradients and
// AdamW's moments in flat buffers (layer by layer, each weight [out, in] as PyTorch's
// nn.Linear then its bias), the forward and backward passes over one batch, and the
// optimizer step. Hidden layers apply the activation; the last is linear.
//
//   Mlp net(dev, {256, 1024, 1, }, Activation::Gelu, Loss::Mse, 512);
//   net.init(seed);
//   net.upload_batch(x, y, nullptr, rows);
//   double loss_sum = net.forward_backward(rows, [&](std::size_t layer) { reducer.ready(...); });
//   net.step(adamw_step);
//
// Deterministic: the same parameters, batch and device give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "device.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

// Where one layer's tensors lie in the flat buffers (offsets in floats).
struct LayerSlot {
  std::size_t in = 0, out = 0;
  std::size_t weight = 0, bias = 0;  // offsets of W [out, in] and b [out]
};

class Mlp {
 public:
  // `max_rows`: the largest batch forward_backward and evaluate are given.
  Mlp(Device& dev, std::vector<std::size_t> layers, kernels::Activation act, Loss loss, std::size_t max_rows);

  std::size_t parameters() const { return params_count_; }
  const std::vector<LayerSlot>& slots() const { return slots_; }
  float* params() { return params_; }
  float* grads() { return grads_; }
  float* exp_avg() { return exp_avg_; }
  float* exp_avg_sq() { return exp_avg_sq_; }

  // PyTorch nn.Linear's default initialisation: W and b uniform in ±1/sqrt(in), from `seed`.
  void init(std::uint64_t seed);

  // Copies a batch of `rows` rows to the device: features, and targets (MSE) or labels (CE).
  void upload_batch(const float* x, const float* y, const std::int32_t* labels, std::size_t rows);
  // Forward and backward over the uploaded batch; returns the batch's loss summed over
  // elements (MSE) or rows (CE). Gradients are of (loss sum) * grad_scale; `layer_done(l)`
  // is called as soon as layer l's gradients are enqueued (l from the last down to 0).
  double forward_backward(std::size_t rows, float grad_scale, const std::function<void(std::size_t)>& layer_done);
  // Forward only: the loss summed as above, and for CE the number of correct rows.
  std::pair<double, std::size_t> evaluate(std::size_t rows);
  // Squared L2 norm of all gradients.
  double grad_norm_squared() { return dev_.sum_squares(params_count_, grads_); }
  // One AdamW step over every parameter.
  void step(const kernels::AdamwStep& s) { dev_.adamw(params_count_, params_, grads_, exp_avg_, exp_avg_sq_, s); }

  // Names and shapes as checkpoints spell them: "layers.L.weight" [out, in], "layers.L.bias" [out].
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> shape;
    std::size_t offset = 0, count = 0;
  };
  std::vector<Tensor> tensors() const;

 private:
  Device& dev_;
  std::vector<std::size_t> layers_;
  kernels::Activation act_;
  Loss loss_;
  std::size_t max_rows_;
  std::vector<LayerSlot> slots_;
  std::size_t params_count_ = 0;
  float *params_ = nullptr, *grads_ = nullptr, *exp_avg_ = nullptr, *exp_avg_sq_ = nullptr;
  std::vector<float*> z_, a_;            // per layer: pre-activations and outputs (max_rows x out)
  float* input_ = nullptr;               // max_rows x inputs
  float* target_ = nullptr;              // max_rows x outputs (MSE)
  std::int32_t* labels_ = nullptr;       // max_rows (CE)
  float* back_[2] = {nullptr, nullptr};  // max_rows x widest layer: dL/dz of a layer, dL/d(its input)

  void forward(std::size_t rows);
  double loss(std::size_t rows, float grad_scale, float* dpred);
};

}  // namespace rkit::rtrain
