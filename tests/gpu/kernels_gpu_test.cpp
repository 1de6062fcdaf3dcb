// The CUDA kernels of kernels/ against their CPU references, on a real GPU. Not a
// ctest test: it fails (never skips) without a GPU; tests/gpu/gpu-check.sh runs it.
//
// sgemm: every entry of C, on shapes that are and are not multiples of the 128x128x8
// tiles, with and without float4 loads (leading dimensions and pointers aligned or
// not), alpha/beta, padding left alone, and the BLAS corner cases. Tolerance per entry:
// 2 (k + 2) FLT_EPSILON (sum_l |alpha a_il b_lj| + |beta c_ij|), twice the classic bound
// for a float sum of k + 2 terms in any order. stream: bit-identical to the references.
// mlp: within mlp.hpp's tolerances of the references (activations and derivatives
// 4e-6 (1 + |exact|), sums relative 1e-5, AdamW 4 ulps), sums bit-identical run to run.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gemm.hpp"
#include "kernel_test_data.hpp"
#include "mlp.hpp"
#include "stream.hpp"

namespace {

using namespace rkit::kernels;
using namespace rkit::kernel_tests;

#define ASSERT_CUDA(call)                                                    \
  do {                                                                       \
    const cudaError_t rc_ = (call);                                          \
    ASSERT_EQ(rc_, cudaSuccess) << #call << ": " << cudaGetErrorString(rc_); \
  } while (0)

// cudaMalloc'd memory, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) { rc_ = cudaMalloc(&ptr_, bytes > 0 ? bytes : 1); }
  ~DeviceBuffer() {
    if (ptr_) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  cudaError_t status() const { return rc_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaError_t rc_ = cudaSuccess;
};

class KernelsGpu : public testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    ASSERT_EQ(rc, cudaSuccess) << "no usable CUDA device: " << cudaGetErrorString(rc);
    ASSERT_GT(count, 0) << "no CUDA device";
    ASSERT_CUDA(cudaSetDevice(0));
  }
};

constexpr float kPadding = 1234.5f;

// One sgemm problem: row-major with leading dimensions lda, ldb, ldc (>= k, n, n), and
// `offset` floats before each matrix (1 makes the pointers unaligned for float4).
struct Gemm {
  int m, n, k, lda, ldb, ldc, offset;
  float alpha, beta;
};

