// File: libcommon/src/cgroup_impl.hpp — private to rkit's cgroup module (cgroup*.cpp): the
// kernel's small files read and written whole, their text split, and groups' paths.
//
//   const auto text = read_text(dir + "/cgroup.procs");     // nullopt, errno set, when unreadable
//   const int err = write_text_errno(dir + "/cgroup.kill", "1");
//   const std::string dir = join(mount, components(parent, "parent"));   // DataErr on '..'
//
// Functions of their arguments and the files they name: thread-compatible.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rkit/cgroup.hpp"

namespace rkit::cgroup_detail {

// The v1 controllers this module uses.
constexpr std::string_view kV1Controllers[] = {"cpuset", "cpuacct", "memory", "pids", "devices", "freezer"};

std::string_view trim(std::string_view s);
std::vector<std::string_view> split(std::string_view s, char sep);
// The words of `text` (split at white space), sorted and distinct.
std::set<std::string> split_words(std::string_view text);

// A small kernel file, whole; nullopt (errno set) when it cannot be read.
std::optional<std::string> read_text(const std::string& path);
// Writes `value` in one write(); 0 or the errno.
int write_text_errno(const std::string& path, std::string_view value);
bool exists(const std::string& path);

// The path's components: empty ones (from "//" or a leading "/") dropped; "." and ".."
// refused, so that a group never lands outside its hierarchy.
std::vector<std::string> components(const std::string& path, const char* what);
// `base` and each of `parts` after a '/'.
std::string join(const std::string& base, const std::vector<std::string>& parts);
// Subdirectories of `dir` (groups a job made below its own), depth first, deepest first.
void subgroups(const std::string& dir, std::vector<std::string>& out);

// The distinct v1 mount points of the controllers we use, in a stable order.
std::vector<std::string> v1_mounts(const CgroupLayout& layout);
// `layout`, or Error(Unavailable) when it has no usable hierarchy.
const CgroupLayout& require_layout(const CgroupLayout& layout);

}  // namespace rkit::cgroup_detail
