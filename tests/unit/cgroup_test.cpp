#include "rkit/cgroup.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "rkit/error.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

// ---- Parsers, on text as the kernel writes it.

// /proc/self/mountinfo of a v1 machine with systemd's hybrid cgroup2 mount (this
// project's build machine), plus an escaped mount point and a non-cgroup mount.
constexpr const char* kMountinfoV1Fixture =
    "23 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset,clone_children\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "37 31 0:34 / /sys/fs/cgroup/free\\040zer rw,relatime - cgroup cgroup rw,freezer\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
    "99 35 0:32 / /mnt/memory-again rw,relatime - cgroup cgroup rw,memory\n"
    "garbage line\n";

// A pure v2 machine (systemd's default since 2021), cgroup2 at /sys/fs/cgroup.
constexpr const char* kMountinfoV2Fixture =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro\n"
    "26 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "27 26 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

TEST(CgroupParse, MountinfoV1WithHybridUnifiedMount) {
  const auto mounts = parse_cgroup_mounts(kMountinfoV1Fixture);
  ASSERT_EQ(mounts.size(), 8u);  // tmpfs, ext4, name=systemd and garbage left out
  EXPECT_EQ(mounts[0].path, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(mounts[0].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(mounts[1].controllers, (std::vector<std::string>{"cpuset"}));  // clone_children is an option
  EXPECT_EQ(mounts[4].path, "/sys/fs/cgroup/free zer");
  EXPECT_TRUE(mounts[6].unified);
  EXPECT_EQ(mounts[6].path, "/sys/fs/cgroup/unified");

  auto chosen = mounts;
  chosen[6].controllers = {};  // the hybrid mount's cgroup.controllers is empty
  const CgroupLayout layout = choose_cgroup_layout(chosen);
  EXPECT_EQ(layout.version, CgroupVersion::V1);
  EXPECT_EQ(layout.v1.at("cpuacct"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(layout.v1.at("cpu"), "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(layout.v1.at("memory"), "/sys/fs/cgroup/memory");  // the first mount of it
  EXPECT_EQ(layout.v1.at("freezer"), "/sys/fs/cgroup/free zer");
  EXPECT_EQ(layout.v1.count("name=systemd"), 0u);
  EXPECT_TRUE(layout.unified.empty());
}

TEST(CgroupParse, MountinfoV2) {
  auto mounts = parse_cgroup_mounts(kMountinfoV2Fixture);
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_TRUE(mounts[0].unified);
  EXPECT_EQ(mounts[0].path, "/sys/fs/cgroup");
  // Without controllers (nothing delegated to us) it is not usable.
  EXPECT_EQ(choose_cgroup_layout(mounts).version, CgroupVersion::None);
  mounts[0].controllers = {"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"};
  const CgroupLayout layout = choose_cgroup_layout(mounts);
  EXPECT_EQ(layout.version, CgroupVersion::V2);
  EXPECT_EQ(layout.unified, "/sys/fs/cgroup");
  EXPECT_TRUE(layout.v1.empty());
}

TEST(CgroupParse, NoCgroupfs) {
  EXPECT_EQ(choose_cgroup_layout(parse_cgroup_mounts("")).version, CgroupVersion::None);
  EXPECT_EQ(choose_cgroup_layout(parse_cgroup_mounts("23 1 254:0 / / rw - ext4 /dev/vda rw\n")).version,
            CgroupVersion::None);
}

TEST(CgroupParse, StatFiles) {
  // v2 cpu.stat, memory.events; v1 memory.oom_control, as the kernel writes them.
  const char* cpu_stat_v2 = "usage_usec 301234\nuser_usec 300000\nsystem_usec 1234\nnr_periods 0\nnr_throttled 0\n";
  const char* memory_events_v2 = "low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n";
  const char* oom_control_v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
  EXPECT_EQ(parse_keyed_value(cpu_stat_v2, "usage_usec"), 301234u);
  EXPECT_EQ(parse_keyed_value(cpu_stat_v2, "user_usec"), 300000u);
  EXPECT_EQ(parse_keyed_value(memory_events_v2, "oom_kill"), 1u);
  EXPECT_EQ(parse_keyed_value(memory_events_v2, "oom"), 1u);  // a key, not a prefix
  EXPECT_EQ(parse_keyed_value(oom_control_v1, "oom_kill"), 2u);
  EXPECT_EQ(parse_keyed_value(oom_control_v1, "missing"), std::nullopt);
  EXPECT_EQ(parse_keyed_value("oom_kill x\n", "oom_kill"), std::nullopt);

  EXPECT_EQ(parse_single_value("52428800\n"), 52428800u);  // v1 memory.max_usage_in_bytes
  EXPECT_EQ(parse_single_value("max\n"), std::nullopt);    // v2 memory.peak absent / pids.max
  EXPECT_EQ(parse_single_value(""), std::nullopt);

  EXPECT_EQ(parse_pid_list("12\n345\n\n7\n"), (std::vector<pid_t>{12, 345, 7}));
  EXPECT_TRUE(parse_pid_list("").empty());
}

// ---- The kernel: these run as root on a machine with cgroupfs, else they skip.

// Waits up to `timeout` for `pid` (our child) to end; its wait status, or nullopt.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
    ::close(pidfd);
    if (ready != 1) return std::nullopt;
  }
  int status = 0;
  if (::waitpid(pid, &status, pidfd >= 0 ? 0 : WNOHANG) != pid) return std::nullopt;
  return status;
}

// True once `pid` (not our child) no longer runs: gone, or a zombie. Up to `timeout`.
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

bool not_running(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren == std::string::npos || (paren + 2 < line.size() && (line[paren + 2] == 'Z' || line[paren + 2] == 'X'));
}

// Touches `bytes` of fresh anonymous memory, page by page.
void touch(std::size_t bytes) {
  auto* p = static_cast<char*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) ::_exit(100);
  for (std::size_t i = 0; i < bytes; i += 4096) p[i] = 1;
}

// Forks a child that enters `cg` and exits with body()'s result (120 if it cannot enter).
pid_t fork_in(const JobCgroup& cg, const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (cg.enter_child() != 0) ::_exit(120);
    ::_exit(body());
  }
  return pid;
}

std::string file_in(const JobCgroup& cg, const std::string& file) {
  for (const auto& dir : cg.paths())
    if (::access((dir + "/" + file).c_str(), F_OK) == 0) return testing::slurp(dir + "/" + file);
  return {};
}

constexpr std::uint64_t kMiB = 1 << 20;

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "cgroups need root";
    if (cgroup_version() == CgroupVersion::None) GTEST_SKIP() << "no usable cgroup hierarchy mounted";
    parent_ = "rkit-unit-" + std::to_string(::getpid()) + "/jobs";
  }

  // Every group a test made goes, passed or failed, and so do the parent levels.
  void TearDown() override {
    if (parent_.empty()) return;
    for (const auto& name : JobCgroup::list(parent_))
      if (auto g = JobCgroup::open(parent_, name)) {
        EXPECT_TRUE(g->kill_all(5s)) << name;
        g->remove();
      }
    const CgroupLayout& layout = cgroup_layout();
    std::vector<std::string> mounts;
    if (layout.version == CgroupVersion::V2) mounts.push_back(layout.unified);
    for (const auto& [controller, mount] : layout.v1) mounts.push_back(mount);
    const std::string top = parent_.substr(0, parent_.find('/'));
    for (const auto& mount : mounts) {
      ::rmdir((mount + "/" + parent_).c_str());
      ::rmdir((mount + "/" + top).c_str());
      EXPECT_NE(::access((mount + "/" + top).c_str(), F_OK), 0) << mount << "/" << top << " left behind";
    }
  }

  std::string parent_;
};

