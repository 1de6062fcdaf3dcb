#include "rkit/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "rkit/error.hpp"
#include "rkit/topology.hpp"  // format_cpu_list

namespace rkit {

namespace {

using Clock = std::chrono::steady_clock;

// NVIDIA's character devices: /dev/nvidiaN are minors 0..253 of major 195, 254 is
// nvidia-modeset and 255 nvidiactl (both needed by every CUDA process, as is
// nvidia-uvm, whose major is dynamic and which we leave alone).
constexpr int kNvidiaMajor = 195;
constexpr int kNvidiaMaxGpuMinor = 253;

// The v1 controllers this module uses.
constexpr std::string_view kV1Controllers[] = {"cpuset", "cpuacct", "memory", "pids", "devices", "freezer"};

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

std::optional<std::uint64_t> to_u64(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const char a = s[i + 1], b = s[i + 2], c = s[i + 3];
      if (a >= '0' && a <= '3' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out += static_cast<char>((a - '0') * 64 + (b - '0') * 8 + (c - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
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

// Writes a limit; a value the kernel refuses is bad input data (65), naming file and value.
void write_limit(const std::string& path, std::string_view value, std::string_view hint = {}) {
  const int err = write_text_errno(path, value);
  if (err == 0) return;
  const std::string what = fmt::format("cgroup: write '{}' to {}", value, path);
  if (err == EINVAL || err == ERANGE || err == ENOSPC)
    throw Error(Exit::DataErr, fmt::format("{}: {}", what, std::strerror(err)), std::string(hint));
  throw system_error(what, err);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void sleep_for(std::chrono::microseconds us) {
  timespec ts{static_cast<time_t>(us.count() / 1000000), static_cast<long>(us.count() % 1000000) * 1000};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
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
  std::string add;
  for (const auto& c : wanted)
    if (!enabled.count(c)) add += (add.empty() ? "+" : " +") + c;
  if (add.empty()) return;
  const int err = write_text_errno(dir + "/cgroup.subtree_control", add);
  if (err == 0) return;
  Error e = system_error(fmt::format("cgroup: enable '{}' in {}/cgroup.subtree_control", add, dir), err);
  if (err == EBUSY)
    throw Error(e.code(), e.what(),
                "a v2 group that holds processes cannot enable controllers for its children: use a parent "
                "path without processes");
  throw e;
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

}  // namespace

// ---- Parsers.

std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo) {
  std::vector<CgroupMount> out;
  for (std::string_view line : split(mountinfo, '\n')) {
    std::vector<std::string_view> f;
    for (std::string_view t : split(line, ' '))
      if (!t.empty()) f.push_back(t);
    // id parent major:minor root mountpoint options [optional...] - fstype source superoptions
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    const std::string_view fstype = f[dash + 1];
    CgroupMount m;
    m.path = unescape_octal(f[4]);
    if (fstype == "cgroup2") {
      m.unified = true;
    } else if (fstype == "cgroup") {
      if (dash + 3 >= f.size()) continue;
      for (std::string_view opt : split(f[dash + 3], ',')) {
        static constexpr std::string_view kNotControllers[] = {
            "rw", "ro", "noprefix", "clone_children", "xattr", "cpuset_v2_mode", "favordynmods", "none", "all"};
        if (opt.empty() || opt.find('=') != std::string_view::npos ||
            std::find(std::begin(kNotControllers), std::end(kNotControllers), opt) != std::end(kNotControllers))
          continue;
        m.controllers.emplace_back(opt);
      }
      if (m.controllers.empty()) continue;  // a named hierarchy (name=systemd)
    } else {
      continue;
    }
    out.push_back(std::move(m));
  }
  return out;
}

CgroupLayout choose_cgroup_layout(const std::vector<CgroupMount>& mounts) {
  CgroupLayout v1;
  for (const auto& m : mounts)
    if (!m.unified)
      for (const auto& c : m.controllers) v1.v1.emplace(c, m.path);  // the first mount of each wins
  for (auto c : kV1Controllers)
    if (v1.v1.count(std::string(c))) {
      v1.version = CgroupVersion::V1;
      return v1;
    }
  for (const auto& m : mounts) {
    if (!m.unified) continue;
    const auto& cs = m.controllers;
    if (std::find(cs.begin(), cs.end(), "memory") != cs.end() || std::find(cs.begin(), cs.end(), "pids") != cs.end()) {
      CgroupLayout v2;
      v2.version = CgroupVersion::V2;
      v2.unified = m.path;
      return v2;
    }
  }
  return {};
}

const CgroupLayout& cgroup_layout() {
  static const CgroupLayout layout = [] {
    if (::geteuid() != 0) return CgroupLayout{};
    const auto text = read_text("/proc/self/mountinfo");
    if (!text) return CgroupLayout{};
    std::vector<CgroupMount> mounts = parse_cgroup_mounts(*text);
    for (auto& m : mounts)
      if (m.unified)
        if (const auto cs = read_text(m.path + "/cgroup.controllers"))
          for (const auto& c : split_words(*cs)) m.controllers.push_back(c);
    return choose_cgroup_layout(mounts);
  }();
  return layout;
}

CgroupVersion cgroup_version() { return cgroup_layout().version; }

std::optional<std::uint64_t> parse_keyed_value(std::string_view text, std::string_view key) {
  for (std::string_view line : split(text, '\n')) {
    line = trim(line);
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.substr(0, sp) != key) continue;
    return to_u64(trim(line.substr(sp + 1)));
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_single_value(std::string_view text) { return to_u64(trim(text)); }

std::vector<pid_t> parse_pid_list(std::string_view text) {
  std::vector<pid_t> out;
  for (std::string_view line : split(text, '\n'))
    if (auto v = to_u64(trim(line)); v && *v > 0 && *v <= 0x3fffffff) out.push_back(static_cast<pid_t>(*v));
  return out;
}

// ---- JobCgroup.

JobCgroup::JobCgroup(JobCgroup&& o) noexcept
    : version_(o.version_),
      dirs_(std::exchange(o.dirs_, {})),
      memory_dir_(std::exchange(o.memory_dir_, {})),
      cpu_dir_(std::exchange(o.cpu_dir_, {})),
      freezer_dir_(std::exchange(o.freezer_dir_, {})),
      procs_fds_(std::exchange(o.procs_fds_, {})),
      oom_fd_(std::move(o.oom_fd_)),
      devices_confined_(o.devices_confined_),
      removed_(std::exchange(o.removed_, true)) {}

JobCgroup& JobCgroup::operator=(JobCgroup&& o) noexcept {
  if (this != &o) {
    remove_quietly();
    version_ = o.version_;
    dirs_ = std::exchange(o.dirs_, {});
    memory_dir_ = std::exchange(o.memory_dir_, {});
    cpu_dir_ = std::exchange(o.cpu_dir_, {});
    freezer_dir_ = std::exchange(o.freezer_dir_, {});
    procs_fds_ = std::exchange(o.procs_fds_, {});
    oom_fd_ = std::move(o.oom_fd_);
    devices_confined_ = o.devices_confined_;
    removed_ = std::exchange(o.removed_, true);
  }
  return *this;
}

JobCgroup::~JobCgroup() { remove_quietly(); }

void JobCgroup::release() noexcept {
  dirs_.clear();
  memory_dir_.clear();
  cpu_dir_.clear();
  freezer_dir_.clear();
  procs_fds_.clear();
  oom_fd_.reset();
  devices_confined_ = false;
  removed_ = true;
}

void JobCgroup::remove_quietly() noexcept {
  if (removed_ || dirs_.empty()) return;
  try {
    kill_all(std::chrono::seconds(1));
    remove();
  } catch (...) {
    // A destructor must not throw; what is left is found again by list()/open().
  }
}

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

std::optional<JobCgroup> JobCgroup::open(const std::string& parent, const std::string& name,
                                         const CgroupLayout& layout_in) {
  const CgroupLayout& layout = require_layout(layout_in);
  const std::vector<std::string> leaf = components(name, "name");
  if (leaf.size() != 1) throw Error(Exit::DataErr, fmt::format("cgroup: name '{}': must be one path component", name));
  std::vector<std::string> path = components(parent, "parent");
  path.push_back(leaf[0]);
  JobCgroup g;
  g.version_ = layout.version;
  if (layout.version == CgroupVersion::V1) {
    for (const std::string& mount : v1_mounts(layout)) {
      const std::string dir = join(mount, path);
      if (!exists(dir)) continue;
      g.dirs_.push_back(dir);
      auto has = [&](const char* c) {
        auto it = layout.v1.find(c);
        return it != layout.v1.end() && it->second == mount;
      };
      if (has("memory")) g.memory_dir_ = dir;
      if (has("cpuacct")) g.cpu_dir_ = dir;
      if (has("freezer")) g.freezer_dir_ = dir;
    }
  } else {
    const std::string dir = join(layout.unified, path);
    if (exists(dir)) {
      g.dirs_.push_back(dir);
      if (exists(dir + "/memory.events")) g.memory_dir_ = dir;
      g.cpu_dir_ = g.freezer_dir_ = dir;
    }
  }
  if (g.dirs_.empty()) return std::nullopt;
  g.open_descriptors(false);
  return g;
}

std::vector<std::string> JobCgroup::list(const std::string& parent, const CgroupLayout& layout) {
  std::vector<std::string> mounts = layout.version == CgroupVersion::V1   ? v1_mounts(layout)
                                    : layout.version == CgroupVersion::V2 ? std::vector<std::string>{layout.unified}
                                                                          : std::vector<std::string>{};
  const std::vector<std::string> levels = components(parent, "parent");
  std::set<std::string> names;
  for (const auto& mount : mounts) {
    DIR* d = ::opendir(join(mount, levels).c_str());
    if (!d) continue;
    while (const dirent* e = ::readdir(d))
      if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        names.emplace(e->d_name);
    ::closedir(d);
  }
  return {names.begin(), names.end()};
}

void JobCgroup::remove_parent(const std::string& parent, const CgroupLayout& layout) noexcept {
  try {
    const std::vector<std::string> mounts = layout.version == CgroupVersion::V1 ? v1_mounts(layout)
                                            : layout.version == CgroupVersion::V2
                                                ? std::vector<std::string>{layout.unified}
                                                : std::vector<std::string>{};
    const std::vector<std::string> levels = components(parent, "parent");
    for (const auto& mount : mounts) ::rmdir(join(mount, levels).c_str());  // EBUSY/ENOENT: left as it is
  } catch (const std::exception&) {                                         // a malformed parent: nothing to remove
  }
}

void JobCgroup::open_descriptors(bool with_oom) {
  for (const auto& dir : dirs_) {
    const std::string procs = dir + "/cgroup.procs";
    UniqueFd fd(::open(procs.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) throw system_error("cgroup: open " + procs, errno);
    procs_fds_.push_back(std::move(fd));
  }
  if (!with_oom || memory_dir_.empty()) return;
  if (version_ == CgroupVersion::V1) {
    UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!efd) throw system_error("cgroup: eventfd", errno);
    const std::string control = memory_dir_ + "/memory.oom_control";
    UniqueFd cfd(::open(control.c_str(), O_RDONLY | O_CLOEXEC));
    if (!cfd) throw system_error("cgroup: open " + control, errno);
    const std::string line = fmt::format("{} {}", efd.get(), cfd.get());
    const int err = write_text_errno(memory_dir_ + "/cgroup.event_control", line);
    if (err != 0) throw system_error("cgroup: register an OOM event in " + memory_dir_ + "/cgroup.event_control", err);
    oom_fd_ = std::move(efd);  // the registration holds what it needs of `cfd`
  } else {
    UniqueFd ifd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!ifd) throw system_error("cgroup: inotify_init1", errno);
    const std::string events = memory_dir_ + "/memory.events";
    if (::inotify_add_watch(ifd.get(), events.c_str(), IN_MODIFY) < 0)
      throw system_error("cgroup: watch " + events, errno);
    oom_fd_ = std::move(ifd);
  }
}

int JobCgroup::enter_child() const noexcept {
  for (const auto& fd : procs_fds_) {
    ssize_t n;
    do n = ::write(fd.get(), "0", 1);
    while (n < 0 && errno == EINTR);
    if (n < 0) return errno;
  }
  return 0;
}

void JobCgroup::add(pid_t pid) const {
  const std::string text = std::to_string(pid);
  for (std::size_t i = 0; i < procs_fds_.size(); ++i)
    if (::write(procs_fds_[i].get(), text.data(), text.size()) < 0)
      throw system_error(fmt::format("cgroup: add pid {} to {}", pid, dirs_[i]), errno);
}

bool JobCgroup::consume_oom_event() {
  if (oom_fd_) {
    char buf[4096];
    while (::read(oom_fd_.get(), buf, sizeof buf) > 0) {
    }
  }
  return oom_killed();
}

bool JobCgroup::oom_killed() const {
  if (memory_dir_.empty()) return false;
  const char* file = version_ == CgroupVersion::V1 ? "/memory.oom_control" : "/memory.events";
  if (const auto text = read_text(memory_dir_ + file))
    if (const auto kills = parse_keyed_value(*text, "oom_kill")) return *kills > 0;
  // A v1 kernel older than 4.13 keeps no count: the OOM event then tells.
  if (version_ == CgroupVersion::V1 && oom_fd_) {
    pollfd p{oom_fd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  return false;
}

CgroupUsage JobCgroup::usage() const {
  CgroupUsage u;
  if (version_ == CgroupVersion::V1) {
    if (!cpu_dir_.empty())
      if (const auto t = read_text(cpu_dir_ + "/cpuacct.usage"))
        if (const auto ns = parse_single_value(*t)) u.cpu_s = double(*ns) * 1e-9;
    if (!memory_dir_.empty())
      if (const auto t = read_text(memory_dir_ + "/memory.max_usage_in_bytes"))
        u.peak_memory_bytes = parse_single_value(*t);
  } else if (version_ == CgroupVersion::V2) {
    if (!cpu_dir_.empty())
      if (const auto t = read_text(cpu_dir_ + "/cpu.stat"))
        if (const auto us = parse_keyed_value(*t, "usage_usec")) u.cpu_s = double(*us) * 1e-6;
    if (!memory_dir_.empty())
      if (const auto t = read_text(memory_dir_ + "/memory.peak")) u.peak_memory_bytes = parse_single_value(*t);
  }
  u.oom_killed = oom_killed();
  return u;
}

namespace {

// Every pid in `dirs` and the groups below them, sorted, without duplicates.
std::vector<pid_t> all_pids(const std::vector<std::string>& dirs) {
  std::vector<pid_t> out;
  for (const auto& dir : dirs) {
    std::vector<std::string> groups;
    subgroups(dir, groups);
    groups.push_back(dir);
    for (const auto& g : groups)
      if (const auto text = read_text(g + "/cgroup.procs")) {
        const auto pids = parse_pid_list(*text);
        out.insert(out.end(), pids.begin(), pids.end());
      }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Polls until `done()` or `deadline`, sleeping 20 µs, doubling up to 2 ms: a killed
// process is usually gone within a millisecond, so short naps first.
template <class Done>
bool wait_until(Done done, Clock::time_point deadline) {
  std::chrono::microseconds nap(20);
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace

bool JobCgroup::empty() const { return all_pids(dirs_).empty(); }

bool JobCgroup::kill_all(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const pid_t self = ::getpid();
  auto nobody = [&] {
    const auto pids = all_pids(dirs_);
    return pids.empty() || (pids.size() == 1 && pids[0] == self);
  };
  if (dirs_.empty() || nobody()) return true;
  if (version_ == CgroupVersion::V2 && write_text_errno(dirs_.front() + "/cgroup.kill", "1") == 0)
    return wait_until(nobody, deadline);
  // Freezing first: a process cannot fork between our reading the pids and killing
  // them. Killed while frozen, they die when thawed.
  const bool v1 = version_ == CgroupVersion::V1;
  const std::string freeze_file =
      freezer_dir_.empty() ? std::string() : freezer_dir_ + (v1 ? "/freezer.state" : "/cgroup.freeze");
  auto frozen = [&] {
    if (v1) {
      const auto t = read_text(freeze_file);
      return t && trim(*t) == "FROZEN";
    }
    const auto t = read_text(freezer_dir_ + "/cgroup.events");
    return t && parse_keyed_value(*t, "frozen").value_or(0) == 1;
  };
  for (;;) {
    const bool freeze = !freeze_file.empty() && write_text_errno(freeze_file, v1 ? "FROZEN" : "1") == 0;
    // A task stuck in the kernel may never freeze: kill after a short while regardless.
    if (freeze) wait_until(frozen, std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
    for (pid_t pid : all_pids(dirs_))
      if (pid != self) ::kill(pid, SIGKILL);
    if (freeze) write_text_errno(freeze_file, v1 ? "THAWED" : "0");
    if (wait_until(nobody, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)))) return true;
    if (Clock::now() >= deadline) return false;
  }
}

void JobCgroup::remove() {
  if (removed_) return;
  procs_fds_.clear();
  oom_fd_.reset();
  std::optional<Error> first;
  for (const auto& dir : dirs_) {
    std::vector<std::string> groups;
    subgroups(dir, groups);
    groups.push_back(dir);
    for (const auto& g : groups) {
      if (::rmdir(g.c_str()) == 0 || errno == ENOENT) continue;
      if (first) continue;
      if (errno == EBUSY)
        first = Error(Exit::TempFail, fmt::format("cgroup: remove {}: processes remain", g), "kill_all() first");
      else
        first = system_error("cgroup: remove " + g, errno);
    }
  }
  if (first) throw *first;
  removed_ = true;
}

}  // namespace rkit
