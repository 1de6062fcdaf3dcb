#include "data.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <optional>
#include <string_view>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/rng.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rtrain {
namespace {

static_assert(std::endian::native == std::endian::little, "the file readers assume a little-endian host");

namespace st = rkit::safetensors;

// ---------------------------------------------------------------------------------------
// Counter-based random bits: splitmix64's finaliser (rkit/rng.hpp) over (key + counter).
// Any value of any stream can be computed alone, which is what makes rows and epochs
// restartable.

// The k-th 64 random bits of the stream `key`.
constexpr std::uint64_t bits_at(std::uint64_t key, std::uint64_t k) { return mix64(key + (k + 1) * kGolden64); }

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

[[noreturn]] void row_out_of_range(std::uint64_t row, std::uint64_t rows) {
  throw Error(Exit::Software, fmt::format("dataset: row {} out of range (the dataset has {} rows)", row, rows));
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

// ---------------------------------------------------------------------------------------
// Loaded files: everything in memory, features and targets row-major.

class MemoryDataset final : public Dataset {
 public:
  MemoryDataset(Task task, std::uint64_t rows, std::size_t features, std::size_t outputs, std::vector<float> x,
                std::vector<float> y, std::vector<std::int32_t> labels)
      : task_(task),
        rows_(rows),
        features_(features),
        outputs_(outputs),
        x_(std::move(x)),
        y_(std::move(y)),
        labels_(std::move(labels)) {}

  std::uint64_t rows() const override { return rows_; }
  std::size_t features() const override { return features_; }
  std::size_t outputs() const override { return outputs_; }
  Task task() const override { return task_; }
  void gather(std::span<const std::uint64_t> rows, float* x, float* y, std::int32_t* labels) const override {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::uint64_t r = rows[i];
      if (r >= rows_) row_out_of_range(r, rows_);
      if (x) std::memcpy(x + i * features_, x_.data() + r * features_, features_ * sizeof(float));
      if (task_ == Task::Regression) {
        if (y) std::memcpy(y + i * outputs_, y_.data() + r * outputs_, outputs_ * sizeof(float));
      } else if (labels) {
        labels[i] = labels_[r];
      }
    }
  }

 private:
  Task task_;
  std::uint64_t rows_;
  std::size_t features_, outputs_;
  std::vector<float> x_, y_;
  std::vector<std::int32_t> labels_;
};

// Labels beyond this are refused: classes are a softmax's width, and floats hold
// integers exactly up to 2^24.
constexpr double kMaxClasses = double(1 << 24);

// A file's contents before checks: features, regression targets or raw label values.
struct Table {
  std::uint64_t rows = 0;
  std::size_t features = 0, targets = 0;  // targets: regression outputs; 0 for classification
  std::vector<float> x, y;
  std::vector<double> labels;
};

// How a format names a place in its file, for errors.
struct Locator {
  // The value at `row`, column `col` of the features (in_x) or the targets.
  std::function<std::string(std::uint64_t row, std::size_t col, bool in_x)> value;
  // The label of `row`.
  std::function<std::string(std::uint64_t row)> label;
};

std::string show_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

// Checks `t` (finite values, labels) and makes the dataset.
std::unique_ptr<Dataset> finish(Table t, const FileSpec& spec, const std::string& name, const Locator& where) {
  if (t.rows == 0) throw Error(Exit::DataErr, name + ": no rows");
  auto check_finite = [&](const std::vector<float>& v, std::size_t width, bool in_x) {
    const auto bad = std::find_if(v.begin(), v.end(), [](float e) { return !std::isfinite(e); });
    if (bad == v.end()) return;
    const auto at = static_cast<std::uint64_t>(bad - v.begin());
    throw Error(Exit::DataErr, fmt::format("{} is {}: features and targets must be finite numbers",
                                           where.value(at / width, at % width, in_x), show_number(*bad)));
  };
  check_finite(t.x, t.features, true);
  if (spec.task == Task::Regression) {
    check_finite(t.y, t.targets, false);
    return std::make_unique<MemoryDataset>(spec.task, t.rows, t.features, t.targets, std::move(t.x), std::move(t.y),
                                           std::vector<std::int32_t>{});
  }

  const double limit = spec.outputs ? double(spec.outputs) : kMaxClasses;
  double top = 0;
  std::vector<std::int32_t> labels(t.labels.size());
  for (std::size_t r = 0; r < t.labels.size(); ++r) {
    const double v = t.labels[r];
    if (!std::isfinite(v) || v != std::floor(v))
      throw Error(Exit::DataErr, fmt::format("{}: label {} is not an integer", where.label(r), show_number(v)));
    if (v < 0 || v >= limit)
      throw Error(Exit::DataErr,
                  spec.outputs ? fmt::format("{}: label {} is out of range [0, {})", where.label(r), v, spec.outputs)
                               : fmt::format("{}: label {} is out of range [0, 2^24)", where.label(r), v));
    labels[r] = static_cast<std::int32_t>(v);
    top = std::max(top, v);
  }
  const std::size_t classes = spec.outputs ? spec.outputs : static_cast<std::size_t>(top) + 1;
  if (classes < 2)
    throw Error(Exit::DataErr, fmt::format("{}: every label is 0; classification needs at least 2 classes", name));
  return std::make_unique<MemoryDataset>(spec.task, t.rows, t.features, classes, std::move(t.x), std::vector<float>{},
                                         std::move(labels));
}

// The number of target columns at the end of a .csv or .npy row (1 for a label).
std::size_t target_columns(const FileSpec& spec) { return spec.task == Task::Regression ? spec.outputs : 1; }

// Splits rows of `columns` values, fed in order, into a Table's features and targets.
class TableFiller {
 public:
  TableFiller(Table& t, std::size_t columns, Task task) : t_(t), columns_(columns), task_(task) {}
  void push(double v) {
    if (col_ < t_.features)
      t_.x.push_back(static_cast<float>(v));
    else if (task_ == Task::Regression)
      t_.y.push_back(static_cast<float>(v));
    else
      t_.labels.push_back(v);
    if (++col_ == columns_) col_ = 0;
  }

