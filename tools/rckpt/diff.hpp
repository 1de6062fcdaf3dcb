// File: diff.hpp
//
// Comparing two archives tensor by tensor: same, changed (with the largest absolute
// difference and the L2 norm of the difference relative to A's), added or removed.
// Files that are not safetensors compare as a whole. Frames with equal hashes at the
// same place are not decoded; others are decoded a window at a time (bounded memory).
//
//   DiffReport d = diff_checkpoints("step-100.rkpt", "step-200.rkpt");
//   for (const TensorDiff& t : d.rows) printer.print(t.to_json());
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rckpt {

struct TensorDiff {
  std::string file;
  std::string tensor;  // empty: the file as a whole
  std::string status;  // "same", "changed", "added", "removed"
  std::optional<double> max_abs, rel_l2;
  std::string note;      // e.g. "dtype F32 -> BF16"
  Json to_json() const;  // rkit.ckpt.diff.v1
};

struct DiffReport {
  std::vector<TensorDiff> rows;
  bool identical() const;
};

DiffReport diff_checkpoints(const std::string& a, const std::string& b);

}  // namespace rkit::rckpt
