// Fuzz target: TOML configuration files (rkit/config.hpp).
#include "fuzz.hpp"
#include "rkit/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rkit;
  fuzz::expect_clean([&] {
    Config cfg;
    cfg.path = "fuzz.toml";
    cfg.table = parse_toml(fuzz::as_text(data, size), cfg.path, Exit::Config);
    for (const char* key : {"rtop.policy", "rtop", "a.b.c", "rtop.interval"}) {
      fuzz::expect_clean([&] { cfg.get_string(key); });
      fuzz::expect_clean([&] { cfg.get_number(key); });
      fuzz::expect_clean([&] { cfg.get_bool(key); });
      cfg.where(key);
    }
  });
  return 0;
}
