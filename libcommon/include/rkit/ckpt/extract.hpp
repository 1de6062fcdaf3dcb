// File: rkit/ckpt/extract.hpp
//
// Getting data back out of an .rkpt archive: unpack (all or some files, each written
// atomically), verify (every hash, no output) and cat (one file or tensor to a
// descriptor, decoding only the frames it needs). Frames are decoded on all cores.
//
//   UnpackOptions opt{.archive = "step-100.rkpt", .dir = "restore"};
//   UnpackResult r = unpack_checkpoint(opt);
//   VerifyReport v = verify_checkpoint("step-100.rkpt", 0, false);   // v.ok()
//   cat_entry("step-100.rkpt", "model.safetensors:layers.0.w", 0, STDOUT_FILENO);
//
// unpack never writes outside `dir`: parse_manifest already refused unsafe paths and
// escaping symlinks; here no path component may be a symlink (O_NOFOLLOW), files
// appear under their names only when complete and checked, symlinks are made last.
// Errors: 65 for corrupt frames (unpack, cat), 66 for a missing archive, base or
// --only path, 74 for I/O errors, including too little free space.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rckpt {

struct UnpackOptions {
  std::string archive;
  std::string dir;
  std::vector<std::string> only;  // files or directories; empty = everything
  unsigned threads = 0;
  bool progress = false;
};

struct UnpackResult {
  std::string archive, dir;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  Json to_json() const;  // rkit.ckpt.unpack.v1
};

UnpackResult unpack_checkpoint(const UnpackOptions& options);

struct VerifyProblem {
  std::optional<std::uint64_t> frame;  // none: the manifest or the bytes around frames
  std::string file;
  std::vector<std::string> tensors;
  std::string message;  // one line, naming frame, file and tensors
};

struct VerifyReport {
  std::string archive;
  std::uint64_t frames = 0;
  std::uint64_t bytes = 0;  // raw bytes checked
  std::vector<VerifyProblem> problems;
  double seconds = 0;
  bool ok() const { return problems.empty(); }
  Json to_json() const;  // rkit.ckpt.verify.v1
};

VerifyReport verify_checkpoint(const std::string& archive, unsigned threads, bool progress);

// Frames in flight (raw, shuffled and compressed copies) stay under this, packing and
// unpacking alike.
inline constexpr std::uint64_t kMemoryBudget = std::uint64_t{384} << 20;
// Worker threads for decoding frames of at most `max_frame_bytes` (`requested`, 0 = every
// CPU the process may use), within the budget.
unsigned decode_threads(unsigned requested, std::uint64_t max_frame_bytes);

// Writes the raw bytes of `spec` ("PATH" or "PATH:TENSOR"; a path that exists as a
// whole wins over a split at its last ':') to `fd`.
void cat_entry(const std::string& archive, const std::string& spec, unsigned threads, int fd);

}  // namespace rkit::rckpt
