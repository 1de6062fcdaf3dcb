#include "rkit/ckpt/frame_codec.hpp"

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode

#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <new>

#include "rkit/error.hpp"

namespace rkit::rckpt {
namespace {

// Fixed element sizes let the compiler unroll and vectorise the inner loops.
template <std::size_t kSize>
void shuffle_fixed(const std::byte* in, std::size_t n, std::byte* out, std::size_t stride) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < kSize; ++j) out[j * stride + i] = in[i * kSize + j];
}

template <std::size_t kSize>
void unshuffle_fixed(const std::byte* in, std::size_t n, std::byte* out, std::size_t from = 0) {
  for (std::size_t i = from; i < n; ++i)
    for (std::size_t j = 0; j < kSize; ++j) out[i * kSize + j] = in[j * n + i];
}

#if defined(__SSE2__)
// 16 elements at a time with SSE2 byte and word interleaves (x86-64 baseline); the
// scalar loops above finish the tail and are the reference the tests compare with.
template <std::size_t kSize>
void shuffle_simd(const std::byte* in, std::size_t n, std::byte* out, std::size_t stride) {
  static_assert(kSize == 2 || kSize == 4);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i x[kSize];
    for (std::size_t k = 0; k < kSize; ++k)
      x[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i * kSize + 16 * k));
    // Interleaving the bytes of two registers, repeated, transposes them: log2(16)
    // rounds for two planes, three (then 64-bit halves) for four.
    auto interleave = [](__m128i& p, __m128i& q) {
      __m128i lo = _mm_unpacklo_epi8(p, q), hi = _mm_unpackhi_epi8(p, q);
      p = lo;
      q = hi;
    };
    auto store = [&](std::size_t j, __m128i v) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j * stride + i), v);
    };
    if constexpr (kSize == 2) {
      for (int round = 0; round < 4; ++round) interleave(x[0], x[1]);
      store(0, x[0]);
      store(1, x[1]);
    } else {
      for (int round = 0; round < 3; ++round) {
        interleave(x[0], x[1]);
        interleave(x[2], x[3]);
      }
      // x[0]: planes 0 and 1 of elements 0-7, x[1]: planes 2 and 3; x[2], x[3]: elements 8-15.
      store(0, _mm_unpacklo_epi64(x[0], x[2]));
      store(1, _mm_unpackhi_epi64(x[0], x[2]));
      store(2, _mm_unpacklo_epi64(x[1], x[3]));
      store(3, _mm_unpackhi_epi64(x[1], x[3]));
    }
  }
  for (; i < n; ++i)
    for (std::size_t j = 0; j < kSize; ++j) out[j * stride + i] = in[i * kSize + j];
}

template <std::size_t kSize>
void unshuffle_simd(const std::byte* in, std::size_t n, std::byte* out) {
  static_assert(kSize == 2 || kSize == 4);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    auto plane = [&](std::size_t j) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j * n + i)); };
    auto store = [&](std::size_t k, __m128i v) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * kSize + 16 * k), v);
    };
    if constexpr (kSize == 2) {
      __m128i a = plane(0), b = plane(1);
      store(0, _mm_unpacklo_epi8(a, b));
      store(1, _mm_unpackhi_epi8(a, b));
    } else {
      __m128i a = plane(0), b = plane(1), c = plane(2), d = plane(3);
      __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
      __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
      store(0, _mm_unpacklo_epi16(ab_lo, cd_lo));
      store(1, _mm_unpackhi_epi16(ab_lo, cd_lo));
      store(2, _mm_unpacklo_epi16(ab_hi, cd_hi));
      store(3, _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
  }
  unshuffle_fixed<kSize>(in, n, out, i);
}
#endif

}  // namespace

std::uint64_t xxh3(std::span<const std::byte> data) { return XXH3_64bits(data.data(), data.size()); }

void shuffle_bytes_into(std::span<const std::byte> in, std::size_t size, std::byte* out, std::size_t total,
                        std::size_t first) {
  std::size_t n = in.size() / size;
  switch (size) {
#if defined(__SSE2__)
    case 2: shuffle_simd<2>(in.data(), n, out + first, total); break;
    case 4: shuffle_simd<4>(in.data(), n, out + first, total); break;
#else
    case 2: shuffle_fixed<2>(in.data(), n, out + first, total); break;
    case 4: shuffle_fixed<4>(in.data(), n, out + first, total); break;
#endif
    case 8: shuffle_fixed<8>(in.data(), n, out + first, total); break;
    default: std::memcpy(out + first, in.data(), in.size());
  }
}

void shuffle_bytes(std::span<const std::byte> in, std::size_t size, std::byte* out) {
  shuffle_bytes_into(in, size, out, in.size() / size, 0);
}

