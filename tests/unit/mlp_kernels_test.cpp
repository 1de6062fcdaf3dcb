// kernels/mlp on the CPU: the references (mlp_ref.cpp, the specification) against values
// worked out by hand and against their own forward passes (finite differences), and the
// fast versions (mlp_cpu.cpp) against the references within mlp.hpp's tolerances:
//   activations and their derivatives: |error| <= 4e-6 (1 + |exact|); for dz = dy * act'(z)
//     that is 4e-6 (|dy| + |dz|)
//   bias gradient, losses, squared norm: relative 1e-5, relative to the sum of the
//     terms' magnitudes where the terms have both signs (the bias gradient)
//   AdamW: within 4 float ulps (the fast version repeats the reference's operations, so
//     it is in fact equal)
// and run twice, bit for bit the same.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "kernel_test_data.hpp"
#include "mlp.hpp"

namespace {

using namespace rkit::kernels;
using namespace rkit::kernel_tests;

constexpr Activation kActivations[] = {Activation::Identity, Activation::Relu, Activation::Gelu};

const char* name(Activation act) {
  switch (act) {
    case Activation::Identity: return "identity";
    case Activation::Relu: return "relu";
    case Activation::Gelu: return "gelu";
  }
  return "?";
}

// The exact GELU and its derivative, in double.
double gelu_exact(double z) { return z * 0.5 * std::erfc(-z / std::numbers::sqrt2); }
double gelu_derivative_exact(double z) {
  return 0.5 * std::erfc(-z / std::numbers::sqrt2) + z * std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi);
}

struct Shape {
  std::size_t m, n;
};
constexpr Shape kShapes[] = {{0, 0},  {0, 5},   {5, 0},    {1, 1},    {1, 17},   {17, 1},  {3, 31},
                             {7, 33}, {64, 16}, {31, 100}, {33, 515}, {2, 1025}, {129, 7}, {512, 64}};

// --- the references against hand-computed values ------------------------------------

TEST(MlpRef, GeluForwardKnownValues) {
  const std::vector<float> bias = {0.0f};
  struct Case {
    float z;
    double gelu;
  };
  const Case cases[] = {{1.0f, 0.8413447460685429},
                        {-1.0f, -0.15865525393145705},
                        {2.0f, 1.9544997361036416},
                        {0.5f, 0.34573123063700655},
                        {0.0f, 0.0},
                        {-10.0f, -7.6198530241605261e-23},
                        {30.0f, 30.0},
                        {-30.0f, 0.0}};
  for (const Case& c : cases) {
    float z = c.z, y = -1;
    bias_act_forward_ref(Activation::Gelu, 1, 1, bias.data(), &z, &y);
    EXPECT_LE(ulps(y, static_cast<float>(c.gelu)), 1) << "GELU(" << c.z << ") = " << y << ", want " << c.gelu;
  }
}

TEST(MlpRef, ForwardAddsTheBiasAndKeepsThePreActivation) {
  // 2 x 3, bias added per column; z keeps z + bias for every activation.
  const std::vector<float> bias = {1.0f, -2.0f, 0.5f};
  const std::vector<float> z0 = {0.0f, 1.0f, -3.0f, -1.0f, 2.0f, 0.25f};
  const std::vector<float> pre = {1.0f, -1.0f, -2.5f, 0.0f, 0.0f, 0.75f};
  for (Activation act : kActivations) {
    SCOPED_TRACE(name(act));
    std::vector<float> z = z0, y(6, -99);
    bias_act_forward_ref(act, 2, 3, bias.data(), z.data(), y.data());
    EXPECT_EQ(z, pre);
    for (std::size_t i = 0; i < 6; ++i) {
      const double want = act == Activation::Identity ? pre[i]
                          : act == Activation::Relu   ? std::max(pre[i], 0.0f)
                                                      : gelu_exact(pre[i]);
      EXPECT_LE(ulps(y[i], static_cast<float>(want)), 1) << i;
    }
  }
  // Identity in place (y == z).
  std::vector<float> z = z0;
  bias_act_forward_ref(Activation::Identity, 2, 3, bias.data(), z.data(), z.data());
  EXPECT_EQ(z, pre);
}

TEST(MlpRef, ReluIsZeroForNegativeAndZeroAndItsDerivativeToo) {
  const std::vector<float> bias = {0, 0, 0, 0, 0};
  std::vector<float> z = {-2.0f, -0.0f, 0.0f, 1e-30f, 3.0f}, y(5);
  bias_act_forward_ref(Activation::Relu, 1, 5, bias.data(), z.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 1e-30f, 3.0f}));
  const std::vector<float> dy = {5, 5, 5, 5, 5};
  std::vector<float> dz(5), dbias(5);
  bias_act_backward_ref(Activation::Relu, 1, 5, z.data(), dy.data(), dz.data(), dbias.data());
  EXPECT_EQ(dz, (std::vector<float>{0, 0, 0, 5, 5}));  // derivative 0 at z <= 0
  // A NaN pre-activation stays NaN (divergence shows in the loss).
  float nan_z = std::numeric_limits<float>::quiet_NaN(), out = 0;
  bias_act_forward_ref(Activation::Relu, 1, 1, bias.data(), &nan_z, &out);
  EXPECT_TRUE(std::isnan(out));
}

