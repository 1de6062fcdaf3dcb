// The fast CPU versions of kernels/mlp (the *_cpu functions; see mlp.hpp): float, one
// thread, loops GCC vectorises, each hot loop cloned for AVX-512, AVX2 and the x86-64
// baseline (target_clones: the build has no -march; the loader picks the clone).
//
// Results do not depend on the clone chosen: the file is built with -ffp-contract=off
// (no FMA in one clone and not another) and every sum has a fixed shape (kLanes
// accumulators in double, combined in a fixed tree, or column sums in order of rows),
// which the compiler may not reorder without -ffast-math. So, for one build, the same
// inputs give the same bits on any x86-64 machine (checked: baseline, AVX2, AVX2+FMA and
// AVX-512 builds of this file agree bit for bit), which rtrain's bitwise resume relies on.
//
// GELU and its derivative use rational approximations below (erf_fast, gelu_derivative)
// and the softmax exp_fast, instead of std::erf / std::exp per element: those are library
// calls that stop vectorisation and cost ~10x more.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mlp.hpp"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define RKIT_MLP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RKIT_MLP_CLONES
#endif
#define RKIT_MLP_INLINE [[gnu::always_inline]] inline

namespace rkit::kernels {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;

// erf(x) as x P(x^2) / Q(x^2) on |x| < 3.92, exactly +-1 beyond (as erf is in float:
// GELU's 0.5 z (1 + erf) multiplies any error there by |z|); the coefficients are a
// rational least-squares fit (mpmath, 30 digits, Lawson-weighted towards minimax) whose
// error is under 2.4e-8 before the float rounding of the evaluation, which adds up to
// ~6 ulps of the result (3.6e-7 near +-1). A NaN stays NaN.
RKIT_MLP_INLINE float erf_fast(float x) {
  constexpr float kClamp = 3.92f;
  const float c = x < -kClamp ? -kClamp : (x > kClamp ? kClamp : x);  // keeps the rational finite
  const float u = c * c;
  float p = 2.3486855147864979e-4f;
  p = p * u + 3.7358156728575443e-3f;
  p = p * u + 5.1975761306783599e-2f;
  p = p * u + 1.9322620021098664e-1f;
  p = p * u + 1.1283789525239107f;
  float q = -1.109876417360669e-7f;
  q = q * u + 2.3297670210694623e-5f;
  q = q * u + 1.0930831708211101e-3f;
  q = q * u + 1.4734392966903962e-2f;
  q = q * u + 1.1426274722245575e-1f;
  q = q * u + 5.0457309848150237e-1f;
  q = q * u + 1.0f;
  const float r = c * p / q;
  return x <= -kClamp ? -1.0f : (x >= kClamp ? 1.0f : r);
}

// exp(x) for x <= 0 (all this file needs): 2^k exp(r) with k = round(x / ln 2) (by the
// 1.5 * 2^23 trick: no float-to-int conversion, so a NaN is no undefined behaviour),
// r = x - k ln 2 in two parts (Cody-Waite: k * kLn2Hi is exact), exp(r) =
// 1 + r + r^2 G(r) with G a degree-4 Chebyshev fit (error 8e-9 on |r| <= ln2 / 2).
// Relative error about 1 ulp; 0 below -87.3, where exp is under FLT_MIN anyway.
RKIT_MLP_INLINE float exp_fast(float x) {
  constexpr float kLow = -87.3f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440054690583e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < kLow ? kLow : (x > 0.0f ? 0.0f : x);
  const float shifted = xc * kLog2e + kRound;
  const float k = shifted - kRound;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  float g = 1.39261761199e-3f;
  g = g * r + 8.36317307451e-3f;
  g = g * r + 4.16665546621e-2f;
  g = g * r + 1.66665770256e-1f;
  g = g * r + 0.5f;
  const float e = (g * (r * r) + r) + 1.0f;
  // k sits in the low mantissa bits of `shifted`; 2^k is (k + 127) << 23, k in [-126, 0].
  const std::uint32_t k_bits = std::bit_cast<std::uint32_t>(shifted) - std::bit_cast<std::uint32_t>(kRound);
  const float scale = std::bit_cast<float>((k_bits + 127u) << 23);
  const float result = e * scale;
  return x < kLow ? 0.0f : result;
}

RKIT_MLP_INLINE float gelu(float z) { return 0.5f * z * (1.0f + erf_fast(z * kInvSqrt2)); }

// GELU'(z) = Phi(z) + z phi(z) = 0.5 + z P(z^2) / Q(z^2): the part after 0.5 is odd, so
// it is fitted directly, as erf_fast is (|error| under 6e-9 on |z| < 6.2 before float
// rounding, 2.2e-7 after; exactly 0 or 1 beyond, 1.1e-8 off). erf_fast plus an exp for
// phi took 1.5x as long.
RKIT_MLP_INLINE float gelu_derivative(float z) {
  constexpr float kClamp = 6.2f;
  const float c = z < -kClamp ? -kClamp : (z > kClamp ? kClamp : z);
  const float u = c * c;
  float p = 1.8732991222482066e-8f;
  p = p * u + 1.1252194753343867e-6f;
  p = p * u + 3.4162038961513937e-5f;
  p = p * u + 2.7753971163485331e-4f;
  p = p * u + 1.3698952078182096e-2f;
  p = p * u + -1.8239821030383144e-2f;
  p = p * u + 7.9788451374010866e-1f;
  float q = 1.3762628246276046e-9f;
  q = q * u + 3.9637229282244372e-7f;
  q = q * u + 1.1298785154501634e-5f;
  q = q * u + 2.6432648017519046e-4f;
  q = q * u + 4.1855205080400741e-3f;
  q = q * u + 4.5661592871752386e-2f;
  q = q * u + 3.1047252526897552e-1f;
  q = q * u + 1.0f;
  const float r = 0.5f + c * p / q;
  return z <= -kClamp ? 0.0f : (z >= kClamp ? 1.0f : r);
}

template <Activation kAct>
RKIT_MLP_INLINE float apply(float z) {
  if constexpr (kAct == Activation::Gelu) return gelu(z);
  if constexpr (kAct == Activation::Relu) return z < 0.0f ? 0.0f : z;  // as the reference: NaN stays NaN
  return z;
}

// dy * act'(z).
template <Activation kAct>
RKIT_MLP_INLINE float back(float z, float dy) {
  if constexpr (kAct == Activation::Gelu) return dy * gelu_derivative(z);
  if constexpr (kAct == Activation::Relu) return dy * (z > 0.0f ? 1.0f : 0.0f);  // as the reference: NaN dy spreads
  return dy;
}

template <Activation kAct>
RKIT_MLP_INLINE void forward(std::size_t m, std::size_t n, const float* bias, float* z, float* y) {
  for (std::size_t i = 0; i < m; ++i) {
    float* z_row = z + i * n;
    float* y_row = y + i * n;
    for (std::size_t j = 0; j < n; ++j) {
      const float v = z_row[j] + bias[j];
      z_row[j] = v;
      y_row[j] = apply<kAct>(v);
    }
  }
}

// Columns in blocks whose double sums stay in L1; within a block, rows in order, so each
// dbias[j] is summed in order of i whatever the block width and vector width.
constexpr std::size_t kColumnBlock = 512;

template <Activation kAct>
RKIT_MLP_INLINE void backward(std::size_t m, std::size_t n, const float* z, const float* dy, float* dz, float* dbias) {
  double sums[kColumnBlock];
  for (std::size_t j0 = 0; j0 < n; j0 += kColumnBlock) {
    const std::size_t width = std::min(kColumnBlock, n - j0);
    for (std::size_t j = 0; j < width; ++j) sums[j] = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const std::size_t row = i * n + j0;
      for (std::size_t j = 0; j < width; ++j) {
        const float d = back<kAct>(z[row + j], dy[row + j]);
        dz[row + j] = d;
        sums[j] += static_cast<double>(d);
      }
    }
    for (std::size_t j = 0; j < width; ++j) dbias[j0 + j] = static_cast<float>(sums[j]);
  }
}