void unshuffle_bytes(std::span<const std::byte> in, std::size_t size, std::byte* out) {
  std::size_t n = in.size() / size;
  switch (size) {
#if defined(__SSE2__)
    case 2: unshuffle_simd<2>(in.data(), n, out); break;
    case 4: unshuffle_simd<4>(in.data(), n, out); break;
#else
    case 2: unshuffle_fixed<2>(in.data(), n, out); break;
    case 4: unshuffle_fixed<4>(in.data(), n, out); break;
#endif
    case 8: unshuffle_fixed<8>(in.data(), n, out); break;
    default: std::memcpy(out, in.data(), in.size());
  }
}

FrameEncoder::FrameEncoder(int level) : ctx_(ZSTD_createCCtx()), tensor_ctx_(ZSTD_createCCtx()) {
  if (!ctx_ || !tensor_ctx_) throw std::bad_alloc();
  for (ZSTD_CCtx* c : {ctx_, tensor_ctx_}) {
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0);  // the manifest's XXH3 covers it
  }
  if (level == 1) {
    // Shuffled floats compress through their exponent bytes' skewed histogram, not
    // through repeats: at the fastest level, skip the match search (a huge target
    // length) and keep Huffman coding of literals. Measured on N(0, 0.02) fp32:
    // 1.45 GB/s at ratio 1.198, against 0.88 GB/s at 1.187 for plain level 1.
    ZSTD_CCtx_setParameter(tensor_ctx_, ZSTD_c_strategy, ZSTD_fast);
    ZSTD_CCtx_setParameter(tensor_ctx_, ZSTD_c_targetLength, 4096);
    ZSTD_CCtx_setParameter(tensor_ctx_, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
  }
}

FrameEncoder::~FrameEncoder() {
  ZSTD_freeCCtx(ctx_);
  ZSTD_freeCCtx(tensor_ctx_);
}

std::byte* FrameEncoder::shuffle_buffer(std::size_t bytes) {
  if (shuffled_.size() < bytes) shuffled_.resize(bytes);
  return shuffled_.data();
}

std::size_t FrameEncoder::compress_shuffled(std::size_t bytes, std::vector<std::byte>& out) {
  std::size_t bound = ZSTD_compressBound(bytes);
  if (out.size() < bound) out.resize(bound);
  std::size_t n = ZSTD_compress2(tensor_ctx_, out.data(), out.size(), shuffled_.data(), bytes);
  if (ZSTD_isError(n)) throw Error(Exit::Software, std::string("zstd: ") + ZSTD_getErrorName(n));
  return n;
}

std::size_t FrameEncoder::encode(std::span<const std::byte> raw, std::size_t shuffle, std::vector<std::byte>& out) {
  const std::byte* src = raw.data();
  if (shuffle > 1) {
    if (shuffled_.size() < raw.size()) shuffled_.resize(raw.size());
    shuffle_bytes(raw, shuffle, shuffled_.data());
    src = shuffled_.data();
  }
  std::size_t bound = ZSTD_compressBound(raw.size());
  if (out.size() < bound) out.resize(bound);
  std::size_t n = ZSTD_compress2(shuffle > 1 ? tensor_ctx_ : ctx_, out.data(), out.size(), src, raw.size());
  if (ZSTD_isError(n)) throw Error(Exit::Software, std::string("zstd: ") + ZSTD_getErrorName(n));
  return n;
}

FrameDecoder::FrameDecoder() : ctx_(ZSTD_createDCtx()) {
  if (!ctx_) throw std::bad_alloc();
}

FrameDecoder::~FrameDecoder() { ZSTD_freeDCtx(ctx_); }

void FrameDecoder::decode(std::span<const std::byte> packed, std::size_t raw_bytes, std::size_t shuffle,
                          std::byte* out) {
  // Exactly one frame, whose header declares the size the manifest expects.
  unsigned long long declared = ZSTD_getFrameContentSize(packed.data(), packed.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) throw FrameError("not a zstd frame");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != raw_bytes)
    throw FrameError("frame declares " + std::to_string(declared) + " bytes, the manifest " +
                     std::to_string(raw_bytes));
  std::size_t frame_size = ZSTD_findFrameCompressedSize(packed.data(), packed.size());
  if (ZSTD_isError(frame_size) || frame_size != packed.size()) throw FrameError("zstd frame is damaged or truncated");
  std::byte* dst = out;
  if (shuffle > 1) {
    if (shuffled_.size() < raw_bytes) shuffled_.resize(raw_bytes);
    dst = shuffled_.data();
  }
  std::size_t n = ZSTD_decompressDCtx(ctx_, dst, raw_bytes, packed.data(), packed.size());
  if (ZSTD_isError(n)) throw FrameError(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != raw_bytes)
    throw FrameError("frame holds " + std::to_string(n) + " bytes, the manifest says " + std::to_string(raw_bytes));
  if (shuffle > 1) unshuffle_bytes({dst, raw_bytes}, shuffle, out);
}

}  // namespace rkit::rckpt