TEST(MlpRef, GeluDerivativeIsPhiPlusZPhi) {
  struct Case {
    float z;
    double derivative;
  };
  // Phi(z) + z phi(z): Phi(1) = 0.8413447460685429, phi(1) = 0.24197072451914337.
  const Case cases[] = {{1.0f, 1.0833154705876863},
                        {-1.0f, -0.083315470587686298},
                        {2.0f, 1.0852318010781969},
                        {0.0f, 0.5},
                        {0.5f, 0.86749512465616284},
                        {-10.0f, -7.6184000964648141e-22},
                        {30.0f, 1.0},
                        {-30.0f, 0.0}};
  for (const Case& c : cases) {
    const float dy = 1.0f;
    float dz = -1, dbias = -1;
    bias_act_backward_ref(Activation::Gelu, 1, 1, &c.z, &dy, &dz, &dbias);
    EXPECT_LE(ulps(dz, static_cast<float>(c.derivative)), 1) << "GELU'(" << c.z << ") = " << dz;
    EXPECT_EQ(dbias, dz);
    EXPECT_NEAR(gelu_derivative_exact(c.z), c.derivative, 1e-15 * (1 + std::fabs(c.derivative)));
  }
}

TEST(MlpRef, BackwardSumsTheBiasGradientOverRowsAndMayWorkInPlace) {
  const std::vector<float> z = {1.0f, -1.0f, 2.0f, 3.0f, -4.0f, 0.5f};  // 3 x 2
  const std::vector<float> dy0 = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  std::vector<float> dz(6), dbias(2, -1);
  bias_act_backward_ref(Activation::Identity, 3, 2, z.data(), dy0.data(), dz.data(), dbias.data());
  EXPECT_EQ(dz, dy0);
  EXPECT_EQ(dbias, (std::vector<float>{9.0f, 12.0f}));
  bias_act_backward_ref(Activation::Relu, 3, 2, z.data(), dy0.data(), dz.data(), dbias.data());
  EXPECT_EQ(dz, (std::vector<float>{1, 0, 3, 4, 0, 6}));
  EXPECT_EQ(dbias, (std::vector<float>{4.0f, 10.0f}));
  std::vector<float> dy = dy0;  // dz == dy
  bias_act_backward_ref(Activation::Gelu, 3, 2, z.data(), dy.data(), dy.data(), dbias.data());
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_LE(ulps(dy[i], static_cast<float>(dy0[i] * gelu_derivative_exact(z[i]))), 1) << i;
  EXPECT_EQ(dbias[0], static_cast<float>(static_cast<double>(dy[0]) + dy[2] + dy[4]));
  // No rows: the sums are 0, overwritten.
  dbias = {7, 7};
  bias_act_backward_ref(Activation::Gelu, 0, 2, nullptr, nullptr, nullptr, dbias.data());
  EXPECT_EQ(dbias, (std::vector<float>{0, 0}));
}

TEST(MlpRef, MseKnownValues) {
  std::vector<float> pred = {1, 2, 3, 4};
  const std::vector<float> target = {0, 2, 5, 1};  // differences 1, 0, -2, 3
  std::vector<float> dpred(4);
  EXPECT_EQ(mse_loss_ref(2, 2, pred.data(), target.data(), 0.25f, dpred.data()), 14.0);
  EXPECT_EQ(dpred, (std::vector<float>{0.5f, 0.0f, -1.0f, 1.5f}));                      // 2 * 0.25 * difference
  EXPECT_EQ(mse_loss_ref(2, 2, pred.data(), target.data(), 0.25f, pred.data()), 14.0);  // in place
  EXPECT_EQ(pred, dpred);
  EXPECT_EQ(mse_loss_ref(0, 4, nullptr, nullptr, 1.0f, nullptr), 0.0);
}

TEST(MlpRef, CrossEntropyKnownValues) {
  // Row 0: equal logits, loss log 3. Row 1: logits 1, 2, 3 with label 2, loss
  // log(1 + e^-1 + e^-2); softmax 0.0900306, 0.2447285, 0.6652410.
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 1.0f, 2.0f, 3.0f};
  const std::vector<std::int32_t> labels = {0, 2};
  const float scale = 0.5f;
  std::vector<float> d(6);
  const double loss = cross_entropy_loss_ref(2, 3, logits.data(), labels.data(), scale, d.data());
  EXPECT_NEAR(loss, std::log(3.0) + 0.4076059644443803, 1e-15);
  const double want[] = {(1 / 3.0 - 1) * 0.5,
                         1 / 6.0,
                         1 / 6.0,
                         0.090030573170380458 * 0.5,
                         0.24472847105479765 * 0.5,
                         (0.66524095577482189 - 1) * 0.5};
  for (std::size_t i = 0; i < 6; ++i) EXPECT_LE(ulps(d[i], static_cast<float>(want[i])), 1) << i;

  const std::vector<float> two = {0.0f, 0.0f};
  const std::int32_t label1 = 1;
  EXPECT_NEAR(cross_entropy_loss_ref(1, 2, two.data(), &label1, 1.0f, d.data()), std::numbers::ln2, 1e-15);
}

