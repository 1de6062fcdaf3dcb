#include "data.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rkit/error.hpp"
#include "rkit/safetensors.hpp"
#include "test_support.hpp"

using rkit::Error;
using rkit::Exit;
using rkit::testing::error_of;
using rkit::testing::write;
using namespace rkit::rtrain;
namespace st = rkit::safetensors;

namespace {

// A fresh directory under GoogleTest's temporary directory, removed at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "rtrain-data.XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct Gathered {
  std::vector<float> x, y;
  std::vector<std::int32_t> labels;
};

Gathered gather(const Dataset& d, const std::vector<std::uint64_t>& rows) {
  Gathered g;
  g.x.resize(rows.size() * d.features());
  if (d.task() == Task::Regression)
    g.y.resize(rows.size() * d.outputs());
  else
    g.labels.resize(rows.size());
  d.gather(rows, g.x.data(), g.y.empty() ? nullptr : g.y.data(), g.labels.empty() ? nullptr : g.labels.data());
  return g;
}

std::vector<std::uint64_t> iota_rows(std::uint64_t first, std::uint64_t n) {
  std::vector<std::uint64_t> r(n);
  std::iota(r.begin(), r.end(), first);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Solves the symmetric positive definite system a x = b (n x n, row-major) by Cholesky.
std::vector<double> solve_spd(std::vector<double> a, std::vector<double> b, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (std::size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (std::size_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (std::size_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < i; ++k) b[i] -= a[i * n + k] * b[k];
    b[i] /= a[i * n + i];
  }
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t k = i + 1; k < n; ++k) b[i] -= a[k * n + i] * b[k];
    b[i] /= a[i * n + i];
  }
  return b;
}

// A .npy file: magic, version, header length, the dict padded to a multiple of 64, data.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

std::unique_ptr<Dataset> load(const std::string& path, Task task = Task::Regression, std::size_t outputs = 1) {
  FileSpec spec;
  spec.path = path;
  spec.task = task;
  spec.outputs = outputs;
  return load_dataset(spec);
}

Error load_error(const std::string& path, Task task = Task::Regression, std::size_t outputs = 1) {
  return error_of([&] { load(path, task, outputs); });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Synthetic data

TEST(RtrainDataSynthetic, DeterministicBySeedAndRow) {
  SyntheticSpec spec;
  spec.rows = 1'000'000;
  spec.outputs = 2;
  spec.seed = 7;
  const auto a = make_synthetic(spec), b = make_synthetic(spec);
  EXPECT_EQ(a->rows(), 1'000'000u);
  EXPECT_EQ(a->features(), 256u);
  EXPECT_EQ(a->outputs(), 2u);
  EXPECT_EQ(a->task(), Task::Regression);

  const std::vector<std::uint64_t> rows = {0, 5, 999'999, 123'456, 5, 42};
  const Gathered ga = gather(*a, rows), gb = gather(*b, rows);
  EXPECT_TRUE(same_bits(ga.x, gb.x));
  EXPECT_TRUE(same_bits(ga.y, gb.y));
  // Row 5 twice in one batch: the same values both times.
  EXPECT_EQ(std::memcmp(&ga.x[1 * 256], &ga.x[4 * 256], 256 * sizeof(float)), 0);

  // A row gathered alone equals the same row within a batch.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Gathered one = gather(*a, {rows[i]});
    EXPECT_EQ(std::memcmp(one.x.data(), &ga.x[i * 256], 256 * sizeof(float)), 0) << "row " << rows[i];
    EXPECT_EQ(std::memcmp(one.y.data(), &ga.y[i * 2], 2 * sizeof(float)), 0) << "row " << rows[i];
  }

  // Another seed gives other data; so does another row.
  spec.seed = 8;
  const Gathered gc = gather(*make_synthetic(spec), rows);
  EXPECT_FALSE(same_bits(ga.x, gc.x));
  EXPECT_FALSE(same_bits(ga.y, gc.y));
  EXPECT_NE(std::memcmp(&ga.x[0], &ga.x[256], 256 * sizeof(float)), 0);

  // Null outputs are allowed: features alone, or targets alone, with the same values.
  std::vector<float> x(256), y(2);
  a->gather(std::span(rows).subspan(2, 1), x.data(), nullptr, nullptr);
  EXPECT_EQ(std::memcmp(x.data(), &ga.x[2 * 256], 256 * sizeof(float)), 0);
  a->gather(std::span(rows).subspan(2, 1), nullptr, y.data(), nullptr);
  EXPECT_EQ(std::memcmp(y.data(), &ga.y[2 * 2], 2 * sizeof(float)), 0);
}

