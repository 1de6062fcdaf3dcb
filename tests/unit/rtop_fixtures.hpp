// Topologies the rtop tests share: the synthetic "pack:2 numa:2 core:8 pu:2" and the
// dgx_like.xml server, optionally with a GPU fixture from tests/fixtures.
#pragma once

#include <string>

#include "rkit/topology.hpp"

namespace rkit::fixtures {

inline const std::string kFixtures = RKIT_FIXTURES;
inline const std::string kSynthetic = "pack:2 numa:2 core:8 pu:2";

// `gpus`: a fixture file name in tests/fixtures, or empty for none.
inline Topology synthetic(const std::string& gpus = "") {
  ProbeOptions opt;
  opt.synthetic = kSynthetic;
  if (!gpus.empty()) opt.gpu_fixture = kFixtures + "/" + gpus;
  return probe(opt);
}

// `gpus`: a fixture path, or empty for none.
inline Topology dgx(const std::string& gpus = "") {
  ProbeOptions opt;
  opt.xml_path = kFixtures + "/dgx_like.xml";
  if (!gpus.empty()) opt.gpu_fixture = gpus;
  return probe(opt);
}

}  // namespace rkit::fixtures
