// rtop's samples: /proc/stat parsing and the utilisation arithmetic, on crafted text.
#include "sample.hpp"

#include <gtest/gtest.h>

#include <string>

#include "rkit/error.hpp"
#include "rkit/host.hpp"

namespace rkit::rtop {
namespace {

// user nice system idle iowait irq softirq steal guest guest_nice
const char* kStat =
    "cpu  300 20 80 500 100 0 0 0 40 0\n"
    "cpu0 200 20 30 200 50 0 0 0 40 0\n"
    "cpu1 100 0 50 300 50 0 0 0 0 0\n"
    "intr 123456 0 0\n"
    "ctxt 987654\n"
    "btime 1700000000\n"
    "processes 4242\n";

TEST(RtopSample, ParsesAggregateThenPerCpuLines) {
  auto t = parse_proc_stat(kStat);
  ASSERT_EQ(t.size(), 3u);  // "cpu", "cpu0", "cpu1"
  // total: the first eight fields (guest time is already inside user); busy: total
  // less idle and iowait.
  EXPECT_EQ(t[0].total, 1000u);
  EXPECT_EQ(t[0].busy, 400u);
  EXPECT_EQ(t[1].total, 500u);
  EXPECT_EQ(t[1].busy, 250u);
  EXPECT_EQ(t[2].total, 500u);
  EXPECT_EQ(t[2].busy, 150u);
}

TEST(RtopSample, AcceptsOldKernelsWithFourFields) {
  auto t = parse_proc_stat("cpu 10 20 30 40\n");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].total, 100u);
  EXPECT_EQ(t[0].busy, 60u);
}

TEST(RtopSample, ShortOrMissingCpuLinesAreDataErrors) {
  for (const char* bad : {"cpu 1 2 3\n", "cpu  10 0 10 80 0 0 0 0\ncpu0 1 2\n", "intr 1 2 3\nctxt 4\n", ""}) {
    try {
      parse_proc_stat(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::DataErr) << bad;
      EXPECT_NE(std::string(e.what()).find("/proc/stat"), std::string::npos) << e.what();
    }
  }
}

TEST(RtopSample, UtilisationIsBusyOverElapsed) {
  EXPECT_DOUBLE_EQ(utilisation({100, 1000}, {150, 1100}), 0.5);
  EXPECT_DOUBLE_EQ(utilisation({0, 0}, {0, 400}), 0.0);
  EXPECT_DOUBLE_EQ(utilisation({0, 0}, {400, 400}), 1.0);
  EXPECT_DOUBLE_EQ(utilisation({0, 0}, {900, 400}), 1.0);  // inconsistent counters clamp to 1

  // Two readings of /proc/stat, one second apart on two CPUs: cpu0 busy half the time.
  auto before = parse_proc_stat("cpu  100 0 0 100 0 0 0 0\ncpu0 50 0 0 50 0 0 0 0\ncpu1 50 0 0 50 0 0 0 0\n");
  auto after = parse_proc_stat("cpu  160 0 0 240 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0\ncpu1 60 0 0 140 0 0 0 0\n");
  EXPECT_DOUBLE_EQ(utilisation(before[0], after[0]), 0.3);
  EXPECT_DOUBLE_EQ(utilisation(before[1], after[1]), 0.5);
  EXPECT_DOUBLE_EQ(utilisation(before[2], after[2]), 0.1);
}

TEST(RtopSample, MeminfoValuesInBytes) {
  const char* meminfo =
      "MemTotal:       16318264 kB\nMemFree:  5 kB\nMemAvailable:   12000000 kB\nHighMemTotal: 7 kB\n";
  EXPECT_EQ(meminfo_bytes(meminfo, "MemTotal"), 16318264ull * 1024);
  EXPECT_EQ(meminfo_bytes(meminfo, "MemAvailable"), 12000000ull * 1024);
  EXPECT_EQ(meminfo_bytes("HighMemTotal: 7 kB\nMemTotal: 9 kB\n", "MemTotal"), 9ull * 1024);  // whole keys only
  EXPECT_EQ(meminfo_bytes(meminfo, "SwapTotal"), 0u);
  EXPECT_EQ(meminfo_bytes("MemTotal: lots\n", "MemTotal"), 0u);
}

TEST(RtopSample, CountersThatGoBackwardsGiveZero) {
  EXPECT_DOUBLE_EQ(utilisation({500, 1000}, {100, 200}), 0.0);   // counters reset (CPU hot-plug)
  EXPECT_DOUBLE_EQ(utilisation({500, 1000}, {400, 1100}), 0.0);  // busy went back, total moved
  EXPECT_DOUBLE_EQ(utilisation({500, 1000}, {600, 1000}), 0.0);  // total did not move
}

TEST(RtopSample, SamplerReadsThisMachine) {
  Sampler s;
  Json j = s.next(0.05);
  EXPECT_EQ(j["schema"], "rkit.sample.v1");
  EXPECT_EQ(j["host"], rkit::host_name());
  EXPECT_FALSE(rkit::host_name().empty());
  double util = j["cpu_util"].get<double>();
  EXPECT_GE(util, 0.0);
  EXPECT_LE(util, 1.0);
  EXPECT_FALSE(j["cpu_util_per_cpu"].empty());
  EXPECT_GT(j["memory_total_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_TRUE(j["gpus"].is_array());  // empty unless NVML loads
}

}  // namespace
}  // namespace rkit::rtop
