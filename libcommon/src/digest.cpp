// Content digests (see rkit/digest.hpp). xxHash inlined: no library to load for it.
#include "rkit/digest.hpp"

#define XXH_INLINE_ALL
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"

namespace rkit {

FileDigest digest_file(const std::string& path) {
  // Not blocking on a FIFO's open, and then refusing it: a digest reads files, not streams
  // (reading one would take its data from whoever reads it next).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw system_error("open " + path, errno);
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw Error(Exit::DataErr, fmt::format("{}: not a regular file, so it has no digest", path));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), XXH3_freeState);
  if (!st) {
    ::close(fd);
    throw std::bad_alloc();
  }
  XXH3_64bits_reset(st.get());
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(std::size_t{1} << 20);
  FileDigest d;
  for (;;) {
    check_interrupted();
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw system_error("read " + path, err);
    }
    if (n == 0) break;
    XXH3_64bits_update(st.get(), buf.data(), static_cast<std::size_t>(n));
    d.bytes += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  d.xxh3 = XXH3_64bits_digest(st.get());
  return d;
}

std::uint64_t digest_bytes(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string digest_hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

}  // namespace rkit