TEST(MlpRef, CrossEntropyBigLogitsStayFinite) {
  // +-80: exp(160) overflows float, but not the max-shifted sums.
  std::vector<float> logits = {80.0f, -80.0f, 0.0f, -80.0f, 80.0f, 80.0f};
  const std::vector<std::int32_t> labels = {1, 2};
  std::vector<float> d(6);
  const double loss = cross_entropy_loss_ref(2, 3, logits.data(), labels.data(), 1.0f, d.data());
  EXPECT_TRUE(std::isfinite(loss));
  // Row 0: 160 + log(1 + e^-160 + e^-80); row 1: 80 + log 2 - 80.
  EXPECT_NEAR(loss, 160.0 + std::numbers::ln2, 1e-12);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], -1.0f);
  EXPECT_EQ(d[4], 0.5f);
  EXPECT_EQ(d[5], -0.5f);
  // In place.
  EXPECT_EQ(cross_entropy_loss_ref(2, 3, logits.data(), labels.data(), 1.0f, logits.data()), loss);
  EXPECT_EQ(logits, d);
}

TEST(MlpRef, CountCorrectTakesTheFirstOfEqualMaxima) {
  const std::vector<float> logits = {1, 3, 3, 5, 0, 0, 2, 2, 2, -1, -2, -3};
  EXPECT_EQ(count_correct_ref(4, 3, logits.data(), std::vector<std::int32_t>{1, 0, 0, 0}.data()), 4u);
  EXPECT_EQ(count_correct_ref(4, 3, logits.data(), std::vector<std::int32_t>{2, 1, 1, 2}.data()), 0u);
  EXPECT_EQ(count_correct_ref(0, 3, logits.data(), nullptr), 0u);
}

TEST(MlpRef, SumSquares) {
  const std::vector<float> x = {3.0f, -4.0f, 0.5f};
  EXPECT_EQ(sum_squares_ref(3, x.data()), 25.25);
  EXPECT_EQ(sum_squares_ref(0, nullptr), 0.0);
  const float big = 3e30f;  // its square overflows float, not double
  EXPECT_EQ(sum_squares_ref(1, &big), static_cast<double>(big) * big);
}

TEST(MlpRef, AdamwStepMakeComputesTheBiasCorrections) {
  const AdamwStep s = AdamwStep::make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 3);
  EXPECT_EQ(s.lr, 1e-3f);
  EXPECT_EQ(s.grad_scale, 0.5f);
  EXPECT_EQ(s.weight_decay, 0.01f);
  const double b1 = 0.9f, b2 = 0.999f;
  EXPECT_EQ(s.step_size, static_cast<float>(static_cast<double>(1e-3f) / (1 - b1 * b1 * b1)));
  EXPECT_EQ(s.bias2_sqrt, static_cast<float>(std::sqrt(1 - b2 * b2 * b2)));
  EXPECT_THROW(AdamwStep::make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 0), std::invalid_argument);
}

// The betas as the float arguments hold them (0.999f is 0.99900001287...).
constexpr double kBeta1 = 0.9f, kBeta2 = 0.999f;

TEST(MlpRef, AdamwHandComputedSteps) {
  // A constant gradient g: m_t = (1 - b1^t) g and v_t = (1 - b2^t) g^2, so the bias-corrected
  // step is lr * g / |g| = lr each time (eps aside): 1 -> 0.9 -> 0.8 -> 0.7 with lr 0.1.
  float p = 1.0f, m = 0.0f, v = 0.0f;
  const float g = 0.5f;
  for (int step = 1; step <= 3; ++step) {
    adamw_update_ref(1, &p, &g, &m, &v, AdamwStep::make(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, step));
    EXPECT_NEAR(p, 1.0 - 0.1 * step, 2e-6) << "step " << step;
    EXPECT_NEAR(m, (1 - std::pow(kBeta1, step)) * 0.5, 1e-7);
    EXPECT_NEAR(v, (1 - std::pow(kBeta2, step)) * 0.25, 1e-10);
  }
  // Weight decay shrinks the parameter first: 1 * (1 - 0.1 * 0.1) - 0.1 = 0.89.
  p = 1.0f, m = 0.0f, v = 0.0f;
  adamw_update_ref(1, &p, &g, &m, &v, AdamwStep::make(0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1));
  EXPECT_NEAR(p, 0.89, 2e-6);
  // grad_scale multiplies the gradient before anything else: with 2 the moments double.
  p = 1.0f, m = 0.0f, v = 0.0f;
  adamw_update_ref(1, &p, &g, &m, &v, AdamwStep::make(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 2.0f, 1));
  EXPECT_NEAR(m, (1 - kBeta1) * 1.0, 1e-8);
  EXPECT_NEAR(v, (1 - kBeta2) * 1.0, 1e-10);
  EXPECT_NEAR(p, 0.9, 2e-6);
  // A zero gradient on fresh moments moves only by weight decay (m / (0 + eps) = 0).
  p = 2.0f, m = 0.0f, v = 0.0f;
  const float zero = 0.0f;
  adamw_update_ref(1, &p, &zero, &m, &v, AdamwStep::make(0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1.0f, 1));
  EXPECT_FLOAT_EQ(p, 2.0f * (1 - 0.05f));
}

