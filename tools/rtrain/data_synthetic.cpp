// File: rtrain/data_synthetic.cpp — the synthetic factor model (data.hpp: SyntheticSpec,
// make_synthetic): rows generated on the fly from (seed, row) alone.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numbers>

#include "data.hpp"
#include "data_impl.hpp"
#include "rkit/error.hpp"
#include "rkit/rng.hpp"

namespace rkit::rtrain {
namespace {

using detail::bits_at;
using detail::row_out_of_range;

// A uniform double in (0, 1) from the top 53 bits.
double uniform01(std::uint64_t h) { return (double(h >> 11) + 0.5) * 0x1.0p-53; }

// An exact standard normal (Box-Muller) from two 64-bit draws; for model constants.
double normal_exact(std::uint64_t key, std::uint64_t k) {
  const double u1 = uniform01(bits_at(key, 2 * k)), u2 = uniform01(bits_at(key, 2 * k + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// A fast, approximately standard normal value from the low 60 bits of h: the sum of four
// 15-bit uniforms, centred and scaled to variance 1 (so within +-3.46; kurtosis 2.7).
// Integer arithmetic until the one conversion, so that loops over it vectorise.
constexpr float kIrwinHallScale = 1.0f / 18918.6f;  // 1 / sqrt((32768^2 - 1) / 3)
inline float normal60(std::uint64_t h) {
  const auto s =
      static_cast<std::int32_t>((h & 0x7fff) + ((h >> 15) & 0x7fff) + ((h >> 30) & 0x7fff) + ((h >> 45) & 0x7fff));
  return static_cast<float>(s - 65534) * kIrwinHallScale;
}

// Fat-tailed noise of variance 1: normal60 scaled by 3 with probability 1/16 (the top 4
// bits), a normal scale mixture with kurtosis ~7-8, the tails of daily returns.
constexpr float kCalmNoise = 0.81649658f;   // 1 / sqrt(15/16 + 9/16)
constexpr float kStormNoise = 2.44948974f;  // 3 / sqrt(1.5)
inline float fat_noise(std::uint64_t h) { return normal60(h) * ((h >> 60) == 0 ? kStormNoise : kCalmNoise); }

// The standard normal quantile function (Acklam's rational approximation, relative error
// < 1.2e-9), for the class thresholds.
double normal_quantile(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  if (p < kLow) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - kLow) return -normal_quantile(1 - p);
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// The features' noise, four values per 64 random bits: 12 bits pick one of 4096 equally
// likely standard normal quantiles (a normal to within 1/4096 in probability, tails to
// +-3.7), and 4 bits make it a fat-tailed scale mixture as fat_noise does.
constexpr std::size_t kTableBits = 12;
const std::array<float, 1 << kTableBits>& normal_table() {
  static const std::array<float, 1 << kTableBits> table = [] {
    std::array<double, 1 << kTableBits> q{};
    double sum2 = 0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      q[i] = normal_quantile((double(i) + 0.5) / double(q.size()));
      sum2 += q[i] * q[i];
    }
    const double inv_sd = 1.0 / std::sqrt(sum2 / double(q.size()));  // exactly variance 1
    std::array<float, 1 << kTableBits> t{};
    for (std::size_t i = 0; i < q.size(); ++i) t[i] = static_cast<float>(q[i] * inv_sd);
    return t;
  }();
  return table;
}

// Noise of variance 1 from 16 random bits (see normal_table).
inline float fat_table_noise(const float* table, std::uint32_t bits16) {
  return table[bits16 & ((1u << kTableBits) - 1)] * ((bits16 >> kTableBits) == 0 ? kStormNoise : kCalmNoise);
}

// One row's features: x[j] = idio[j] * noise_j + load[0][j] f[0] + load[1][j] f[1] + ...,
// added in that order; noise_j from 16 bits of the row's draw noise_base + j / 4.
// On x86-64 cloned for AVX2 (8-wide) and the baseline (4-wide SSE2): neither can fuse a
// multiply and an add (AVX2 does not bring FMA), so both give the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
#define RKIT_CLONE_AVX2 __attribute__((target_clones("avx2", "default")))
#else
#define RKIT_CLONE_AVX2
#endif
RKIT_CLONE_AVX2 void row_features(std::uint64_t key, std::uint64_t noise_base, std::size_t features,
                                  std::size_t factors, const float* __restrict idio, const float* __restrict load,
                                  const float* __restrict f, float* __restrict x) {
  const float* __restrict table = normal_table().data();
  std::size_t j = 0;
  for (; j + 4 <= features; j += 4) {
    const std::uint64_t h = bits_at(key, noise_base + j / 4);
    for (std::size_t q = 0; q < 4; ++q)
      x[j + q] = idio[j + q] * fat_table_noise(table, static_cast<std::uint32_t>(h >> (16 * q)) & 0xffff);
  }
  for (std::uint64_t h = bits_at(key, noise_base + j / 4); j < features; ++j, h >>= 16)
    x[j] = idio[j] * fat_table_noise(table, static_cast<std::uint32_t>(h) & 0xffff);

  // Blocks of features kept in registers across all the factors.
  constexpr std::size_t kBlock = 32;
  std::size_t j0 = 0;
  for (; j0 + kBlock <= features; j0 += kBlock) {
    float acc[kBlock];
    std::memcpy(acc, x + j0, sizeof acc);
    for (std::size_t k = 0; k < factors; ++k) {
      const float fk = f[k];
      const float* __restrict l = load + k * features + j0;
      for (std::size_t q = 0; q < kBlock; ++q) acc[q] += l[q] * fk;
    }
    std::memcpy(x + j0, acc, sizeof acc);
  }
  for (std::size_t k = 0; k < factors; ++k)
    for (std::size_t q = j0; q < features; ++q) x[q] += load[k * features + q] * f[k];
}

// ---------------------------------------------------------------------------------------
// The synthetic factor model (see SyntheticSpec).

class SyntheticDataset final : public Dataset {
 public:
  explicit SyntheticDataset(const SyntheticSpec& spec);

  std::uint64_t rows() const override { return rows_; }
  std::size_t features() const override { return features_; }
  std::size_t outputs() const override { return outputs_; }
  Task task() const override { return task_; }
  void gather(std::span<const std::uint64_t> rows, float* x, float* y, std::int32_t* labels) const override;

 private:
  // Volatility regimes of the factors: 2x on one row in 8, normalised so E f^2 = 1.
  static constexpr float kCalmVol = 0.85280287f;   // 1 / sqrt(7/8 + 4/8)
  static constexpr float kStormVol = 1.70560573f;  // 2 / sqrt(11/8)
  // Weights of the target's linear, tanh and product terms (before standardising).
  static constexpr double kLinear = 0.8, kTanh = 0.6, kProduct = 0.5;

  std::uint64_t row_key(std::uint64_t row) const { return mix64(seed_key_ ^ mix64(row + kGolden64)); }
  void draw_factors(std::uint64_t key, float* f) const;
  double raw_target(const float* f, std::size_t k) const;  // g_k(f), not standardised
  float target(const float* f, std::size_t k, std::uint64_t key) const;

  std::uint64_t rows_;
  std::size_t features_, factors_, outputs_;
  Task task_;
  std::size_t targets_;  // regression targets computed per row: outputs_, or 1 for classes
  std::uint64_t seed_key_;
  std::vector<float> load_;                             // [factors][features]: s_j B_jk / norm_j
  std::vector<float> idio_;                             // [features]: s_j noise / norm_j
  std::vector<double> beta_;                            // [targets][factors]: linear part of g_k
  std::vector<std::size_t> tanh_of_, prod_a_, prod_b_;  // [targets]: factor indices
  std::vector<double> mean_, inv_sd_;                   // [targets]: standardisation of g_k
  double signal_w_, noise_w_;
  std::vector<double> thresholds_;  // classification: the classes - 1 bucket boundaries
};

SyntheticDataset::SyntheticDataset(const SyntheticSpec& spec)
    : rows_(spec.rows),
      features_(spec.features),
      factors_(spec.factors),
      outputs_(spec.outputs),
      task_(spec.task),
      targets_(spec.task == Task::Regression ? spec.outputs : 1) {
  if (spec.rows == 0) throw Error(Exit::Usage, "synthetic data: rows must be at least 1");
  if (spec.features == 0) throw Error(Exit::Usage, "synthetic data: features must be at least 1");
  if (spec.factors == 0) throw Error(Exit::Usage, "synthetic data: factors must be at least 1");
  if (spec.task == Task::Regression && spec.outputs == 0)
    throw Error(Exit::Usage, "synthetic data: outputs must be at least 1");
  if (spec.task == Task::Classification && spec.outputs < 2)
    throw Error(Exit::Usage,
                fmt::format("synthetic data: classification needs at least 2 classes, not {}", spec.outputs));
  if (!std::isfinite(spec.noise) || spec.noise < 0)
    throw Error(Exit::Usage, fmt::format("synthetic data: noise must be a finite number >= 0, not {}", spec.noise));

  seed_key_ = mix64(spec.seed ^ 0x5eed'da7a'0000'0001ULL);
  const std::uint64_t model_key = mix64(seed_key_ ^ 0x6d6f'64656c'000002ULL);
  std::uint64_t draw = 0;  // the next index of the model's stream
  auto normal = [&] { return normal_exact(model_key, draw++); };
  auto uniform = [&] { return uniform01(bits_at(model_key, (std::uint64_t{1} << 62) + draw++)); };
  auto index_below = [&](std::size_t n) { return std::min(n - 1, static_cast<std::size_t>(uniform() * double(n))); };

  // Loadings: every feature loads positively on factor 0 (the market), and on the others
  // with either sign. Scales s_j are log-uniform in [0.5, 2].
  load_.resize(factors_ * features_);
  idio_.resize(features_);
  std::vector<double> b(factors_);
  for (std::size_t j = 0; j < features_; ++j) {
    double norm2 = spec.noise * spec.noise;
    for (std::size_t k = 0; k < factors_; ++k) {
      b[k] = k == 0 ? 0.8 + 0.3 * normal() : 0.6 * normal();
      norm2 += b[k] * b[k];
    }
    const double scale = 0.5 * std::pow(4.0, uniform()), inv_norm = 1.0 / std::sqrt(norm2);
    for (std::size_t k = 0; k < factors_; ++k) load_[k * features_ + j] = static_cast<float>(scale * b[k] * inv_norm);
    idio_[j] = static_cast<float>(scale * spec.noise * inv_norm);
  }

  // Targets: a unit-norm linear combination of the factors, a tanh of one, a product of two.
  beta_.resize(targets_ * factors_);
  tanh_of_.resize(targets_);
  prod_a_.resize(targets_);
  prod_b_.resize(targets_);
  for (std::size_t t = 0; t < targets_; ++t) {
    double norm2 = 0;
    for (std::size_t k = 0; k < factors_; ++k) {
      beta_[t * factors_ + k] = normal();
      norm2 += beta_[t * factors_ + k] * beta_[t * factors_ + k];
    }
    for (std::size_t k = 0; k < factors_; ++k) beta_[t * factors_ + k] *= kLinear / std::sqrt(norm2);
    tanh_of_[t] = index_below(factors_);
    prod_a_[t] = index_below(factors_);
    prod_b_[t] = factors_ == 1 ? 0 : (prod_a_[t] + 1 + index_below(factors_ - 1)) % factors_;
  }

  // Standardise g_k: its mean and variance estimated from 2^14 draws of the factors on a
  // stream of its own (the model's, so the constants depend on the seed alone).
  constexpr std::size_t kDraws = 1 << 14;
  std::vector<double> sum(targets_, 0.0), sum2(targets_, 0.0);
  std::vector<float> f(factors_);
  const std::uint64_t mc_key = mix64(model_key ^ 0x4d43'0000'0003ULL);
  for (std::size_t i = 0; i < kDraws; ++i) {
    draw_factors(mix64(mc_key + i * kGolden64), f.data());
    for (std::size_t t = 0; t < targets_; ++t) {
      const double g = raw_target(f.data(), t);
      sum[t] += g;
      sum2[t] += g * g;
    }
  }
  mean_.resize(targets_);
  inv_sd_.resize(targets_);
  for (std::size_t t = 0; t < targets_; ++t) {
    mean_[t] = sum[t] / kDraws;
    const double var = std::max(sum2[t] / kDraws - mean_[t] * mean_[t], 1e-12);
    inv_sd_[t] = 1.0 / std::sqrt(var);
  }
  signal_w_ = 1.0 / std::sqrt(1.0 + spec.noise * spec.noise);
  noise_w_ = spec.noise * signal_w_;

  if (task_ == Task::Classification)
    for (std::size_t c = 1; c < outputs_; ++c) thresholds_.push_back(normal_quantile(double(c) / double(outputs_)));
}

void SyntheticDataset::draw_factors(std::uint64_t key, float* f) const {
  const float vol = (bits_at(key, factors_) >> 61) == 0 ? kStormVol : kCalmVol;
  for (std::size_t k = 0; k < factors_; ++k) f[k] = vol * normal60(bits_at(key, k));
}

double SyntheticDataset::raw_target(const float* f, std::size_t t) const {
  double g = 0;
  for (std::size_t k = 0; k < factors_; ++k) g += beta_[t * factors_ + k] * f[k];
  return g + kTanh * std::tanh(1.5 * f[tanh_of_[t]]) + kProduct * double(f[prod_a_[t]]) * f[prod_b_[t]];
}

float SyntheticDataset::target(const float* f, std::size_t t, std::uint64_t key) const {
  const double g = (raw_target(f, t) - mean_[t]) * inv_sd_[t];
  return static_cast<float>(signal_w_ * g + noise_w_ * fat_noise(bits_at(key, factors_ + 1 + t)));
}

void SyntheticDataset::gather(std::span<const std::uint64_t> rows, float* x, float* y, std::int32_t* labels) const {
  std::vector<float> f(factors_);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::uint64_t row = rows[i];
    if (row >= rows_) row_out_of_range(row, rows_);
    const std::uint64_t key = row_key(row);
    draw_factors(key, f.data());
    if (x)
      row_features(key, factors_ + 1 + targets_, features_, factors_, idio_.data(), load_.data(), f.data(),
                   x + i * features_);
    if (task_ == Task::Regression) {
      if (y)
        for (std::size_t t = 0; t < outputs_; ++t) y[i * outputs_ + t] = target(f.data(), t, key);
    } else if (labels) {
      const float v = target(f.data(), 0, key);
      labels[i] = static_cast<std::int32_t>(std::upper_bound(thresholds_.begin(), thresholds_.end(), double(v)) -
                                            thresholds_.begin());
    }
  }
}

}  // namespace

std::unique_ptr<Dataset> make_synthetic(const SyntheticSpec& spec) { return std::make_unique<SyntheticDataset>(spec); }

}  // namespace rkit::rtrain