TEST(RtrainDataSynthetic, ConcurrentGathersAgree) {
  SyntheticSpec spec;
  spec.rows = 10'000;
  spec.features = 37;  // not a multiple of the blocks
  spec.factors = 5;
  const auto d = make_synthetic(spec);
  const std::vector<std::uint64_t> rows = iota_rows(0, 4000);
  const Gathered alone = gather(*d, rows);
  std::vector<Gathered> out(4);
  std::vector<std::thread> threads;
  for (auto& o : out) threads.emplace_back([&] { o = gather(*d, rows); });
  for (auto& t : threads) t.join();
  for (const auto& o : out) {
    EXPECT_TRUE(same_bits(o.x, alone.x));
    EXPECT_TRUE(same_bits(o.y, alone.y));
  }
}

TEST(RtrainDataSynthetic, StatisticsLookLikeAFactorModel) {
  SyntheticSpec spec;
  spec.rows = 100'000;
  spec.seed = 3;
  const auto d = make_synthetic(spec);
  constexpr std::size_t kRows = 6000, kF = 256;
  const Gathered g = gather(*d, iota_rows(1000, kRows));

  // Every feature: mean ~0 relative to its std, std in [0.5, 2] (the scales) roughly.
  double pooled_m4 = 0, pooled_m2 = 0;
  for (std::size_t j = 0; j < kF; ++j) {
    double s = 0, s2 = 0;
    for (std::size_t i = 0; i < kRows; ++i) s += g.x[i * kF + j];
    const double mean = s / kRows;
    for (std::size_t i = 0; i < kRows; ++i) s2 += (g.x[i * kF + j] - mean) * (g.x[i * kF + j] - mean);
    const double sd = std::sqrt(s2 / kRows);
    EXPECT_LT(std::fabs(mean), 0.1 * sd) << "feature " << j;
    EXPECT_GT(sd, 0.4) << "feature " << j;
    EXPECT_LT(sd, 2.5) << "feature " << j;
    for (std::size_t i = 0; i < kRows; ++i) {
      const double z = (g.x[i * kF + j] - mean) / sd;
      pooled_m2 += z * z;
      pooled_m4 += z * z * z * z;
    }
  }
  // Fat tails: kurtosis clearly above the normal's 3.
  EXPECT_GT(pooled_m4 / pooled_m2 / (pooled_m2 / (kRows * kF)), 3.3);

  // The target: mean ~0, variance ~1.
  const double ymean = std::accumulate(g.y.begin(), g.y.end(), 0.0) / kRows;
  double yvar = 0;
  for (float v : g.y) yvar += (v - ymean) * (v - ymean);
  yvar /= kRows;
  EXPECT_LT(std::fabs(ymean), 0.1);
  EXPECT_GT(yvar, 0.75);
  EXPECT_LT(yvar, 1.3);

  // Least squares on 32 features plus an intercept, fitted on 4000 rows and scored on the
  // other 2000: the features clearly predict the target.
  constexpr std::size_t kP = 33, kFit = 4000;
  auto feature = [&](std::size_t i, std::size_t p) { return p == 0 ? 1.0 : double(g.x[i * kF + (p - 1)]); };
  std::vector<double> xtx(kP * kP, 0.0), xty(kP, 0.0);
  for (std::size_t i = 0; i < kFit; ++i)
    for (std::size_t p = 0; p < kP; ++p) {
      xty[p] += feature(i, p) * g.y[i];
      for (std::size_t q = 0; q < kP; ++q) xtx[p * kP + q] += feature(i, p) * feature(i, q);
    }
  const std::vector<double> beta = solve_spd(xtx, xty, kP);
  double sse = 0, sst = 0;
  for (std::size_t i = kFit; i < kRows; ++i) {
    double pred = 0;
    for (std::size_t p = 0; p < kP; ++p) pred += beta[p] * feature(i, p);
    sse += (g.y[i] - pred) * (g.y[i] - pred);
    sst += (g.y[i] - ymean) * (g.y[i] - ymean);
  }
  const double r2 = 1 - sse / sst;
  EXPECT_GT(r2, 0.2);
  EXPECT_LT(r2, 0.95);  // noise 0.5 and the nonlinear terms leave something unexplained
}

