#include "rkit/jsonl.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <iostream>

#include "rkit/error.hpp"

namespace rkit {
namespace {

// nlohmann's message is "[json.exception.parse_error.101] parse error at line 1, ...";
// keep the part after the bracketed id. Parsing throws parse_error for bad syntax and
// out_of_range for numbers too large for any type (1e999): both are bad input.
std::string_view parse_error_text(const Json::exception& e) {
  std::string_view msg = e.what();
  if (auto pos = msg.find("] "); pos != std::string_view::npos) msg.remove_prefix(pos + 2);
  return msg;
}

}  // namespace

JsonLinesReader::JsonLinesReader(const std::string& path) : name_(path == "-" ? "<stdin>" : path) {
  if (path == "-") {
    in_ = &std::cin;
    return;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(Exit::NoInput, path + ": is a directory");
  file_ = std::make_unique<std::ifstream>(path);
  if (!*file_) throw system_error(path, errno);
  in_ = file_.get();
}

bool JsonLinesReader::next(Json& out) {
  std::string line;
  while (std::getline(*in_, line)) {
    ++line_;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out = Json::parse(line);
    } catch (const Json::exception& e) {
      throw Error(Exit::DataErr, fmt::format("{}: invalid JSON: {}", where(), parse_error_text(e)));
    }
    return true;
  }
  if (in_->bad()) throw Error(Exit::IoErr, fmt::format("{}: read error", name_));
  return false;
}

std::string JsonLinesReader::where() const { return fmt::format("{}:{}", name_, line_); }

Json parse_json(std::string_view text, std::string_view source) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw Error(Exit::DataErr, fmt::format("{}: invalid JSON: {}", source, parse_error_text(e)));
  }
}

int check_schema(const Json& record, std::string_view family, int max_major, std::string_view where) {
  if (!record.is_object()) throw Error(Exit::DataErr, fmt::format("{}: expected a JSON object with \"schema\"", where));
  auto it = record.find("schema");
  if (it == record.end() || !it->is_string())
    throw Error(Exit::DataErr, fmt::format("{}: record has no \"schema\" string", where));
  const std::string& schema = it->get_ref<const std::string&>();
  std::string prefix = std::string(family) + ".v";
  int major = 0;
  const char* end = schema.data() + schema.size();
  // The digits start after the prefix, which must be there first (no pointer past the end).
  if (schema.rfind(prefix, 0) != 0 || std::from_chars(schema.data() + prefix.size(), end, major).ptr != end ||
      major < 1)
    throw Error(Exit::DataErr, fmt::format("{}: schema '{}' is not {}.v<N>", where, schema, family));
  if (major > max_major)
    throw Error(Exit::DataErr,
                fmt::format("{}: unsupported schema version '{}' (this build reads up to {}.v{})", where, schema,
                            family, max_major),
                "upgrade rkit");
  return major;
}

std::string to_json_line(const Json& record) { return record.dump(-1, ' ', false, Json::error_handler_t::replace); }

void append_json_string(std::string& out, std::string_view text) {
  if (!is_utf8(text)) {
    out += Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
    return;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  std::size_t plain = 0;  // the start of the bytes not yet copied
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text, plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xf];
    }
  }
  out.append(text, plain, text.size() - plain);
  out += '"';
}

bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    // The length a lead byte announces, and the range its first continuation must be in
    // (which excludes overlong forms, surrogates and code points over U+10FFFF).
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80)
      n = 1;
    else if (c >= 0xc2 && c <= 0xdf)
      n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else
      return false;
    if (s.size() - i < n) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return false;
    }
    i += n;
  }
  return true;
}

Json bytes_json(std::string_view bytes) {
  if (is_utf8(bytes)) return Json(std::string(bytes));
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) fmt::format_to(std::back_inserter(hex), "{:02x}", c);
  return Json{{"hex", hex}};
}

std::string bytes_of(const Json& value, std::string_view what) {
  if (value.is_string()) return value.get<std::string>();
  const auto it = value.is_object() && value.size() == 1 ? value.find("hex") : value.end();
  if (it == value.end() || !it->is_string() || it->get_ref<const std::string&>().size() % 2 != 0)
    throw Error(Exit::DataErr, fmt::format("{}: not a string, nor {{\"hex\": \"...\"}} bytes", what));
  const std::string& hex = it->get_ref<const std::string&>();
  std::string out;
  out.reserve(hex.size() / 2);
  auto digit = [&](char h) -> int {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    throw Error(Exit::DataErr, fmt::format("{}: \"hex\" holds a character that is not a lowercase hex digit", what));
  };
  for (std::size_t i = 0; i < hex.size(); i += 2)
    out.push_back(static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1])));
  return out;
}

std::string json_text(const Json& record, std::string_view key, std::string_view fallback) {
  if (record.is_object())
    if (const auto it = record.find(key); it != record.end() && it->is_string()) return it->get<std::string>();
  return std::string(fallback);
}

}  // namespace rkit
