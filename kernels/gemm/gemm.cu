// kernels/gemm: a tiled single-precision GEMM, row-major (see gemm.hpp).
//
// Each block of 256 threads computes a 128x128 tile of C, walking k in slices of 8:
// the slice of A (128x8) is stored transposed in shared memory and the slice of B
// (8x128) as it is, so that at each of the 8 steps a thread reads 8 values of A and 8
// of B as float4s and does 64 FMAs into its 8x8 accumulators. Shared memory is double
// buffered: the next slice is fetched from global memory into registers while the
// current one is used, and stored into the other buffer afterwards, so one barrier per
// slice suffices. Thread (ty, tx) of the 16x16 grid owns rows ty*4..+3 and 64+ty*4..+3
// and columns tx*4..+3 and 64+tx*4..+3 of the tile: the float4 reads of a warp then
// fall on distinct banks. Entries outside m, n or k are loaded as zeros and never stored.
#include <cstddef>
#include <cstdint>

#include "gemm.hpp"

namespace rkit::kernels {
namespace {

constexpr int kTileM = 128, kTileN = 128, kTileK = 8;
constexpr int kThreads = 256;
constexpr int kPadA = 4;  // the transposed store of A's slice hits 32 distinct banks with it
constexpr int kMaxGridY = 65535;

struct SharedTiles {
  float a[2][kTileK][kTileM + kPadA];  // a[buf][kk][row]: A's slice, transposed
  float b[2][kTileK][kTileN];          // b[buf][kk][col]
};

// The 4 values of A this thread fetches for the slice at k0: row `row` of the tile,
// columns col..col+3 of the slice (global column k0 + col).
template <bool kVector>
__device__ __forceinline__ void fetch_a(const float* __restrict__ a, int lda, int m, int k, int tile_row, int k0,
                                        int row, int col, float (&out)[4]) {
  const int gr = tile_row + row, gk = k0 + col;
  const float* p = a + static_cast<std::ptrdiff_t>(gr) * lda + gk;
  if (kVector && gr < m && gk + 4 <= k) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
    for (int i = 0; i < 4; ++i) out[i] = gr < m && gk + i < k ? p[i] : 0.0f;
  }
}

// The 4 values of B this thread fetches for the slice at k0: row `row` of the slice
// (global row k0 + row), columns col..col+3 of the tile.
template <bool kVector>
__device__ __forceinline__ void fetch_b(const float* __restrict__ b, int ldb, int n, int k, int tile_col, int k0,
                                        int row, int col, float (&out)[4]) {
  const int gk = k0 + row, gc = tile_col + col;
  const float* p = b + static_cast<std::ptrdiff_t>(gk) * ldb + gc;
  if (kVector && gk < k && gc + 4 <= n) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
    for (int i = 0; i < 4; ++i) out[i] = gk < k && gc + i < n ? p[i] : 0.0f;
  }
}

// kVector: a, b and c are 16-byte aligned and lda, ldb, ldc multiples of 4, so that
// every 4 floats starting at a column that is a multiple of 4 can move as one float4.
template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    sgemm_tiled(int m, int n, int k, float alpha, const float* __restrict__ a, int lda, const float* __restrict__ b,
                int ldb, float beta, float* __restrict__ c, int ldc) {
  __shared__ __align__(16) SharedTiles tiles;
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  const int tile_row = static_cast<int>(blockIdx.y) * kTileM, tile_col = static_cast<int>(blockIdx.x) * kTileN;
  // What this thread fetches of each slice: A's 128x8 is 256 runs of 4 (2 per row),
  // B's 8x128 is 256 runs of 4 (32 per row).
  const int a_row = tid / 2, a_col = (tid % 2) * 4;
  const int b_row = tid / 32, b_col = (tid % 32) * 4;

  float fa[4], fb[4];
  auto store = [&](int buf) {
    for (int i = 0; i < 4; ++i) tiles.a[buf][a_col + i][a_row] = fa[i];
    for (int i = 0; i < 4; ++i) tiles.b[buf][b_row][b_col + i] = fb[i];
  };

  float acc[8][8];
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int slices = (k + kTileK - 1) / kTileK;
  fetch_a<kVector>(a, lda, m, k, tile_row, 0, a_row, a_col, fa);
  fetch_b<kVector>(b, ldb, n, k, tile_col, 0, b_row, b_col, fb);
  store(0);
  __syncthreads();
  for (int s = 0; s < slices; ++s) {
    const int buf = s & 1;
    const bool more = s + 1 < slices;
    if (more) {  // in flight while the math below runs
      fetch_a<kVector>(a, lda, m, k, tile_row, (s + 1) * kTileK, a_row, a_col, fa);
      fetch_b<kVector>(b, ldb, n, k, tile_col, (s + 1) * kTileK, b_row, b_col, fb);
    }
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&tiles.a[buf][kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&tiles.a[buf][kk][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&tiles.b[buf][kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&tiles.b[buf][kk][64 + tx * 4]);
      const float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
    // The other buffer was last read in slice s-1, before the barrier that ended it.
    if (more) store(buf ^ 1);
    __syncthreads();
  }

  // acc[i][j] is C[tile_row + row(i)][tile_col + col(j)], row(i) = (i < 4 ? 0 : 64) +
  // ty*4 + i%4 and col(j) likewise with tx: two runs of 4 columns per row. The loops
  // are unrolled so that acc stays in registers (a run-time index would spill it).
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = tile_row + (i < 4 ? 0 : 64) + ty * 4 + i % 4;
    if (row < m) {
      float* c_row = c + static_cast<std::ptrdiff_t>(row) * ldc;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = tile_col + half * 64 + tx * 4;
        if (kVector && col + 4 <= n) {
          float4 out = make_float4(alpha * acc[i][half * 4 + 0], alpha * acc[i][half * 4 + 1],
                                   alpha * acc[i][half * 4 + 2], alpha * acc[i][half * 4 + 3]);
          if (beta != 0.0f) {
            const float4 old = *reinterpret_cast<const float4*>(c_row + col);
            out.x += beta * old.x, out.y += beta * old.y, out.z += beta * old.z, out.w += beta * old.w;
          }
          *reinterpret_cast<float4*>(c_row + col) = out;
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (col + j < n) {
              const float v = alpha * acc[i][half * 4 + j];
              c_row[col + j] = beta != 0.0f ? v + beta * c_row[col + j] : v;
            }
          }
        }
      }
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t sgemm(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0 || lda < (k > 1 ? k : 1) || ldb < (n > 1 ? n : 1) || ldc < (n > 1 ? n : 1))
    return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  const long long grid_y = (static_cast<long long>(m) + kTileM - 1) / kTileM;
  const long long grid_x = (static_cast<long long>(n) + kTileN - 1) / kTileN;
  if (grid_y > kMaxGridY) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  const bool vector = aligned16(a) && aligned16(b) && aligned16(c) && lda % 4 == 0 && ldb % 4 == 0 && ldc % 4 == 0;
  if (vector)
    sgemm_tiled<true><<<grid, kThreads, 0, stream>>>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    sgemm_tiled<false><<<grid, kThreads, 0, stream>>>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return cudaGetLastError();
}

}  // namespace rkit::kernels