TEST(RtrainDataSynthetic, ClassesSpreadOverAllBuckets) {
  SyntheticSpec spec;
  spec.rows = 50'000;
  spec.features = 16;
  spec.factors = 4;
  spec.outputs = 5;
  spec.task = Task::Classification;
  const auto d = make_synthetic(spec);
  EXPECT_EQ(d->outputs(), 5u);
  EXPECT_EQ(d->task(), Task::Classification);
  constexpr std::size_t kRows = 10'000;
  const Gathered g = gather(*d, iota_rows(0, kRows));
  std::vector<std::size_t> count(5, 0);
  for (std::int32_t l : g.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 5);
    ++count[static_cast<std::size_t>(l)];
  }
  for (std::size_t c = 0; c < 5; ++c) {
    EXPECT_GT(count[c], kRows / 10) << "class " << c;
    EXPECT_LT(count[c], kRows * 3 / 10) << "class " << c;
  }
  // y is not touched for classification.
  std::vector<float> x(16);
  std::vector<std::int32_t> l(1);
  float y = -7.0f;
  d->gather(std::vector<std::uint64_t>{3}, x.data(), &y, l.data());
  EXPECT_EQ(y, -7.0f);
  EXPECT_EQ(l[0], g.labels[3]);
}

TEST(RtrainDataSynthetic, RefusesBadSpecsAndRows) {
  auto code = [](auto edit) {
    SyntheticSpec s;
    s.rows = 100;
    edit(s);
    return error_of([&] { make_synthetic(s); }).code();
  };
  EXPECT_EQ(code([](SyntheticSpec& s) { s.rows = 0; }), Exit::Usage);
  EXPECT_EQ(code([](SyntheticSpec& s) { s.features = 0; }), Exit::Usage);
  EXPECT_EQ(code([](SyntheticSpec& s) { s.factors = 0; }), Exit::Usage);
  EXPECT_EQ(code([](SyntheticSpec& s) { s.outputs = 0; }), Exit::Usage);
  EXPECT_EQ(code([](SyntheticSpec& s) { s.task = Task::Classification; }), Exit::Usage);  // 1 class
  EXPECT_EQ(code([](SyntheticSpec& s) { s.noise = -1; }), Exit::Usage);
  EXPECT_EQ(code([](SyntheticSpec& s) { s.noise = std::numeric_limits<double>::quiet_NaN(); }), Exit::Usage);

  SyntheticSpec s;
  s.rows = 100;
  s.factors = 1;  // one factor: the product term squares it
  s.noise = 0;
  const auto d = make_synthetic(s);
  const Gathered g = gather(*d, iota_rows(0, 100));
  EXPECT_TRUE(std::all_of(g.x.begin(), g.x.end(), [](float v) { return std::isfinite(v); }));
  const Error e = error_of([&] { gather(*d, {100}); });
  EXPECT_EQ(e.code(), Exit::Software);
  EXPECT_NE(std::string(e.what()).find("row 100"), std::string::npos) << e.what();
}

// ---------------------------------------------------------------------------------------
// Sampler and held-out rows

TEST(RtrainDataSampler, RanksSplitTheOneRankBatch) {
  constexpr std::uint64_t kTrain = 1000;
  Sampler one(kTrain, 11, 0, 1, 64), r0(kTrain, 11, 0, 2, 32), r1(kTrain, 11, 1, 2, 32);
  EXPECT_EQ(one.steps_per_epoch(), 15u);
  EXPECT_EQ(r0.steps_per_epoch(), 15u);
  for (std::uint64_t step : {0, 1, 14, 15, 16, 44, 100}) {
    const auto all = one.batch(step);
    const std::vector<std::uint64_t> whole(all.begin(), all.end());
    const auto a = r0.batch(step);
    std::vector<std::uint64_t> joined(a.begin(), a.end());
    const auto b = r1.batch(step);
    joined.insert(joined.end(), b.begin(), b.end());
    EXPECT_EQ(joined, whole) << "step " << step;
    std::set<std::uint64_t> distinct(joined.begin(), joined.end());
    EXPECT_EQ(distinct.size(), 64u) << "step " << step;
  }
}