TEST_F(CgroupTest, CpusetConfinesAffinity) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs 2 CPUs";
  CgroupLimits lim;
  lim.cpus = {0};
  JobCgroup cg = JobCgroup::create(parent_, "cpuset", lim);
  const pid_t pid = fork_in(cg, [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return 10;
    if (CPU_COUNT(&set) != 1 || !CPU_ISSET(0, &set)) return 11;  // entering reset it to {0}
    CPU_ZERO(&set);
    CPU_SET(1, &set);
    if (::sched_setaffinity(0, sizeof set, &set) == 0) return 12;  // escaped
    return errno == EINVAL ? 0 : 13;
  });
  const auto status = wait_child(pid, 10s);
  ASSERT_TRUE(status);
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0) << "10: getaffinity failed, 11: affinity not {0}, 12: escaped, 13: other errno";
  EXPECT_TRUE(cg.kill_all(2s));
  cg.remove();
}

TEST_F(CgroupTest, CpusOutsideTheParentAreBadData) {
  CgroupLimits lim;
  lim.cpus = {4000};
  try {
    JobCgroup::create(parent_, "badcpu", lim);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::DataErr) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpuset.cpus"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(JobCgroup::open(parent_, "badcpu")) << "a failed create left its group";
}

TEST_F(CgroupTest, MemoryLimitOomKillsAndIsReported) {
  CgroupLimits lim;
  lim.memory_bytes = 20 * kMiB;
  JobCgroup cg = JobCgroup::create(parent_, "oom", lim);
  ASSERT_GE(cg.oom_fd(), 0);
  EXPECT_FALSE(cg.oom_killed());
  const pid_t pid = fork_in(cg, [] {
    touch(200 * kMiB);
    return 0;
  });
  pollfd p{cg.oom_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 1000), 1) << "no OOM event within a second";
  const auto status = wait_child(pid, 10s);
  ASSERT_TRUE(status);
  ASSERT_TRUE(WIFSIGNALED(*status)) << "status " << *status;
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  EXPECT_TRUE(cg.oom_killed());
  EXPECT_TRUE(cg.consume_oom_event());
  EXPECT_TRUE(cg.usage().oom_killed);
  cg.kill_all(2s);
  cg.remove();
}

