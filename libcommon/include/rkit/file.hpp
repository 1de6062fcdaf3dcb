// File: rkit/file.hpp
//
// Files and paths, with the exit codes users expect.
//
//   std::string xml = rkit::read_file(path);          // "-" reads stdin
//   std::string cfg = rkit::read_file(path, 1 << 20); // refuse anything over 1 MiB
//   rkit::UniqueFd fd(::open(...));                   // closed on every way out
//   std::size_t n = rkit::pread_full(fd.get(), buf, size, offset, path);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace rkit {

// Inputs larger than this are refused unless the caller allows more.
inline constexpr std::uint64_t kMaxInputBytes = std::uint64_t{1} << 30;

// How errors name an input: "<stdin>" for "-", else the path.
inline std::string input_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

// Reads a whole file ("-" reads stdin). Throws Error(NoInput) when missing or a
// directory, Error(NoPerm) when unreadable, Error(DataErr) when it exceeds
// `max_bytes` (endless devices such as /dev/zero too), Error(IoErr) otherwise.
std::string read_file(const std::string& path, std::uint64_t max_bytes = kMaxInputBytes);

// "a/b" for "a/b/c", "." for "c", "/" for "/c".
std::string parent_dir(std::string_view path);
// "c" for "a/b/c".
std::string base_name(std::string_view path);

// Reads [offset, offset + size) with pread, retrying short reads; returns fewer bytes
// only at the end of the file. Errors throw system_error("read <name>").
std::size_t pread_full(int fd, void* buf, std::size_t size, std::uint64_t offset, const std::string& name);
// Writes all of `data` to `fd`, retrying short writes; system_error("write <name>").
void write_full(int fd, const void* data, std::size_t size, const std::string& name);

// Owns a file descriptor (-1: none) and closes it on destruction.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset(int fd = -1) noexcept;
  // Gives up ownership: returns the descriptor, which the caller then closes.
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace rkit
