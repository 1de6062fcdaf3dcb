// File: rkit/cgroup.hpp
//
// Confines one job attempt in its own control group, so that the kernel enforces its
// limits as Slurm's task/cgroup and proctrack/cgroup do: a cpuset of its CPUs that no
// sched_setaffinity escapes, a hard memory limit (OOM kill, reported as such), a
// maximum number of tasks, the GPUs it was not given hidden, every process it ever
// started killed at the end (setsid and double forks included), and its CPU time and
// peak memory measured. Works on cgroup v2 (the unified hierarchy) and v1 (one
// hierarchy per controller); needs root.
//
//   rkit::CgroupLimits lim;
//   lim.cpus = {2, 3};
//   lim.memory_bytes = 8ull << 30;
//   lim.pids_max = 4096;
//   lim.gpus = std::vector<int>{1};
//   rkit::JobCgroup cg = rkit::JobCgroup::create("rkit", "job-42.1", lim);
//   pid_t pid = fork();
//   if (pid == 0) { if (cg.enter_child() != 0) _exit(126); /* setaffinity, setuid */ execvp(...); }
//   ... a task ended by SIGKILL: cg.oom_killed() says whether the memory limit did it
//   rkit::CgroupUsage used = cg.usage();    // before the group goes
//   cg.kill_all(std::chrono::seconds(5));   // every process left, then waits until none
//   cg.remove();
//
// The group is `<hierarchy>/<parent>/<name>` in every hierarchy it uses, with `parent`
// relative to the hierarchy's root (as mounted, found in /proc/self/mountinfo), e.g.
// /sys/fs/cgroup/memory/rkit/job-42.1 on v1, /sys/fs/cgroup/rkit/job-42.1 on v2.
//
// What each version does:
//   v1: cpuset (cpus, mems), memory (memory.limit_in_bytes and memory.memsw.limit_in_bytes
//       when swap accounting exists; OOM through cgroup.event_control on
//       memory.oom_control), pids, devices (NVIDIA major 195), freezer (to kill without
//       a fork racing the kill), cpuacct (CPU time).
//   v2: cpuset, memory (memory.max, and memory.swap.max = 0 so that RAM + swap stay
//       under the limit; OOM through memory.events), pids, cgroup.kill (else
//       cgroup.freeze), cpu.stat. GPUs are NOT hidden on v2: that needs an eBPF device
//       program, which this module does not load; devices_confined() is then false and
//       the caller hides them by other means (CUDA_VISIBLE_DEVICES).
// A hybrid machine (v1 controllers plus a cgroup2 mount without controllers, as systemd's
// /sys/fs/cgroup/unified) counts as v1. The unit tests run every v1 path on the kernel;
// of v2 they run what needs no controller (enter, cgroup.kill, cpu.stat, leftovers) on
// such a controller-less mount, and v2's limits only where a machine enables them.
//
// Thread-safety: a JobCgroup is used by one thread at a time; distinct groups are
// independent. Cost, measured on v1 (2 CPUs, Linux 6.18; six hierarchies): create
// 0.35 ms (0.65 ms with GPUs hidden), enter 0.05 ms, kill_all of an emptied group
// 0.1 ms, remove 0.17 ms: about 0.7 ms per job start and end (1.0 ms with GPUs).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rkit/file.hpp"