TEST(MlpRef, AdamwMatchesTheFormulaInDouble) {
  // Random state, one step: the float reference against the header's formula in double.
  const std::size_t n = 1000;
  std::vector<float> p = random_floats(n, 2, 1), g = random_floats(n, 1, 2), m = random_floats(n, 0.1, 3);
  std::vector<float> v = random_floats(n, 0.01, 4);
  for (auto& x : v) x = std::fabs(x);
  const AdamwStep s = AdamwStep::make(3e-3f, 0.9f, 0.99f, 1e-6f, 0.05f, 0.7f, 5);
  std::vector<float> p1 = p, m1 = m, v1 = v;
  adamw_update_ref(n, p1.data(), g.data(), m1.data(), v1.data(), s);
  const double lr = 3e-3f, b1 = 0.9f, b2 = 0.99f, eps = 1e-6f, wd = 0.05f, grad_scale = 0.7f;
  const double step_size = lr / (1 - std::pow(b1, 5)), bias2_sqrt = std::sqrt(1 - std::pow(b2, 5));
  for (std::size_t i = 0; i < n; ++i) {
    const double gi = grad_scale * static_cast<double>(g[i]);
    const double mi = b1 * static_cast<double>(m[i]) + (1 - b1) * gi;
    const double vi = b2 * static_cast<double>(v[i]) + (1 - b2) * gi * gi;
    const double pi = p[i] * (1 - lr * wd) - step_size * mi / (std::sqrt(vi) / bias2_sqrt + eps);
    // Float rounding, relative to the terms (they may cancel).
    const double m_terms = std::fabs(b1 * m[i]) + std::fabs((1 - b1) * gi);
    ASSERT_NEAR(m1[i], mi, 1e-6 * m_terms) << i;
    ASSERT_NEAR(v1[i], vi, 1e-6 * vi) << i;
    ASSERT_NEAR(p1[i], pi, 1e-6 * (std::fabs(p[i]) + step_size * std::fabs(mi) / (std::sqrt(vi) / bias2_sqrt + eps)))
        << i;
  }
}

// --- finite differences: each gradient is the derivative of its forward ----------------

// y(z + h) - y(z - h) over 2h, by moving the bias: d y / d bias = act'(z). z on a 1/64
// grid and h = 1/128, so z +- h is exact in float; |z| >= 1/64 keeps ReLU off its kink.
// Tolerance: the central difference's h^2 f''' / 6 and the float rounding of y over 2h.
TEST(MlpGradient, BiasActBackwardIsTheDerivativeOfTheForward) {
  const std::size_t m = 5, n = 96;
  const float h = 1.0f / 128;
  std::vector<float> z(m * n), dy = random_floats(m * n, 1.0, 11);
  std::uint64_t seed = 12;
  for (auto& v : z) {
    v = std::round(static_cast<float>(random_value(seed)) * 6 * 64) / 64;
    if (v == 0) v = 1.0f / 64;
  }
  using Forward = void (*)(Activation, std::size_t, std::size_t, const float*, float*, float*);
  using Backward = void (*)(Activation, std::size_t, std::size_t, const float*, const float*, float*, float*);
  const struct {
    const char* what;
    Forward forward;
    Backward backward;
  } versions[] = {{"ref", bias_act_forward_ref, bias_act_backward_ref},
                  {"cpu", bias_act_forward_cpu, bias_act_backward_cpu}};
  for (const auto& version : versions) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(testing::Message() << version.what << " " << name(act));
      const std::vector<float> plus_h(n, h), minus_h(n, -h);
      std::vector<float> z_plus = z, z_minus = z, y_plus(m * n), y_minus(m * n), dz(m * n), dbias(n);
      version.forward(act, m, n, plus_h.data(), z_plus.data(), y_plus.data());
      version.forward(act, m, n, minus_h.data(), z_minus.data(), y_minus.data());
      version.backward(act, m, n, z.data(), dy.data(), dz.data(), dbias.data());
      for (std::size_t j = 0; j < n; ++j) {
        double fd_bias = 0, tolerance_bias = 0;
        for (std::size_t i = 0; i < m; ++i) {
          const std::size_t at = i * n + j;
          const double fd = dy[at] * ((static_cast<double>(y_plus[at]) - y_minus[at]) / (2.0 * h));
          const double tolerance = 2e-4 * std::fabs(dy[at]) * (1 + std::fabs(z[at]));
          EXPECT_NEAR(dz[at], fd, tolerance) << "z = " << z[at];
          fd_bias += fd;
          tolerance_bias += tolerance;
        }
        EXPECT_NEAR(dbias[j], fd_bias, tolerance_bias) << "column " << j;
      }
    }
  }
}

