// File: rkit/options.hpp
//
// Options declared once. An OptionTable lists, for one settings struct, every value a
// command takes from its command line, from its TOML file, or from both: the flag
// ("--batch-size"), the TOML key ("train.batch_size"), the kind of value and its range,
// the value hint for --help (N, X, MB, FILE), the help sentence, and where the value
// goes (a member, or a setter). From that one table come the CLI11 options (and so
// --help and the shell completions, completion.hpp), the reading and checking of the
// file, and the precedence: a flag given overrides the file, which overrides the
// struct's defaults.
//
//   struct Run { std::uint64_t steps = 1000; double lr = 1e-3; std::string output; };
//   using RunOptions = rkit::OptionTable<Run>;
//   const RunOptions kRunOptions({"train"}, {
//       RunOptions::whole("--steps", "train.steps", &Run::steps, "N", "Optimizer steps (default 1000)"),
//       RunOptions::number("--lr", "train.lr", &Run::lr, "X", "Learning rate (default 0.001)", {0, 10}),
//       RunOptions::text("--output", "", &Run::output, "FILE", "Write the weights here"),  // a flag only
//   });
//   rkit::OptionFlags flags = kRunOptions.add_to(*cmd);      // before parsing; keep it alive
//   ...tool.run() parses...
//   Run run = kRunOptions.resolve(rkit::load_config(path), flags);
//
// The file: a table other than those the table names, or a key it does not list, is
// Error(Config) "file:line:column: unknown table 'x' (expected [train])" or "...: unknown
// key 'train.stepz'"; a value of the wrong type or out of range is Error(Config) at the
// value (Config::where) in Config's words: "'train.steps' must be a whole number, 0 or
// more". A flag's value out of range is Error(Usage) "--steps must be a whole number, 0
// or more"; a value that does not convert is CLI11's usage error. A custom option's
// parser reads text (the flag's, or what the file holds): its Error stays as it is for a
// flag and becomes Error(Config) at the file's value.
//
// Cost: a lookup per key; nothing is kept between calls. A table is immutable once built
// and may be shared between threads; OptionFlags belongs to one parse.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "rkit/config.hpp"
#include "rkit/jsonl.hpp"

namespace rkit {

enum class OptionKind {
  Whole,   // a whole number in a range (TOML: an integer, or 2.0)
  Number,  // a number in a range
  Text,    // a string
  Choice,  // one of a few strings (the completions offer them)
  Bool,    // a flag without a value; a boolean in the file
  Custom,  // text that the tool's parser turns into the value
};

// What an option is, whatever struct it sets.
struct OptionSpec {
  std::string flag;  // "--batch-size"; empty: only in the file
  std::string key;   // "train.batch_size" ("table.key", or "key" at the top); empty: a flag only
  OptionKind kind = OptionKind::Text;
  std::string type_name;  // the value's hint in --help: N, X, MB, FILE
  std::string help;
  double min = -std::numeric_limits<double>::infinity();  // Whole and Number
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // Choice
  bool when_given = true;            // Bool: what the flag sets (false for --no-pack)
  // Custom: the file's value as the flag would spell it (a TOML array [8, 4] as "8,4");
  // unset: the value must be a TOML string, taken as it is.
  std::function<std::string(const Config&, const std::string& key)> file_text;
};

// A value as read from a flag or the file, before it is set: Whole → int64, Number →
// double, Text, Choice and Custom → string, Bool → bool.
using OptionValue = std::variant<std::int64_t, double, std::string, bool>;

// The flags of one table as one command line gave them: what add_to() returns. CLI11
// writes into it while it parses, so it must outlive the parse (it may be moved).
class OptionFlags {
 public:
  // Whether `flag` ("--steps") was given.
  bool given(std::string_view flag) const;