TEST(RtrainDataSampler, EachTrainRowOncePerEpoch) {
  constexpr std::uint64_t kTrain = 960;
  for (int world : {1, 4}) {
    for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int> seen(kTrain, 0);
      for (int rank = 0; rank < world; ++rank) {
        Sampler s(kTrain, 5, rank, world, 320 / static_cast<std::size_t>(world));
        ASSERT_EQ(s.steps_per_epoch(), 3u);
        for (std::uint64_t b = 0; b < 3; ++b)
          for (std::uint64_t r : s.batch(epoch * 3 + b)) {
            ASSERT_LT(r, kTrain);
            ++seen[r];
          }
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }))
          << "world " << world << " epoch " << epoch;
    }
  }
  // Not divisible: every row at most once, and all but the remainder used.
  Sampler s(1000, 5, 0, 1, 300);
  EXPECT_EQ(s.steps_per_epoch(), 3u);
  std::set<std::uint64_t> used;
  for (std::uint64_t b = 0; b < 3; ++b)
    for (std::uint64_t r : s.batch(b)) EXPECT_TRUE(used.insert(r).second);
  EXPECT_EQ(used.size(), 900u);
}

TEST(RtrainDataSampler, EpochsDifferAndReplayExactly) {
  Sampler a(500, 9, 0, 1, 100);
  const auto e0 = a.batch(0);
  const std::vector<std::uint64_t> first(e0.begin(), e0.end());
  const auto e1 = a.batch(5);  // epoch 1, batch 0
  const std::vector<std::uint64_t> second(e1.begin(), e1.end());
  EXPECT_NE(first, second);
  // Any step, from a fresh sampler, in any order, equals the sequential run's.
  Sampler b(500, 9, 0, 1, 100);
  const auto late = b.batch(5);
  EXPECT_EQ(std::vector<std::uint64_t>(late.begin(), late.end()), second);
  const auto early = b.batch(0);
  EXPECT_EQ(std::vector<std::uint64_t>(early.begin(), early.end()), first);
  // Another seed, another order.
  Sampler c(500, 10, 0, 1, 100);
  const auto other = c.batch(0);
  EXPECT_NE(std::vector<std::uint64_t>(other.begin(), other.end()), first);
  // The permutation is not the identity.
  std::vector<std::uint64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, first);
}