RKIT_MLP_CLONES void forward_identity(std::size_t m, std::size_t n, const float* bias, float* z, float* y) {
  forward<Activation::Identity>(m, n, bias, z, y);
}
RKIT_MLP_CLONES void forward_relu(std::size_t m, std::size_t n, const float* bias, float* z, float* y) {
  forward<Activation::Relu>(m, n, bias, z, y);
}
RKIT_MLP_CLONES void forward_gelu(std::size_t m, std::size_t n, const float* bias, float* z, float* y) {
  forward<Activation::Gelu>(m, n, bias, z, y);
}
RKIT_MLP_CLONES void backward_identity(std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                                       float* dbias) {
  backward<Activation::Identity>(m, n, z, dy, dz, dbias);
}
RKIT_MLP_CLONES void backward_relu(std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                                   float* dbias) {
  backward<Activation::Relu>(m, n, z, dy, dz, dbias);
}
RKIT_MLP_CLONES void backward_gelu(std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                                   float* dbias) {
  backward<Activation::Gelu>(m, n, z, dy, dz, dbias);
}

// Sums are kept in kLanes double accumulators, element i in lane i % kLanes, and the
// lanes combined pairwise: a fixed order the vectoriser keeps (lanes map onto vector
// registers) that does not depend on the vector width.
constexpr std::size_t kLanes = 32;

