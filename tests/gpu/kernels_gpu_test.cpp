// The CUDA kernels of kernels/ against their CPU references, on a real GPU. Not a
// ctest test: it fails (never skips) without a GPU; tests/gpu/gpu-check.sh runs it.
//
// sgemm: every entry of C, on shapes that are and are not multiples of the 128x128x8
// tiles, with and without float4 loads (leading dimensions and pointers aligned or
// not), alpha/beta, padding left alone, and the BLAS corner cases. Tolerance per entry:
// 2 (k + 2) FLT_EPSILON (sum_l |alpha a_il b_lj| + |beta c_ij|), twice the classic bound
// for a float sum of k + 2 terms in any order. stream: bit-identical to the references.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gemm.hpp"
#include "stream.hpp"

namespace {

using namespace rkit::kernels;

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

std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double random_value(std::uint64_t& seed) {  // in [-1, 1)
  return static_cast<double>(mix64(seed += 0x9e3779b97f4a7c15ULL) >> 11) * 0x1p-52 - 1.0;
}

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

}  // namespace