 private:
  Table& t_;
  std::size_t columns_, col_ = 0;
  Task task_;
};

// Prepares `t` for `rows` rows of `columns` columns of which the last are targets.
void shape_table(Table& t, const FileSpec& spec, const std::string& name, std::uint64_t rows, std::size_t columns) {
  const std::size_t targets = target_columns(spec);
  if (columns <= targets)
    throw Error(Exit::DataErr,
                fmt::format("{}: needs at least {} columns (features, then {}), found {}", name, targets + 1,
                            spec.task == Task::Classification ? std::string("the label")
                            : targets == 1                    ? std::string("the target")
                                                              : fmt::format("{} targets", targets),
                            columns));
  t.features = columns - targets;
  t.targets = spec.task == Task::Regression ? targets : 0;
  t.rows = rows;
}

// ---------------------------------------------------------------------------------------
// CSV

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// One CSV field parsed as a number.
struct Parsed {
  enum Status { Ok, NotANumber, TooLarge } status;
  double value;
};

// Parses one field with std::from_chars as a T (float, or double for labels). Magnitudes
// beyond T's range are TooLarge; ones too small for it become 0 or subnormal. "nan" and
// "inf" parse (and are refused later, with the row and column).
template <typename T>
Parsed parse_number(std::string_view field) {
  T v{};
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, v);
  if (field.empty() || ptr != end) return {Parsed::NotANumber, 0};
  if (ec == std::errc::result_out_of_range) {
    double d = 0;
    const auto [p2, ec2] = std::from_chars(field.data(), end, d);
    if (ec2 == std::errc() && p2 == end && std::fabs(d) < 1) return {Parsed::Ok, double(static_cast<T>(d))};
    return {Parsed::TooLarge, 0};
  }
  if (ec != std::errc()) return {Parsed::NotANumber, 0};
  return {Parsed::Ok, double(v)};
}

std::string quoted(std::string_view field) {
  return field.size() > 40 ? fmt::format("'{}...'", field.substr(0, 40)) : fmt::format("'{}'", field);
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  for (;;) {
    const std::size_t comma = line.find(',');
    out.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return out;
    line.remove_prefix(comma + 1);
  }
}