// The MSE is quadratic, so the central difference of its double loss is exact up to the
// rounding of the sum: with pred and target on a 2^-10 grid and h = 2^-10 it must agree
// to 1e-9.
TEST(MlpGradient, MseGradientIsTheDerivativeOfTheLoss) {
  const std::size_t m = 3, k = 5;
  const float h = 0x1p-10f, scale = 1.0f / (m * k);
  std::vector<float> pred = random_floats(m * k, 4, 21), target = random_floats(m * k, 4, 22);
  for (auto& v : pred) v = std::round(v * 1024) / 1024;
  for (auto& v : target) v = std::round(v * 1024) / 1024;
  std::vector<float> dpred(m * k), scratch(m * k);
  mse_loss_ref(m, k, pred.data(), target.data(), scale, dpred.data());
  std::vector<float> dpred_cpu(m * k);
  mse_loss_cpu(m, k, pred.data(), target.data(), scale, dpred_cpu.data());
  for (std::size_t i = 0; i < m * k; ++i) {
    std::vector<float> p = pred;
    p[i] = pred[i] + h;
    const double up = scale * mse_loss_ref(m, k, p.data(), target.data(), scale, scratch.data());
    p[i] = pred[i] - h;
    const double down = scale * mse_loss_ref(m, k, p.data(), target.data(), scale, scratch.data());
    const double fd = (up - down) / (2.0 * h);
    EXPECT_NEAR(dpred[i], fd, 1e-9 + 1e-7 * std::fabs(fd)) << i;
    EXPECT_NEAR(dpred_cpu[i], fd, 1e-9 + 1e-7 * std::fabs(fd)) << i;
  }
}

// Softmax cross-entropy: the central difference of the reference's double loss, logits
// on a 2^-8 grid and h = 2^-10 (both exact in float); error O(h^2) ~ 1e-7.
TEST(MlpGradient, CrossEntropyGradientIsTheDerivativeOfTheLoss) {
  const std::size_t m = 4, c = 7;
  const float h = 0x1p-10f, scale = 1.0f / m;
  std::vector<float> logits = random_floats(m * c, 4, 31);
  for (auto& v : logits) v = std::round(v * 256) / 256;
  const std::vector<std::int32_t> labels = {0, 6, 3, 6};  // the first and the last class too
  std::vector<float> d(m * c), d_cpu(m * c), scratch(m * c);
  cross_entropy_loss_ref(m, c, logits.data(), labels.data(), scale, d.data());
  cross_entropy_loss_cpu(m, c, logits.data(), labels.data(), scale, d_cpu.data());
  for (std::size_t i = 0; i < m * c; ++i) {
    std::vector<float> l = logits;
    l[i] = logits[i] + h;
    const double up = scale * cross_entropy_loss_ref(m, c, l.data(), labels.data(), scale, scratch.data());
    l[i] = logits[i] - h;
    const double down = scale * cross_entropy_loss_ref(m, c, l.data(), labels.data(), scale, scratch.data());
    const double fd = (up - down) / (2.0 * h);
    EXPECT_NEAR(d[i], fd, 1e-6) << i;
    EXPECT_NEAR(d_cpu[i], fd, 2e-6) << i;
  }
}

// --- the fast versions against the references ---------------------------------------

// |got - want| <= 4e-6 (1 + |want|): activations and derivatives.
void expect_activation_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tolerance = 4e-6 * (1 + std::fabs(static_cast<double>(want[i])));
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tolerance) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", the reference says " << want[i];
  }
  EXPECT_EQ(bad, 0u) << what;
}

TEST(MlpCpu, GeluAndItsDerivativeAreAccurateEverywhere) {
  // Every 1/512 on [-16, 16], and far out: against the exact values in double. The
  // header's tolerance is 4e-6 (1 + |exact|); the approximations do better: measured
  // 8.8e-7 for GELU (near z = -4.8, where 1 + erf cancels and a few ulps of erf near -1
  // are multiplied by |z|/2) and 2.2e-7 for its derivative.
  std::vector<float> z;
  for (int i = -16 * 512; i <= 16 * 512; ++i) z.push_back(static_cast<float>(i) / 512);
  for (float far : {30.0f, -30.0f, 100.0f, -100.0f, 1e6f, -1e6f, 3e38f, -3e38f, 1e-30f, -1e-30f}) z.push_back(far);
  const std::size_t n = z.size();
  const std::vector<float> zero_bias(n, 0.0f), ones(n, 1.0f);
  std::vector<float> zz = z, y(n), d(n), dbias(n);
  bias_act_forward_cpu(Activation::Gelu, 1, n, zero_bias.data(), zz.data(), y.data());
  bias_act_backward_cpu(Activation::Gelu, 1, n, z.data(), ones.data(), d.data(), dbias.data());
  double worst_y = 0, worst_d = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double want_y = gelu_exact(z[i]), want_d = gelu_derivative_exact(z[i]);
    worst_y = std::max(worst_y, std::fabs(y[i] - want_y) / (1 + std::fabs(want_y)));
    worst_d = std::max(worst_d, std::fabs(d[i] - want_d) / (1 + std::fabs(want_d)));
  }
  EXPECT_LE(worst_y, 1e-6);
  EXPECT_LE(worst_d, 4e-7);
  // Not finite in, not finite out.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float nz = nan, ny = 0;
  bias_act_forward_cpu(Activation::Gelu, 1, 1, zero_bias.data(), &nz, &ny);
  EXPECT_TRUE(std::isnan(ny));
  bias_act_backward_cpu(Activation::Gelu, 1, 1, &nz, ones.data(), &ny, dbias.data());
  EXPECT_TRUE(std::isnan(ny));
}

