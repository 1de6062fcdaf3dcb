// Fuzz target: durations and sizes as users type them (rkit/units.hpp).
#include <cmath>
#include <cstdlib>

#include "fuzz.hpp"
#include "rkit/units.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rkit;
  std::string_view text = fuzz::as_text(data, size);
  fuzz::expect_clean([&] {
    double s = parse_duration(text);
    if (!(s >= 0) || !std::isfinite(s)) std::abort();  // the contract: finite, >= 0
    format_duration(s);
  });
  fuzz::expect_clean([&] { format_bytes(parse_size(text)); });
  return 0;
}
