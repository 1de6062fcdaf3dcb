// File: rkit/file.hpp
//
// Reading whole input files, with the exit codes users expect.
//
//   std::string xml = rkit::read_file(path);          // "-" reads stdin
//   std::string cfg = rkit::read_file(path, 1 << 20); // refuse anything over 1 MiB
#pragma once

#include <cstdint>
#include <string>

namespace rkit {

// Inputs larger than this are refused unless the caller allows more.
inline constexpr std::uint64_t kMaxInputBytes = std::uint64_t{1} << 30;

// How errors name an input: "<stdin>" for "-", else the path.
inline std::string input_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

// Reads a whole file ("-" reads stdin). Throws Error(NoInput) when missing or a
// directory, Error(NoPerm) when unreadable, Error(DataErr) when it exceeds
// `max_bytes` (endless devices such as /dev/zero too), Error(IoErr) otherwise.
std::string read_file(const std::string& path, std::uint64_t max_bytes = kMaxInputBytes);

}  // namespace rkit
