#include "rkit/progress.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>

namespace rkit {
namespace {

const std::string kClearLine = "\r\x1b[K";

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + what.size())) ++n;
  return n;
}

TEST(Progress, SilentBeforeShowAfter) {
  std::ostringstream out;
  {
    Progress bar("packing", 100, out, /*show_after_s=*/60.0);
    EXPECT_TRUE(bar.active());
    bar.update(10);
    bar.update(50);
    bar.update(100);
    bar.finish();
  }
  EXPECT_EQ(out.str(), "") << "short work must stay silent, finish() included";
}

TEST(Progress, DrawsAfterShowAfter) {
  std::ostringstream out;
  Progress bar("packing", 200, out, /*show_after_s=*/0.0);
  bar.update(100);
  std::string s = out.str();
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.front(), '\r');
  EXPECT_NE(s.find("packing"), std::string::npos) << s;
  EXPECT_NE(s.find(" 50%"), std::string::npos) << s;
  EXPECT_EQ(s.find('\n'), std::string::npos) << "a bar redraws one line";
  bar.finish();
}

TEST(Progress, DrawsOnceTheDelayHasPassed) {
  std::ostringstream out;
  Progress::Clock::time_point t{};  // a test clock: moved by hand
  Progress bar("copy", 10, out, /*show_after_s=*/0.05, [&] { return t; });
  bar.update(1);
  EXPECT_EQ(out.str(), "");
  t += std::chrono::milliseconds(49);
  bar.update(1);
  EXPECT_EQ(out.str(), "") << "drawn before the delay";
  t += std::chrono::milliseconds(31);
  bar.update(2);
  EXPECT_NE(out.str().find(" 20%"), std::string::npos) << out.str();
}

TEST(Progress, FinishClearsTheLine) {
  std::ostringstream out;
  Progress bar("packing", 100, out, 0.0);
  bar.update(30);
  std::size_t drawn = out.str().size();
  bar.finish();
  std::string s = out.str();
  ASSERT_GT(s.size(), drawn);
  EXPECT_EQ(s.substr(drawn), kClearLine);
  EXPECT_FALSE(bar.active());
  bar.update(90);
  bar.finish();
  EXPECT_EQ(out.str(), s) << "nothing is drawn after finish()";
}

TEST(Progress, DestructorClearsTheLine) {
  std::ostringstream out;
  {
    Progress bar("packing", 100, out, 0.0);
    bar.update(30);
  }
  std::string s = out.str();
  ASSERT_GE(s.size(), kClearLine.size());
  EXPECT_EQ(s.substr(s.size() - kClearLine.size()), kClearLine);
}

TEST(Progress, RedrawsAtMostTenTimesASecondButAlwaysAtTheEnd) {
  std::ostringstream out;
  Progress::Clock::time_point t{};  // a test clock: 1 ms per update
  Progress bar("n", 1000, out, 0.0, [&] { return t; });
  for (std::uint64_t i = 1; i < 1000; ++i, t += std::chrono::milliseconds(1)) bar.update(i);
  std::size_t draws = count(out.str(), "\r");
  EXPECT_EQ(draws, 10u) << "999 updates over 0.999 s: one draw per 100 ms";
  bar.update(1000);
  EXPECT_EQ(count(out.str(), "\r"), draws + 1) << "the final update is always drawn";
  EXPECT_NE(out.str().find("100%"), std::string::npos);
}

TEST(Progress, RenderShowsPercentageAndBar) {
  std::ostringstream out;
  Progress bar("packing", 200, out, 60.0);
  std::string half = bar.render(100, 2.0);
  EXPECT_EQ(half.rfind("packing", 0), 0u) << half;
  EXPECT_NE(half.find(" 50%"), std::string::npos) << half;
  EXPECT_EQ(std::count(half.begin(), half.end(), '#'), 15) << half;
  std::string none = bar.render(0, 0.0);
  EXPECT_NE(none.find("  0%"), std::string::npos) << none;
  EXPECT_EQ(std::count(none.begin(), none.end(), '#'), 0);
  std::string full = bar.render(200, 1.0);
  EXPECT_NE(full.find("100%"), std::string::npos) << full;
  EXPECT_EQ(std::count(full.begin(), full.end(), '#'), 30);
  std::string over = bar.render(500, 1.0);
  EXPECT_NE(over.find("100%"), std::string::npos) << "done > total is clamped: " << over;
  // The bar has a fixed width whatever the fraction.
  EXPECT_EQ(half.find(']') - half.find('['), none.find(']') - none.find('['));
  EXPECT_EQ(half.find(']') - half.find('['), full.find(']') - full.find('['));
}

TEST(Progress, RenderShowsTheByteRate) {
  std::ostringstream out;
  Progress bar("packing", 4ull << 30, out, 60.0);
  std::string s = bar.render(2ull << 30, 2.0);
  EXPECT_NE(s.find(" 50%  1 GiB/s"), std::string::npos) << s;
  std::string slow = bar.render(1536, 1.0);
  EXPECT_NE(slow.find("1.5 KiB/s"), std::string::npos) << slow;
  std::string start = bar.render(0, 0.0);
  EXPECT_NE(start.find("0 B/s"), std::string::npos) << start;
}

TEST(Progress, RenderWithZeroTotalDoesNotDivideByZero) {
  std::ostringstream out;
  Progress bar("scan", 0, out, 60.0);
  std::string s = bar.render(5, 1.0);
  EXPECT_NE(s.find("0%"), std::string::npos) << s;
  EXPECT_EQ(s.find("nan"), std::string::npos) << s;
  EXPECT_EQ(s.find("inf"), std::string::npos) << s;
}

TEST(Progress, DisabledBarIsInactive) {
  Progress bar("quiet", 100, /*enabled=*/false);
  EXPECT_FALSE(bar.active());
  bar.update(50);  // must not draw anywhere
  bar.finish();
}

TEST(Progress, NeedsATerminal) {
  if (::isatty(STDERR_FILENO)) GTEST_SKIP() << "stderr is a terminal here";
  Progress bar("piped", 100, /*enabled=*/true);
  EXPECT_FALSE(bar.active()) << "drew on a stderr that is not a terminal";
}

}  // namespace
}  // namespace rkit