std::unique_ptr<Dataset> load_csv(const FileSpec& spec) {
  const std::string& name = spec.path;
  const std::string text = read_file(spec.path, std::uint64_t{1} << 40);
  std::string_view rest = text;
  std::uint64_t line_no = 0;
  auto next_line = [&] {
    const std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };

  const std::string_view first = next_line();
  if (trim(first).empty()) throw Error(Exit::DataErr, name + ": empty file (no header and no rows)");
  const std::vector<std::string_view> head = split_fields(first);
  const bool has_header = std::any_of(head.begin(), head.end(), [](std::string_view f) {
    return parse_number<double>(f).status == Parsed::NotANumber;
  });
  const std::size_t columns = head.size();
  const std::uint64_t first_row_line = has_header ? 2 : 1;

  Table t;
  shape_table(t, spec, name, 0, columns);
  const auto max_rows = static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  t.x.reserve(max_rows * t.features);
  (spec.task == Task::Regression ? t.y.reserve(max_rows * t.targets) : t.labels.reserve(max_rows));
  TableFiller fill(t, columns, spec.task);
  const std::size_t label_col = spec.task == Task::Classification ? columns - 1 : columns;

  // Parses a line known to hold `columns` fields.
  auto parse_line = [&](std::string_view line) {
    for (std::size_t col = 0; col < columns; ++col) {
      const std::size_t comma = line.find(',');
      const std::string_view field = trim(line.substr(0, comma));
      line.remove_prefix(comma == std::string_view::npos ? line.size() : comma + 1);
      // A label is parsed as a double so that a non-integer one is seen as such.
      const Parsed v = col == label_col ? parse_number<double>(field) : parse_number<float>(field);
      if (v.status == Parsed::NotANumber)
        throw Error(Exit::DataErr,
                    fmt::format("{}:{}: {} is not a number (column {})", name, line_no, quoted(field), col + 1));
      if (v.status == Parsed::TooLarge)
        throw Error(Exit::DataErr, fmt::format("{}:{}: {} is too large for a float (column {})", name, line_no,
                                               quoted(field), col + 1));
      fill.push(v.value);
    }
  };

  std::uint64_t rows = 0;
  if (!has_header) {
    parse_line(first);  // already known to hold `columns` numbers
    ++rows;
  }
  while (!rest.empty()) {
    const std::string_view line = next_line();
    if (trim(line).empty()) {
      if (rest.find_first_not_of("\r\n\t ") == std::string_view::npos) break;  // blank lines at the end
      throw Error(Exit::DataErr, fmt::format("{}:{}: empty line", name, line_no));
    }
    const std::size_t found = static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
    if (found != columns)
      throw Error(Exit::DataErr, fmt::format("{}:{}: expected {} columns, found {}", name, line_no, columns, found));
    parse_line(line);
    ++rows;
  }
  t.rows = rows;
  if (rows == 0) throw Error(Exit::DataErr, name + ": no rows (only a header line)");

  const std::size_t features = t.features;  // `t` moves into finish
  Locator where;
  where.label = [&name, first_row_line](std::uint64_t row) { return fmt::format("{}:{}", name, first_row_line + row); };
  where.value = [&name, first_row_line, features](std::uint64_t row, std::size_t col, bool in_x) {
    return fmt::format("{}:{}: column {}", name, first_row_line + row, (in_x ? col : features + col) + 1);
  };
  return finish(std::move(t), spec, name, where);
}

// ---------------------------------------------------------------------------------------
// Binary files: reading elements of any safetensors dtype in chunks.

