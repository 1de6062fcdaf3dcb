// rtrain run's MLP on a Device (see model.hpp).
#include "model.hpp"

#include <algorithm>
#include <cmath>

#include "rkit/error.hpp"
#include "rkit/rng.hpp"

namespace rkit::rtrain {

Mlp::Mlp(Device& dev, std::vector<std::size_t> layers, kernels::Activation act, Loss loss, std::size_t max_rows,
         bool own_state)
    : dev_(dev),
      layers_(std::move(layers)),
      act_(act),
      loss_(loss),
      max_rows_(max_rows),
      slots_(layer_slots(layers_)),
      params_count_(parameter_count(slots_)) {
  std::size_t widest = 0;
  for (const LayerSlot& s : slots_) widest = std::max({widest, s.in, s.out});
  if (own_state) {
    params_ = dev_.alloc(params_count_);
    grads_ = dev_.alloc(params_count_);
    exp_avg_ = dev_.alloc(params_count_);
    exp_avg_sq_ = dev_.alloc(params_count_);
  }
  for (const LayerSlot& s : slots_) {
    z_.push_back(dev_.alloc(max_rows_ * s.out));
    a_.push_back(&s == &slots_.back() ? z_.back() : dev_.alloc(max_rows_ * s.out));  // the last layer is linear
  }
  input_ = dev_.alloc(max_rows_ * layers_.front());
  if (loss_ == Loss::Mse)
    target_ = dev_.alloc(max_rows_ * layers_.back());
  else
    labels_ = static_cast<std::int32_t*>(dev_.alloc_bytes(max_rows_ * sizeof(std::int32_t)));
  back_[0] = dev_.alloc(max_rows_ * widest);
  back_[1] = dev_.alloc(max_rows_ * widest);
}

std::vector<LayerSlot> layer_slots(const std::vector<std::size_t>& layers) {
  std::vector<LayerSlot> slots;
  std::size_t next = 0;
  for (std::size_t l = 0; l + 1 < layers.size(); ++l) {
    const LayerSlot s{layers[l], layers[l + 1], next, next + layers[l] * layers[l + 1]};
    next = s.bias + s.out;
    slots.push_back(s);
  }
  return slots;
}

std::vector<ModelTensor> model_tensors(const std::vector<LayerSlot>& slots) {
  std::vector<ModelTensor> out;
  for (std::size_t l = 0; l < slots.size(); ++l) {
    const LayerSlot& s = slots[l];
    out.push_back({"layers." + std::to_string(l) + ".weight", {s.out, s.in}, s.weight, s.out * s.in});
    out.push_back({"layers." + std::to_string(l) + ".bias", {s.out}, s.bias, s.out});
  }
  return out;
}

std::vector<float> initial_params(const std::vector<LayerSlot>& slots, std::uint64_t seed) {
  std::vector<float> host(parameter_count(slots));
  for (std::size_t l = 0; l < slots.size(); ++l) {
    const LayerSlot& s = slots[l];
    const double bound = 1.0 / std::sqrt(static_cast<double>(s.in));
    CounterRng rng(seed, 0x1a7e5000 + l);  // one stream per layer: layers do not depend on each other's sizes
    for (std::size_t i = 0; i < s.in * s.out + s.out; ++i)
      host[s.weight + i] = static_cast<float>((2 * rng.uniform(i) - 1) * bound);
  }
  return host;
}

void Mlp::init(std::uint64_t seed) {
  const std::vector<float> host = initial_params(slots_, seed);
  dev_.copy_in(params_, host.data(), host.size() * sizeof(float));
}

void Mlp::upload_batch(const float* x, const float* y, const std::int32_t* labels, std::size_t rows) {
  if (rows > max_rows_) throw Error(Exit::Software, "rtrain: a batch larger than the model's buffers");
  dev_.copy_in(input_, x, rows * layers_.front() * sizeof(float));
  if (loss_ == Loss::Mse)
    dev_.copy_in(target_, y, rows * layers_.back() * sizeof(float));
  else
    dev_.copy_in(labels_, labels, rows * sizeof(std::int32_t));
}

void Mlp::forward(std::size_t rows) {
  const float* in = input_;
  for (std::size_t l = 0; l < slots_.size(); ++l) {
    const LayerSlot& s = slots_[l];
    const auto slice = layer_slice(tracer_, "forward", l);
    // z = in · Wᵀ, then z += b and a = act(z) (the last layer: a is z)
    const float* w = layer_params(l, Pass::Forward);
    dev_.gemm(false, true, static_cast<int>(rows), static_cast<int>(s.out), static_cast<int>(s.in), 1.0f, in,
              static_cast<int>(s.in), w, static_cast<int>(s.in), 0.0f, z_[l], static_cast<int>(s.out));
    const bool last = l + 1 == slots_.size();
    dev_.bias_act_forward(last ? kernels::Activation::Identity : act_, rows, s.out, w + s.in * s.out, z_[l], a_[l]);
    in = a_[l];
  }
}

double Mlp::loss(std::size_t rows, float grad_scale, float* dpred) {
  const std::size_t outputs = layers_.back();
  if (loss_ == Loss::Mse) return dev_.mse_loss(rows, outputs, a_.back(), target_, grad_scale, dpred);
  return dev_.cross_entropy_loss(rows, outputs, a_.back(), labels_, grad_scale, dpred);
}

double Mlp::forward_backward(std::size_t rows, float grad_scale, const std::function<void(std::size_t)>& layer_done) {
  forward(rows);
  int cur = 0;  // back_[cur] holds dL/dz of the layer at hand
  const double sum = loss(rows, grad_scale, back_[cur]);
  for (std::size_t l = slots_.size(); l-- > 0;) {
    const LayerSlot& s = slots_[l];
    const bool last = l + 1 == slots_.size();
    const auto slice = layer_slice(tracer_, "backward", l);
    float* g = layer_grads(l);
    // back_[cur] holds dL/da of layer l (the loss's gradient for the last): make it dL/dz, and db.
    dev_.bias_act_backward(last ? kernels::Activation::Identity : act_, rows, s.out, z_[l], back_[cur], back_[cur],
                           g + s.in * s.out);
    // dW = dzᵀ · (layer input)
    const float* in = l == 0 ? input_ : a_[l - 1];
    dev_.gemm(true, false, static_cast<int>(s.out), static_cast<int>(s.in), static_cast<int>(rows), 1.0f, back_[cur],
              static_cast<int>(s.out), in, static_cast<int>(s.in), 0.0f, g, static_cast<int>(s.in));
    if (layer_done) layer_done(l);
    if (l == 0) break;  // nobody needs dL/d(input)
    // dL/da of layer l-1 = dz · W
    dev_.gemm(false, false, static_cast<int>(rows), static_cast<int>(s.in), static_cast<int>(s.out), 1.0f, back_[cur],
              static_cast<int>(s.out), layer_params(l, Pass::Backward), static_cast<int>(s.in), 0.0f, back_[1 - cur],
              static_cast<int>(s.in));
    cur = 1 - cur;
  }
  return sum;
}

std::pair<double, std::size_t> Mlp::evaluate(std::size_t rows) {
  forward(rows);
  const double sum = loss(rows, 0.0f, back_[0]);
  const std::size_t correct =
      loss_ == Loss::CrossEntropy ? dev_.count_correct(rows, layers_.back(), a_.back(), labels_) : 0;
  return {sum, correct};
}

}  // namespace rkit::rtrain
