#include "rkit/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "rkit/file.hpp"
#include "rkit/units.hpp"

namespace rkit {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

std::string home() { return env_or("HOME", "/"); }

bool readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

template <typename T>
std::optional<T> typed(const Config& cfg, std::string_view key, std::string_view type_name) {
  toml::node_view<const toml::node> node = cfg.table.at_path(key);
  if (!node) return std::nullopt;
  std::optional<T> v;
  if constexpr (std::is_same_v<T, double>)
    v = node.value<T>();  // integers are numbers too
  else
    v = node.value_exact<T>();  // TOML is typed: `smt = 1` is not a boolean
  if (v) return v;
  throw Error(Exit::Config, fmt::format("{}: '{}' must be a {}", cfg.where(key), key, type_name));
}

}  // namespace

std::string Config::where(std::string_view key) const {
  toml::node_view<const toml::node> node = table.at_path(key);
  if (!node) return path;
  const auto& src = node.node()->source();
  return fmt::format("{}:{}:{}", path, src.begin.line, src.begin.column);
}

std::optional<std::string> Config::get_string(std::string_view key) const {
  return typed<std::string>(*this, key, "string");
}
std::optional<double> Config::get_number(std::string_view key) const { return typed<double>(*this, key, "number"); }
std::optional<bool> Config::get_bool(std::string_view key) const { return typed<bool>(*this, key, "boolean"); }

std::optional<double> Config::get_duration(std::string_view key) const {
  const auto text = get_string(key);
  if (!text) return std::nullopt;
  try {
    return parse_duration(*text);
  } catch (const Error& e) {
    throw Error(Exit::Config, fmt::format("{}: {}: {}", where(key), key, e.what()));
  }
}

std::string whole_requirement(std::int64_t min, std::int64_t max) {
  if (max >= Config::kWholeMax) return fmt::format("a whole number, {} or more", min);
  return fmt::format("a whole number from {} to {}", min, max);
}

std::string number_requirement(double min, double max) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (max == kInf) return min == -kInf ? "a number" : fmt::format("{} or more", min);
  if (min == -kInf) return fmt::format("at most {}", max);
  return fmt::format("between {} and {}", min, max);
}

std::optional<std::int64_t> Config::get_whole(std::string_view key, std::int64_t min, std::int64_t max) const {
  const auto v = get_number(key);
  if (!v) return std::nullopt;
  // The bounds are at most 2^53 from 0, so that they compare exactly as doubles.
  if (*v != std::floor(*v) || *v < static_cast<double>(min) || *v > static_cast<double>(max))
    throw Error(Exit::Config, fmt::format("{}: '{}' must be {}", where(key), key, whole_requirement(min, max)));
  return static_cast<std::int64_t>(*v);
}

std::optional<double> Config::get_number(std::string_view key, double min, double max) const {
  const auto v = get_number(key);
  if (v && !(*v >= min && *v <= max))  // NaN too
    throw Error(Exit::Config, fmt::format("{}: '{}' must be {}", where(key), key, number_requirement(min, max)));
  return v;
}

std::optional<std::string> Config::get_choice(std::string_view key, const std::vector<std::string>& choices) const {
  auto v = get_string(key);
  if (!v || std::find(choices.begin(), choices.end(), *v) != choices.end()) return v;
  std::vector<std::string> quoted;
  for (const std::string& c : choices) quoted.push_back(fmt::format("\"{}\"", c));
  std::string expected = quoted.empty() ? std::string("nothing") : quoted.back();
  if (quoted.size() > 1)
    expected = fmt::format("{} or {}", fmt::join(quoted.begin(), quoted.end() - 1, ", "), quoted.back());
  throw Error(Exit::Config, fmt::format("{}: {} is '{}': expected {}", where(key), key, *v, expected));
}

