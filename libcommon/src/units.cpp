#include "rkit/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "rkit/error.hpp"

namespace rkit {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Reads a non-negative decimal number at the front of `s`; returns chars consumed.
std::size_t read_number(std::string_view s, double& value) {
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + i, value);
  if (ec != std::errc() || ptr != s.data() + i) return 0;
  return i;
}

[[noreturn]] void bad(std::string_view kind, std::string_view text, std::string_view expected) {
  throw Error(Exit::Usage, fmt::format("invalid {} '{}': expected {}", kind, text, expected));
}

}  // namespace

double parse_duration(std::string_view text) {
  constexpr std::string_view kExpected = "e.g. 90s, 1h30m, 250ms (units d h m s ms us ns)";
  if (text.empty()) bad("duration", text, kExpected);
  std::string s = lower(text);
  double total = 0;
  std::size_t i = 0;
  while (i < s.size()) {
    double value = 0;
    std::size_t n = read_number(std::string_view(s).substr(i), value);
    if (n == 0) bad("duration", text, kExpected);
    i += n;
    std::size_t u = i;
    while (u < s.size() && std::isalpha(static_cast<unsigned char>(s[u]))) ++u;
    std::string_view unit = std::string_view(s).substr(i, u - i);
    double scale = 0;
    if (unit.empty()) {
      if (u != s.size() || i - n != 0) bad("duration", text, kExpected);  // bare number only alone
      scale = 1;
    } else if (unit == "d")
      scale = 86400;
    else if (unit == "h")
      scale = 3600;
    else if (unit == "m" || unit == "min")
      scale = 60;
    else if (unit == "s")
      scale = 1;
    else if (unit == "ms")
      scale = 1e-3;
    else if (unit == "us")
      scale = 1e-6;
    else if (unit == "ns")
      scale = 1e-9;
    else
      bad("duration", text, kExpected);
    total += value * scale;
    i = u;
  }
  if (!std::isfinite(total)) bad("duration", text, kExpected);
  return total;
}

std::uint64_t parse_size(std::string_view text) {
  constexpr std::string_view kExpected = "e.g. 4096, 512M, 2GiB, 10GB";
  std::string s = lower(text);
  double value = 0;
  std::size_t n = read_number(s, value);
  if (n == 0) bad("size", text, kExpected);
  std::string_view unit = std::string_view(s).substr(n);
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  struct Suffix {
    std::string_view name;
    double scale;
  };
  static constexpr std::array<Suffix, 17> kSuffixes{{
      {"", 1},
      {"b", 1},
      {"k", 0x1p10},
      {"m", 0x1p20},
      {"g", 0x1p30},
      {"t", 0x1p40},
      {"p", 0x1p50},
      {"kib", 0x1p10},
      {"mib", 0x1p20},
      {"gib", 0x1p30},
      {"tib", 0x1p40},
      {"pib", 0x1p50},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
      {"pb", 1e15},
  }};
  double scale = -1;
  for (const auto& sfx : kSuffixes)
    if (unit == sfx.name) scale = sfx.scale;
  if (scale < 0) bad("size", text, kExpected);
  double bytes = value * scale;
  if (bytes != std::floor(bytes)) bad("size", text, "a whole number of bytes");
  if (bytes >= 0x1p64) bad("size", text, "at most 16 EiB");
  return static_cast<std::uint64_t>(bytes);
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<std::string_view, 7> kUnits{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < kUnits.size()) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  int decimals = v < 10 ? 2 : v < 100 ? 1 : 0;
  std::string num = fmt::format("{:.{}f}", v, decimals);
  // Trim trailing zeros so that 2.00 GiB reads 2 GiB.
  if (num.find('.') != std::string::npos) {
    while (num.back() == '0') num.pop_back();
    if (num.back() == '.') num.pop_back();
  }
  return fmt::format("{} {}", num, kUnits[u]);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  if (seconds < 60) {
    std::string num = fmt::format("{:.3f}", seconds);
    while (num.back() == '0') num.pop_back();
    if (num.back() == '.') num.pop_back();
    return num + "s";
  }
  auto total = static_cast<std::uint64_t>(std::llround(seconds));
  std::string out;
  const std::array<std::pair<std::uint64_t, char>, 4> parts{{{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}}};
  for (auto [unit, name] : parts) {
    if (total >= unit) {
      out += fmt::format("{}{}", total / unit, name);
      total %= unit;
    }
  }
  return out;
}

}  // namespace rkit
