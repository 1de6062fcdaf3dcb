// Fuzz target: the rckpt manifest (rkit.ckpt.v1) and index parsers (rkit/ckpt/manifest.hpp).
#include "fuzz.hpp"
#include "rkit/ckpt/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rkit::rckpt;
  std::string_view text = rkit::fuzz::as_text(data, size);
  rkit::fuzz::expect_clean([&] {
    Manifest m = parse_manifest(text, "fuzz.json");
    // Whatever parses must describe itself and survive a round trip.
    for (std::size_t i = 0; i < m.frames.size(); ++i) m.describe_frame(i);
    parse_manifest(m.to_json().dump(), "again.json");
  });
  parse_index(text);
  return 0;
}