TEST(MlpCpu, BiasActForwardMatchesTheReference) {
  std::uint64_t seed = 100;
  for (Shape s : kShapes) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(testing::Message() << name(act) << " m=" << s.m << " n=" << s.n);
      const std::vector<float> z0 = pre_activations(s.m * s.n, ++seed), bias = random_floats(s.n, 1, ++seed);
      std::vector<float> z_ref = z0, z_cpu = z0, y_ref(s.m * s.n, -1), y_cpu(s.m * s.n, -2);
      bias_act_forward_ref(act, s.m, s.n, bias.data(), z_ref.data(), y_ref.data());
      bias_act_forward_cpu(act, s.m, s.n, bias.data(), z_cpu.data(), y_cpu.data());
      EXPECT_TRUE(same_bits(z_cpu, z_ref)) << "the pre-activations differ";
      expect_activation_close(y_cpu, y_ref, "y");
      if (act == Activation::Identity) {  // in place
        bias_act_forward_cpu(act, s.m, s.n, bias.data(), y_cpu.data(), y_cpu.data());
        bias_act_forward_ref(act, s.m, s.n, bias.data(), y_ref.data(), y_ref.data());
        EXPECT_TRUE(same_bits(y_cpu, y_ref));
      }
    }
  }
}

// dz within 4e-6 (|dy| + |dz|); dbias[j] within 1e-5 of sum_i |dz_ij| (the terms have
// both signs, so the sum itself can be far smaller than its error bound) plus the sum of
// its terms' own tolerances.
void check_backward(Activation act, std::size_t m, std::size_t n, const std::vector<float>& z,
                    const std::vector<float>& dy) {
  std::vector<float> dz_ref(m * n, -1), dz_cpu(m * n, -2), db_ref(n, -1), db_cpu(n, -2);
  bias_act_backward_ref(act, m, n, z.data(), dy.data(), dz_ref.data(), db_ref.data());
  bias_act_backward_cpu(act, m, n, z.data(), dy.data(), dz_cpu.data(), db_cpu.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < m * n; ++i) {
    const double tolerance = 4e-6 * (std::fabs(static_cast<double>(dy[i])) + std::fabs(dz_ref[i]));
    if (!(std::fabs(static_cast<double>(dz_cpu[i]) - dz_ref[i]) <= tolerance) && ++bad <= 5)
      ADD_FAILURE() << "dz[" << i << "] = " << dz_cpu[i] << ", the reference says " << dz_ref[i] << " (z " << z[i]
                    << ", dy " << dy[i] << ")";
  }
  EXPECT_EQ(bad, 0u) << "dz";
  for (std::size_t j = 0; j < n; ++j) {
    double magnitude = 0, terms_tolerance = 0;
    for (std::size_t i = 0; i < m; ++i) {
      magnitude += std::fabs(dz_ref[i * n + j]);
      terms_tolerance += 4e-6 * (std::fabs(static_cast<double>(dy[i * n + j])) + std::fabs(dz_ref[i * n + j]));
    }
    EXPECT_NEAR(db_cpu[j], db_ref[j], 1e-5 * magnitude + terms_tolerance) << "dbias[" << j << "]";
  }
  // In place: dz == dy gives the same.
  std::vector<float> in_place = dy, db(n);
  bias_act_backward_cpu(act, m, n, z.data(), in_place.data(), in_place.data(), db.data());
  EXPECT_TRUE(same_bits(in_place, dz_cpu));
  EXPECT_TRUE(same_bits(db, db_cpu));
}

TEST(MlpCpu, BiasActBackwardMatchesTheReference) {
  std::uint64_t seed = 200;
  for (Shape s : kShapes) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(testing::Message() << name(act) << " m=" << s.m << " n=" << s.n);
      const std::vector<float> z = pre_activations(s.m * s.n, ++seed);
      check_backward(act, s.m, s.n, z, random_floats(s.m * s.n, 2, ++seed));
    }
  }
}

TEST(MlpCpu, BiasActBackwardOnATrainingSizedLayer) {
  // 512 x 1024 as rtrain's hidden layers, and a width that is not a multiple of the
  // column blocks or of any vector.
  for (Shape s : {Shape{512, 1024}, Shape{300, 1537}})
    for (Activation act : {Activation::Relu, Activation::Gelu}) {
      SCOPED_TRACE(testing::Message() << name(act) << " m=" << s.m << " n=" << s.n);
      check_backward(act, s.m, s.n, pre_activations(s.m * s.n, 7), random_floats(s.m * s.n, 1, 8));
    }
}

