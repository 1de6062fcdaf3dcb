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

}  // namespace rkit