namespace rkit {

// Which cgroup hierarchy this machine offers us, or None when there is no usable one
// (not root, no cgroupfs mounted, or a cgroup2 mount without controllers only).
enum class CgroupVersion { None, V1, V2 };

// What a job may use. Every field left empty leaves that resource unconfined.
struct CgroupLimits {
  std::vector<int> cpus;                      // CPU numbers (the union of the tasks' PUs); empty: no cpuset
  std::vector<int> mems;                      // memory (NUMA) nodes with `cpus`; empty: the parent's
  std::optional<std::uint64_t> memory_bytes;  // hard limit, swap included; over it the kernel OOM-kills
  std::optional<int> pids_max;                // most tasks (processes and threads) at once
  // Set: only these NVIDIA GPU minors (0..253; /dev/nvidiaN) can be opened, plus
  // nvidiactl, nvidia-modeset and nvidia-uvm; an empty vector hides every GPU.
  // nullopt: devices untouched. v1 only (see above).
  std::optional<std::vector<int>> gpus;
};

// What a job used, read from the kernel's counters.
struct CgroupUsage {
  double cpu_s = 0;                                // user + system CPU seconds of every process
  std::optional<std::uint64_t> peak_memory_bytes;  // high-water mark (page cache included); nullopt: not kept
  bool oom_killed = false;                         // the memory limit killed a process
};

// One cgroup filesystem mount from /proc/self/mountinfo.
struct CgroupMount {
  std::string path;                      // mount point, octal escapes (\040) decoded
  bool unified = false;                  // cgroup2
  std::vector<std::string> controllers;  // v1: from the super options ("cpu", "cpuacct"); v2: filled by
                                         // the caller from <path>/cgroup.controllers
};

// Which hierarchies to use.
struct CgroupLayout {
  CgroupVersion version = CgroupVersion::None;
  std::string unified;                    // V2: the cgroup2 mount point
  std::map<std::string, std::string> v1;  // V1: controller → mount point (first mount of each)
};

// This machine's layout: /proc/self/mountinfo, and cgroup.controllers of cgroup2 mounts;
// version None when not root. Read once per process.
const CgroupLayout& cgroup_layout();
// The hierarchy version here: cgroup_layout().version.
CgroupVersion cgroup_version();

class JobCgroup {
 public:
  // Creates `parent/name` in every hierarchy the limits need (plus memory, cpuacct and
  // freezer on v1, for measures and killing) and applies the limits. Missing levels of
  // `parent` are created ready for children: v1 cpuset levels get their parent's cpus
  // and mems, v2 levels get the controllers enabled in cgroup.subtree_control. A group
  // of that name left over by a crash is killed and replaced, so its counters start at
  // zero. `parent` is a relative path ("rkit", "rkit/jobs"); `name` one component.
  // Errors, as rkit::Error naming the file and why: Unavailable (69) when
  // cgroup_version() is None or a limit needs a controller that is not mounted;
  // NoPerm (77); DataErr (65) for a bad name or a limit the kernel refuses (CPUs or
  // nodes outside the parent's cpuset, a GPU minor out of range); v2 levels that hold
  // processes cannot enable controllers (EBUSY, IoErr). On error nothing is left behind
  // but the parent levels. Cost: on v1 about 0.35 ms, plus 0.3 ms for the 254 writes
  // that hide GPUs when `gpus` is set.
  // `layout` is this machine's unless given (tests; hierarchies mounted elsewhere).
  static JobCgroup create(const std::string& parent, const std::string& name, const CgroupLimits& limits,
                          const CgroupLayout& layout = cgroup_layout());

  // The existing group `parent/name` (left by a supervisor that died: the daemon kills
  // and removes it, or reads its usage), or nullopt when no hierarchy has it. Its
  // oom_fd() is -1. Like a created one it is killed and removed when it goes out of
  // scope, unless release()d. Errors as create().
  static std::optional<JobCgroup> open(const std::string& parent, const std::string& name,
                                       const CgroupLayout& layout = cgroup_layout());

  // Removes the last level of `parent` in every hierarchy where it is empty (no group
  // below it left), e.g. a daemon's own level when it stops; others are left. Never throws.
  static void remove_parent(const std::string& parent, const CgroupLayout& layout = cgroup_layout()) noexcept;

  // The names of the groups under `parent` in any hierarchy, sorted; empty when none or
  // when cgroup_version() is None. For finding leftovers after a restart.
  static std::vector<std::string> list(const std::string& parent, const CgroupLayout& layout = cgroup_layout());

  JobCgroup(JobCgroup&& other) noexcept;
  JobCgroup& operator=(JobCgroup&& other) noexcept;
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;
  // kill_all (1 s) and remove() when not done yet (nor release()d); never throws.
  ~JobCgroup();
  // Forgets the group without killing or removing it: for a look at a running job's
  // usage through open(). This object is then empty (no paths, no descriptors).
  void release() noexcept;

