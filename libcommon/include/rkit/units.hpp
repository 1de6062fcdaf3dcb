// File: rkit/units.hpp
//
// Parsing and printing of durations and sizes as users type them.
//
//   double s = rkit::parse_duration("1h30m");      // 5400.0
//   std::uint64_t b = rkit::parse_size("512M");    // 536870912
//   rkit::format_bytes(1536)                       // "1.5 KiB"
//
// Durations: a sequence of <number><unit> with units d, h, m, s, ms, us, ns
// ("90s", "1h30m", "1.5s", "250ms"); a bare number is seconds. Sizes: a number with
// an optional suffix: B; K, M, G, T, P and KiB, MiB, GiB, TiB, PiB are powers of
// 1024 (as Slurm reads them); KB, MB, GB, TB, PB are powers of 1000. Case-insensitive.
// Errors throw rkit::Error(Exit::Usage) naming the text and what was expected; callers
// that read data files rethrow with their own exit code.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rkit {

// Seconds, >= 0. Throws Error(Usage) on empty, negative or malformed text.
double parse_duration(std::string_view text);

// Bytes. Throws Error(Usage) on empty, negative, fractional-byte or overflowing text.
std::uint64_t parse_size(std::string_view text);

// "1.5 KiB", "23.4 GiB", "512 B": binary units, three significant digits.
std::string format_bytes(std::uint64_t bytes);

// "1h30m", "90s" → "1m30s", "0.25s", "2d3h": the shortest exact-ish form.
std::string format_duration(double seconds);

}  // namespace rkit
