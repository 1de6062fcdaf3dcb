// File: rkit/ckpt/archive.hpp
//
// Reading an .rkpt archive by random access: the index at its end locates the
// manifest, and the manifest locates every frame, so one tensor of a large archive
// costs a few reads (see manifest.hpp for the layout).
//
//   Archive a = Archive::open("step-100.rkpt");   // 66 missing, 65 truncated or foreign
//   a.open_bases();                                // incremental archives: 66 when a base is gone
//   std::vector<std::byte> packed;
//   a.read_frame(7, packed);                       // the compressed bytes of frame 7
//
// An Archive is read-only after open_bases(); read_frame and decode_frame may be
// called from many threads. Open archives hold a shared flock, so that `rckpt gc`
// (which takes it exclusively) never removes an archive being read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rkit/ckpt/frame_codec.hpp"
#include "rkit/ckpt/manifest.hpp"
#include "rkit/error.hpp"

namespace rkit::rckpt {

class Archive {
 public:
  static Archive open(const std::string& path);
  // Whether `path` is a whole archive a restart may use: it opens (its index and
  // manifest, written last, are there) and so do its incremental bases. False while
  // one is being written, after a crash truncated it, or with a base missing.
  static bool complete(const std::string& path);
  Archive(Archive&&) noexcept;
  Archive& operator=(Archive&&) noexcept;
  ~Archive();

  const std::string& path() const { return path_; }
  const Manifest& manifest() const { return manifest_; }
  std::uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  // Where the manifest's tar header starts: archive_xxh3 covers [0, this).
  std::uint64_t manifest_header_offset() const { return manifest_offset_ - kTarBlock; }

  // Opens every base archive the manifest names, next to this one, and checks that
  // each is the archive this one was built on. Throws Error(NoInput) naming the
  // missing base and how many frames need it, Error(DataErr) when it differs.
  void open_bases();
  const std::vector<Archive>& bases() const { return bases_; }
  // Path of base `i` as resolved next to this archive.
  std::string base_path(std::size_t i) const;

  // Reads the compressed bytes of frame `i` (from a base when it lives there) into
  // `out`, resized to fit. Throws FrameError when they lie beyond the file's end.
  void read_frame(std::size_t i, std::vector<std::byte>& out) const;

  // One thread's buffers for decode_frame.
  struct FrameBuffers {
    FrameDecoder codec;
    std::vector<std::byte> packed, raw;
  };
  // Reads, decodes and checks frame `i` (size and XXH3) into b.raw; returns its raw
  // bytes. Throws FrameError naming what is wrong.
  std::span<const std::byte> decode_frame(std::size_t i, FrameBuffers& b) const;
  // "frame 3 (model.safetensors bytes ..., tensors ...) [in base X] is corrupt: why".
  std::string describe_corruption(std::size_t i, const std::string& why) const;
  // The error to report for a corrupt frame: DataErr, the archive's path and the above.
  Error corrupt_frame(std::size_t i, const FrameError& e) const;

 private:
  Archive() = default;
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t manifest_offset_ = 0;
  Manifest manifest_;
  std::vector<Archive> bases_;
};

}  // namespace rkit::rckpt
