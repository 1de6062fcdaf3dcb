// rkit/cpus.hpp: the affinity mask, as thread pools see it.
#include "rkit/cpus.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>

namespace rkit {
namespace {

TEST(Cpus, UsableCpusAreTheAffinityMask) {
  std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
  EXPECT_EQ(usable_cpus(), cpus.size());
}

TEST(Cpus, ANarrowerMaskGivesFewerCpus) {
  // In a child, restricted to the first allowed CPU, as `taskset -c N` would.
  int first = allowed_cpus().front();
  EXPECT_EXIT(
      {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) std::_Exit(99);
        std::_Exit(usable_cpus() == 1 && allowed_cpus() == std::vector<int>{first} ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace rkit
