#include "exposition.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rkit/error.hpp"

namespace rkit::rtop {
namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlong
// forms, surrogates and code points past U+10FFFF are not).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // overlong
    if (c == 0xed) hi = 0x9f;  // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;  // overlong
    if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  return n;
}

std::string escape(std::string_view in, bool quotes) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size();) {
    const char c = in[i];
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quotes)
      out += "\\\"";
    else if (static_cast<unsigned char>(c) < 0x80)
      out += c;
    else {
      const std::size_t n = utf8_length(in, i);
      if (n == 0) {
        out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER, for the one bad byte
        ++i;
        continue;
      }
      out.append(in.substr(i, n));
      i += n;
      continue;
    }
    ++i;
  }
  return out;
}

}  // namespace

bool valid_metric_name(std::string_view name, bool label) {
  if (name.empty()) return false;
  if (label && name.size() >= 2 && name[0] == '_' && name[1] == '_') return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string escape_label_value(std::string_view value) { return escape(value, true); }

std::string escape_help(std::string_view help) { return escape(help, false); }

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return "0";  // also -0
  return fmt::format("{}", value);
}

std::string render_exposition(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const MetricFamily& f : families) {
    if (f.samples.empty()) continue;
    if (!valid_metric_name(f.name)) throw Error(Exit::Software, "invalid metric name: " + f.name);
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, escape_help(f.help), f.name,
                       f.type == MetricType::Counter ? "counter" : "gauge");
    for (const MetricSample& s : f.samples) {
      out += f.name;
      if (!s.labels.empty()) {
        out += '{';
        for (std::size_t i = 0; i < s.labels.size(); ++i) {
          const auto& [key, value] = s.labels[i];
          if (!valid_metric_name(key, true)) throw Error(Exit::Software, "invalid label name: " + key);
          out += fmt::format("{}{}=\"{}\"", i ? "," : "", key, escape_label_value(value));
        }
        out += '}';
      }
      out += ' ';
      out += format_value(s.value);
      out += '\n';
    }
  }
  return out;
}

}  // namespace rkit::rtop
