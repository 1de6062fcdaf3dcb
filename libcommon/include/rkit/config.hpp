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
#pragma once

#include <toml++/toml.h>
#include <map>
#include <optional>
#include <string>
#include <string_view>

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
