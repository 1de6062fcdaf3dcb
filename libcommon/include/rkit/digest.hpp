// File: rkit/digest.hpp
//
// Content digests: XXH3-64 of bytes and of whole files, written as 16 hex digits, the
// form rckpt's manifests and the run records use.
//
//   rkit::FileDigest d = rkit::digest_file("prices.csv");   // {bytes, xxh3}
//   std::string hex = rkit::digest_hex(d.xxh3);              // "9f2c..."
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rkit {

struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};

// Reads the whole file. Error(NoInput) when it is missing, Error(NoPerm) when it may not
// be read, Error(DataErr) when it is no regular file (a FIFO, a device), Error(IoErr) when
// reading fails; Ctrl-C interrupts (check_interrupted).
FileDigest digest_file(const std::string& path);
std::uint64_t digest_bytes(std::string_view bytes);
// "0123456789abcdef": 16 lower-case hex digits.
std::string digest_hex(std::uint64_t h);

}  // namespace rkit
