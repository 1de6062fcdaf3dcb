// File: gc.hpp
//
// Removing old archives from a checkpoint directory: the newest `keep_last` (by the
// time their pack started, then by name) stay, and so does every archive a kept one
// needs (its bases); leftovers of killed packs (temporaries no live pack holds) go.
// Archives whose manifest cannot be read are left alone and reported.
//
//   for (const GcAction& a : gc_checkpoints("ckpt", 3, /*dry_run=*/false)) printer.print(a.to_json());
#pragma once

#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rckpt {

struct GcAction {
  std::string archive;
  std::string action;  // "keep", "remove", "skip"
  std::string reason;
  Json to_json() const;  // rkit.ckpt.gc.v1
};

std::vector<GcAction> gc_checkpoints(const std::string& dir, std::size_t keep_last, bool dry_run);

}  // namespace rkit::rckpt