class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (!fd_) throw system_error(path, errno);
    struct stat s {};
    if (::fstat(fd_.get(), &s) != 0) throw system_error("stat " + path, errno);
    if (S_ISDIR(s.st_mode)) throw Error(Exit::NoInput, path + ": is a directory");
    size_ = static_cast<std::uint64_t>(s.st_size);
  }
  std::uint64_t size() const { return size_; }
  // Exactly `n` bytes at `offset`; a short read is "truncated" (DataErr).
  void read(void* buf, std::size_t n, std::uint64_t offset) const {
    if (pread_full(fd_.get(), buf, n, offset, path_) != n) throw Error(Exit::DataErr, path_ + ": truncated");
  }
  // Calls sink(value) for each of `count` elements of `dtype` starting at `offset`.
  template <typename Sink>
  void read_elements(std::uint64_t offset, std::uint64_t count, st::Dtype dtype, Sink&& sink) const {
    const std::size_t size = st::dtype_size(dtype);
    constexpr std::size_t kChunkBytes = 1 << 20;
    const std::size_t per_chunk = kChunkBytes / size;
    std::vector<std::byte> buf(per_chunk * size);
    for (std::uint64_t done = 0; done < count;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(per_chunk, count - done));
      read(buf.data(), n * size, offset + done * size);
      if (dtype == st::Dtype::F32) {
        for (std::size_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, buf.data() + i * 4, 4);
          sink(double(v));
        }
      } else if (dtype == st::Dtype::F64) {
        for (std::size_t i = 0; i < n; ++i) {
          double v;
          std::memcpy(&v, buf.data() + i * 8, 8);
          sink(v);
        }
      } else {
        for (std::size_t i = 0; i < n; ++i) sink(st::element_as_double(dtype, buf.data(), i));
      }
      done += n;
    }
  }

 private:
  std::string path_;
  UniqueFd fd_;
  std::uint64_t size_ = 0;
};

// rows * columns * size, or DataErr when that overflows.
std::uint64_t checked_bytes(const std::string& name, std::uint64_t rows, std::uint64_t columns, std::size_t size) {
  if (columns && rows > std::numeric_limits<std::uint64_t>::max() / columns / size)
    throw Error(Exit::DataErr, fmt::format("{}: shape ({}, {}) is too large", name, rows, columns));
  return rows * columns * size;
}

// ---------------------------------------------------------------------------------------
// NumPy .npy: "\x93NUMPY", major, minor, the header length (2 bytes LE in 1.0, 4 in
// 2.0/3.0), a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (n, c)}
// padded with spaces and a newline, then the raw array.

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
  bool has_descr = false, has_order = false, has_shape = false;
};

// A parser of the dict literal NumPy writes (strings, True/False, tuples of integers).
class NpyDictParser {
 public:
  NpyDictParser(std::string_view s, const std::string& name) : s_(s), name_(name) {}

