// File: libcommon/src/cgroup_create.cpp — JobCgroup::create (rkit/cgroup.hpp): a job's group
// made in every hierarchy it needs, its parent levels made ready, and its limits applied.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "cgroup_impl.hpp"
#include "rkit/cgroup.hpp"
#include "rkit/error.hpp"
#include "rkit/topology.hpp"  // format_cpu_list

namespace rkit {

using namespace cgroup_detail;

namespace {

// NVIDIA's character devices: /dev/nvidiaN are minors 0..253 of major 195, 254 is
// nvidia-modeset and 255 nvidiactl (both needed by every CUDA process, as is
// nvidia-uvm, whose major is dynamic and which we leave alone).
constexpr int kNvidiaMajor = 195;
constexpr int kNvidiaMaxGpuMinor = 253;

// Writes a limit; a value the kernel refuses is bad input data (65), naming file and value.
void write_limit(const std::string& path, std::string_view value, std::string_view hint = {}) {
  const int err = write_text_errno(path, value);
  if (err == 0) return;
  const std::string what = fmt::format("cgroup: write '{}' to {}", value, path);
  if (err == EINVAL || err == ERANGE || err == ENOSPC)
    throw Error(Exit::DataErr, fmt::format("{}: {}", what, std::strerror(err)), std::string(hint));
  throw system_error(what, err);
}

void mkdir_level(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) throw system_error("cgroup: mkdir " + path, errno);
}

// A new v1 cpuset has empty cpus and mems, and takes no task (nor child with cpus)
// until they are set: give it its parent's.
void inherit_cpuset(const std::string& dir) {
  const std::string up = dir.substr(0, dir.rfind('/'));
  for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
    const auto mine = read_text(dir + "/" + file);
    if (mine && !trim(*mine).empty()) continue;
    const auto theirs = read_text(up + "/" + file);
    if (!theirs) throw system_error(fmt::format("cgroup: read {}/{}", up, file), errno);
    write_limit(dir + "/" + file, trim(*theirs));
  }
}

// v2: enables `wanted` for the children of `dir` (those not enabled yet).
void enable_controllers(const std::string& dir, const std::vector<std::string>& wanted) {
  const auto enabled_text = read_text(dir + "/cgroup.subtree_control");
  if (!enabled_text) throw system_error("cgroup: read " + dir + "/cgroup.subtree_control", errno);
  std::set<std::string> enabled;
  for (std::string_view c : split(trim(*enabled_text), ' '))
    if (!c.empty()) enabled.emplace(c);
  std::vector<std::string> missing;
  for (const auto& c : wanted)
    if (!enabled.count(c)) missing.push_back(c);
  if (missing.empty()) return;
  const std::string add = fmt::format("+{}", fmt::join(missing, " +"));
  const int err = write_text_errno(dir + "/cgroup.subtree_control", add);
  if (err == 0) return;
  Error e = system_error(fmt::format("cgroup: enable '{}' in {}/cgroup.subtree_control", add, dir), err);
  if (err == EBUSY)
    throw Error(e.code(), e.what(),
                "a v2 group that holds processes cannot enable controllers for its children: use a parent "
                "path without processes");
  throw e;
}

}  // namespace

