// File: libcommon/src/cgroup_files.cpp — the cgroup module's kernel files, text and group
// paths (cgroup_impl.hpp).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "cgroup_impl.hpp"
#include "rkit/error.hpp"

namespace rkit::cgroup_detail {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

// A small kernel file, whole; nullopt (errno set) when it cannot be read.
std::optional<std::string> read_text(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// Writes `value` in one write(); 0 or the errno.
int write_text_errno(const std::string& path, std::string_view value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n;
  do n = ::write(fd, value.data(), value.size());
  while (n < 0 && errno == EINTR);
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The path's components: empty ones (from "//" or a leading "/") dropped; "." and ".."
// refused, so that a group never lands outside its hierarchy.
std::vector<std::string> components(const std::string& path, const char* what) {
  std::vector<std::string> out;
  for (std::string_view c : split(path, '/')) {
    if (c.empty()) continue;
    if (c == "." || c == ".." || c.find('\n') != std::string_view::npos)
      throw Error(Exit::DataErr, fmt::format("cgroup: {} '{}': '.', '..' and newlines are not allowed", what, path));
    out.emplace_back(c);
  }
  return out;
}

std::string join(const std::string& base, const std::vector<std::string>& parts) {
  std::string out = base;
  for (const auto& p : parts) out += "/" + p;
  return out;
}

// Subdirectories of `dir` (groups a job made below its own), depth first, deepest first.
void subgroups(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    const std::string sub = dir + "/" + e->d_name;
    subgroups(sub, out);
    out.push_back(sub);
  }
  ::closedir(d);
}

std::set<std::string> split_words(std::string_view text) {
  std::set<std::string> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) out.emplace(text.substr(i, j - i));
    i = j;
  }
  return out;
}

// The distinct v1 mount points of the controllers we use, in a stable order.
std::vector<std::string> v1_mounts(const CgroupLayout& layout) {
  std::vector<std::string> out;
  for (auto c : kV1Controllers) {
    auto it = layout.v1.find(std::string(c));
    if (it != layout.v1.end() && std::find(out.begin(), out.end(), it->second) == out.end()) out.push_back(it->second);
  }
  return out;
}

const CgroupLayout& require_layout(const CgroupLayout& layout) {
  if (layout.version == CgroupVersion::None)
    throw Error(Exit::Unavailable, "cgroup: no usable cgroup hierarchy",
                ::geteuid() != 0 ? "confining jobs in cgroups needs root"
                                 : "mount cgroupfs (v1 controllers or cgroup2 with controllers)");
  return layout;
}

}  // namespace rkit::cgroup_detail
