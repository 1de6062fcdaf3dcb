// rkit/parallel.hpp: the ordered pipeline keeps its order, its window and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rkit/error.hpp"
#include "rkit/parallel.hpp"

namespace rkit {
namespace {

TEST(OrderedParallel, ConsumesInOrderWithinTheWindow) {
  std::atomic<int> in_flight{0}, most{0};
  std::vector<std::size_t> seen;
  ordered_parallel<std::size_t>(
      200, 4, 6,
      [&](std::size_t i, unsigned) {
        int now = ++in_flight;
        int prev = most.load();
        while (now > prev && !most.compare_exchange_weak(prev, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds((i * 37) % 200));
        --in_flight;
        return i * i;
      },
      [&](std::size_t i, std::size_t&& v) {
        EXPECT_EQ(v, i * i);
        seen.push_back(i);
      });
  ASSERT_EQ(seen.size(), 200u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_LE(most.load(), 4);
}

TEST(OrderedParallel, RethrowsTheFirstFailureInOrder) {
  std::vector<std::size_t> seen;
  EXPECT_THROW(ordered_parallel<int>(
                   50, 3, 3,
                   [](std::size_t i, unsigned) -> int {
                     if (i == 7 || i == 30) throw std::runtime_error("boom " + std::to_string(i));
                     return 0;
                   },
                   [&](std::size_t i, int&&) { seen.push_back(i); }),
               std::runtime_error);
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_THROW(ordered_parallel<int>(
                   50, 2, 2, [](std::size_t, unsigned) { return 0; },
                   [](std::size_t i, int&&) {
                     if (i == 3) throw Error(Exit::IoErr, "disk full");
                   }),
               Error);
}

}  // namespace
}  // namespace rkit