  NpyHeader parse() {
    NpyHeader h;
    expect('{');
    while (skip_space() != '}') {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        if (skip_space() == '[') fail("structured dtypes are not supported (expected a 2-D array of '<f4' or '<f8')");
        h.descr = string_literal();
        h.has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        h.has_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        h.has_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}' in the header", key));
      }
      if (skip_space() == ',')
        ++i_;
      else if (peek() != '}')
        fail("malformed header: expected ',' or '}'");
    }
    ++i_;
    if (skip_space() != '\0') fail("malformed header: text after the dictionary");
    if (!h.has_descr || !h.has_order || !h.has_shape)
      fail("malformed header: it needs 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw Error(Exit::DataErr, name_ + ": " + why); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  char skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
    return peek();
  }
  void expect(char c) {
    if (skip_space() != c) fail(fmt::format("malformed header: expected '{}'", c));
    ++i_;
  }
  std::string string_literal() {
    const char q = skip_space();
    if (q != '\'' && q != '"') fail("malformed header: expected a quoted string");
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) fail("malformed header: unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    if (s_.substr(i_, 4) == "True") return i_ += 4, true;
    if (s_.substr(i_, 5) == "False") return i_ += 5, false;
    fail("malformed header: 'fortran_order' must be True or False");
  }
  std::vector<std::uint64_t> tuple() {
    std::vector<std::uint64_t> out;
    expect('(');
    while (skip_space() != ')') {
      std::uint64_t v = 0;
      const char* begin = s_.data() + i_;
      auto [ptr, ec] = std::from_chars(begin, s_.data() + s_.size(), v);
      if (ec != std::errc() || ptr == begin) fail("malformed header: 'shape' must be a tuple of integers");
      i_ += static_cast<std::size_t>(ptr - begin);
      if (skip_space() == 'L') ++i_;  // Python 2's long suffix
      out.push_back(v);
      if (skip_space() == ',')
        ++i_;
      else if (peek() != ')')
        fail("malformed header: 'shape' must be a tuple of integers");
    }
    ++i_;
    return out;
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t i_ = 0;
};

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::unique_ptr<Dataset> load_npy(const FileSpec& spec) {
  const std::string& name = spec.path;
  const InputFile file(spec.path);
  constexpr std::string_view kMagic = "\x93NUMPY";
  char prefix[12] = {};
  if (file.size() < 10) throw Error(Exit::DataErr, name + ": not a .npy file (too short)");
  file.read(prefix, std::min<std::uint64_t>(12, file.size()), 0);
  if (std::string_view(prefix, 6) != kMagic)
    throw Error(Exit::DataErr, name + ": not a .npy file (no \\x93NUMPY magic)");
  const auto major = static_cast<unsigned char>(prefix[6]), minor = static_cast<unsigned char>(prefix[7]);
  if (major < 1 || major > 3)
    throw Error(Exit::DataErr,
                fmt::format("{}: .npy format version {}.{} is not supported (1.0 to 3.0 are)", name, major, minor));
  const auto byte = [&](int i) { return std::uint64_t{static_cast<unsigned char>(prefix[i])}; };
  std::uint64_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = byte(8) | byte(9) << 8;
    header_at = 10;
  } else {
    if (file.size() < 12) throw Error(Exit::DataErr, name + ": truncated header");
    header_len = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    header_at = 12;
  }
  if (header_len > (1 << 20))
    throw Error(Exit::DataErr, fmt::format("{}: header of {} bytes is too long", name, header_len));
  if (header_at + header_len > file.size()) throw Error(Exit::DataErr, name + ": truncated header");
  std::string header(header_len, '\0');
  file.read(header.data(), header.size(), header_at);
  const NpyHeader h = NpyDictParser(header, name).parse();

  st::Dtype dtype;
  if (h.descr == "<f4")
    dtype = st::Dtype::F32;
  else if (h.descr == "<f8")
    dtype = st::Dtype::F64;
  else
    throw Error(Exit::DataErr, fmt::format("{}: dtype '{}' is not supported (expected little-endian float32 '<f4' "
                                           "or float64 '<f8')",
                                           name, h.descr));
  if (h.fortran_order)
    throw Error(Exit::DataErr, name + ": Fortran-order arrays are not supported (save np.ascontiguousarray(a))");
  if (h.shape.size() != 2)
    throw Error(Exit::DataErr,
                fmt::format("{}: shape {} is not 2-D (expected (rows, columns))", name, shape_text(h.shape)));
  const std::uint64_t rows = h.shape[0], columns = h.shape[1];
  const std::uint64_t data_at = header_at + header_len;
  const std::uint64_t want = checked_bytes(name, rows, columns, st::dtype_size(dtype));
  if (file.size() - data_at < want)
    throw Error(Exit::DataErr, fmt::format("{}: truncated: shape {} of '{}' needs {} data bytes, found {}", name,
                                           shape_text(h.shape), h.descr, want, file.size() - data_at));
  if (file.size() - data_at > want)
    throw Error(Exit::DataErr,
                fmt::format("{}: has {} trailing bytes after the array", name, file.size() - data_at - want));
  if (rows == 0) throw Error(Exit::DataErr, name + ": no rows");

  Table t;
  shape_table(t, spec, name, rows, columns);
  t.x.reserve(rows * t.features);
  (spec.task == Task::Regression ? t.y.reserve(rows * t.targets) : t.labels.reserve(rows));
  TableFiller fill(t, columns, spec.task);
  file.read_elements(data_at, rows * columns, dtype, [&](double v) { fill.push(v); });

  const std::size_t features = t.features;
  Locator where;
  where.value = [&name, features](std::uint64_t row, std::size_t col, bool in_x) {
    return fmt::format("{}: [{}, {}]", name, row, in_x ? col : features + col);
  };
  where.label = [&name, features](std::uint64_t row) { return fmt::format("{}: [{}, {}]", name, row, features); };
  return finish(std::move(t), spec, name, where);
}

