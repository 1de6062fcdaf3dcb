// File: libcommon/src/cgroup.cpp — a job's cgroup after its creation (rkit/cgroup.hpp):
// opening and listing groups, entering, OOM events, usage, killing everything, removal.
#include "rkit/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <set>
#include <utility>

#include "cgroup_impl.hpp"
#include "rkit/error.hpp"

namespace rkit {

using namespace cgroup_detail;

namespace {

using Clock = std::chrono::steady_clock;

void sleep_for(std::chrono::microseconds us) {
  timespec ts{static_cast<time_t>(us.count() / 1000000), static_cast<long>(us.count() % 1000000) * 1000};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

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
