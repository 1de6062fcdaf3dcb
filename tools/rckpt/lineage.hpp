// File: rckpt/lineage.hpp
//
// rckpt log: where a checkpoint came from. Each archive rtrain packs carries its
// provenance in the manifest (rkit/ckpt/manifest.hpp): the run, the step, the
// configuration's digest, the inputs by digest, and the parent it was resumed or
// fine-tuned from, by path and digest. The log follows the parents back, checking each
// one's digest, to the run that started from data alone.
//
//   Lineage l = lineage("ft/step-200.rkpt");
//   for (const Json& r : l.records) print(r);      // rkit.ckpt.log.v1, the archive first
//   return l.complete() ? 0 : 1;
#pragma once

#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rckpt {

struct Lineage {
  // One rkit.ckpt.log.v1 record per archive, from `archive` back to the first: depth,
  // archive, archive_xxh3, status (ok, missing, changed: its digest is not the one its
  // child recorded, unknown: no provenance), run_id, step, config_xxh3, inputs, parent_kind.
  std::vector<Json> records;
  // Why the walk stopped short ("" when it reached an archive without a parent).
  std::string broken;
  bool complete() const { return broken.empty(); }
};

// Walks back from `archive` (Error(NoInput) when it is missing, DataErr when it is not an
// archive). A parent that moved is looked for beside its child, by name. At most 1000
// links; a loop stops the walk.
Lineage lineage(const std::string& archive);

// rckpt pack --provenance FILE: a JSON object of at most 1 MiB. Error(NoInput) for a
// missing file, Error(DataErr) for one that is not an object.
Json read_provenance(const std::string& path);

}  // namespace rkit::rckpt
