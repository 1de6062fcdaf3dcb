// File: pack.hpp
//
// Packing a checkpoint directory into an .rkpt archive (layout in manifest.hpp).
// Files are cut into frames (tensors of safetensors files are never cut at an odd
// place: small tensors of one element size share frames, larger ones start their
// own), frames are hashed, shuffled and compressed on all cores, and written in order
// through libarchive. The archive appears under its name only once it is complete
// and synced; a failed or interrupted pack leaves nothing there.
//
//   PackOptions opt{.dir = "ckpt/step-200", .output = "ckpt/step-200.rkpt"};
//   opt.base = "ckpt/step-100.rkpt";        // incremental: reuse identical frames
//   PackResult r = pack_checkpoint(opt);
//
// Errors: Error(NoInput) for a missing directory or base, Error(IoErr) for a full
// disk or a file that changes while it is read, TempFail when interrupted.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "rkit/ckpt/extract.hpp"  // kMemoryBudget
#include "rkit/ckpt/manifest.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rckpt {

struct PackOptions {
  std::string dir;
  std::string output;    // "-" writes to stdout
  unsigned threads = 0;  // 0: every core the process may use
  int level = 1;
  std::uint64_t frame_bytes = kDefaultFrameBytes;
  bool shuffle = true;
  bool dereference = false;  // store what symlinks point at, not the links
  std::optional<std::string> base;
  Json provenance;  // the manifest's (null: none)
  bool progress = false;
  std::function<void(const std::string&)> warn = [](const std::string&) {};
};

struct PackResult {
  std::string output;
  std::uint64_t files = 0;
  std::uint64_t frames = 0;
  std::uint64_t base_frames = 0;    // frames left in the base archive
  std::uint64_t raw_bytes = 0;      // of the input files
  std::uint64_t written_bytes = 0;  // size of the archive written
  unsigned threads = 0;
  double seconds = 0;
  Json to_json() const;  // rkit.ckpt.pack.v1
};

PackResult pack_checkpoint(const PackOptions& options);

// A frame to cut from a file: [raw_offset, raw_offset + raw_bytes), shuffled by `shuffle`.
struct FramePlan {
  std::uint64_t raw_offset = 0;
  std::uint64_t raw_bytes = 0;
  std::uint32_t shuffle = 1;
};
// How a file is cut into frames of at most `frame_bytes`. `tensors` (empty for a
// plain file) are a safetensors file's: the header and bytes no tensor claims are
// stored as is; tensors under frame_bytes / 8 of one element size share frames;
// larger tensors start their own; tensor frames are shuffled by element size.
std::vector<FramePlan> plan_frames(std::uint64_t file_bytes, const std::vector<TensorRecord>& tensors,
                                   std::uint64_t frame_bytes, bool shuffle);

// Worker threads: `requested` (0 = every CPU the process may use, rkit::usable_cpus()), cut so that the frames in
// flight stay within the memory budget for this frame size and level.
// The budget is extract.hpp's kMemoryBudget.
unsigned pack_threads(unsigned requested, std::uint64_t frame_bytes, int level);

}  // namespace rkit::rckpt
