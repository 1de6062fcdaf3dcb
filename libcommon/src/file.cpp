#include "rkit/file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "rkit/error.hpp"
#include "rkit/units.hpp"

namespace rkit {

std::string read_file(const std::string& path, std::uint64_t max_bytes) {
  const bool is_stdin = path == "-";
  const std::string name = input_name(path);
  int fd = is_stdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (!is_stdin) ::close(fd);
    throw Error(Exit::NoInput, name + ": is a directory");
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      if (!is_stdin) ::close(fd);
      throw system_error("read " + name, err);
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes) {
      if (!is_stdin) ::close(fd);
      throw Error(Exit::DataErr, fmt::format("{}: larger than {}", name, format_bytes(max_bytes)));
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  if (!is_stdin) ::close(fd);
  return out;
}

std::string parent_dir(std::string_view path) {
  auto slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  return slash == 0 ? "/" : std::string(path.substr(0, slash));
}

std::string base_name(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::size_t pread_full(int fd, void* buf, std::size_t size, std::uint64_t offset, const std::string& name) {
  std::size_t done = 0;
  auto* p = static_cast<char*>(buf);
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error("read " + name, errno);
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

void write_full(int fd, const void* data, std::size_t size, const std::string& name) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error("write " + name, errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace rkit
