// File: data.hpp
//
// The data layer of `rtrain run`: datasets of float feature rows with regression
// targets or class labels, either generated on the fly (a synthetic "market-like"
// factor model) or loaded from a .csv, .npy or .safetensors file, and the sampler that
// says which rows each rank trains on at each step.
//
//   auto data = make_synthetic({.rows = 1'000'000, .features = 256});
//   Sampler sampler(train_rows, seed, rank, world, batch);
//   std::span<const std::uint64_t> rows = sampler.batch(step);   // this rank's rows
//   data->gather(rows, x.data(), y.data(), nullptr);              // x: rows x features
//
// Rows [0, train_rows) are trained on and the tail [train_rows, rows()) is held out
// for evaluation (with time-ordered files nothing of the future leaks into training).
// Every row index the sampler hands out depends only on (seed, step, rank, world), so a
// restarted run computes exactly the batches it would have seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace rkit::rtrain {

enum class Task { Regression, Classification };

// Rows of `features()` float features, each with `outputs()` regression targets or one
// class label. Implementations are immutable after construction.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::uint64_t rows() const = 0;
  virtual std::size_t features() const = 0;
  // Regression: targets per row (>= 1). Classification: the number of classes (>= 2).
  virtual std::size_t outputs() const = 0;
  virtual Task task() const = 0;
  // For each i < rows.size(): x[i*features() ..] = the features of row rows[i];
  // regression: y[i*outputs() ..] = its targets (labels is not touched);
  // classification: labels[i] = its class in [0, outputs()) (y is not touched).
  // An output pointer the task does not use may be null. Every row index must be
  // < rows(): one that is not throws Error(Software). Thread-safe (const, no state).
  // Cost: a copy per row for loaded files; ~features * factors flops for synthetic.
  virtual void gather(std::span<const std::uint64_t> rows, float* x, float* y, std::int32_t* labels) const = 0;
};

// The synthetic factor model. Row i depends only on (seed, i): any row can be generated
// alone, by any rank, in any order, with the same bits (on any x86-64 CPU, for a given
// build and C library: the model's constants use libm). Per row:
//   f = v * z / sqrt(E v^2): `factors` latent factors, z ~ N(0, 1) (approximately:
//       a sum of four uniforms), v a common volatility regime (2 on one row in 8, else 1);
//   x_j = s_j (B_j . f + noise * e_j) / sqrt(|B_j|^2 + noise^2): loadings B (a "market"
//       factor every feature loads positively on, then the others) and scales s_j in
//       [0.5, 2] fixed by the seed; e_j fat-tailed idiosyncratic noise (a scale mixture
//       of a 4096-level discretised normal, variance 1, kurtosis ~8). Features have mean
//       0 and std s_j.
//   y_k = (g_k(f) + noise * e'_k) / sqrt(1 + noise^2), g_k a linear combination of f
//       plus a tanh of one factor and the product of two, standardised to mean 0 and
//       variance 1 (constants estimated once from the model at construction).
// Classification: label = the bucket of y_0 among `outputs` classes split at the
// standard normal's quantiles 1/C, 2/C, ... (so classes are roughly balanced).
struct SyntheticSpec {
  std::uint64_t rows = 1'000'000;
  std::size_t features = 256, factors = 8, outputs = 1;
  Task task = Task::Regression;
  double noise = 0.5;  // >= 0: idiosyncratic noise of features and noise of targets
  std::uint64_t seed = 0;
};

// Throws Error(Usage) when rows, features or factors is 0, outputs is 0 (regression) or
// < 2 (classification), or noise is negative or not finite. Construction costs ~1 ms
// (plus 4 * features * factors bytes). gather generates ~2.2M rows/s on one core at 256
// features and 8 factors (~1.7M without AVX2).
std::unique_ptr<Dataset> make_synthetic(const SyntheticSpec& spec);

// A data file, its format chosen by extension:
//   .csv          comma-separated numbers (std::from_chars), every row with the same
//                 number of columns; an optional header line (taken as one when its
//                 fields are not all numbers); a blank last line is fine.
//   .npy          NumPy format 1.0/2.0/3.0, a 2-D C-order little-endian <f4 or <f8 array.
//   .safetensors  tensor "X" [rows, features] (any dtype) and "y" [rows] or
//                 [rows, outputs] (regression) / [rows] or [rows, 1] (classification).
// For .csv and .npy, regression targets are the last `outputs` columns and a class label
// is the last column; the columns before them are the features (at least one).
// For .safetensors regression, y's columns must equal `outputs`, or outputs is 0 to take
// them from the file.
// Classification: classes = outputs, or max label + 1 when outputs is 0; labels are
// integers (stored as any number type) in [0, classes), and there must be >= 2 classes.
struct FileSpec {
  std::string path;
  Task task = Task::Regression;
  std::size_t outputs = 1;
};

// Loads the whole file into memory as float arrays (doubles are rounded to float).
// Errors: another extension, or outputs that the format cannot take (regression with 0
// outputs for .csv/.npy, classification with outputs 1): Error(Usage); a missing file:
// Error(NoInput); an unreadable one: Error(NoPerm) or Error(IoErr); malformed contents,
// no rows, no feature column, a NaN or infinity in features or targets, a label that is
// not an integer in range: Error(DataErr), naming the file and the line (.csv) or the
// row and column (.npy: "[row, column]", .safetensors: "X[row, column]", "y[row]").
std::unique_ptr<Dataset> load_dataset(const FileSpec& spec);

// The rows one rank trains on, step by step. Global step s (from 0) lies in epoch
// s / steps_per_epoch(). Each epoch is a permutation of [0, train_rows) computed from
// (seed, epoch) only (Fisher-Yates driven by a counter-based hash: nothing is carried
// between epochs, so any step can be computed after a restart). Global batch b of the
// epoch is perm[b*G, (b+1)*G) with G = batch_per_rank * world, and this rank's rows are
// the slice [rank*batch_per_rank, (rank+1)*batch_per_rank) of it. So the ranks' rows are
// disjoint and their union, in rank order, is the 1-rank batch of G rows. The last
// train_rows % G rows of each epoch's permutation are skipped.
// Not thread-safe (batch() caches the epoch's permutation: 8 bytes per training row).
class Sampler {
 public:
  // Throws Error(Usage) when world < 1, rank is not in [0, world), batch_per_rank is 0,
  // or train_rows < batch_per_rank * world.
  Sampler(std::uint64_t train_rows, std::uint64_t seed, int rank, int world, std::size_t batch_per_rank);
  // floor(train_rows / (batch_per_rank * world)), >= 1.
  std::uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  // This rank's batch_per_rank rows of global step `step`. The span is valid until the
  // next call. Cost: O(train_rows) on the first step of an epoch, O(1) otherwise.
  std::span<const std::uint64_t> batch(std::uint64_t step);

 private:
  std::uint64_t train_rows_, seed_;
  std::size_t rank_, world_, batch_;
  std::uint64_t steps_per_epoch_;
  std::uint64_t epoch_ = ~std::uint64_t{0};  // the epoch perm_ holds; none yet
  std::vector<std::uint64_t> perm_;
};

// This rank's share of the held-out rows [train_rows, rows): train_rows + rank,
// train_rows + rank + world, ... (ascending; empty when train_rows >= rows). Ranks'
// shares are disjoint and together cover the tail. Throws Error(Usage) when world < 1
// or rank is not in [0, world).
std::vector<std::uint64_t> eval_rows(std::uint64_t train_rows, std::uint64_t rows, int rank, int world);

}  // namespace rkit::rtrain
