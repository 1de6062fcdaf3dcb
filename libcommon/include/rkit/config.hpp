// File: rkit/config.hpp
//
// TOML configuration files and the state directory.
//
// Search order for the configuration file (the first that applies wins):
//   1. --config FILE         (must exist: missing → 66)
//   2. $RKIT_CONFIG          (must exist: missing → 66)
//   3. $XDG_CONFIG_HOME/rkit/config.toml   (default ~/.config/rkit/config.toml)
//   4. /etc/rkit/config.toml
// Candidates 3 and 4 are optional. Parse errors name file:line:column and exit 78.
//
//   rkit::Config cfg = rkit::load_config(opts.config);
//   std::string policy = cfg.get_string("rtop.policy").value_or("pack");
//   int cpus = cfg.get_whole("local.cpus", 1, 1 << 20).value_or(0);
//
// TOML given as input (a job spec, a price sheet) is read with a TomlReader, whose
// errors are data errors (65) naming source:line.
#pragma once

#include <toml++/toml.h>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rkit/error.hpp"

namespace rkit {

struct Config {
  toml::table table;
  std::string path;  // empty when no file was found

  // Value at a dotted path ("rtop.policy"); nullopt when absent. A value of the
  // wrong type throws Error(Config) naming the file and key.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<double> get_number(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // A duration string ("90s", "1h30m", rkit/units.hpp); Error(Config) naming file:line
  // when it is not one.
  std::optional<double> get_duration(std::string_view key) const;

  // The largest bound get_whole() takes, 2^53: the last whole number a TOML float holds
  // exactly. As `max` it means no upper bound ("0 or more").
  static constexpr std::int64_t kWholeMax = std::int64_t{1} << 53;
  // A whole number from `min` to `max` (an integer, or a float without a fraction: 2.0),
  // nullopt when absent. Error(Config) at file:line:column, "'key' must be a whole number
  // from 1 to 64", or "..., 0 or more" when `max` is kWholeMax.
  std::optional<std::int64_t> get_whole(std::string_view key, std::int64_t min, std::int64_t max = kWholeMax) const;
  // A number from `min` to `max`; Error(Config) "'key' must be between 0 and 1000000".
  std::optional<double> get_number(std::string_view key, double min, double max) const;
  // A string that is one of `choices`; Error(Config) "key is 'x': expected \"pack\" or
  // \"spread\"" (and "'key' must be a string" for another type).
  std::optional<std::string> get_choice(std::string_view key, const std::vector<std::string>& choices) const;
  // An array of strings (admins = ["alice", "bob"]); nullopt when absent, Error(Config)
  // "'key' must be an array of strings" for anything else.
  std::optional<std::vector<std::string>> get_strings(std::string_view key) const;
  // A table of strings ({desk-a = "acct-a"}); empty when absent, Error(Config) for a
  // value that is not a string.
  std::map<std::string, std::string> get_string_map(std::string_view key) const;
  // The table or array at a dotted path; nullptr when absent, Error(Config) when the
  // value there is of another type.
  const toml::table* get_table(std::string_view key) const;
  const toml::array* get_array(std::string_view key) const;
  // "file:line:column" of the key's value (just the file when the key is absent),
  // for errors about values of the right type but the wrong meaning.
  std::string where(std::string_view key) const;
};

// What Config::get_whole() and the ranged get_number() ask for, in the words of their
// errors, for checks of other values to say the same: "a whole number from 1 to 64", "a
// whole number, 0 or more" (max kWholeMax), "between 0 and 1", "0 or more" (max +inf).
std::string whole_requirement(std::int64_t min, std::int64_t max);
std::string number_requirement(double min, double max);

// Typed values of a TOML document given as input (a job spec, a price sheet). Every
// error is Error(on_error) "source:line: key why", `key` dotted from the document's root
// as the caller names it ("resources.tasks must be an integer").
//
//   rkit::TomlReader in("job.toml");
//   for (auto&& [k, v] : root) if (k.str() == "name") name = in.string(v, "name");
class TomlReader {
 public:
  explicit TomlReader(std::string source, Exit on_error = Exit::DataErr)
      : source_(std::move(source)), on_error_(on_error) {}
  const std::string& source() const { return source_; }

  std::string where(const toml::node& node) const;  // "source:line"
  [[noreturn]] void fail(const toml::node& node, std::string_view key, std::string_view why) const;

  std::string string(const toml::node& node, std::string_view key) const;  // "must be a string"
  bool boolean(const toml::node& node, std::string_view key) const;        // "must be a boolean"
  double number(const toml::node& node, std::string_view key) const;       // finite; "must be a number"
  // An integer that T holds: "must be an integer", "is out of range".
  template <typename T = int>
  T integer(const toml::node& node, std::string_view key) const {
    const auto* i = node.as_integer();
    if (!i) fail(node, key, "must be an integer");
    if (!std::in_range<T>(i->get())) fail(node, key, "is out of range");
    return static_cast<T>(i->get());
  }
  const toml::table& table(const toml::node& node, std::string_view key) const;  // "must be a table"
  const toml::array& array(const toml::node& node, std::string_view key) const;  // "must be an array"

 private:
  std::string source_;
  Exit on_error_;
};

// The configuration file that applies, or nullopt. `explicit_path` is --config.
std::optional<std::string> find_config(const std::string& explicit_path);

// Loads the file find_config() picks (an empty Config when none).
Config load_config(const std::string& explicit_path);

// Parses TOML text. Errors throw Error(on_error) as "source:line:column: message":
// use Exit::Config for configuration files, Exit::DataErr for TOML given as input.
toml::table parse_toml(std::string_view text, std::string_view source, Exit on_error);

// $RKIT_STATE_DIR, else $XDG_STATE_HOME/rkit, else ~/.local/state/rkit. Not created.
std::string state_dir();

}  // namespace rkit
