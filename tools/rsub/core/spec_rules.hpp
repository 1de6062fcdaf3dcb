// File: rsub/core/spec_rules.hpp — internal to the job spec's files (spec.cpp, spec_toml.cpp):
// the limits and rules every spec keeps, whether read from TOML, from flags or from the
// store, and the small helpers both readers use.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/spec.hpp"
#include "rkit/error.hpp"

namespace rkit::rsub::spec_rules {

inline constexpr int kMaxTasks = 4096;
inline constexpr int kMaxAttempts = 100;
inline constexpr int kMaxSignal = 64;  // SIGRTMAX on Linux
inline constexpr int kMaxArrayIndex = 1'000'000;
inline constexpr std::size_t kMaxArrayElements = 100'000;
inline constexpr std::uint64_t kMaxSpecBytes = 1 << 20;  // a spec is a few lines; refuse a mistaken huge file

std::optional<DepType> dep_type(std::string_view name);  // "afterok" → AfterOk; nullopt: unknown
// Plain decimal digits, as Slurm reads ids and indices: no sign, no spaces.
std::optional<std::int64_t> parse_digits(std::string_view s);
// {"a", "b"} for "a<sep>b", {"a", nullopt} for "a".
std::pair<std::string_view, std::optional<std::string_view>> cut(std::string_view s, char sep);
// The command's basename ("sh" for a /bin/sh -c string), made valid as a name.
std::string default_name(const std::vector<std::string>& command);
std::optional<double> none_if_zero(double seconds);

// Runs `parse`, turning its Error into one of `code` prefixed with `context`.
template <typename F>
auto with_context(Exit code, std::string_view context, F&& parse) {
  try {
    return parse();
  } catch (const Error& e) {
    throw Error(code, fmt::format("{}: {}", context, e.what()));
  }
}

// Reports a broken rule as (key, "must be at least 1"); it throws, with the key's location.
using Fail = std::function<void(std::string_view key, const std::string& why)>;
// The rules every spec keeps, whether it came from a file, flags or the store.
void validate(const JobSpec& s, const Fail& fail);

}  // namespace rkit::rsub::spec_rules
