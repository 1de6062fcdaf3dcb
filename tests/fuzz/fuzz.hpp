// File: tests/fuzz/fuzz.hpp
//
// What every fuzz target shares. A target defines LLVMFuzzerTestOneInput and calls
// parsers with arbitrary bytes: rkit::Error is the expected answer to bad input;
// anything else escaping (another exception, a crash, a sanitizer report) is a bug.
// Built two ways (tests/fuzz/CMakeLists.txt): with libFuzzer for `make fuzz`, and
// as <target>_replay, which runs the committed corpus under ctest in `make test`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rkit/error.hpp"

namespace rkit::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `f`, accepting rkit::Error (bad input, reported properly) and nothing else.
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace rkit::fuzz
