// Fuzz target: JSON records and the schema check every reader applies (rkit/jsonl.hpp).
#include "fuzz.hpp"
#include "rkit/jsonl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rkit;
  fuzz::expect_clean([&] {
    Json record = parse_json(fuzz::as_text(data, size), "fuzz.json");
    fuzz::expect_clean([&] { check_schema(record, "rkit.topology", 1, "fuzz.json"); });
    to_json_line(record);
  });
  return 0;
}
