// Fuzz target: safetensors headers (rkit/safetensors.hpp). The input is a whole file:
// length prefix, header JSON, data. A header that parses must describe tensors that
// element_as_double can read where the data is there, and must survive a round trip
// through the Writer with the same names, dtypes, shapes and metadata.
#include <cstdlib>
#include <map>
#include <span>
#include <string>

#include "fuzz.hpp"
#include "rkit/safetensors.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rkit::safetensors;
  const std::string_view bytes = rkit::fuzz::as_text(data, size);
  // The same bytes as a bare header, without the length prefix.
  rkit::fuzz::expect_clean([&] { parse_header(bytes, bytes.size(), "fuzz.json"); });
  rkit::fuzz::expect_clean([&] {
    Header h = parse_header_bytes(bytes, "fuzz.safetensors");
    check(h.data_offset >= 8 && h.file_bytes >= h.data_offset);
    Writer w;
    for (const auto& t : h.tensors) {
      check(t.offset >= h.data_offset && t.offset + t.bytes <= h.file_bytes);
      // Read the first and last element when the data is there (and not too far away).
      const std::size_t n = t.bytes / dtype_size(t.dtype);
      const bool present = t.offset + t.bytes <= size;
      if (present && n > 0) {
        const auto* base = reinterpret_cast<const std::byte*>(data) + t.offset;
        element_as_double(t.dtype, base, 0);
        element_as_double(t.dtype, base, n - 1);
      }
      // Data that is not in the input is stood in for by zeros, if small.
      static const std::string zeros(1 << 16, '\0');
      if (!present && t.bytes > zeros.size()) return;
      const auto* src = present ? reinterpret_cast<const std::byte*>(data) + t.offset
                                : reinterpret_cast<const std::byte*>(zeros.data());
      w.add(t.name, t.dtype, t.shape, std::span(src, t.bytes));
    }
    for (const auto& [k, v] : h.metadata) w.set_metadata(k, v);
    const std::string out = w.header_bytes();
    check(out.size() % 8 == 0);
    Header again = parse_header_bytes(out, "fuzz.roundtrip");
    check(again.tensors.size() == h.tensors.size() && again.metadata == h.metadata);
    // Offsets change (the writer packs tensors), and with them the order of empty ones.
    std::map<std::string, const TensorInfo*> by_name;
    for (const auto& t : again.tensors) by_name[t.name] = &t;
    for (const auto& a : h.tensors) {
      auto it = by_name.find(a.name);
      check(it != by_name.end());
      const TensorInfo& b = *it->second;
      check(a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes);
    }
  });
  return 0;
}