TEST(MlpCpu, MseMatchesTheReference) {
  std::uint64_t seed = 300;
  for (Shape s : {Shape{0, 3}, Shape{1, 1}, Shape{1, 31}, Shape{3, 11}, Shape{32, 1}, Shape{33, 33}, Shape{512, 10},
                  Shape{1000, 1001}}) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " k=" << s.n);
    const std::size_t count = s.m * s.n;
    const std::vector<float> pred = random_floats(count, 3, ++seed), target = random_floats(count, 3, ++seed);
    const float scale = count ? 1.0f / static_cast<float>(count) : 1.0f;
    std::vector<float> d_ref(count), d_cpu(count);
    const double want = mse_loss_ref(s.m, s.n, pred.data(), target.data(), scale, d_ref.data());
    const double got = mse_loss_cpu(s.m, s.n, pred.data(), target.data(), scale, d_cpu.data());
    EXPECT_NEAR(got, want, 1e-5 * want);
    for (std::size_t i = 0; i < count; ++i) ASSERT_LE(ulps(d_cpu[i], d_ref[i]), 4) << i;
    std::vector<float> in_place = pred;  // dpred == pred
    EXPECT_EQ(mse_loss_cpu(s.m, s.n, in_place.data(), target.data(), scale, in_place.data()), got);
    EXPECT_TRUE(same_bits(in_place, d_cpu));
  }
}

void check_cross_entropy(std::size_t m, std::size_t c, const std::vector<float>& logits,
                         const std::vector<std::int32_t>& labels, float scale) {
  std::vector<float> d_ref(m * c), d_cpu(m * c);
  const double want = cross_entropy_loss_ref(m, c, logits.data(), labels.data(), scale, d_ref.data());
  const double got = cross_entropy_loss_cpu(m, c, logits.data(), labels.data(), scale, d_cpu.data());
  ASSERT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, want, 1e-5 * want + 1e-12);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < m * c; ++i) {
    const double tolerance = 4e-6 * (std::fabs(scale) + std::fabs(d_ref[i]));
    if (!(std::fabs(static_cast<double>(d_cpu[i]) - d_ref[i]) <= tolerance) && ++bad <= 5)
      ADD_FAILURE() << "dlogits[" << i << "] = " << d_cpu[i] << ", the reference says " << d_ref[i];
  }
  EXPECT_EQ(bad, 0u);
  std::vector<float> in_place = logits;  // dlogits == logits
  EXPECT_EQ(cross_entropy_loss_cpu(m, c, in_place.data(), labels.data(), scale, in_place.data()), got);
  EXPECT_TRUE(same_bits(in_place, d_cpu));
}

TEST(MlpCpu, CrossEntropyMatchesTheReference) {
  std::uint64_t seed = 400;
  for (Shape s : {Shape{0, 10}, Shape{1, 1}, Shape{1, 2}, Shape{5, 3}, Shape{512, 10}, Shape{17, 33}, Shape{3, 1000},
                  Shape{64, 100}}) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " c=" << s.n);
    std::vector<float> logits = random_floats(s.m * s.n, 6, ++seed);
    std::vector<std::int32_t> labels(s.m);
    for (std::size_t i = 0; i < s.m; ++i)  // the first and last classes among them
      labels[i] = static_cast<std::int32_t>(i % 3 == 0 ? 0 : i % 3 == 1 ? s.n - 1 : mix64(++seed) % s.n);
    check_cross_entropy(s.m, s.n, logits, labels, s.m ? 1.0f / static_cast<float>(s.m) : 1.0f);
  }
}

TEST(MlpCpu, CrossEntropyBigLogitsStayFinite) {
  // +-80 logits: right and confidently wrong rows, ties, and a row of equal big logits.
  const std::size_t m = 6, c = 5;
  std::vector<float> logits(m * c, -80.0f);
  logits[0 * c + 0] = 80.0f;                                      // right, label 0
  logits[1 * c + 4] = 80.0f;                                      // wrong, label 0: loss 160
  logits[2 * c + 4] = 80.0f;                                      // right, label c - 1
  for (std::size_t j = 0; j < c; ++j) logits[3 * c + j] = 80.0f;  // all equal: log 5
  logits[4 * c + 1] = 80.0f, logits[4 * c + 2] = 80.0f;           // a tie, label on one
  for (std::size_t j = 0; j < c; ++j) logits[5 * c + j] = j % 2 ? 80.0f : -80.0f;
  const std::vector<std::int32_t> labels = {0, 0, 4, 2, 1, 0};
  check_cross_entropy(m, c, logits, labels, 1.0f);
  std::vector<float> d(m * c);
  const double loss = cross_entropy_loss_cpu(m, c, logits.data(), labels.data(), 1.0f, d.data());
  EXPECT_NEAR(loss, 0 + 160 + 0 + std::log(5.0) + std::numbers::ln2 + (160 + std::log(2.0)), 1e-5);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
}

