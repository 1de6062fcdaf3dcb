// File: tools/rcost/records_impl.hpp — what records.cpp shares with the chunk parser
// (chunk.cpp): the input, sacct's columns, and what a chunk's parse yields.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "records.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rcost::detail {

// One input. A regular file is read chunk by chunk with pread into each thread's own
// buffer (no page faults on a mapping, which cost more than the copy); standard input
// or a pipe is read whole. Every chunk handed to the parser is followed by at least
// SIMDJSON_PADDING readable bytes, as simdjson needs.
class Input {
 public:
  explicit Input(const std::string& path) : name_(input_name(path)) {
    if (path == "-") {
      read_all(STDIN_FILENO);
      return;
    }
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      const int e = errno;
      throw Error(e == EACCES ? Exit::NoPerm : Exit::NoInput, fmt::format("{}: {}", path, std::strerror(e)));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw system_error("stat " + path, errno);
    if (S_ISDIR(st.st_mode)) throw Error(Exit::NoInput, fmt::format("{}: is a directory", path));
    if (S_ISREG(st.st_mode)) {
      size_ = static_cast<std::size_t>(st.st_size);
      ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
      return;
    }
    read_all(fd_);
  }
  ~Input() {
    if (fd_ >= 0) ::close(fd_);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

  // The bytes [from, to), followed by padding: a view into the whole input, or read
  // into `buffer`.
  const char* bytes(std::size_t from, std::size_t to, std::string& buffer) const {
    if (whole_) return buf_.data() + from;
    buffer.resize(to - from + simdjson::SIMDJSON_PADDING);
    std::size_t done = 0;
    while (done < to - from) {
      const ssize_t n = ::pread(fd_, buffer.data() + done, to - from - done, static_cast<off_t>(from + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw system_error("read " + name_, errno);
      if (n == 0) throw Error(Exit::IoErr, fmt::format("{}: the file shrank while it was read", name_));
      done += static_cast<std::size_t>(n);
    }
    std::memset(buffer.data() + done, 0, simdjson::SIMDJSON_PADDING);
    return buffer.data();
  }

  // The position just past the first newline at or after `at` (the size if none).
  std::size_t line_start_after(std::size_t at) const {
    std::string window;
    while (at < size_) {
      const std::size_t to = std::min(size_, at + 4096);
      const char* p = bytes(at, to, window);
      if (const void* nl = std::memchr(p, '\n', to - at))
        return at + static_cast<std::size_t>(static_cast<const char*>(nl) - p) + 1;
      at = to;
    }
    return size_;
  }

 private:
  void read_all(int fd) {
    char block[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, block, sizeof block);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        throw system_error("read " + name_, errno);
      }
      buf_.append(block, static_cast<std::size_t>(n));
    }
    size_ = buf_.size();
    buf_.append(simdjson::SIMDJSON_PADDING, '\0');
    whole_ = true;
  }

  std::string name_;
  int fd_ = -1;
  bool whole_ = false;
  std::size_t size_ = 0;
  std::string buf_;
};

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// Column positions of the fields rcost reads from `sacct -P` text (-1: absent).
struct SacctColumns {
  int job_id = -1, user = -1, account = -1, partition = -1, state = -1, submit = -1, eligible = -1, start = -1,
      end = -1, alloc_tres = -1, node_list = -1;
  std::size_t count = 0;
};

// Fields of a `sacct -P` line.
std::vector<std::string_view> split_bar(std::string_view line);
// A whole number or decimal, nothing else.
bool parse_number(std::string_view s, double& out);

// What one thread makes of one chunk of an input: ids in its own Strings, merged later.
struct ChunkResult {
  Dataset data;
  std::vector<std::pair<std::uint64_t, std::string>> bad;  // (line within chunk, why)
  std::uint64_t lines_in_chunk = 0;                        // newline-terminated or not
  std::unique_ptr<ChunkDigest> digest;                     // Inputs::stream's digest of it
};

enum class InputKind { Json, Sacct };

// Parses the lines of bytes [from, to) of `in` into `out` (chunk.cpp).
void parse_chunk(const Input& in, InputKind kind, const SacctColumns& cols, const ReadOptions& opt, std::size_t from,
                 std::size_t to, ChunkResult& out);

}  // namespace rkit::rcost::detail