std::optional<std::vector<std::string>> Config::get_strings(std::string_view key) const {
  const toml::array* a = get_array(key);
  if (!a) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& v : *a) {
    if (!v.is_string()) throw Error(Exit::Config, fmt::format("{}: '{}' must be an array of strings", where(key), key));
    out.push_back(*v.value<std::string>());
  }
  return out;
}

std::map<std::string, std::string> Config::get_string_map(std::string_view key) const {
  std::map<std::string, std::string> out;
  if (const auto* t = get_table(key))
    for (const auto& [k, v] : *t) {
      if (!v.is_string()) {
        const std::string at = fmt::format("{}.{}", key, k.str());
        throw Error(Exit::Config, fmt::format("{}: {} must be a string", where(at), at));
      }
      out[std::string(k.str())] = *v.value<std::string>();
    }
  return out;
}

const toml::table* Config::get_table(std::string_view key) const {
  toml::node_view<const toml::node> node = table.at_path(key);
  if (!node) return nullptr;
  if (const auto* t = node.as_table()) return t;
  throw Error(Exit::Config, fmt::format("{}: '{}' must be a table", where(key), key));
}
const toml::array* Config::get_array(std::string_view key) const {
  toml::node_view<const toml::node> node = table.at_path(key);
  if (!node) return nullptr;
  if (const auto* a = node.as_array()) return a;
  throw Error(Exit::Config, fmt::format("{}: '{}' must be an array", where(key), key));
}

std::string TomlReader::where(const toml::node& node) const {
  return fmt::format("{}:{}", source_, node.source().begin.line);
}

void TomlReader::fail(const toml::node& node, std::string_view key, std::string_view why) const {
  throw Error(on_error_, fmt::format("{}: {} {}", where(node), key, why));
}

std::string TomlReader::string(const toml::node& node, std::string_view key) const {
  if (const auto* s = node.as_string()) return s->get();
  fail(node, key, "must be a string");
}

bool TomlReader::boolean(const toml::node& node, std::string_view key) const {
  if (const auto* b = node.as_boolean()) return b->get();
  fail(node, key, "must be a boolean");
}

double TomlReader::number(const toml::node& node, std::string_view key) const {
  const auto v = node.value<double>();
  if (!node.is_number() || !v || !std::isfinite(*v)) fail(node, key, "must be a number");  // not nan, inf
  return *v;
}

const toml::table& TomlReader::table(const toml::node& node, std::string_view key) const {
  if (const auto* t = node.as_table()) return *t;
  fail(node, key, "must be a table");
}

const toml::array& TomlReader::array(const toml::node& node, std::string_view key) const {
  if (const auto* a = node.as_array()) return *a;
  fail(node, key, "must be an array");
}

std::optional<std::string> find_config(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* env = std::getenv("RKIT_CONFIG"); env && *env) return std::string(env);
  std::string xdg = env_or("XDG_CONFIG_HOME", home() + "/.config") + "/rkit/config.toml";
  if (readable(xdg)) return xdg;
  if (readable("/etc/rkit/config.toml")) return std::string("/etc/rkit/config.toml");
  return std::nullopt;
}

toml::table parse_toml(std::string_view text, std::string_view source, Exit on_error) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw Error(on_error, fmt::format("{}:{}:{}: {}", source, where.line, where.column, e.description()));
  }
}

Config load_config(const std::string& explicit_path) {
  Config cfg;
  auto path = find_config(explicit_path);
  if (!path) return cfg;
  std::string text;
  try {
    text = read_file(*path);
  } catch (const Error& e) {
    throw Error(e.code(), std::string("config ") + e.what());
  }
  cfg.path = *path;
  cfg.table = parse_toml(text, *path, Exit::Config);
  return cfg;
}

std::string state_dir() {
  if (const char* d = std::getenv("RKIT_STATE_DIR"); d && *d) return d;
  return env_or("XDG_STATE_HOME", home() + "/.local/state") + "/rkit";
}

}  // namespace rkit
