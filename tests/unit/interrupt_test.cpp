// rkit/interrupt.hpp: a signal is recorded, not fatal, while the guard is installed.
#include "rkit/interrupt.hpp"

#include <gtest/gtest.h>

#include <csignal>

#include "rkit/error.hpp"

namespace rkit {
namespace {

TEST(InterruptGuard, RecordsTheSignalAndCheckThrowsTempFail) {
  InterruptGuard guard;
  EXPECT_EQ(interrupt_signal(), 0);
  EXPECT_NO_THROW(check_interrupted());
  std::raise(SIGTERM);
  EXPECT_EQ(interrupt_signal(), SIGTERM);
  try {
    check_interrupted();
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::TempFail);
    EXPECT_STREQ(e.what(), "interrupted by SIGTERM");
  }
}

TEST(InterruptGuard, ReraiseDiesOfTheSignal) {
  EXPECT_EXIT(
      {
        InterruptGuard guard;
        std::raise(SIGINT);
        guard.reraise();
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

}  // namespace
}  // namespace rkit