TEST(RtrainDataSampler, RefusesBadArguments) {
  EXPECT_EQ(error_of([] { Sampler(100, 0, 0, 2, 51); }).code(), Exit::Usage);  // 102 > 100 rows
  EXPECT_EQ(error_of([] { Sampler(100, 0, 0, 1, 0); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([] { Sampler(100, 0, 2, 2, 10); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([] { Sampler(100, 0, -1, 2, 10); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([] { Sampler(100, 0, 0, 0, 10); }).code(), Exit::Usage);
  EXPECT_EQ(Sampler(100, 0, 1, 2, 50).steps_per_epoch(), 1u);
}

TEST(RtrainDataSampler, EvalRowsSplitTheTail) {
  std::vector<int> seen(100, 0);
  for (int rank = 0; rank < 3; ++rank)
    for (std::uint64_t r : eval_rows(90, 100, rank, 3)) {
      ASSERT_GE(r, 90u);
      ASSERT_LT(r, 100u);
      ++seen[r];
    }
  for (std::uint64_t r = 0; r < 100; ++r) EXPECT_EQ(seen[r], r >= 90 ? 1 : 0) << r;
  EXPECT_EQ(eval_rows(90, 100, 1, 3), (std::vector<std::uint64_t>{91, 94, 97}));
  EXPECT_TRUE(eval_rows(100, 100, 0, 1).empty());
  EXPECT_EQ(error_of([] { eval_rows(90, 100, 3, 3); }).code(), Exit::Usage);
}

// ---------------------------------------------------------------------------------------
// CSV

TEST(RtrainDataCsv, WithAndWithoutHeader) {
  ScratchDir dir;
  write(dir.file("h.csv"), "a,b,target\n1,2,3\n4.5, -5e1 ,6\r\n\n");
  write(dir.file("n.csv"), "1,2,3\n4.5,-50,6");
  for (const char* name : {"h.csv", "n.csv"}) {
    const auto d = load(dir.file(name));
    ASSERT_EQ(d->rows(), 2u) << name;
    EXPECT_EQ(d->features(), 2u);
    EXPECT_EQ(d->outputs(), 1u);
    const Gathered g = gather(*d, {1, 0});
    EXPECT_EQ(g.x, (std::vector<float>{4.5f, -50.0f, 1.0f, 2.0f}));
    EXPECT_EQ(g.y, (std::vector<float>{6.0f, 3.0f}));
  }
  // Two targets.
  const auto d2 = load(dir.file("h.csv"), Task::Regression, 2);
  EXPECT_EQ(d2->features(), 1u);
  EXPECT_EQ(gather(*d2, {0}).y, (std::vector<float>{2.0f, 3.0f}));
}

TEST(RtrainDataCsv, Classification) {
  ScratchDir dir;
  write(dir.file("c.csv"), "x1,x2,label\n0.5,1,0\n1.5,2,2\n2.5,3,1.0\n");
  const auto d = load(dir.file("c.csv"), Task::Classification, 0);  // classes from the labels
  EXPECT_EQ(d->outputs(), 3u);
  EXPECT_EQ(d->task(), Task::Classification);
  const Gathered g = gather(*d, {0, 1, 2});
  EXPECT_EQ(g.labels, (std::vector<std::int32_t>{0, 2, 1}));
  EXPECT_EQ(g.x[2], 1.5f);
  EXPECT_EQ(load(dir.file("c.csv"), Task::Classification, 4)->outputs(), 4u);

  Error e = load_error(dir.file("c.csv"), Task::Classification, 2);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(std::string(e.what()), dir.file("c.csv") + ":3: label 2 is out of range [0, 2)");
  write(dir.file("f.csv"), "0.5,1,0\n1.5,2,1.5\n");
  e = load_error(dir.file("f.csv"), Task::Classification, 0);
  EXPECT_EQ(std::string(e.what()), dir.file("f.csv") + ":2: label 1.5 is not an integer");
  write(dir.file("neg.csv"), "0.5,1,-1\n");
  EXPECT_EQ(load_error(dir.file("neg.csv"), Task::Classification, 3).code(), Exit::DataErr);
  write(dir.file("zero.csv"), "0.5,1,0\n1,1,0\n");
  EXPECT_EQ(load_error(dir.file("zero.csv"), Task::Classification, 0).code(), Exit::DataErr);
  EXPECT_EQ(load_error(dir.file("c.csv"), Task::Classification, 1).code(), Exit::Usage);
}

TEST(RtrainDataCsv, MalformedFilesNameTheLine) {
  ScratchDir dir;
  const std::string p = dir.file("data.csv");
  write(p, "a,b,c\n1,2,3\n4,5\n");
  Error e = load_error(p);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(std::string(e.what()), p + ":3: expected 3 columns, found 2");
  write(p, "1,2,3\n4,5,6,7\n");
  EXPECT_EQ(std::string(load_error(p).what()), p + ":2: expected 3 columns, found 4");

  write(p, "1,2,3\n4,abc,6\n");
  e = load_error(p);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(std::string(e.what()), p + ":2: 'abc' is not a number (column 2)");
  write(p, "x,y\n1,\n");
  EXPECT_EQ(std::string(load_error(p).what()), p + ":2: '' is not a number (column 2)");

  write(p, "a,b\n1,2\n\n3,4\n");
  EXPECT_EQ(std::string(load_error(p).what()), p + ":3: empty line");

  write(p, "a,b,c\n1,2,3\n4,nan,6\n");
  e = load_error(p);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(std::string(e.what()), p + ":3: column 2 is nan: features and targets must be finite numbers");
  write(p, "1,2,3\n4,5,inf\n");
  EXPECT_EQ(std::string(load_error(p).what()), p + ":2: column 3 is inf: features and targets must be finite numbers");
  write(p, "1,2,1e300\n");
  EXPECT_EQ(std::string(load_error(p).what()), p + ":1: '1e300' is too large for a float (column 3)");
  write(p, "1e-50,2,3\n");  // too small for a float: 0
  EXPECT_EQ(gather(*load(p), {0}).x[0], 0.0f);

  write(p, "");
  e = load_error(p);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  write(p, "a,b,c\n");
  EXPECT_NE(std::string(load_error(p).what()).find("no rows"), std::string::npos);
  write(p, "a\n1\n");  // one column: no feature before the target
  EXPECT_EQ(std::string(load_error(p).what()), p + ": needs at least 2 columns (features, then the target), found 1");
  write(p, "1,2\n");  // regression with 2 targets out of 2 columns
  EXPECT_EQ(load_error(p, Task::Regression, 2).code(), Exit::DataErr);
}

TEST(RtrainDataFiles, FormatsAndMissingFiles) {
  ScratchDir dir;
  write(dir.file("d.txt"), "1,2\n");
  Error e = load_error(dir.file("d.txt"));
  EXPECT_EQ(e.code(), Exit::Usage);
  EXPECT_EQ(std::string(e.what()), dir.file("d.txt") + ": unknown data format (expected .csv, .npy or .safetensors)");
  EXPECT_EQ(load_error(dir.file("missing.csv")).code(), Exit::NoInput);
  EXPECT_EQ(load_error(dir.file("missing.npy")).code(), Exit::NoInput);
  EXPECT_EQ(load_error(dir.file("missing.safetensors")).code(), Exit::NoInput);
  EXPECT_EQ(load_error(dir.file("d.csv"), Task::Regression, 0).code(), Exit::Usage);
}

// ---------------------------------------------------------------------------------------
// NumPy

TEST(RtrainDataNpy, Float32AndFloat64) {
  ScratchDir dir;
  const std::vector<float> f4 = {1, 2, 3, 4, 5, 6};  // 2 rows x 3 columns
  write(dir.file("a.npy"), npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw_bytes(f4)));
  auto d = load(dir.file("a.npy"));
  EXPECT_EQ(d->rows(), 2u);
  EXPECT_EQ(d->features(), 2u);
  Gathered g = gather(*d, {1, 0});
  EXPECT_EQ(g.x, (std::vector<float>{4, 5, 1, 2}));
  EXPECT_EQ(g.y, (std::vector<float>{6, 3}));

  const std::vector<double> f8 = {0.5, 1.5, 0, 2.5, 3.5, 1, 4.5, 5.5, 1};  // 3 x 3, labels 0/1
  for (int major : {1, 2, 3}) {
    const std::string p = dir.file("b" + std::to_string(major) + ".npy");
    write(p, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 3), }", raw_bytes(f8), major));
    d = load(p, Task::Classification, 2);
    EXPECT_EQ(d->rows(), 3u);
    EXPECT_EQ(d->outputs(), 2u);
    g = gather(*d, {0, 1, 2});
    EXPECT_EQ(g.x, (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));
    EXPECT_EQ(g.labels, (std::vector<std::int32_t>{0, 1, 1}));
  }
}

TEST(RtrainDataNpy, RefusesWhatItCannotRead) {
  ScratchDir dir;
  const std::string p = dir.file("bad.npy");
  const std::vector<float> f4 = {1, 2, 3, 4, 5, 6};
  auto message = [&](const std::string& bytes) {
    write(p, bytes);
    const Error e = load_error(p);
    EXPECT_EQ(e.code(), Exit::DataErr) << e.what();
    return std::string(e.what());
  };
  EXPECT_NE(message(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", raw_bytes(f4)))
                .find("Fortran-order"),
            std::string::npos);
  EXPECT_NE(message(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", raw_bytes(f4)))
                .find("shape (6,) is not 2-D"),
            std::string::npos);
  EXPECT_NE(message(npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", raw_bytes(f4)))
                .find("dtype '<i4' is not supported"),
            std::string::npos);
  EXPECT_NE(message(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", raw_bytes(f4)))
                .find("dtype '>f4'"),
            std::string::npos);
  const std::string whole = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw_bytes(f4));
  EXPECT_NE(message(whole.substr(0, whole.size() - 3)).find("truncated"), std::string::npos);
  EXPECT_NE(message(whole.substr(0, 20)).find("truncated"), std::string::npos);
  EXPECT_NE(message(whole + "xx").find("trailing"), std::string::npos);
  EXPECT_NE(message("PK\x03\x04 not numpy at all").find("not a .npy file"), std::string::npos);
  EXPECT_NE(
      message(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3) ", raw_bytes(f4))).find("malformed"),
      std::string::npos);

  const std::vector<float> nan = {1, 2, 3, 4, std::numeric_limits<float>::quiet_NaN(), 6};
  EXPECT_EQ(message(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw_bytes(nan))),
            p + ": [1, 1] is nan: features and targets must be finite numbers");
}

// ---------------------------------------------------------------------------------------
// safetensors

TEST(RtrainDataSafetensors, RegressionAndClassification) {
  ScratchDir dir;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};         // 3 rows x 2 features
  const std::vector<double> y = {10, 11, 20, 21, 30, 31};  // 3 rows x 2 targets
  const std::vector<std::int64_t> labels = {2, 0, 1};
  {
    st::Writer w;
    w.add("X", st::Dtype::F32, {3, 2}, bytes_of(x));
    w.add("y", st::Dtype::F64, {3, 2}, bytes_of(y));
    w.write(dir.file("r.safetensors"));
  }
  {
    st::Writer w;
    w.add("y", st::Dtype::I64, {3}, bytes_of(labels));
    w.add("X", st::Dtype::F32, {3, 2}, bytes_of(x));
    w.write(dir.file("c.safetensors"));
  }
  auto d = load(dir.file("r.safetensors"), Task::Regression, 0);
  EXPECT_EQ(d->rows(), 3u);
  EXPECT_EQ(d->features(), 2u);
  EXPECT_EQ(d->outputs(), 2u);
  Gathered g = gather(*d, {2, 0});
  EXPECT_EQ(g.x, (std::vector<float>{5, 6, 1, 2}));
  EXPECT_EQ(g.y, (std::vector<float>{30, 31, 10, 11}));
  EXPECT_EQ(load(dir.file("r.safetensors"), Task::Regression, 2)->outputs(), 2u);
  Error e = load_error(dir.file("r.safetensors"), Task::Regression, 1);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("2 target column(s) but outputs is 1"), std::string::npos) << e.what();

  d = load(dir.file("c.safetensors"), Task::Classification, 0);
  EXPECT_EQ(d->outputs(), 3u);
  g = gather(*d, {0, 1, 2});
  EXPECT_EQ(g.labels, (std::vector<std::int32_t>{2, 0, 1}));
  e = load_error(dir.file("c.safetensors"), Task::Classification, 2);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(std::string(e.what()), dir.file("c.safetensors") + ": y[0]: label 2 is out of range [0, 2)");
}

TEST(RtrainDataSafetensors, RefusesBadTensors) {
  ScratchDir dir;
  const std::string p = dir.file("bad.safetensors");
  const std::vector<float> x = {1, 2, 3, 4, 5, std::numeric_limits<float>::infinity()};
  const std::vector<float> y3 = {1, 2, 3}, y2 = {1, 2};
  const std::vector<float> fy = {0, 1.5f, 1};
  const std::vector<float> clean = {1, 2, 3, 4, 5, 6};
  auto message = [&](auto build, Task task = Task::Regression, std::size_t outputs = 1) {
    st::Writer w;
    build(w);
    w.write(p);
    const Error e = load_error(p, task, outputs);
    EXPECT_EQ(e.code(), Exit::DataErr) << e.what();
    return std::string(e.what());
  };
  EXPECT_EQ(message([&](st::Writer& w) {
              w.add("X", st::Dtype::F32, {3, 2}, bytes_of(x));
              w.add("y", st::Dtype::F32, {3}, bytes_of(y3));
            }),
            p + ": X[2, 1] is inf: features and targets must be finite numbers");
  EXPECT_NE(message([&](st::Writer& w) {
              w.add("X", st::Dtype::F32, {3, 2}, bytes_of(x));
            }).find("no tensor \"y\""),
            std::string::npos);
  EXPECT_NE(message([&](st::Writer& w) {
              w.add("X", st::Dtype::F32, {3, 2}, bytes_of(x));
              w.add("y", st::Dtype::F32, {2}, bytes_of(y2));
            }).find("y has 2 rows but X has 3"),
            std::string::npos);
  EXPECT_NE(message([&](st::Writer& w) {
              w.add("X", st::Dtype::F32, {6}, bytes_of(x));
              w.add("y", st::Dtype::F32, {3}, bytes_of(y3));
            }).find("X has shape (6,)"),
            std::string::npos);
  EXPECT_EQ(message(
                [&](st::Writer& w) {
                  w.add("X", st::Dtype::F32, {3, 2}, bytes_of(clean));
                  w.add("y", st::Dtype::F32, {3}, bytes_of(fy));
                },
                Task::Classification, 2),
            p + ": y[1]: label 1.5 is not an integer");
}