  // Moves the calling process into the group, for a child between fork and exec: do it
  // first, before sched_setaffinity (entering a cpuset resets the affinity to it) and
  // before setuid (only root may move a process). Async-signal-safe: one write() per
  // hierarchy to descriptors opened by create() (close-on-exec). Returns 0, or the
  // errno of the failed write; the child should then _exit rather than run unconfined.
  int enter_child() const noexcept;
  // Moves process `pid` (all its threads) into the group. Error as system_error.
  void add(pid_t pid) const;

  // A descriptor that polls readable (POLLIN) when the kernel reports a memory event of
  // the group (v1: an eventfd on memory.oom_control, signalled on OOM; v2: inotify on
  // memory.events, which also changes when memory.max throttles), or -1 without a
  // memory controller. Owned by this object. Level-triggered: call consume_oom_event().
  int oom_fd() const noexcept { return oom_fd_.get(); }
  // Reads what is pending on oom_fd() (non-blocking) and returns oom_killed().
  bool consume_oom_event();
  // Whether the kernel has OOM-killed a process of the group (memory.oom_control's or
  // memory.events' oom_kill count). Cheap (one read): call it when a task died by SIGKILL.
  bool oom_killed() const;

  // CPU time, peak memory and the OOM flag so far; read it before remove().
  CgroupUsage usage() const;

  // Whether no process is left in the group (nor in groups the job made below it).
  bool empty() const;
  // Kills every process of the group, however it detached (setsid, double fork,
  // reparented to init), and of groups below it: v2 cgroup.kill where the kernel has
  // it; else freeze (v1 freezer, v2 cgroup.freeze) so that none forks meanwhile,
  // SIGKILL each pid in cgroup.procs, thaw, and again until none is left. Waits until
  // the group is empty, at most `timeout`; returns false if processes remain then
  // (stuck in the kernel, e.g. on a dead NFS server). Does not reap: the caller still
  // waits for its own children. Errors: none thrown.
  bool kill_all(std::chrono::milliseconds timeout);
  // Removes the group's directory in every hierarchy (and groups the job made below
  // it); the parent levels stay for other jobs. Call kill_all first. Idempotent.
  // Error(TempFail) when processes remain (EBUSY), else system_error.
  void remove();

  CgroupVersion version() const noexcept { return version_; }
  // Whether GPUs the job was not given are hidden (v1 with `gpus` set).
  bool devices_confined() const noexcept { return devices_confined_; }
  // The group's directory in each hierarchy it uses.
  const std::vector<std::string>& paths() const noexcept { return dirs_; }

 private:
  JobCgroup() = default;
  void open_descriptors(bool with_oom);
  void remove_quietly() noexcept;

  CgroupVersion version_ = CgroupVersion::None;
  std::vector<std::string> dirs_;                   // one per hierarchy
  std::string memory_dir_, cpu_dir_, freezer_dir_;  // where those files are (may be empty)
  std::vector<UniqueFd> procs_fds_;                 // cgroup.procs of each dir, for enter_child()
  UniqueFd oom_fd_;
  bool devices_confined_ = false;
  bool removed_ = false;
};

// ---- The kernel's text, parsed: pure functions, used above and tested on fixtures.

// The cgroup and cgroup2 mounts in a /proc/<pid>/mountinfo text, in order; named v1
// hierarchies without controllers (name=systemd) are left out. Malformed lines are skipped.
std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo);
// V1 when a v1 hierarchy carries any controller this module uses (cpuset, cpuacct,
// memory, pids, devices, freezer); else V2 on the first cgroup2 mount whose controllers
// include memory or pids; else None. (A controller lives in one hierarchy only, so a
// hybrid layout's cgroup2 mount has none of them.)
CgroupLayout choose_cgroup_layout(const std::vector<CgroupMount>& mounts);

// The value of `key` in a flat keyed file ("oom_kill 3\n", v2 cpu.stat "usage_usec 12"),
// or nullopt when the key is absent or its value is not a number.
std::optional<std::uint64_t> parse_keyed_value(std::string_view text, std::string_view key);
// A single-number file ("123\n"; v2 "max" is nullopt).
std::optional<std::uint64_t> parse_single_value(std::string_view text);
// The pids in a cgroup.procs text (one per line), skipping anything that is not one.
std::vector<pid_t> parse_pid_list(std::string_view text);

}  // namespace rkit