TEST(MlpCpu, SumSquaresMatchesTheReference) {
  std::uint64_t seed = 500;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33},
                        std::size_t{1000}, (std::size_t{1} << 20) + 7}) {
    const std::vector<float> x = random_floats(n, 5, ++seed);
    const double want = sum_squares_ref(n, x.data());
    EXPECT_NEAR(sum_squares_cpu(n, x.data()), want, 1e-5 * want) << "n=" << n;
  }
  const float big = 3e30f;
  EXPECT_EQ(sum_squares_cpu(1, &big), static_cast<double>(big) * big);
}

TEST(MlpCpu, AdamwMatchesTheReferenceWithinFourUlps) {
  std::uint64_t seed = 600;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{1000}, std::size_t{100003}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    std::vector<float> p_ref = random_floats(n, 1, ++seed), m_ref(n, 0), v_ref(n, 0);
    std::vector<float> p_cpu = p_ref, m_cpu = m_ref, v_cpu = v_ref;
    for (std::int64_t step = 1; step <= 5; ++step) {
      std::vector<float> g = random_floats(n, step == 3 ? 1000 : 1, ++seed);  // one step of big gradients
      if (n > 2) g[1] = 0.0f, g[2] = -0.0f;
      const float weight_decay = step % 2 ? 0.1f : 0.0f, grad_scale = step == 4 ? 0.3f : 1.0f;
      const AdamwStep s = AdamwStep::make(1e-2f, 0.9f, 0.999f, 1e-8f, weight_decay, grad_scale, step);
      adamw_update_ref(n, p_ref.data(), g.data(), m_ref.data(), v_ref.data(), s);
      adamw_update_cpu(n, p_cpu.data(), g.data(), m_cpu.data(), v_cpu.data(), s);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_LE(ulps(p_cpu[i], p_ref[i]), 4) << "params[" << i << "] step " << step;
        ASSERT_LE(ulps(m_cpu[i], m_ref[i]), 4) << "exp_avg[" << i << "] step " << step;
        ASSERT_LE(ulps(v_cpu[i], v_ref[i]), 4) << "exp_avg_sq[" << i << "] step " << step;
      }
    }
  }
}

TEST(MlpCpu, EveryFunctionIsDeterministic) {
  const std::size_t m = 97, n = 531;
  const std::vector<float> z0 = pre_activations(m * n, 1), bias = random_floats(n, 1, 2);
  const std::vector<float> dy = random_floats(m * n, 1, 3);
  for (Activation act : kActivations) {
    std::vector<float> z1 = z0, z2 = z0, y1(m * n), y2(m * n), dz1(m * n), dz2(m * n), b1(n), b2(n);
    bias_act_forward_cpu(act, m, n, bias.data(), z1.data(), y1.data());
    bias_act_forward_cpu(act, m, n, bias.data(), z2.data(), y2.data());
    bias_act_backward_cpu(act, m, n, z1.data(), dy.data(), dz1.data(), b1.data());
    bias_act_backward_cpu(act, m, n, z2.data(), dy.data(), dz2.data(), b2.data());
    EXPECT_TRUE(same_bits(y1, y2) && same_bits(dz1, dz2) && same_bits(b1, b2)) << name(act);
  }
  std::vector<float> d1(m * n), d2(m * n);
  const double mse1 = mse_loss_cpu(m, n, z0.data(), dy.data(), 0.5f, d1.data());
  const double mse2 = mse_loss_cpu(m, n, z0.data(), dy.data(), 0.5f, d2.data());
  EXPECT_EQ(std::bit_cast<std::uint64_t>(mse1), std::bit_cast<std::uint64_t>(mse2));
  EXPECT_TRUE(same_bits(d1, d2));
  std::vector<std::int32_t> labels(m);
  for (std::size_t i = 0; i < m; ++i) labels[i] = static_cast<std::int32_t>(i % n);
  const double ce1 = cross_entropy_loss_cpu(m, n, z0.data(), labels.data(), 0.1f, d1.data());
  const double ce2 = cross_entropy_loss_cpu(m, n, z0.data(), labels.data(), 0.1f, d2.data());
  EXPECT_EQ(std::bit_cast<std::uint64_t>(ce1), std::bit_cast<std::uint64_t>(ce2));
  EXPECT_TRUE(same_bits(d1, d2));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(sum_squares_cpu(m * n, z0.data())),
            std::bit_cast<std::uint64_t>(sum_squares_cpu(m * n, z0.data())));
  std::vector<float> p1 = bias, p2 = bias, m1(n, 0), m2(n, 0), v1(n, 0), v2(n, 0);
  const AdamwStep s = AdamwStep::make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 1);
  adamw_update_cpu(n, p1.data(), dy.data(), m1.data(), v1.data(), s);
  adamw_update_cpu(n, p2.data(), dy.data(), m2.data(), v2.data(), s);
  EXPECT_TRUE(same_bits(p1, p2) && same_bits(m1, m2) && same_bits(v1, v2));
}

}  // namespace
