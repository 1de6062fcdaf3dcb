// File: rckpt/pack_plan.cpp — how pack cuts files into frames (pack.hpp: plan_frames) and how
// many workers fit its memory budget (pack_threads).
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_estimateCCtxSize_usingCParams, for the memory budget
#include <zstd.h>

#include <algorithm>

#include "pack.hpp"
#include "rkit/cpus.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rckpt {
namespace {

// Tensors smaller than frame_bytes / kSmallTensorDivisor share frames.
constexpr std::uint64_t kSmallTensorDivisor = 8;

}  // namespace

unsigned pack_threads(unsigned requested, std::uint64_t frame_bytes, int level) {
  unsigned threads = requested ? requested : usable_cpus();
  ZSTD_compressionParameters params = ZSTD_getCParams(level, frame_bytes, 0);
  std::uint64_t context = ZSTD_estimateCCtxSize_usingCParams(params);
  std::uint64_t bound = ZSTD_compressBound(frame_bytes);
  // Each worker: raw + shuffled copies and a zstd context; each result in flight: one compressed copy.
  std::uint64_t per_worker = 2 * frame_bytes + 2 * context + bound;  // two contexts: plain and tensor
  std::uint64_t fit = kMemoryBudget > 2 * bound ? (kMemoryBudget - 2 * bound) / per_worker : 1;
  return static_cast<unsigned>(std::clamp<std::uint64_t>(fit, 1, threads));
}

std::vector<FramePlan> plan_frames(std::uint64_t file_bytes, const std::vector<TensorRecord>& tensors,
                                   std::uint64_t frame_bytes, bool shuffle) {
  std::vector<FramePlan> plan;
  // Cuts [begin, end) into frames of whole elements.
  auto add_region = [&](std::uint64_t begin, std::uint64_t end, std::uint32_t elem) {
    std::uint64_t cap = std::max<std::uint64_t>(elem, frame_bytes - frame_bytes % elem);
    for (std::uint64_t at = begin; at < end; at += cap) plan.push_back({at, std::min(cap, end - at), elem});
  };
  std::vector<const TensorRecord*> sorted;
  for (const auto& t : tensors)
    if (t.bytes > 0) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });

  std::uint64_t at = 0;
  // A group of small tensors of one element size waiting to fill a frame.
  std::uint64_t group_begin = 0, group_end = 0;
  std::uint32_t group_elem = 0;
  auto flush = [&] {
    if (group_end > group_begin) add_region(group_begin, group_end, group_elem);
    group_begin = group_end = at;
  };
  for (const TensorRecord* t : sorted) {
    if (t->offset < at) continue;  // overlapping tensors: already covered
    auto dtype = safetensors::parse_dtype(t->dtype);
    std::uint32_t elem = shuffle && dtype ? static_cast<std::uint32_t>(safetensors::dtype_size(*dtype)) : 1;
    if (t->offset > at) {  // the header, or bytes no tensor claims
      flush();
      add_region(at, t->offset, 1);
      at = group_begin = group_end = t->offset;
    }
    bool small = t->bytes < frame_bytes / kSmallTensorDivisor;
    if (!small || elem != group_elem || group_end - group_begin + t->bytes > frame_bytes) {
      flush();
      group_elem = elem;
    }
    group_end = at = t->offset + t->bytes;
    if (!small) flush();
  }
  flush();
  if (at < file_bytes) add_region(at, file_bytes, 1);
  return plan;
}

}  // namespace rkit::rckpt
