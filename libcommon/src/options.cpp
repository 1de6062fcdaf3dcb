// File: rkit/options.cpp — the option table's work that does not depend on the struct
// it sets (options.hpp).
#include "rkit/options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "rkit/error.hpp"

namespace rkit {

bool OptionFlags::given(std::string_view flag) const {
  const auto it = std::find(flags.begin(), flags.end(), flag);
  if (flag.empty() || it == flags.end() || !slots) return false;
  const Slot& s = (*slots)[static_cast<std::size_t>(it - flags.begin())];
  return s.whole || s.number || s.text || s.on;
}

namespace internal {
namespace {

// "[model], [data], [train] or [checkpoint]".
std::string table_list(const std::vector<std::string>& tables) {
  std::vector<std::string> names;
  for (const auto& t : tables) names.push_back(fmt::format("[{}]", t));
  if (names.size() < 2) return names.empty() ? std::string() : names.front();
  return fmt::format("{} or {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

bool whole_unbounded(const OptionSpec& s) { return s.max >= static_cast<double>(Config::kWholeMax); }

[[noreturn]] void unknown_key(const Config& cfg, const toml::key& key, const std::string& path) {
  const auto& at = key.source().begin;
  throw Error(Exit::Config, fmt::format("{}:{}:{}: unknown key '{}'", cfg.path, at.line, at.column, path));
}

}  // namespace

OptionFlags add_flags(CLI::App& app, const std::vector<OptionSpec>& specs) {
  OptionFlags f;
  f.slots = std::make_unique<std::vector<OptionFlags::Slot>>(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const OptionSpec& s = specs[i];
    f.flags.push_back(s.flag);
    if (s.flag.empty()) continue;
    OptionFlags::Slot& slot = (*f.slots)[i];
    CLI::Option* o = nullptr;
    switch (s.kind) {
      case OptionKind::Whole: o = app.add_option(s.flag, slot.whole, s.help); break;
      case OptionKind::Number: o = app.add_option(s.flag, slot.number, s.help); break;
      case OptionKind::Text:
      case OptionKind::Custom: o = app.add_option(s.flag, slot.text, s.help); break;
      case OptionKind::Choice: o = app.add_option(s.flag, slot.text, s.help)->check(CLI::IsMember(s.choices)); break;
      case OptionKind::Bool: app.add_flag(s.flag, slot.on, s.help); break;
    }
    if (o) o->type_name(s.type_name);
  }
  return f;
}

std::optional<OptionValue> flag_value(const OptionFlags& flags, std::size_t index, const OptionSpec& spec) {
  if (spec.flag.empty() || !flags.slots || index >= flags.slots->size()) return std::nullopt;
  const OptionFlags::Slot& slot = (*flags.slots)[index];
  switch (spec.kind) {
    case OptionKind::Whole: {
      if (!slot.whole) return std::nullopt;
      const auto v = static_cast<double>(*slot.whole);
      if (v < spec.min || (v > spec.max && !whole_unbounded(spec)))
        throw Error(Exit::Usage, fmt::format("{} must be {}", spec.flag,
                                             whole_requirement(static_cast<std::int64_t>(spec.min),
                                                               static_cast<std::int64_t>(spec.max))));
      return *slot.whole;
    }
    case OptionKind::Number:
      if (!slot.number) return std::nullopt;
      if (!std::isinf(spec.min) || !std::isinf(spec.max))  // a range: NaN is out of it too
        if (!(*slot.number >= spec.min && *slot.number <= spec.max))
          throw Error(Exit::Usage, fmt::format("{} must be {}", spec.flag, number_requirement(spec.min, spec.max)));
      return *slot.number;
    case OptionKind::Text:
    case OptionKind::Choice:  // CLI11 checked the choice
    case OptionKind::Custom:
      if (!slot.text) return std::nullopt;
      return *slot.text;
    case OptionKind::Bool:
      if (!slot.on) return std::nullopt;
      return spec.when_given;
  }
  return std::nullopt;
}

void check_keys(const Config& cfg, const std::vector<OptionSpec>& specs, const std::vector<std::string>& tables) {
  std::set<std::string, std::less<>> keys;
  bool top_level_keys = false;
  for (const auto& s : specs)
    if (!s.key.empty()) {
      keys.insert(s.key);
      top_level_keys |= s.key.find('.') == std::string::npos;
    }
  for (const auto& [name_key, node] : cfg.table) {
    const std::string name(name_key.str());
    if (keys.count(name)) continue;
    const bool known_table = std::find(tables.begin(), tables.end(), name) != tables.end();
    if (!known_table || !node.is_table()) {
      if (tables.empty() || (top_level_keys && !node.is_table())) unknown_key(cfg, name_key, name);
      throw Error(Exit::Config,
                  fmt::format("{}: unknown table '{}' (expected {})", cfg.where(name), name, table_list(tables)));
    }
    for (const auto& [key, _] : *node.as_table()) {
      const std::string path = fmt::format("{}.{}", name, key.str());
      if (!keys.count(path)) unknown_key(cfg, key, path);
    }
  }
}

std::optional<OptionValue> file_value(const Config& cfg, const OptionSpec& spec) {
  const std::string& key = spec.key;
  switch (spec.kind) {
    case OptionKind::Whole:
      if (auto v = cfg.get_whole(key, static_cast<std::int64_t>(spec.min), static_cast<std::int64_t>(spec.max)))
        return *v;
      return std::nullopt;
    case OptionKind::Number: {
      // Without a range any number goes, NaN too: the tool's checks name what is wrong.
      const auto v =
          std::isinf(spec.min) && std::isinf(spec.max) ? cfg.get_number(key) : cfg.get_number(key, spec.min, spec.max);
      if (v) return *v;
      return std::nullopt;
    }
    case OptionKind::Text:
      if (auto v = cfg.get_string(key)) return *v;
      return std::nullopt;
    case OptionKind::Choice:
      if (auto v = cfg.get_choice(key, spec.choices)) return *v;
      return std::nullopt;
    case OptionKind::Bool:
      if (auto v = cfg.get_bool(key)) return *v;
      return std::nullopt;
    case OptionKind::Custom:
      if (!cfg.table.at_path(key)) return std::nullopt;
      if (spec.file_text) return spec.file_text(cfg, key);
      return *cfg.get_string(key);
  }
  return std::nullopt;
}

Json value_json(const OptionValue& v) {
  return std::visit([](const auto& x) { return Json(x); }, v);
}

OptionValue json_value(const Json& j, const OptionSpec& spec, const std::string& source) {
  auto bad = [&](std::string_view what) -> OptionValue {
    throw Error(Exit::DataErr, fmt::format("{}: '{}' must be {}", source, spec.key, what));
  };
  switch (spec.kind) {
    case OptionKind::Whole:
      if (!j.is_number_integer()) return bad("a whole number");
      if (const auto v = j.get<std::int64_t>();
          static_cast<double>(v) >= spec.min && static_cast<double>(v) <= spec.max)
        return v;
      return bad(fmt::format("a whole number from {} to {}", spec.min, spec.max));
    case OptionKind::Number:
      if (!j.is_number()) return bad("a number");
      if (const auto v = j.get<double>();
          (std::isinf(spec.min) && std::isinf(spec.max)) || (v >= spec.min && v <= spec.max))
        return v;
      return bad(fmt::format("a number from {} to {}", spec.min, spec.max));
    case OptionKind::Bool:
      if (!j.is_boolean()) return bad("true or false");
      return j.get<bool>();
    case OptionKind::Choice:
      if (!j.is_string() ||
          std::find(spec.choices.begin(), spec.choices.end(), j.get<std::string>()) == spec.choices.end())
        return bad(fmt::format("one of {}", fmt::join(spec.choices, ", ")));
      return j.get<std::string>();
    case OptionKind::Text:
    case OptionKind::Custom:
      if (!j.is_string()) return bad("a string");
      return j.get<std::string>();
  }
  return bad("known");
}

void at_key(const Config& cfg, const std::string& key, const std::function<void()>& set) {
  try {
    set();
  } catch (const Error& e) {
    if (e.code() == Exit::Config) throw;
    throw Error(Exit::Config, fmt::format("{}: {}", cfg.where(key), e.what()));
  }
}

void check_spec(const OptionSpec& spec, const std::vector<std::string>& tables) {
  auto bad = [&](const std::string& why) {
    throw std::logic_error(fmt::format("option {}{}: {}", spec.flag, spec.key, why));
  };
  if (spec.flag.empty() && spec.key.empty()) bad("neither a flag nor a key");
  if (!spec.flag.empty() && spec.flag.rfind("-", 0) != 0) bad("a flag starts with -");
  if (const auto dot = spec.key.find('.'); dot != std::string::npos) {
    if (spec.key.find('.', dot + 1) != std::string::npos) bad("a key is table.key");
    if (std::find(tables.begin(), tables.end(), spec.key.substr(0, dot)) == tables.end()) bad("table not named");
  }
  const auto limit = static_cast<double>(Config::kWholeMax);
  if (spec.kind == OptionKind::Whole && (spec.min < -limit || spec.max > limit || spec.min > spec.max))
    bad("a whole range within 2^53");
  if (spec.kind == OptionKind::Number && !(spec.min <= spec.max)) bad("an empty range");
  if (spec.kind == OptionKind::Choice && spec.choices.empty()) bad("no choices");
  if (spec.kind == OptionKind::Bool && spec.flag.empty() && !spec.when_given) bad("when_given without a flag");
}

}  // namespace internal
}  // namespace rkit