TEST_F(CgroupTest, UnderTheMemoryLimitIsNotFlagged) {
  CgroupLimits lim;
  lim.memory_bytes = 64 * kMiB;
  JobCgroup cg = JobCgroup::create(parent_, "fits", lim);
  const pid_t pid = fork_in(cg, [] {
    touch(8 * kMiB);
    return 0;
  });
  const auto status = wait_child(pid, 10s);
  ASSERT_TRUE(status);
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_FALSE(cg.oom_killed());
  pollfd p{cg.oom_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  cg.remove();
}

TEST_F(CgroupTest, PidsMaxStopsForks) {
  CgroupLimits lim;
  lim.pids_max = 16;
  JobCgroup cg = JobCgroup::create(parent_, "pids", lim);
  const pid_t pid = fork_in(cg, [] {
    int forked = 0;
    for (; forked < 100; ++forked) {
      const pid_t c = ::fork();
      if (c == 0) {
        ::pause();
        ::_exit(0);
      }
      if (c < 0) return errno == EAGAIN ? forked : 200;
    }
    return 201;
  });
  const auto status = wait_child(pid, 10s);
  ASSERT_TRUE(status);
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 15) << "forks before EAGAIN (200: another errno, 201: never refused)";
  EXPECT_TRUE(cg.kill_all(5s));
  EXPECT_TRUE(cg.empty());
  cg.remove();
}