  struct Slot {  // what CLI11 parses a flag into, by kind
    std::optional<std::int64_t> whole;
    std::optional<double> number;
    std::optional<std::string> text;
    bool on = false;
  };
  std::vector<std::string> flags;            // by option, as in the table ("" for file-only keys)
  std::unique_ptr<std::vector<Slot>> slots;  // by option; a stable address for CLI11
};

namespace internal {
// The work of OptionTable<T> that does not depend on T (options.cpp).
OptionFlags add_flags(CLI::App& app, const std::vector<OptionSpec>& specs);
// A flag's value when given; Error(Usage) when out of range.
std::optional<OptionValue> flag_value(const OptionFlags& flags, std::size_t index, const OptionSpec& spec);
// Error(Config) for a table or key of the file that no option names.
void check_keys(const Config& cfg, const std::vector<OptionSpec>& specs, const std::vector<std::string>& tables);
// The file's value at spec.key when present; Error(Config) for a wrong type or range.
std::optional<OptionValue> file_value(const Config& cfg, const OptionSpec& spec);
// Runs `set`; an Error it throws becomes Error(Config) at the file's value of `key`.
void at_key(const Config& cfg, const std::string& key, const std::function<void()>& set);
// An option's value as JSON, and back as its kind wants it (Error(DataErr) naming
// `source` and the key when the type or range is wrong; a parser's Error as it is).
Json value_json(const OptionValue& v);
OptionValue json_value(const Json& j, const OptionSpec& spec, const std::string& source);
// Checks an entry as it is declared (a flag or a key, a key in a table named, ranges
// within what Config reads); std::logic_error otherwise, a bug of the table.
void check_spec(const OptionSpec& spec, const std::vector<std::string>& tables);
}  // namespace internal

template <typename T>
class OptionTable {
 public:
  using Setter = std::function<void(T&, const OptionValue&)>;
  // The value as the struct holds it, for to_json(); nullopt for an unset optional.
  using Getter = std::function<std::optional<OptionValue>(const T&)>;
  struct Option {
    OptionSpec spec;
    Setter set;
    Getter get;  // may be empty: the option is not recorded (to_json)
  };
  struct WholeRange {
    std::int64_t min = 0, max = Config::kWholeMax;
  };
  struct NumberRange {
    double min = -std::numeric_limits<double>::infinity(), max = std::numeric_limits<double>::infinity();
  };

  // `tables`: the TOML tables the file may hold, in the order an error lists them;
  // every key is in one of them (or at the top when it has no dot).
  OptionTable(std::vector<std::string> tables, std::vector<Option> options) : tables_(std::move(tables)) {
    for (auto& o : options) {
      internal::check_spec(o.spec, tables_);
      specs_.push_back(std::move(o.spec));
      setters_.push_back(std::move(o.set));
      getters_.push_back(std::move(o.get));
    }
  }

  // Entries. `flag` or `key` may be empty (a file-only key, a flag-only option), not both.
  // A member of integer type, a range of whole numbers (default: 0 or more).
  template <typename M>
  static Option whole(std::string flag, std::string key, M T::*member, std::string type_name, std::string help,
                      WholeRange range = {}) {
    return whole(
        std::move(flag), std::move(key), [member](T& t, std::int64_t v) { t.*member = static_cast<M>(v); },
        std::move(type_name), std::move(help), range,
        [member](const T& t) { return static_cast<std::int64_t>(t.*member); });
  }
  static Option whole(std::string flag, std::string key, std::function<void(T&, std::int64_t)> set,
                      std::string type_name, std::string help, WholeRange range = {},
                      std::function<std::int64_t(const T&)> get = {}) {
    OptionSpec s = spec(std::move(flag), std::move(key), OptionKind::Whole, std::move(type_name), std::move(help));
    s.min = static_cast<double>(range.min);
    s.max = static_cast<double>(range.max);
    Getter getter;
    if (get) getter = [get](const T& t) -> std::optional<OptionValue> { return get(t); };
    return {std::move(s), [set](T& t, const OptionValue& v) { set(t, std::get<std::int64_t>(v)); }, getter};
  }
  // A member of type double or std::optional<double>; any number unless a range is given.
  template <typename M>
  static Option number(std::string flag, std::string key, M T::*member, std::string type_name, std::string help,
                       NumberRange range = {}) {
    OptionSpec s = spec(std::move(flag), std::move(key), OptionKind::Number, std::move(type_name), std::move(help));
    s.min = range.min;
    s.max = range.max;
    return {std::move(s), [member](T& t, const OptionValue& v) { t.*member = std::get<double>(v); },
            [member](const T& t) -> std::optional<OptionValue> {
              if constexpr (std::is_same_v<M, double>)
                return t.*member;
              else
                return (t.*member) ? std::optional<OptionValue>(*(t.*member)) : std::nullopt;
            }};
  }
  static Option text(std::string flag, std::string key, std::string T::*member, std::string type_name,
                     std::string help) {
    return {spec(std::move(flag), std::move(key), OptionKind::Text, std::move(type_name), std::move(help)),
            [member](T& t, const OptionValue& v) { t.*member = std::get<std::string>(v); },
            [member](const T& t) -> std::optional<OptionValue> { return t.*member; }};
  }
  static Option choice(std::string flag, std::string key, std::string T::*member, std::string type_name,
                       std::string help, std::vector<std::string> choices) {
    OptionSpec s = spec(std::move(flag), std::move(key), OptionKind::Choice, std::move(type_name), std::move(help));
    s.choices = std::move(choices);
    return {std::move(s), [member](T& t, const OptionValue& v) { t.*member = std::get<std::string>(v); },
            [member](const T& t) -> std::optional<OptionValue> { return t.*member; }};
  }
  // A flag sets the member to `when_given`; the file's boolean sets it to itself.
  static Option boolean(std::string flag, std::string key, bool T::*member, std::string help, bool when_given = true) {
    OptionSpec s = spec(std::move(flag), std::move(key), OptionKind::Bool, "", std::move(help));
    s.when_given = when_given;
    return {std::move(s), [member](T& t, const OptionValue& v) { t.*member = std::get<bool>(v); },
            [member](const T& t) -> std::optional<OptionValue> { return t.*member; }};
  }
  // `parse` sets the struct from the text, throwing rkit::Error when it is not valid;
  // `print` gives the text back (as the flag spells it) for to_json().
  static Option custom(std::string flag, std::string key, std::function<void(T&, const std::string&)> parse,
                       std::string type_name, std::string help,
                       std::function<std::string(const Config&, const std::string&)> file_text = {},
                       std::function<std::string(const T&)> print = {}) {
    OptionSpec s = spec(std::move(flag), std::move(key), OptionKind::Custom, std::move(type_name), std::move(help));
    s.file_text = std::move(file_text);
    Getter getter;
    if (print) getter = [print](const T& t) -> std::optional<OptionValue> { return print(t); };
    return {std::move(s), [parse](T& t, const OptionValue& v) { parse(t, std::get<std::string>(v)); }, getter};
  }

