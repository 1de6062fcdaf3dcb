#include "rkit/atomic_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit {
namespace {

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw system_error("open directory " + dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; the rename is still ordered.
  if (rc != 0 && err != EINVAL && err != EROFS) throw system_error("fsync " + dir, err);
}

}  // namespace

AtomicFile::AtomicFile(std::string path, mode_t mode) : path_(std::move(path)) {
  if (path_.empty() || path_.back() == '/') throw Error(Exit::Usage, "invalid output path '" + path_ + "'");
  std::string tmpl = parent_dir(path_) + "/." + base_name(path_) + ".tmp.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  fd_ = ::mkostemp(buf.data(), O_CLOEXEC);
  if (fd_ < 0) throw system_error("create temporary file in " + parent_dir(path_), errno);
  temp_.assign(buf.data());
  // Held until commit() or the destructor: a cleaner that can take it knows the writer is gone.
  if (::flock(fd_, LOCK_EX) != 0) {
    int err = errno;
    ::close(fd_);
    ::unlink(temp_.c_str());
    fd_ = -1;
    throw system_error("lock " + temp_, err);
  }
  mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd_, mode & ~mask) != 0) {
    int err = errno;
    ::close(fd_);
    ::unlink(temp_.c_str());
    fd_ = -1;
    throw system_error("chmod " + temp_, err);
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(std::string_view data) {
  if (fd_ < 0) throw Error(Exit::Software, "write to closed atomic file " + path_);
  while (!data.empty()) {
    ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error("write " + path_, errno);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void AtomicFile::commit() {
  if (fd_ < 0 || committed_) throw Error(Exit::Software, "atomic file " + path_ + " committed twice");
  if (::fsync(fd_) != 0) throw system_error("fsync " + path_, errno);
  // Renamed while still open (and locked), so that no cleaner takes it for abandoned.
  if (::rename(temp_.c_str(), path_.c_str()) != 0) throw system_error("rename to " + path_, errno);
  committed_ = true;
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw system_error("close " + path_, errno);
  fsync_dir(parent_dir(path_));
}

bool is_atomic_temp_name(std::string_view name) {
  constexpr std::string_view kTmp = ".tmp.";
  if (name.size() < 1 + 1 + kTmp.size() + 6 || name.front() != '.') return false;
  return name.substr(name.size() - 6 - kTmp.size(), kTmp.size()) == kTmp;
}

bool remove_if_abandoned(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  // Unlinked while the lock is held: a writer cannot take the file back in between.
  bool removed = ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::unlink(path.c_str()) == 0;
  ::close(fd);
  return removed;
}

void atomic_write_file(const std::string& path, std::string_view data, mode_t mode) {
  AtomicFile f(path, mode);
  f.write(data);
  f.commit();
}

}  // namespace rkit
