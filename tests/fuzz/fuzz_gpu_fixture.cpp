// Fuzz target: GPU fixtures (rkit/gpu_fixture.hpp) against the NUMA nodes of the
// synthetic topology "pack:2 numa:2 core:8 pu:2".
#include "fuzz.hpp"
#include "rkit/gpu_fixture.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rkit;
  static const std::vector<NumaNode> numas = [] {
    std::vector<NumaNode> nodes(4);
    for (int i = 0; i < 4; ++i) {
      nodes[static_cast<std::size_t>(i)].os_index = i;
      for (int pu = 16 * i; pu < 16 * (i + 1); ++pu) nodes[static_cast<std::size_t>(i)].pus.push_back(pu);
    }
    return nodes;
  }();
  fuzz::expect_clean([&] { parse_gpu_fixture(fuzz::as_text(data, size), "fuzz.json", numas); });
  return 0;
}
