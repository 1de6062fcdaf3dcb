// File: rkit/gpu_fixture.hpp
//
// GPU fixtures (rkit.gpu_fixture.v1): GPUs described in JSON, added to a topology so
// that GPU-aware placement can be planned and tested on machines without GPUs. The
// format is documented in rkit(7); every GPU it describes is fake.
//
//   for (const FixtureGpu& f : read_gpu_fixture("gpus4.json", topology.numa_nodes)) ...
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "rkit/topology.hpp"

namespace rkit {

struct FixtureGpu {
  Gpu gpu;                     // source "fixture"; index is the position in the file
  std::map<int, int> nvlinks;  // peer index (in the file) → number of NVLinks
};

// Reads and validates a fixture ("-" reads stdin): schema, at most 1024 GPUs, types
// and ranges, NUMA nodes that exist in `numas`, distinct PCI bus ids of the form
// [dddd:]bb:dd.f, NVLink peers written as plain indices that exist, are not the GPU
// itself, and agree from both ends. Any violation throws
// Error(DataErr) naming the file and the GPU; a missing file Error(NoInput).
std::vector<FixtureGpu> read_gpu_fixture(const std::string& path, const std::vector<NumaNode>& numas);

// The same for fixture text already read; `source` names it in errors.
std::vector<FixtureGpu> parse_gpu_fixture(std::string_view text, const std::string& source,
                                          const std::vector<NumaNode>& numas);

}  // namespace rkit