TEST_F(CgroupTest, ForkBombIsContainedAndKilled) {
  CgroupLimits lim;
  lim.pids_max = 16;
  lim.cpus = {0};  // leave the other CPU to the machine
  JobCgroup cg = JobCgroup::create(parent_, "bomb", lim);
  const pid_t pid = fork_in(cg, []() -> int {
    for (;;) ::fork();
  });
  auto current = [&] { return parse_single_value(file_in(cg, "pids.current")).value_or(0); };
  EXPECT_TRUE(eventually([&] { return current() >= 16; }, 5s)) << "pids.current " << current();
  EXPECT_LE(current(), 16u);
  EXPECT_TRUE(cg.kill_all(5s));
  EXPECT_TRUE(cg.empty());
  const auto status = wait_child(pid, 5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  cg.remove();
}

TEST_F(CgroupTest, KillAllReachesDetachedGrandchildren) {
  JobCgroup cg = JobCgroup::create(parent_, "detached", {});
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = fork_in(cg, [&] {
    // Double fork: the grandchild leads its own session, is reparented to init, and
    // would survive a kill of our process group.
    if (::fork() == 0) {
      ::setsid();
      if (::fork() == 0) {
        const pid_t me = ::getpid();
        if (::write(fds[1], &me, sizeof me) != sizeof me) ::_exit(1);
        for (;;) ::pause();
      }
      ::_exit(0);
    }
    return 0;
  });
  ::close(fds[1]);
  pid_t grandchild = 0;
  pollfd p{fds[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof grandchild), ssize_t(sizeof grandchild));
  ::close(fds[0]);
  const auto status = wait_child(pid, 5s);
  ASSERT_TRUE(status && WIFEXITED(*status));
  ASSERT_EQ(::kill(grandchild, 0), 0) << "the grandchild should run until kill_all";
  EXPECT_NE(::getsid(grandchild), ::getsid(0));
  EXPECT_FALSE(cg.empty());

  EXPECT_TRUE(cg.kill_all(5s));
  EXPECT_TRUE(cg.empty());
  EXPECT_TRUE(eventually([&] { return not_running(grandchild); }, 5s));
  const auto dirs = cg.paths();
  cg.remove();
  for (const auto& dir : dirs) EXPECT_NE(::access(dir.c_str(), F_OK), 0) << dir;
  cg.remove();  // idempotent
}

TEST_F(CgroupTest, UsageCountsCpuAndPeakMemory) {
  JobCgroup cg = JobCgroup::create(parent_, "usage", {});
  const pid_t pid = fork_in(cg, [] {
    timespec ts{};
    do ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    while (ts.tv_sec == 0 && ts.tv_nsec < 300'000'000);
    touch(50 * kMiB);
    return 0;
  });
  const auto status = wait_child(pid, 20s);
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  const CgroupUsage u = cg.usage();
  EXPECT_GT(u.cpu_s, 0.2);
  EXPECT_LT(u.cpu_s, 5.0);
  ASSERT_TRUE(u.peak_memory_bytes) << "no peak memory kept (v2 memory.peak needs Linux 5.19)";
  EXPECT_GE(*u.peak_memory_bytes, 50 * kMiB);
  EXPECT_FALSE(u.oom_killed);
  cg.remove();
}

TEST_F(CgroupTest, DevicesHideGpusNotGiven) {
  if (cgroup_version() != CgroupVersion::V1) GTEST_SKIP() << "GPUs are hidden on v1 only (v2 needs eBPF)";
  TempDir dir;
  // No NVIDIA device here: a node of major 195 stands in. With no driver behind it,
  // open() fails with ENXIO where the devices controller lets it through, and with
  // EPERM where the controller refuses it.
  const std::string gpu0 = dir.file("nvidia0"), gpu1 = dir.file("nvidia1");
  if (::mknod(gpu0.c_str(), S_IFCHR | 0666, makedev(195, 0)) != 0 ||
      ::mknod(gpu1.c_str(), S_IFCHR | 0666, makedev(195, 1)) != 0)
    GTEST_SKIP() << "mknod: " << std::strerror(errno);
  auto open_errno = [](const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
    return fd >= 0 ? 0 : errno;
  };
  ASSERT_NE(open_errno(gpu0), EPERM) << "outside any group the node opens (up to the missing driver)";

  // Exit code: 0 when open() is refused (EPERM), 1 when it went through to the driver.
  auto refused_in = [&](const JobCgroup& cg, const std::string& path) {
    const pid_t pid = fork_in(cg, [&] { return open_errno(path) == EPERM ? 0 : 1; });
    const auto status = wait_child(pid, 5s);
    EXPECT_TRUE(status && WIFEXITED(*status));
    return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  };
  CgroupLimits none;
  none.gpus = std::vector<int>{};
  JobCgroup hidden = JobCgroup::create(parent_, "nogpu", none);
  EXPECT_TRUE(hidden.devices_confined());
  EXPECT_TRUE(refused_in(hidden, gpu0));
  EXPECT_TRUE(refused_in(hidden, gpu1));

  CgroupLimits one;
  one.gpus = std::vector<int>{0};
  JobCgroup given = JobCgroup::create(parent_, "gpu0", one);
  EXPECT_FALSE(refused_in(given, gpu0));
  EXPECT_TRUE(refused_in(given, gpu1));

  CgroupLimits untouched;
  JobCgroup all = JobCgroup::create(parent_, "allgpus", untouched);
  EXPECT_FALSE(all.devices_confined());
  EXPECT_FALSE(refused_in(all, gpu1));
}

TEST_F(CgroupTest, LeftoverOfACrashIsKilledAndReplaced) {
  // A supervisor makes the group, starts a task in it and dies without cleaning up.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t supervisor = ::fork();
  if (supervisor == 0) {
    try {
      CgroupLimits lim;
      lim.memory_bytes = 64 * kMiB;
      JobCgroup cg = JobCgroup::create(parent_, "job-7.1", lim);
      // The task says it runs once it is in the group.
      fork_in(cg, [&]() -> int {
        const pid_t me = ::getpid();
        if (::write(fds[1], &me, sizeof me) != sizeof me) return 2;
        for (;;) ::pause();
      });
      ::_exit(0);  // no destructor runs: a crash
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(fds[1]);
  pid_t task = 0;
  pollfd p{fds[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  ASSERT_EQ(::read(fds[0], &task, sizeof task), ssize_t(sizeof task));
  ::close(fds[0]);
  const auto status = wait_child(supervisor, 5s);
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  ASSERT_EQ(::kill(task, 0), 0);
  EXPECT_EQ(JobCgroup::list(parent_), (std::vector<std::string>{"job-7.1"}));
  // A look that release()s leaves it running.
  auto look = JobCgroup::open(parent_, "job-7.1");
  ASSERT_TRUE(look);
  EXPECT_FALSE(look->empty());
  look->release();
  EXPECT_TRUE(look->paths().empty());
  look.reset();
  EXPECT_EQ(::kill(task, 0), 0);

  // The daemon, later: the same name again works, with the old task gone.
  JobCgroup again = JobCgroup::create(parent_, "job-7.1", {});
  EXPECT_TRUE(eventually([&] { return not_running(task); }, 5s));
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(again.usage().cpu_s, 0.0);

  // And open() finds a leftover, for a daemon that only cleans up.
  auto found = JobCgroup::open(parent_, "job-7.1");
  ASSERT_TRUE(found);
  EXPECT_TRUE(found->kill_all(1s));
  found->remove();
  EXPECT_FALSE(JobCgroup::open(parent_, "job-7.1"));
  EXPECT_TRUE(JobCgroup::list(parent_).empty());
}

TEST_F(CgroupTest, BadNamesAreRefused) {
  for (const char* name : {"..", "a/b", ""}) {
    try {
      JobCgroup::create(parent_, name, {});
      ADD_FAILURE() << "no error for '" << name << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::DataErr) << e.what();
    }
  }
  EXPECT_THROW(JobCgroup::create("rkit/../..", "x", {}), Error);
}

// The v2 code on this machine's cgroup2 mount, also where it is the controller-less
// one of a v1 machine (/sys/fs/cgroup/unified): entering, cgroup.kill, cpu.stat,
// leftovers and removal need no controller; limits needing an absent one are refused.
class CgroupV2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "cgroups need root";
    std::ifstream in("/proc/self/mountinfo");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const auto& m : parse_cgroup_mounts(text))
      if (m.unified) {
        layout_.version = CgroupVersion::V2;
        layout_.unified = m.path;
        break;
      }
    if (layout_.version != CgroupVersion::V2) GTEST_SKIP() << "no cgroup2 mount";
    std::ifstream controllers(layout_.unified + "/cgroup.controllers");
    for (std::string c; controllers >> c;) controllers_.push_back(c);
    parent_ = "rkit-unit-v2-" + std::to_string(::getpid());
  }
  void TearDown() override {
    if (parent_.empty()) return;
    for (const auto& name : JobCgroup::list(parent_, layout_))
      if (auto g = JobCgroup::open(parent_, name, layout_)) {
        EXPECT_TRUE(g->kill_all(5s)) << name;
        g->remove();
      }
    ::rmdir((layout_.unified + "/" + parent_).c_str());
    EXPECT_NE(::access((layout_.unified + "/" + parent_).c_str(), F_OK), 0) << "left behind";
  }
  bool has(const std::string& c) const {
    return std::find(controllers_.begin(), controllers_.end(), c) != controllers_.end();
  }

  CgroupLayout layout_;
  std::vector<std::string> controllers_;
  std::string parent_;
};

TEST_F(CgroupV2Test, KillsDetachedProcessesAndCountsCpu) {
  JobCgroup cg = JobCgroup::create(parent_, "job", {}, layout_);
  EXPECT_EQ(cg.version(), CgroupVersion::V2);
  ASSERT_EQ(cg.paths().size(), 1u);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = fork_in(cg, [&] {
    timespec ts{};
    do ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    while (ts.tv_sec == 0 && ts.tv_nsec < 300'000'000);
    if (::fork() == 0) {
      ::setsid();
      if (::fork() == 0) {
        const pid_t me = ::getpid();
        if (::write(fds[1], &me, sizeof me) != sizeof me) ::_exit(1);
        for (;;) ::pause();
      }
      ::_exit(0);
    }
    return 0;
  });
  ::close(fds[1]);
  pid_t grandchild = 0;
  pollfd p{fds[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof grandchild), ssize_t(sizeof grandchild));
  ::close(fds[0]);
  const auto status = wait_child(pid, 5s);
  ASSERT_TRUE(status && WIFEXITED(*status));
  const auto procs = parse_pid_list(testing::slurp(cg.paths()[0] + "/cgroup.procs"));
  EXPECT_NE(std::find(procs.begin(), procs.end(), grandchild), procs.end());
  EXPECT_GT(cg.usage().cpu_s, 0.2);  // cpu.stat's usage_usec

  EXPECT_TRUE(cg.kill_all(5s));
  EXPECT_TRUE(cg.empty());
  EXPECT_TRUE(eventually([&] { return not_running(grandchild); }, 5s));
  const std::string dir = cg.paths()[0];
  cg.remove();
  EXPECT_NE(::access(dir.c_str(), F_OK), 0);
}

TEST_F(CgroupV2Test, LeftoverIsReplacedAndGpusAreNotHidden) {
  CgroupLimits lim;
  lim.gpus = std::vector<int>{};  // not done on v2: reported, not refused
  JobCgroup first = JobCgroup::create(parent_, "job", lim, layout_);
  EXPECT_FALSE(first.devices_confined());
  const pid_t pid = fork_in(first, []() -> int {
    for (;;) ::pause();
  });
  EXPECT_TRUE(eventually([&] { return !first.empty(); }, 5s));
  first.release();  // as if its supervisor had died
  JobCgroup second = JobCgroup::create(parent_, "job", {}, layout_);
  const auto status = wait_child(pid, 5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  EXPECT_TRUE(second.empty());
  EXPECT_EQ(JobCgroup::list(parent_, layout_), (std::vector<std::string>{"job"}));
}

TEST_F(CgroupV2Test, LimitWithoutItsControllerIsUnavailable) {
  if (has("pids")) GTEST_SKIP() << "pids is enabled on " << layout_.unified;
  CgroupLimits lim;
  lim.pids_max = 16;
  try {
    JobCgroup::create(parent_, "job", lim, layout_);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Unavailable) << e.what();
  }
}

TEST_F(CgroupV2Test, PidsAndMemoryWhereEnabled) {
  if (!has("pids") || !has("memory")) GTEST_SKIP() << "pids and memory controllers not on " << layout_.unified;
  CgroupLimits lim;
  lim.pids_max = 16;
  lim.memory_bytes = 20 * kMiB;
  JobCgroup cg = JobCgroup::create(parent_, "job", lim, layout_);
  ASSERT_GE(cg.oom_fd(), 0);
  const pid_t pid = fork_in(cg, [] {
    touch(200 * kMiB);
    return 0;
  });
  pollfd p{cg.oom_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 1000), 1) << "no memory event within a second";
  const auto status = wait_child(pid, 10s);
  ASSERT_TRUE(status && WIFSIGNALED(*status));
  EXPECT_TRUE(cg.consume_oom_event());
  EXPECT_EQ(parse_single_value(file_in(cg, "pids.max")), 16u);
}

}  // namespace
}  // namespace rkit