JobCgroup JobCgroup::create(const std::string& parent, const std::string& name, const CgroupLimits& limits,
                            const CgroupLayout& layout_in) {
  const CgroupLayout& layout = require_layout(layout_in);
  const std::vector<std::string> levels = components(parent, "parent");
  const std::vector<std::string> leaf = components(name, "name");
  if (leaf.size() != 1) throw Error(Exit::DataErr, fmt::format("cgroup: name '{}': must be one path component", name));
  for (int g : limits.gpus.value_or(std::vector<int>{}))
    if (g < 0 || g > kNvidiaMaxGpuMinor)
      throw Error(Exit::DataErr, fmt::format("cgroup: GPU minor {}: must be within 0..{}", g, kNvidiaMaxGpuMinor));
  if (limits.pids_max && *limits.pids_max < 1)
    throw Error(Exit::DataErr, fmt::format("cgroup: pids_max {}: must be at least 1", *limits.pids_max));

  // Left over by a crash: kill it and start afresh, so that counters (OOM kills, peak
  // memory) are this attempt's.
  if (auto old = open(parent, name, layout)) {
    if (!old->kill_all(std::chrono::seconds(2)))
      throw Error(Exit::TempFail,
                  fmt::format("cgroup: {}: processes of an earlier group remain", old->paths().front()));
    old->remove();
  }

  std::vector<int> cpus = limits.cpus, mems = limits.mems;
  for (auto* v : {&cpus, &mems}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  const bool want_cpuset = !cpus.empty() || !mems.empty();
  const std::string cpuset_hint = "CPUs and memory nodes must be within the parent group's cpuset";

  JobCgroup g;  // its destructor removes what was made if a step below throws
  g.version_ = layout.version;

  if (layout.version == CgroupVersion::V1) {
    std::vector<std::string> wanted = {"memory", "cpuacct", "freezer"};
    if (want_cpuset) wanted.push_back("cpuset");
    if (limits.pids_max) wanted.push_back("pids");
    if (limits.gpus) wanted.push_back("devices");
    // Only the limits need their controller; measures and the freezer are best effort.
    auto need = [&](const char* c, bool required) -> const std::string* {
      auto it = layout.v1.find(c);
      if (it != layout.v1.end()) return &it->second;
      if (required) throw Error(Exit::Unavailable, fmt::format("cgroup: the v1 '{}' controller is not mounted", c));
      return nullptr;
    };
    need("memory", limits.memory_bytes.has_value());
    need("cpuset", want_cpuset);
    need("pids", limits.pids_max.has_value());
    need("devices", limits.gpus.has_value());

    std::vector<std::string> mounts;
    for (const auto& c : wanted)
      if (auto it = layout.v1.find(c);
          it != layout.v1.end() && std::find(mounts.begin(), mounts.end(), it->second) == mounts.end())
        mounts.push_back(it->second);
    for (const std::string& mount : mounts) {
      auto has = [&](const char* c) {
        auto it = layout.v1.find(c);
        return it != layout.v1.end() && it->second == mount;
      };
      const bool cpuset_here = has("cpuset");
      std::string dir = mount;
      for (const auto& level : levels) {
        dir += "/" + level;
        mkdir_level(dir);
        if (cpuset_here) inherit_cpuset(dir);
      }
      dir += "/" + leaf[0];
      if (::mkdir(dir.c_str(), 0755) != 0) throw system_error("cgroup: mkdir " + dir, errno);
      g.dirs_.push_back(dir);
      if (cpuset_here) {
        // cpus before mems, each the job's or else the parent's: an empty one takes no task.
        const std::string up = dir.substr(0, dir.rfind('/'));
        for (auto [file, list] : {std::pair{"cpuset.cpus", &cpus}, std::pair{"cpuset.mems", &mems}}) {
          std::string value;
          if (!list->empty()) {
            value = format_cpu_list(*list);
          } else {
            const auto theirs = read_text(up + "/" + file);
            if (!theirs) throw system_error(fmt::format("cgroup: read {}/{}", up, file), errno);
            value = std::string(trim(*theirs));
          }
          write_limit(dir + "/" + file, value, cpuset_hint);
        }
      }
      if (has("memory")) {
        g.memory_dir_ = dir;
        if (limits.memory_bytes) {
          const std::string bytes = std::to_string(*limits.memory_bytes);
          write_limit(dir + "/memory.limit_in_bytes", bytes);
          // RAM + swap under the same limit, where swap is accounted (memsw ≥ limit).
          if (exists(dir + "/memory.memsw.limit_in_bytes")) write_limit(dir + "/memory.memsw.limit_in_bytes", bytes);
        }
      }
      if (has("pids") && limits.pids_max) write_limit(dir + "/pids.max", std::to_string(*limits.pids_max));
      if (has("devices") && limits.gpus) {
        // The group starts as "a *:* rwm" (allow all but exceptions); in that mode an allow
        // entry only removes an exception, so each GPU the job was not given is denied by
        // its own entry. One write per entry, through one descriptor.
        const std::string deny = dir + "/devices.deny";
        UniqueFd fd(::open(deny.c_str(), O_WRONLY | O_CLOEXEC));
        if (!fd) throw system_error("cgroup: open " + deny, errno);
        const auto& given = *limits.gpus;
        for (int minor = 0; minor <= kNvidiaMaxGpuMinor; ++minor) {
          if (std::find(given.begin(), given.end(), minor) != given.end()) continue;
          char entry[32];
          const int n = std::snprintf(entry, sizeof entry, "c %d:%d rwm", kNvidiaMajor, minor);
          if (::write(fd.get(), entry, static_cast<std::size_t>(n)) != n)
            throw system_error(fmt::format("cgroup: write '{}' to {}", entry, deny), errno);
        }
        g.devices_confined_ = true;
      }
      if (has("freezer")) g.freezer_dir_ = dir;
      if (has("cpuacct")) g.cpu_dir_ = dir;
    }
  } else {
    const std::string& root = layout.unified;
    const auto available_text = read_text(root + "/cgroup.controllers");
    const std::set<std::string> available = available_text ? split_words(*available_text) : std::set<std::string>{};
    std::vector<std::string> wanted;
    auto want = [&](const char* c, bool use, bool required) {
      if (!use) return;
      if (available.count(c))
        wanted.emplace_back(c);
      else if (required)
        throw Error(Exit::Unavailable, fmt::format("cgroup: the '{}' controller is not available in {}", c, root));
    };
    want("memory", true, limits.memory_bytes.has_value());
    want("cpuset", want_cpuset, true);
    want("pids", limits.pids_max.has_value(), true);
    std::string dir = root;
    for (const auto& level : levels) {
      enable_controllers(dir, wanted);
      dir += "/" + level;
      mkdir_level(dir);
    }
    enable_controllers(dir, wanted);
    dir += "/" + leaf[0];
    if (::mkdir(dir.c_str(), 0755) != 0) throw system_error("cgroup: mkdir " + dir, errno);
    g.dirs_.push_back(dir);
    // In v2 an empty cpuset.cpus or .mems means the parent's: only the job's are written.
    if (!cpus.empty()) write_limit(dir + "/cpuset.cpus", format_cpu_list(cpus), cpuset_hint);
    if (!mems.empty()) write_limit(dir + "/cpuset.mems", format_cpu_list(mems), cpuset_hint);
    if (limits.memory_bytes) {
      write_limit(dir + "/memory.max", std::to_string(*limits.memory_bytes));
      // memory.swap.max limits swap alone: none keeps RAM + swap under memory.max.
      if (exists(dir + "/memory.swap.max")) write_limit(dir + "/memory.swap.max", "0");
    }
    if (limits.pids_max) write_limit(dir + "/pids.max", std::to_string(*limits.pids_max));
    if (std::find(wanted.begin(), wanted.end(), "memory") != wanted.end()) g.memory_dir_ = dir;
    g.cpu_dir_ = dir;      // cpu.stat is in every v2 group
    g.freezer_dir_ = dir;  // cgroup.freeze too (5.2+)
  }
  g.open_descriptors(true);
  return g;
}

}  // namespace rkit