// Runs `g` on the GPU and the reference and compares every element of C, padding too.
void check_sgemm(const Gemm& g, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "m=" << g.m << " n=" << g.n << " k=" << g.k << " lda=" << g.lda << " ldb=" << g.ldb
                                  << " ldc=" << g.ldc << " offset=" << g.offset << " alpha=" << g.alpha
                                  << " beta=" << g.beta);
  const std::size_t a_size = g.offset + static_cast<std::size_t>(std::max(g.m, 1)) * g.lda;
  const std::size_t b_size = g.offset + static_cast<std::size_t>(std::max(g.k, 1)) * g.ldb;
  const std::size_t c_size = g.offset + static_cast<std::size_t>(std::max(g.m, 1)) * g.ldc;
  std::vector<float> a(a_size, kPadding), b(b_size, kPadding), c(c_size, kPadding);
  for (int i = 0; i < g.m; ++i)
    for (int l = 0; l < g.k; ++l)
      a[g.offset + static_cast<std::size_t>(i) * g.lda + l] = static_cast<float>(random_value(seed));
  for (int l = 0; l < g.k; ++l)
    for (int j = 0; j < g.n; ++j)
      b[g.offset + static_cast<std::size_t>(l) * g.ldb + j] = static_cast<float>(random_value(seed));
  for (int i = 0; i < g.m; ++i)
    for (int j = 0; j < g.n; ++j)
      c[g.offset + static_cast<std::size_t>(i) * g.ldc + j] = static_cast<float>(random_value(seed));

  DeviceBuffer da(a_size * sizeof(float)), db(b_size * sizeof(float)), dc(c_size * sizeof(float));
  ASSERT_CUDA(da.status());
  ASSERT_CUDA(db.status());
  ASSERT_CUDA(dc.status());
  ASSERT_CUDA(cudaMemcpy(da.as<float>(), a.data(), a_size * sizeof(float), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(db.as<float>(), b.data(), b_size * sizeof(float), cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(dc.as<float>(), c.data(), c_size * sizeof(float), cudaMemcpyHostToDevice));
  ASSERT_CUDA(sgemm(g.m, g.n, g.k, g.alpha, da.as<float>() + g.offset, g.lda, db.as<float>() + g.offset, g.ldb, g.beta,
                    dc.as<float>() + g.offset, g.ldc, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> got(c_size);
  ASSERT_CUDA(cudaMemcpy(got.data(), dc.as<float>(), c_size * sizeof(float), cudaMemcpyDeviceToHost));

  std::vector<float> want = c;
  sgemm_ref(g.m, g.n, g.k, g.alpha, a.data() + g.offset, g.lda, b.data() + g.offset, g.ldb, g.beta,
            want.data() + g.offset, g.ldc);
  std::size_t bad = 0;
  for (std::size_t at = 0; at < c_size; ++at) {
    const bool inside = at >= static_cast<std::size_t>(g.offset) && static_cast<int>((at - g.offset) / g.ldc) < g.m &&
                        static_cast<int>((at - g.offset) % g.ldc) < g.n;
    if (!inside) {
      if (got[at] != kPadding && ++bad <= 5) ADD_FAILURE() << "padding of C written at " << at;
      continue;
    }
    const int i = static_cast<int>((at - g.offset) / g.ldc), j = static_cast<int>((at - g.offset) % g.ldc);
    double magnitude = g.beta != 0 ? std::fabs(static_cast<double>(g.beta) * c[at]) : 0;
    for (int l = 0; l < g.k; ++l)
      magnitude += std::fabs(static_cast<double>(g.alpha) * a[g.offset + static_cast<std::size_t>(i) * g.lda + l] *
                             b[g.offset + static_cast<std::size_t>(l) * g.ldb + j]);
    const double tolerance = 2.0 * (g.k + 2) * FLT_EPSILON * magnitude;
    if (!(std::fabs(static_cast<double>(got[at]) - want[at]) <= tolerance) && ++bad <= 5)
      ADD_FAILURE() << "C[" << i << "][" << j << "] = " << got[at] << ", the reference says " << want[at]
                    << " (tolerance " << tolerance << ")";
  }
  EXPECT_EQ(bad, 0u) << "entries wrong";
}

struct Shape {
  int m, n, k;
};
const Shape kShapes[] = {{1, 1, 1},       {1, 1, 17},     {2, 3, 4},       {7, 9, 5},     {31, 33, 35},
                         {127, 129, 130}, {128, 128, 8},  {128, 128, 128}, {129, 127, 9}, {256, 256, 256},
                         {255, 257, 511}, {1000, 3, 700}, {3, 1000, 700},  {33, 1000, 1}, {513, 257, 1025},
                         {64, 2048, 5},   {1, 4096, 64},  {4096, 1, 64},   {136, 260, 12}};

TEST_F(KernelsGpu, SgemmMatchesTheReferenceOnEveryShape) {
  std::uint64_t seed = 1;
  for (Shape s : kShapes) {
    // Contiguous (float4 loads when n and k are multiples of 4), then padded.
    check_sgemm({s.m, s.n, s.k, s.k, s.n, s.n, 0, 1.0f, 0.0f}, ++seed);
    check_sgemm({s.m, s.n, s.k, s.k + 4, s.n + 8, s.n + 4, 0, 1.5f, -0.5f}, ++seed);
    check_sgemm({s.m, s.n, s.k, s.k + 3, s.n + 1, s.n + 5, 0, -2.0f, 1.0f}, ++seed);
    if (HasFailure()) return;  // one shape's report is enough
  }
}

TEST_F(KernelsGpu, SgemmUnalignedPointersTakeTheScalarPath) {
  check_sgemm({100, 132, 64, 64, 132, 132, 1, 1.0f, 0.0f}, 41);
  check_sgemm({257, 255, 129, 132, 256, 256, 3, 0.5f, 2.0f}, 42);
}

TEST_F(KernelsGpu, SgemmLargeSquare) {
  check_sgemm({1024, 1024, 1024, 1024, 1024, 1024, 0, 1.0f, 0.0f}, 43);
  check_sgemm({1031, 1029, 1027, 1027, 1029, 1029, 0, 1.0f, 1.0f}, 44);
}

TEST_F(KernelsGpu, SgemmBetaZeroDoesNotReadC) {
  const int m = 130, n = 132, k = 20;
  std::vector<float> a(static_cast<std::size_t>(m) * k, 1.0f), b(static_cast<std::size_t>(k) * n, 0.5f);
  std::vector<float> c(static_cast<std::size_t>(m) * n, std::numeric_limits<float>::quiet_NaN());
  DeviceBuffer da(a.size() * 4), db(b.size() * 4), dc(c.size() * 4);
  ASSERT_CUDA(cudaMemcpy(da.as<float>(), a.data(), a.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(db.as<float>(), b.data(), b.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(dc.as<float>(), c.data(), c.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(sgemm(m, n, k, 1.0f, da.as<float>(), k, db.as<float>(), n, 0.0f, dc.as<float>(), n, nullptr));
  ASSERT_CUDA(cudaMemcpy(c.data(), dc.as<float>(), c.size() * 4, cudaMemcpyDeviceToHost));
  for (float x : c) ASSERT_EQ(x, 10.0f);  // 20 x 1 x 0.5, exact
}

TEST_F(KernelsGpu, SgemmKZeroScalesCByBeta) { check_sgemm({37, 41, 0, 1, 41, 41, 0, 3.0f, 0.5f}, 45); }

TEST_F(KernelsGpu, SgemmRejectsBadArgumentsAndSkipsEmptyOnes) {
  DeviceBuffer buf(64 * sizeof(float));
  float* p = buf.as<float>();
  EXPECT_EQ(sgemm(-1, 4, 4, 1, p, 4, p, 4, 0, p, 4, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(sgemm(4, 4, 4, 1, p, 3, p, 4, 0, p, 4, nullptr), cudaErrorInvalidValue);  // lda < k
  EXPECT_EQ(sgemm(4, 4, 4, 1, p, 4, p, 3, 0, p, 4, nullptr), cudaErrorInvalidValue);  // ldb < n
  EXPECT_EQ(sgemm(4, 4, 4, 1, p, 4, p, 4, 0, p, 3, nullptr), cudaErrorInvalidValue);  // ldc < n
  EXPECT_EQ(sgemm(0, 4, 4, 1, p, 4, p, 4, 0, p, 4, nullptr), cudaSuccess);
  EXPECT_EQ(sgemm(4, 0, 4, 1, p, 4, p, 1, 0, p, 1, nullptr), cudaSuccess);
  ASSERT_CUDA(cudaDeviceSynchronize());
}

// stream: every kernel bit for bit against its reference, on sizes around the block size.
TEST_F(KernelsGpu, StreamKernelsEqualTheReferences) {
  for (std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{257}, std::size_t{1} << 20,
                        (std::size_t{1} << 20) + 3}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    std::uint64_t seed = n;
    std::vector<double> x(n), y(n);
    for (auto& v : x) v = random_value(seed) * 100;
    for (auto& v : y) v = random_value(seed) * 100;
    const double q = 0.4;
    DeviceBuffer dx(n * 8), dy(n * 8), dd(n * 8);
    ASSERT_CUDA(cudaMemcpy(dx.as<double>(), x.data(), n * 8, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(dy.as<double>(), y.data(), n * 8, cudaMemcpyHostToDevice));
    std::vector<double> want(n), got(n);
    auto compare = [&](const char* what) {
      ASSERT_CUDA(cudaDeviceSynchronize());
      ASSERT_CUDA(cudaMemcpy(got.data(), dd.as<double>(), n * 8, cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << what << " at " << i;
    };
    ASSERT_CUDA(stream_copy(dd.as<double>(), dx.as<double>(), n, nullptr));
    stream_copy_ref(want.data(), x.data(), n);
    compare("copy");
    ASSERT_CUDA(stream_scale(dd.as<double>(), dx.as<double>(), q, n, nullptr));
    stream_scale_ref(want.data(), x.data(), q, n);
    compare("scale");
    ASSERT_CUDA(stream_add(dd.as<double>(), dx.as<double>(), dy.as<double>(), n, nullptr));
    stream_add_ref(want.data(), x.data(), y.data(), n);
    compare("add");
    ASSERT_CUDA(stream_triad(dd.as<double>(), dx.as<double>(), dy.as<double>(), q, n, nullptr));
    stream_triad_ref(want.data(), x.data(), y.data(), q, n);
    compare("triad");
    // In place, as gpu.stream never does but the header allows: dst == x.
    ASSERT_CUDA(cudaMemcpy(dd.as<double>(), x.data(), n * 8, cudaMemcpyHostToDevice));
    ASSERT_CUDA(stream_triad(dd.as<double>(), dd.as<double>(), dy.as<double>(), q, n, nullptr));
    stream_triad_ref(want.data(), x.data(), y.data(), q, n);
    compare("triad in place");
  }
}

TEST_F(KernelsGpu, StreamFillAndCountMismatchesCoverEveryElement) {
  // More elements than one grid covers (2^20 blocks x 256): the grid-stride loop must.
  const std::size_t n = (std::size_t{1} << 28) + 5;
  DeviceBuffer x(n * 8), count(sizeof(unsigned long long));
  ASSERT_CUDA(x.status());
  ASSERT_CUDA(stream_fill(x.as<double>(), 3.0, n, nullptr));
  const double last = 7.0;
  ASSERT_CUDA(cudaMemcpy(x.as<double>() + n - 1, &last, 8, cudaMemcpyHostToDevice));
  auto mismatches = [&](double expected) {
    unsigned long long c = ~0ull;
    EXPECT_EQ(cudaMemset(count.as<unsigned long long>(), 0, sizeof c), cudaSuccess);
    EXPECT_EQ(stream_count_mismatches(x.as<double>(), expected, n, count.as<unsigned long long>(), nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&c, count.as<unsigned long long>(), sizeof c, cudaMemcpyDeviceToHost), cudaSuccess);
    return c;
  };
  EXPECT_EQ(mismatches(3.0), 1u);                                        // the last element only
  EXPECT_EQ(mismatches(7.0), n - 1);                                     // all the others
  EXPECT_EQ(stream_fill(x.as<double>(), 1.0, 0, nullptr), cudaSuccess);  // n == 0: no launch
  EXPECT_EQ(mismatches(3.0), 1u);
}

// --- mlp: bias + activation, losses, squared norm, AdamW -----------------------------

template <typename T>
cudaError_t upload(const DeviceBuffer& d, const std::vector<T>& v) {
  return cudaMemcpy(d.as<T>(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
}
template <typename T>
cudaError_t download(std::vector<T>& v, const DeviceBuffer& d) {
  return cudaMemcpy(v.data(), d.as<T>(), v.size() * sizeof(T), cudaMemcpyDeviceToHost);
}

constexpr Activation kActivations[] = {Activation::Identity, Activation::Relu, Activation::Gelu};

struct MlpShape {
  std::size_t m, n;
};
// Odd sizes, one row, one column, several row chunks of the backward's column sums (256
// rows each), and a training-sized layer.
const MlpShape kMlpShapes[] = {{1, 1},    {1, 17},  {17, 1},    {3, 31},     {7, 33},     {64, 16},
                               {255, 33}, {257, 5}, {513, 100}, {512, 1024}, {3001, 257}, {100000, 3}};

TEST_F(KernelsGpu, MlpBiasActForwardMatchesTheReference) {
  std::uint64_t seed = 1000;
  for (MlpShape s : kMlpShapes) {
    for (Activation act : kActivations) {
      SCOPED_TRACE(testing::Message() << "act=" << static_cast<int>(act) << " m=" << s.m << " n=" << s.n);
      const std::size_t count = s.m * s.n;
      const std::vector<float> z0 = pre_activations(count, ++seed), bias = random_floats(s.n, 1, ++seed);
      DeviceBuffer dz(count * 4), dy(count * 4), db(s.n * 4);
      ASSERT_CUDA(dz.status());
      ASSERT_CUDA(dy.status());
      ASSERT_CUDA(upload(dz, z0));
      ASSERT_CUDA(upload(db, bias));
      ASSERT_CUDA(bias_act_forward(act, s.m, s.n, db.as<float>(), dz.as<float>(), dy.as<float>(), nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      std::vector<float> z_gpu(count), y_gpu(count), z_ref = z0, y_ref(count);
      ASSERT_CUDA(download(z_gpu, dz));
      ASSERT_CUDA(download(y_gpu, dy));
      bias_act_forward_ref(act, s.m, s.n, bias.data(), z_ref.data(), y_ref.data());
      EXPECT_TRUE(same_bits(z_gpu, z_ref)) << "the pre-activations differ";
      std::size_t bad = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const double tolerance = 4e-6 * (1 + std::fabs(static_cast<double>(y_ref[i])));
        if (!(std::fabs(static_cast<double>(y_gpu[i]) - y_ref[i]) <= tolerance) && ++bad <= 5)
          ADD_FAILURE() << "y[" << i << "] = " << y_gpu[i] << ", the reference says " << y_ref[i] << " (z " << z_ref[i]
                        << ")";
      }
      EXPECT_EQ(bad, 0u);
      if (HasFailure()) return;
    }
  }
  // Identity in place, and nothing to do.
  std::vector<float> z = random_floats(6, 1, 1), bias = {1, 2, 3};
  DeviceBuffer dz(6 * 4), db(3 * 4);
  ASSERT_CUDA(upload(dz, z));
  ASSERT_CUDA(upload(db, bias));
  ASSERT_CUDA(bias_act_forward(Activation::Identity, 2, 3, db.as<float>(), dz.as<float>(), dz.as<float>(), nullptr));
  EXPECT_EQ(bias_act_forward(Activation::Gelu, 0, 3, db.as<float>(), dz.as<float>(), dz.as<float>(), nullptr),
            cudaSuccess);
  std::vector<float> got(6);
  ASSERT_CUDA(download(got, dz));
  bias_act_forward_ref(Activation::Identity, 2, 3, bias.data(), z.data(), z.data());
  EXPECT_TRUE(same_bits(got, z));
}

// dz within 4e-6 (|dy| + |dz|); dbias[j] within 1e-5 of sum_i |dz_ij| plus its terms'
// tolerances (the GPU sums in another, fixed order). Twice: the same bits both times.
void check_mlp_backward(Activation act, std::size_t m, std::size_t n, std::uint64_t seed, bool in_place) {
  SCOPED_TRACE(testing::Message() << "act=" << static_cast<int>(act) << " m=" << m << " n=" << n
                                  << (in_place ? " in place" : ""));
  const std::size_t count = m * n;
  const std::vector<float> z = pre_activations(count, seed), dy = random_floats(count, 2, seed + 1);
  DeviceBuffer d_z(count * 4), d_dy(count * 4), d_dz(count * 4), d_db(n * 4);
  ASSERT_CUDA(d_z.status());
  ASSERT_CUDA(d_dy.status());
  ASSERT_CUDA(d_dz.status());
  ASSERT_CUDA(upload(d_z, z));
  ASSERT_CUDA(upload(d_dy, dy));
  const std::vector<float> garbage(n, std::numeric_limits<float>::quiet_NaN());
  ASSERT_CUDA(upload(d_db, garbage));  // overwritten, not accumulated
  float* out = in_place ? d_dy.as<float>() : d_dz.as<float>();
  ASSERT_CUDA(bias_act_backward(act, m, n, d_z.as<float>(), d_dy.as<float>(), out, d_db.as<float>(), nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> dz_gpu(count), db_gpu(n), dz_ref(count), db_ref(n);
  ASSERT_CUDA(cudaMemcpy(dz_gpu.data(), out, count * 4, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(download(db_gpu, d_db));
  bias_act_backward_ref(act, m, n, z.data(), dy.data(), dz_ref.data(), db_ref.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double tolerance = 4e-6 * (std::fabs(static_cast<double>(dy[i])) + std::fabs(dz_ref[i]));
    if (!(std::fabs(static_cast<double>(dz_gpu[i]) - dz_ref[i]) <= tolerance) && ++bad <= 5)
      ADD_FAILURE() << "dz[" << i << "] = " << dz_gpu[i] << ", the reference says " << dz_ref[i];
  }
  EXPECT_EQ(bad, 0u) << "dz";
  for (std::size_t j = 0; j < n; ++j) {
    double magnitude = 0, terms_tolerance = 0;
    for (std::size_t i = 0; i < m; ++i) {
      magnitude += std::fabs(dz_ref[i * n + j]);
      terms_tolerance += 4e-6 * (std::fabs(static_cast<double>(dy[i * n + j])) + std::fabs(dz_ref[i * n + j]));
    }
    if (!(std::fabs(static_cast<double>(db_gpu[j]) - db_ref[j]) <= 1e-5 * magnitude + terms_tolerance) && ++bad <= 5)
      ADD_FAILURE() << "dbias[" << j << "] = " << db_gpu[j] << ", the reference says " << db_ref[j];
  }
  EXPECT_EQ(bad, 0u) << "dbias";
  if (!in_place) {  // deterministic: a second run gives the same bits
    ASSERT_CUDA(bias_act_backward(act, m, n, d_z.as<float>(), d_dy.as<float>(), out, d_db.as<float>(), nullptr));
    std::vector<float> dz_again(count), db_again(n);
    ASSERT_CUDA(download(dz_again, d_dz));
    ASSERT_CUDA(download(db_again, d_db));
    EXPECT_TRUE(same_bits(dz_again, dz_gpu) && same_bits(db_again, db_gpu)) << "not deterministic";
  }
}

TEST_F(KernelsGpu, MlpBiasActBackwardMatchesTheReference) {
  std::uint64_t seed = 2000;
  for (MlpShape s : kMlpShapes) {
    for (Activation act : kActivations) {
      check_mlp_backward(act, s.m, s.n, seed += 2, false);
      if (HasFailure()) return;
    }
  }
  check_mlp_backward(Activation::Gelu, 777, 65, 77, true);  // dz == dy
  // More rows than 65535 chunks of 256: the chunks grow.
  check_mlp_backward(Activation::Relu, (std::size_t{1} << 24) + 1001, 1, 78, false);
}

TEST_F(KernelsGpu, MlpBiasActBackwardWithoutRowsZeroesTheBiasGradient) {
  const std::vector<float> garbage(5, 123.0f);
  DeviceBuffer db(5 * 4);
  ASSERT_CUDA(upload(db, garbage));
  ASSERT_CUDA(bias_act_backward(Activation::Gelu, 0, 5, nullptr, nullptr, nullptr, db.as<float>(), nullptr));
  std::vector<float> got(5, -1);
  ASSERT_CUDA(download(got, db));
  EXPECT_EQ(got, std::vector<float>(5, 0.0f));
  EXPECT_EQ(bias_act_backward(Activation::Gelu, 5, 0, nullptr, nullptr, nullptr, nullptr, nullptr), cudaSuccess);
}

// One double from device memory, prefilled with NaN so that "not written" shows.
class DeviceDouble {
 public:
  DeviceDouble() : buf_(sizeof(double)) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    rc_ = cudaMemcpy(buf_.as<double>(), &nan, sizeof nan, cudaMemcpyHostToDevice);
  }
  cudaError_t status() const { return rc_ != cudaSuccess ? rc_ : buf_.status(); }
  double* get() const { return buf_.as<double>(); }
  double value() const {
    double v = std::numeric_limits<double>::quiet_NaN();
    (void)cudaMemcpy(&v, buf_.as<double>(), sizeof v, cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  DeviceBuffer buf_;
  cudaError_t rc_ = cudaSuccess;
};

TEST_F(KernelsGpu, MlpMseMatchesTheReference) {
  std::uint64_t seed = 3000;
  // One block, several, more than the 1024 blocks of the first pass (grid-stride), none.
  for (MlpShape s : {MlpShape{0, 4}, MlpShape{1, 1}, MlpShape{3, 11}, MlpShape{512, 10}, MlpShape{1000, 1001},
                     MlpShape{4097, 1024}}) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " k=" << s.n);
    const std::size_t count = s.m * s.n;
    const std::vector<float> pred = random_floats(count, 3, ++seed), target = random_floats(count, 3, ++seed);
    const float scale = count ? 1.0f / static_cast<float>(count) : 1.0f;
    DeviceBuffer dp(count * 4), dt(count * 4), dd(count * 4);
    DeviceDouble out;
    ASSERT_CUDA(out.status());
    ASSERT_CUDA(upload(dp, pred));
    ASSERT_CUDA(upload(dt, target));
    ASSERT_CUDA(mse_loss(s.m, s.n, dp.as<float>(), dt.as<float>(), scale, dd.as<float>(), out.get(), nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<float> d_gpu(count), d_ref(count);
    ASSERT_CUDA(download(d_gpu, dd));
    const double want = mse_loss_ref(s.m, s.n, pred.data(), target.data(), scale, d_ref.data());
    const double got = out.value();
    EXPECT_NEAR(got, want, 1e-5 * want);
    for (std::size_t i = 0; i < count; ++i) ASSERT_LE(ulps(d_gpu[i], d_ref[i]), 4) << i;
    // In place (dpred == pred), and deterministic.
    ASSERT_CUDA(mse_loss(s.m, s.n, dp.as<float>(), dt.as<float>(), scale, dp.as<float>(), out.get(), nullptr));
    std::vector<float> in_place(count);
    ASSERT_CUDA(download(in_place, dp));
    EXPECT_TRUE(same_bits(in_place, d_gpu));
    EXPECT_EQ(std::bit_cast<std::uint64_t>(out.value()), std::bit_cast<std::uint64_t>(got));
  }
}

void check_mlp_cross_entropy(std::size_t m, std::size_t c, const std::vector<float>& logits,
                             const std::vector<std::int32_t>& labels, float scale) {
  const std::size_t count = m * c;
  DeviceBuffer dl(count * 4), dlab(m * 4), dd(count * 4);
  DeviceDouble out;
  ASSERT_CUDA(out.status());
  ASSERT_CUDA(upload(dl, logits));
  ASSERT_CUDA(upload(dlab, labels));
  ASSERT_CUDA(
      cross_entropy_loss(m, c, dl.as<float>(), dlab.as<std::int32_t>(), scale, dd.as<float>(), out.get(), nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> d_gpu(count), d_ref(count);
  ASSERT_CUDA(download(d_gpu, dd));
  const double want = cross_entropy_loss_ref(m, c, logits.data(), labels.data(), scale, d_ref.data());
  const double got = out.value();
  ASSERT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, want, 1e-5 * want + 1e-12);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double tolerance = 4e-6 * (std::fabs(scale) + std::fabs(d_ref[i]));
    if (!(std::fabs(static_cast<double>(d_gpu[i]) - d_ref[i]) <= tolerance) && ++bad <= 5)
      ADD_FAILURE() << "dlogits[" << i << "] = " << d_gpu[i] << ", the reference says " << d_ref[i];
  }
  EXPECT_EQ(bad, 0u);
  // In place (dlogits == logits), and deterministic.
  ASSERT_CUDA(
      cross_entropy_loss(m, c, dl.as<float>(), dlab.as<std::int32_t>(), scale, dl.as<float>(), out.get(), nullptr));
  std::vector<float> in_place(count);
  ASSERT_CUDA(download(in_place, dl));
  EXPECT_TRUE(same_bits(in_place, d_gpu));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(out.value()), std::bit_cast<std::uint64_t>(got));
}

TEST_F(KernelsGpu, MlpCrossEntropyMatchesTheReference) {
  std::uint64_t seed = 4000;
  for (MlpShape s : {MlpShape{0, 10}, MlpShape{1, 1}, MlpShape{1, 2}, MlpShape{5, 3}, MlpShape{512, 10},
                     MlpShape{17, 33}, MlpShape{3, 1000}, MlpShape{5000, 10}, MlpShape{9, 50000}}) {
    SCOPED_TRACE(testing::Message() << "m=" << s.m << " c=" << s.n);
    const std::vector<float> logits = random_floats(s.m * s.n, 6, ++seed);
    std::vector<std::int32_t> labels(s.m);
    for (std::size_t i = 0; i < s.m; ++i)  // the first and last classes among them
      labels[i] = static_cast<std::int32_t>(i % 3 == 0 ? 0 : i % 3 == 1 ? s.n - 1 : mix64(++seed) % s.n);
    check_mlp_cross_entropy(s.m, s.n, logits, labels, s.m ? 1.0f / static_cast<float>(s.m) : 1.0f);
    if (HasFailure()) return;
  }
  // +-80: confidently right and wrong rows, ties; finite.
  const std::size_t m = 4, c = 5;
  std::vector<float> logits(m * c, -80.0f);
  logits[0] = 80.0f;
  logits[1 * c + 4] = 80.0f;
  for (std::size_t j = 0; j < c; ++j) logits[2 * c + j] = 80.0f;
  logits[3 * c + 1] = 80.0f, logits[3 * c + 2] = 80.0f;
  check_mlp_cross_entropy(m, c, logits, {0, 0, 4, 1}, 1.0f);
}

TEST_F(KernelsGpu, MlpSumSquaresMatchesTheReference) {
  std::uint64_t seed = 5000;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2047}, std::size_t{2049}, std::size_t{1000003},
                        (std::size_t{1} << 24) + 5}) {
    const std::vector<float> x = random_floats(n, 5, ++seed);
    DeviceBuffer dx(n * 4);
    DeviceDouble out;
    ASSERT_CUDA(out.status());
    ASSERT_CUDA(upload(dx, x));
    ASSERT_CUDA(sum_squares(n, dx.as<float>(), out.get(), nullptr));
    const double got = out.value(), want = sum_squares_ref(n, x.data());
    EXPECT_NEAR(got, want, 1e-5 * want) << "n=" << n;
    ASSERT_CUDA(sum_squares(n, dx.as<float>(), out.get(), nullptr));
    EXPECT_EQ(std::bit_cast<std::uint64_t>(out.value()), std::bit_cast<std::uint64_t>(got)) << "n=" << n;
  }
}

TEST_F(KernelsGpu, MlpAdamwMatchesTheReferenceWithinFourUlps) {
  std::uint64_t seed = 6000;
  for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{1000}, std::size_t{1000003}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    std::vector<float> p = random_floats(n, 1, ++seed), m(n, 0.0f), v(n, 0.0f);
    DeviceBuffer dp(n * 4), dg(n * 4), dm(n * 4), dv(n * 4);
    ASSERT_CUDA(upload(dp, p));
    ASSERT_CUDA(upload(dm, m));
    ASSERT_CUDA(upload(dv, v));
    for (std::int64_t step = 1; step <= 5; ++step) {
      std::vector<float> g = random_floats(n, step == 3 ? 1000 : 1, ++seed);
      if (n > 2) g[1] = 0.0f, g[2] = -0.0f;
      const float weight_decay = step % 2 ? 0.1f : 0.0f, grad_scale = step == 4 ? 0.3f : 1.0f;
      const AdamwStep s = AdamwStep::make(1e-2f, 0.9f, 0.999f, 1e-8f, weight_decay, grad_scale, step);
      ASSERT_CUDA(upload(dg, g));
      ASSERT_CUDA(adamw_update(n, dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), s, nullptr));
      adamw_update_ref(n, p.data(), g.data(), m.data(), v.data(), s);
    }
    std::vector<float> p_gpu(n), m_gpu(n), v_gpu(n);
    ASSERT_CUDA(download(p_gpu, dp));
    ASSERT_CUDA(download(m_gpu, dm));
    ASSERT_CUDA(download(v_gpu, dv));
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_LE(ulps(p_gpu[i], p[i]), 4) << "params[" << i << "]";
      ASSERT_LE(ulps(m_gpu[i], m[i]), 4) << "exp_avg[" << i << "]";
      ASSERT_LE(ulps(v_gpu[i], v[i]), 4) << "exp_avg_sq[" << i << "]";
    }
  }
  EXPECT_EQ(adamw_update(0, nullptr, nullptr, nullptr, nullptr, AdamwStep{}, nullptr), cudaSuccess);
}

}  // namespace