  // Registers every entry that has a flag on `app`, in the table's order; a flag given
  // only counts once resolve() or apply_flags() sees the OptionFlags returned.
  OptionFlags add_to(CLI::App& app) const { return internal::add_flags(app, specs_); }

  // Checks the file's tables and keys, then sets `out` from each key present.
  void apply_file(const Config& cfg, T& out) const {
    internal::check_keys(cfg, specs_, tables_);
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].key.empty()) continue;
      if (auto v = internal::file_value(cfg, specs_[i]))
        internal::at_key(cfg, specs_[i].key, [&] { setters_[i](out, *v); });
    }
  }
  // Sets `out` from each flag given, in the table's order.
  void apply_flags(const OptionFlags& flags, T& out) const {
    for (std::size_t i = 0; i < specs_.size(); ++i)
      if (auto v = internal::flag_value(flags, i, specs_[i])) setters_[i](out, *v);
  }
  // The flags over the file over `defaults`.
  T resolve(const Config& cfg, const OptionFlags& flags, T defaults = T{}) const {
    apply_file(cfg, defaults);
    apply_flags(flags, defaults);
    return defaults;
  }

  // The struct's values by key, {"train.steps": 1000, "model.layers": "8,4,1", ...}: every
  // option with a key and a getter, null for an unset optional. What a run records as its
  // configuration, and apply_json() reads back.
  Json to_json(const T& t) const {
    Json out = Json::object();
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].key.empty() || !getters_[i]) continue;
      const std::optional<OptionValue> v = getters_[i](t);
      out[specs_[i].key] = v ? internal::value_json(*v) : Json(nullptr);
    }
    return out;
  }
  // Sets `out` from such an object, as the file would (types and ranges checked); keys
  // the table does not know, and nulls, are left alone. Error(DataErr) "'train.lr' must be
  // a number" (prefixed by `source`) for a value that does not fit.
  void apply_json(const Json& j, T& out, const std::string& source) const {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (specs_[i].key.empty() || !getters_[i]) continue;
      const auto it = j.find(specs_[i].key);
      if (it == j.end() || it->is_null()) continue;
      setters_[i](out, internal::json_value(*it, specs_[i], source));
    }
  }

  const std::vector<OptionSpec>& specs() const { return specs_; }
  const std::vector<std::string>& tables() const { return tables_; }

 private:
  static OptionSpec spec(std::string flag, std::string key, OptionKind kind, std::string type_name, std::string help) {
    OptionSpec s;
    s.flag = std::move(flag);
    s.key = std::move(key);
    s.kind = kind;
    s.type_name = std::move(type_name);
    s.help = std::move(help);
    return s;
  }

  std::vector<std::string> tables_;
  std::vector<OptionSpec> specs_;
  std::vector<Setter> setters_;
  std::vector<Getter> getters_;
};

}  // namespace rkit
