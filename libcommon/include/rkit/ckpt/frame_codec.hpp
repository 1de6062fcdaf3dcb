// File: rkit/ckpt/frame_codec.hpp
//
// One frame's bytes on their way into and out of an archive: XXH3 of the raw bytes,
// byte shuffling by element size (all first bytes, then all second bytes, ...: the
// exponent bytes of floats line up and compress), and one independent zstd frame.
//
//   FrameEncoder enc(level);
//   std::size_t n = enc.encode(raw, /*shuffle=*/4, packed);   // packed[0, n) is the frame
//   FrameDecoder dec;
//   dec.decode(packed, raw_bytes, shuffle, out);   // throws FrameError when it is corrupt
//
// Each encoder and decoder owns its buffers and zstd context: one per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace rkit::rckpt {

std::uint64_t xxh3(std::span<const std::byte> data);

// out[j * n + i] = in[i * size + j] for n = in.size() / size elements (size divides in.size()).
void shuffle_bytes(std::span<const std::byte> in, std::size_t size, std::byte* out);
// The same for a slice of a larger buffer: `in` holds elements [first, first + in.size() / size)
// of `total` elements, and lands in their places of `out` (total * size bytes).
void shuffle_bytes_into(std::span<const std::byte> in, std::size_t size, std::byte* out, std::size_t total,
                        std::size_t first);
// The inverse of shuffle_bytes.
void unshuffle_bytes(std::span<const std::byte> in, std::size_t size, std::byte* out);

// A frame that is not what the manifest says: bad zstd data or the wrong size.
class FrameError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FrameEncoder {
 public:
  explicit FrameEncoder(int level);
  ~FrameEncoder();
  FrameEncoder(const FrameEncoder&) = delete;
  FrameEncoder& operator=(const FrameEncoder&) = delete;
  // Shuffles (shuffle > 1) and compresses `raw` into `out` (grown to the zstd bound
  // when smaller); returns the frame's size.
  std::size_t encode(std::span<const std::byte> raw, std::size_t shuffle, std::vector<std::byte>& out);
  // For callers that shuffle as they read (cache-friendly): a buffer of `bytes` to
  // shuffle into, then compress_shuffled() compresses its first `bytes`.
  std::byte* shuffle_buffer(std::size_t bytes);
  std::size_t compress_shuffled(std::size_t bytes, std::vector<std::byte>& out);

 private:
  ZSTD_CCtx_s* ctx_;
  ZSTD_CCtx_s* tensor_ctx_;  // for shuffled tensor data
  std::vector<std::byte> shuffled_;
};

class FrameDecoder {
 public:
  FrameDecoder();
  ~FrameDecoder();
  FrameDecoder(const FrameDecoder&) = delete;
  FrameDecoder& operator=(const FrameDecoder&) = delete;
  // Decompresses one zstd frame that must hold exactly `raw_bytes`, unshuffles it
  // into `out` (raw_bytes long). Never writes more than raw_bytes, whatever the
  // frame claims. Throws FrameError.
  void decode(std::span<const std::byte> packed, std::size_t raw_bytes, std::size_t shuffle, std::byte* out);

 private:
  ZSTD_DCtx_s* ctx_;
  std::vector<std::byte> shuffled_;
};

}  // namespace rkit::rckpt
