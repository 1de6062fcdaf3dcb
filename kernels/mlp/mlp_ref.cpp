// The CPU references of kernels/mlp (the specification; see mlp.hpp): plain loops, in
// double where the header says so, built with -ffp-contract=off. AdamW is float, in the
// order PyTorch's CPU kernels round it, so that the fast versions can match it exactly.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "mlp.hpp"

namespace rkit::kernels {
namespace {

constexpr double kInvSqrt2 = 1.0 / std::numbers::sqrt2;
constexpr double kInvSqrt2Pi = 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;  // 1 / sqrt(2 pi)

// Phi(z), the standard normal CDF, through erfc: accurate in both tails (1 + erf(z/sqrt2)
// would cancel to 0 below z = -8, where GELU's exact value is still a normal float).
double normal_cdf(double z) { return 0.5 * std::erfc(-z * kInvSqrt2); }

double activation(Activation act, double z) {
  switch (act) {
    case Activation::Identity: return z;
    case Activation::Relu: return z < 0 ? 0.0 : z;  // std::max(z, 0): a NaN stays NaN, so divergence shows
    case Activation::Gelu: return z * normal_cdf(z);
  }
  return z;
}

double activation_derivative(Activation act, double z) {
  switch (act) {
    case Activation::Identity: return 1.0;
    case Activation::Relu: return z > 0 ? 1.0 : 0.0;
    case Activation::Gelu:  // Phi(z) + z phi(z)
      return normal_cdf(z) + z * (kInvSqrt2Pi * std::exp(-0.5 * z * z));
  }
  return 1.0;
}

}  // namespace

void bias_act_forward_ref(Activation act, std::size_t m, std::size_t n, const float* bias, float* z, float* y) {
  for (std::size_t i = 0; i < m; ++i) {
    float* z_row = z + i * n;
    float* y_row = y + i * n;
    for (std::size_t j = 0; j < n; ++j) {
      const float v = z_row[j] + bias[j];  // the pre-activation is a float, as stored
      z_row[j] = v;
      y_row[j] = static_cast<float>(activation(act, v));
    }
  }
}

void bias_act_backward_ref(Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                           float* dbias) {
  std::vector<double> sums(n, 0.0);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t at = i * n + j;
      const float d = static_cast<float>(static_cast<double>(dy[at]) * activation_derivative(act, z[at]));
      dz[at] = d;
      sums[j] += d;  // the stored gradient, summed in order of i
    }
  }
  for (std::size_t j = 0; j < n; ++j) dbias[j] = static_cast<float>(sums[j]);
}

double mse_loss_ref(std::size_t m, std::size_t k, const float* pred, const float* target, float scale, float* dpred) {
  const double twice_scale = 2.0 * static_cast<double>(scale);
  double sum = 0;
  for (std::size_t i = 0; i < m * k; ++i) {
    const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
    sum += d * d;
    dpred[i] = static_cast<float>(twice_scale * d);
  }
  return sum;
}

double cross_entropy_loss_ref(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                              float scale, float* dlogits) {
  if (c == 0) return 0;
  double loss = 0;
  for (std::size_t i = 0; i < m; ++i) {
    const float* row = logits + i * c;
    float* out = dlogits + i * c;
    const auto label = static_cast<std::size_t>(labels[i]);
    double max = row[0];
    for (std::size_t j = 1; j < c; ++j) max = std::fmax(max, static_cast<double>(row[j]));
    double sum = 0;
    for (std::size_t j = 0; j < c; ++j) sum += std::exp(row[j] - max);
    const double log_sum = max + std::log(sum);         // log sum exp(row)
    loss += log_sum - static_cast<double>(row[label]);  // read before out (maybe row) is written
    for (std::size_t j = 0; j < c; ++j) {
      const double p = std::exp(row[j] - max) / sum;
      out[j] = static_cast<float>(static_cast<double>(scale) * (p - (j == label ? 1.0 : 0.0)));
    }
  }
  return loss;
}

std::size_t count_correct_ref(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels) {
  if (c == 0) return 0;
  std::size_t correct = 0;
  for (std::size_t i = 0; i < m; ++i) {
    const float* row = logits + i * c;
    std::size_t best = 0;
    for (std::size_t j = 1; j < c; ++j)
      if (row[j] > row[best]) best = j;  // strictly greater: the first of equal maxima wins
    correct += best == static_cast<std::size_t>(labels[i]);
  }
  return correct;
}

double sum_squares_ref(std::size_t n, const float* x) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

AdamwStep AdamwStep::make(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                          std::int64_t step) {
  if (step < 1) throw std::invalid_argument("AdamwStep::make: step counts from 1");
  AdamwStep s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.weight_decay = weight_decay;
  s.grad_scale = grad_scale;
  const double steps = static_cast<double>(step);
  s.step_size = static_cast<float>(static_cast<double>(lr) / (1.0 - std::pow(static_cast<double>(beta1), steps)));
  s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), steps)));
  return s;
}

// Each operation rounded to float on its own, in PyTorch's order (addcmul: (value * g) * g;
// addcdiv: (value * m) / denom). The fast versions repeat it operation for operation.
void adamw_update_ref(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      const AdamwStep& s) {
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float one_minus_beta1 = 1.0f - s.beta1;
  const float one_minus_beta2 = 1.0f - s.beta2;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = s.grad_scale * grads[i];
    const float p = params[i] * decay;
    const float m = s.beta1 * exp_avg[i] + one_minus_beta1 * g;
    const float v = s.beta2 * exp_avg_sq[i] + one_minus_beta2 * g * g;
    const float denom = std::sqrt(v) / s.bias2_sqrt + s.eps;
    params[i] = p - s.step_size * m / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace rkit::kernels