// ---------------------------------------------------------------------------------------
// safetensors: "X" [rows, features] and "y" [rows] or [rows, k].

std::unique_ptr<Dataset> load_safetensors(const FileSpec& spec) {
  const std::string& name = spec.path;
  const st::Header h = st::read_header(spec.path);
  auto find = [&](const char* tensor) -> const st::TensorInfo& {
    for (const auto& t : h.tensors)
      if (t.name == tensor) return t;
    throw Error(Exit::DataErr,
                fmt::format("{}: no tensor \"{}\" (expected X [rows, features] and y [rows] or [rows, outputs])", name,
                            tensor));
  };
  const st::TensorInfo& tx = find("X");
  const st::TensorInfo& ty = find("y");
  if (tx.shape.size() != 2)
    throw Error(Exit::DataErr,
                fmt::format("{}: X has shape {}; expected [rows, features]", name, shape_text(tx.shape)));
  if (ty.shape.empty() || ty.shape.size() > 2)
    throw Error(Exit::DataErr,
                fmt::format("{}: y has shape {}; expected [rows] or [rows, outputs]", name, shape_text(ty.shape)));
  const std::uint64_t rows = tx.shape[0], features = tx.shape[1];
  if (ty.shape[0] != rows)
    throw Error(Exit::DataErr, fmt::format("{}: y has {} rows but X has {}", name, ty.shape[0], rows));
  if (rows == 0) throw Error(Exit::DataErr, name + ": no rows");
  if (features == 0) throw Error(Exit::DataErr, name + ": X has no feature columns");
  const std::uint64_t y_cols = ty.shape.size() == 2 ? ty.shape[1] : 1;
  if (spec.task == Task::Regression) {
    if (y_cols == 0) throw Error(Exit::DataErr, name + ": y has no target columns");
    if (spec.outputs != 0 && spec.outputs != y_cols)
      throw Error(Exit::DataErr,
                  fmt::format("{}: y has {} target column(s) but outputs is {}", name, y_cols, spec.outputs));
  } else if (y_cols != 1) {
    throw Error(Exit::DataErr, fmt::format("{}: y has shape {}; class labels must be [rows] or [rows, 1]", name,
                                           shape_text(ty.shape)));
  }

  Table t;
  t.rows = rows;
  t.features = features;
  t.targets = spec.task == Task::Regression ? y_cols : 0;
  const InputFile file(spec.path);
  t.x.reserve(rows * features);
  file.read_elements(tx.offset, rows * features, tx.dtype, [&](double v) { t.x.push_back(static_cast<float>(v)); });
  if (spec.task == Task::Regression) {
    t.y.reserve(rows * y_cols);
    file.read_elements(ty.offset, rows * y_cols, ty.dtype, [&](double v) { t.y.push_back(static_cast<float>(v)); });
  } else {
    t.labels.reserve(rows);
    file.read_elements(ty.offset, rows, ty.dtype, [&](double v) { t.labels.push_back(v); });
  }

  const bool y_2d = ty.shape.size() == 2;
  Locator where;
  where.value = [&name, y_2d](std::uint64_t row, std::size_t col, bool in_x) {
    if (in_x) return fmt::format("{}: X[{}, {}]", name, row, col);
    return y_2d ? fmt::format("{}: y[{}, {}]", name, row, col) : fmt::format("{}: y[{}]", name, row);
  };
  where.label = [&name, y_2d](std::uint64_t row) {
    return y_2d ? fmt::format("{}: y[{}, 0]", name, row) : fmt::format("{}: y[{}]", name, row);
  };
  return finish(std::move(t), spec, name, where);
}

// unsigned __int128 is a GCC/Clang extension; __extension__ keeps -Wpedantic quiet.
__extension__ typedef unsigned __int128 U128;