RKIT_MLP_INLINE double combine(double (&lanes)[kLanes]) {
  for (std::size_t width = kLanes / 2; width > 0; width /= 2)
    for (std::size_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}

RKIT_MLP_CLONES double sum_squares_lanes(std::size_t n, const float* x) {
  double lanes[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) {
      const double v = x[i + l];
      lanes[l] += v * v;
    }
  for (std::size_t l = 0; i < n; ++i, ++l) {
    const double v = x[i];
    lanes[l] += v * v;
  }
  return combine(lanes);
}

RKIT_MLP_CLONES double mse_lanes(std::size_t count, const float* pred, const float* target, double twice_scale,
                                 float* dpred) {
  double lanes[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= count; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(pred[i + l]) - static_cast<double>(target[i + l]);
      lanes[l] += d * d;
      dpred[i + l] = static_cast<float>(twice_scale * d);
    }
  for (std::size_t l = 0; i < count; ++i, ++l) {
    const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
    lanes[l] += d * d;
    dpred[i] = static_cast<float>(twice_scale * d);
  }
  return combine(lanes);
}

// One row of softmax cross-entropy: exp(row - max) goes into out first (out may be row:
// the label's logit is read before), then becomes the gradient. Returns the row's loss.
RKIT_MLP_CLONES double cross_entropy_row(std::size_t c, const float* row, std::size_t label, float scale, float* out) {
  float max = row[0];
  for (std::size_t j = 1; j < c; ++j) max = row[j] > max ? row[j] : max;
  const float at_label = row[label];
  double sum = 0;
  for (std::size_t j = 0; j < c; ++j) {
    const float e = exp_fast(row[j] - max);
    out[j] = e;
    sum += static_cast<double>(e);
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (std::size_t j = 0; j < c; ++j) out[j] = scale * (out[j] * inv_sum);
  out[label] -= scale;
  return (static_cast<double>(max) - static_cast<double>(at_label)) + std::log(sum);
}

RKIT_MLP_CLONES void adamw(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                           AdamwStep s) {
  // Operation for operation as adamw_update_ref: the results are the same bits.
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

}  // namespace

void bias_act_forward_cpu(Activation act, std::size_t m, std::size_t n, const float* bias, float* z, float* y) {
  switch (act) {
    case Activation::Identity: return forward_identity(m, n, bias, z, y);
    case Activation::Relu: return forward_relu(m, n, bias, z, y);
    case Activation::Gelu: return forward_gelu(m, n, bias, z, y);
  }
}

void bias_act_backward_cpu(Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                           float* dbias) {
  switch (act) {
    case Activation::Identity: return backward_identity(m, n, z, dy, dz, dbias);
    case Activation::Relu: return backward_relu(m, n, z, dy, dz, dbias);
    case Activation::Gelu: return backward_gelu(m, n, z, dy, dz, dbias);
  }
}

double mse_loss_cpu(std::size_t m, std::size_t k, const float* pred, const float* target, float scale, float* dpred) {
  return mse_lanes(m * k, pred, target, 2.0 * static_cast<double>(scale), dpred);
}

double cross_entropy_loss_cpu(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                              float scale, float* dlogits) {
  if (c == 0) return 0;
  double loss = 0;
  for (std::size_t i = 0; i < m; ++i)
    loss += cross_entropy_row(c, logits + i * c, static_cast<std::size_t>(labels[i]), scale, dlogits + i * c);
  return loss;
}

double sum_squares_cpu(std::size_t n, const float* x) { return sum_squares_lanes(n, x); }

void adamw_update_cpu(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      const AdamwStep& s) {
  adamw(n, params, grads, exp_avg, exp_avg_sq, s);
}

}  // namespace rkit::kernels
