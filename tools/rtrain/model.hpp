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
//
// A sharded strategy (strategy.hpp) keeps the parameters and gradients itself: it builds
// the Mlp without its own state (`own_state` false) and gives it a LayerStore, which
// hands each layer's tensors to the passes when they need them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "device.hpp"
#include "trace.hpp"
#include "train_config.hpp"

namespace rkit::rtrain {

// Where one layer's tensors lie in the flat buffers (offsets in floats).
struct LayerSlot {
  std::size_t in = 0, out = 0;
  std::size_t weight = 0, bias = 0;  // offsets of W [out, in] and b [out]
};

// Where layer l's tensors are when a pass needs them. Layout of a layer's block: W [out,
// in] then b [out], in * out + out floats.
enum class Pass { Forward, Backward };
class LayerStore {
 public:
  virtual ~LayerStore() = default;
  // Layer l's parameters, ready for `pass` (forward: every layer from the first, for the
  // layer's product; backward: from the last down to layer 1, for dL/d(input)).
  virtual const float* params(std::size_t l, Pass pass) = 0;
  // Where layer l's gradients go; asked as layer l's backward begins (from the last down).
  virtual float* grads(std::size_t l) = 0;
};

// The slots of a model of these sizes (inputs, hidden..., outputs): layer by layer, W
// then b, in one flat array.
std::vector<LayerSlot> layer_slots(const std::vector<std::size_t>& layers);
// Floats in that flat array.
inline std::size_t parameter_count(const std::vector<LayerSlot>& slots) {
  return slots.empty() ? 0 : slots.back().bias + slots.back().out;
}

// A tensor of the flat array, named and shaped as checkpoints spell them:
// "layers.L.weight" [out, in], "layers.L.bias" [out].
struct ModelTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::size_t offset = 0, count = 0;
};
std::vector<ModelTensor> model_tensors(const std::vector<LayerSlot>& slots);

// PyTorch nn.Linear's default initialisation of every layer's W and b, uniform in
// ±1/sqrt(in), from `seed`: the flat layout of Mlp's own buffers (slots).
std::vector<float> initial_params(const std::vector<LayerSlot>& slots, std::uint64_t seed);

class Mlp {
 public:
  // `max_rows`: the largest batch forward_backward and evaluate are given. `own_state`:
  // the flat buffers of parameters, gradients and moments below; without them, a
  // LayerStore must be set before a pass.
  Mlp(Device& dev, std::vector<std::size_t> layers, kernels::Activation act, Loss loss, std::size_t max_rows,
      bool own_state = true);
  void set_store(LayerStore* store) { store_ = store; }
  // Each layer's forward and backward pass a slice of `tracer` (null: none).
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  Device& device() { return dev_; }

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
  // (Own state only, from here on.) Squared L2 norm of all gradients.
  double grad_norm_squared() { return dev_.sum_squares(params_count_, grads_); }
  // One AdamW step over every parameter.
  void step(const kernels::AdamwStep& s) { dev_.adamw(params_count_, params_, grads_, exp_avg_, exp_avg_sq_, s); }

  using Tensor = ModelTensor;
  std::vector<Tensor> tensors() const { return model_tensors(slots_); }

 private:
  Device& dev_;
  std::vector<std::size_t> layers_;
  kernels::Activation act_;
  Loss loss_;
  std::size_t max_rows_;
  LayerStore* store_ = nullptr;
  Tracer* tracer_ = nullptr;
  std::vector<LayerSlot> slots_;
  std::size_t params_count_ = 0;
  float *params_ = nullptr, *grads_ = nullptr, *exp_avg_ = nullptr, *exp_avg_sq_ = nullptr;
  std::vector<float*> z_, a_;            // per layer: pre-activations and outputs (max_rows x out)
  float* input_ = nullptr;               // max_rows x inputs
  float* target_ = nullptr;              // max_rows x outputs (MSE)
  std::int32_t* labels_ = nullptr;       // max_rows (CE)
  float* back_[2] = {nullptr, nullptr};  // max_rows x widest layer: dL/dz of a layer, dL/d(its input)

  void forward(std::size_t rows);
  const float* layer_params(std::size_t l, Pass pass) {
    return store_ ? store_->params(l, pass) : params_ + slots_[l].weight;
  }
  float* layer_grads(std::size_t l) { return store_ ? store_->grads(l) : grads_ + slots_[l].weight; }
  double loss(std::size_t rows, float grad_scale, float* dpred);
};

}  // namespace rkit::rtrain