// floor(h * n / 2^64): a draw in [0, n) (bias below n / 2^64).
std::uint64_t below(std::uint64_t h, std::uint64_t n) { return static_cast<std::uint64_t>((U128{h} * n) >> 64); }

}  // namespace

std::unique_ptr<Dataset> make_synthetic(const SyntheticSpec& spec) { return std::make_unique<SyntheticDataset>(spec); }

std::unique_ptr<Dataset> load_dataset(const FileSpec& spec) {
  const bool csv = spec.path.ends_with(".csv"), npy = spec.path.ends_with(".npy");
  if (!csv && !npy && !st::is_safetensors_name(spec.path))
    throw Error(Exit::Usage, fmt::format("{}: unknown data format (expected .csv, .npy or .safetensors)", spec.path));
  if (spec.task == Task::Classification && spec.outputs == 1)
    throw Error(Exit::Usage, fmt::format("{}: classification needs at least 2 classes (outputs = 1); "
                                         "set outputs to 0 to take them from the labels",
                                         spec.path));
  if (spec.task == Task::Regression && spec.outputs == 0 && (csv || npy))
    throw Error(Exit::Usage,
                fmt::format("{}: regression needs outputs >= 1 (the number of target columns)", spec.path));
  if (csv) return load_csv(spec);
  if (npy) return load_npy(spec);
  return load_safetensors(spec);
}

Sampler::Sampler(std::uint64_t train_rows, std::uint64_t seed, int rank, int world, std::size_t batch_per_rank)
    : train_rows_(train_rows), seed_(seed) {
  if (world < 1) throw Error(Exit::Usage, fmt::format("sampler: world size must be at least 1, not {}", world));
  if (rank < 0 || rank >= world)
    throw Error(Exit::Usage, fmt::format("sampler: rank {} is not in [0, {})", rank, world));
  if (batch_per_rank == 0) throw Error(Exit::Usage, "sampler: the batch size must be at least 1");
  rank_ = static_cast<std::size_t>(rank);
  world_ = static_cast<std::size_t>(world);
  batch_ = batch_per_rank;
  if (batch_per_rank > train_rows / world_)
    throw Error(Exit::Usage, fmt::format("sampler: {} training rows are fewer than one global batch ({} x {} ranks)",
                                         train_rows, batch_per_rank, world));
  steps_per_epoch_ = train_rows / (batch_ * world_);
}

std::span<const std::uint64_t> Sampler::batch(std::uint64_t step) {
  const std::uint64_t epoch = step / steps_per_epoch_, b = step % steps_per_epoch_;
  if (epoch != epoch_) {
    // Fisher-Yates, the swap partner of position i drawn from (seed, epoch, i) alone.
    const std::uint64_t key = mix64(mix64(seed_ ^ 0x5a3b'1e00'0000'0004ULL) + epoch * kGolden64);
    perm_.resize(train_rows_);
    std::iota(perm_.begin(), perm_.end(), std::uint64_t{0});
    for (std::uint64_t i = train_rows_ - 1; i > 0; --i) std::swap(perm_[i], perm_[below(bits_at(key, i), i + 1)]);
    epoch_ = epoch;
  }
  const std::uint64_t global = batch_ * world_;
  return std::span<const std::uint64_t>(perm_).subspan(b * global + rank_ * batch_, batch_);
}

std::vector<std::uint64_t> eval_rows(std::uint64_t train_rows, std::uint64_t rows, int rank, int world) {
  if (world < 1) throw Error(Exit::Usage, fmt::format("eval rows: world size must be at least 1, not {}", world));
  if (rank < 0 || rank >= world)
    throw Error(Exit::Usage, fmt::format("eval rows: rank {} is not in [0, {})", rank, world));
  std::vector<std::uint64_t> out;
  if (train_rows >= rows) return out;
  out.reserve((rows - train_rows) / static_cast<std::uint64_t>(world) + 1);
  for (std::uint64_t r = train_rows + static_cast<std::uint64_t>(rank); r < rows;
       r += static_cast<std::uint64_t>(world))
    out.push_back(r);
  return out;
}

}  // namespace rkit::rtrain
