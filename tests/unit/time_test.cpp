#include "rkit/time.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

#include "rkit/rng.hpp"

namespace rkit {
namespace {

TEST(Time, UtcSecondsAgreesWithGmtimeOverFourCenturies) {
  EXPECT_EQ(utc_seconds(1970, 1, 1), 0);
  EXPECT_EQ(utc_seconds(2024, 2, 29), 1709164800);  // a leap day
  EXPECT_EQ(utc_seconds(2026, 12, 1, 0, 0, -1), utc_seconds(2026, 11, 30, 23, 59, 59)) << "seconds carry";
  EXPECT_EQ(utc_seconds(2026, 3, 0), utc_seconds(2026, 2, 28)) << "day 0 is the last of the month before";
  for (std::uint64_t i = 0; i < 20000; ++i) {
    // Any second from 1900 to 2300.
    const auto t = static_cast<std::int64_t>(mix64(i) % 12'622'780'800ULL) - 2'208'988'800LL;
    const std::tm tm = utc_tm(static_cast<double>(t));
    ASSERT_EQ(utc_seconds(tm.tm_year + 1900L, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec), t) << t;
  }
}

TEST(Time, UtcTimestampsParseOnlyInTheirOneForm) {
  EXPECT_EQ(parse_utc_time("2026-11-30T10:00:00Z"), 1796032800);
  EXPECT_EQ(parse_utc_time("1970-01-01T00:00:00Z"), 0);
  for (const char* bad :
       {"", "Z", "2026-11-30T10:00:00", "2026-11-30 10:00:00Z", "2026-13-01T00:00:00Z", "2026-11-30T24:00:00Z",
        "2026-11-30T10:00:0xZ", "2026-11-30T-1:00:00Z", "+026-11-30T10:00:00Z", "Unknown"})
    EXPECT_FALSE(parse_utc_time(bad)) << bad;
  EXPECT_EQ(format_utc(1796032800, "%Y-%m-%d %H:%M UTC"), "2026-11-30 10:00 UTC");
}

TEST(Time, LocalTimestampsAreMktimes) {
  std::tm tm{};
  tm.tm_year = 126;
  tm.tm_mon = 10;
  tm.tm_mday = 30;
  tm.tm_hour = 18;
  tm.tm_min = 19;
  tm.tm_sec = 23;
  tm.tm_isdst = -1;
  EXPECT_EQ(parse_local_time("2026-11-30T18:19:23"), static_cast<double>(std::mktime(&tm)));
  for (const char* bad : {"Unknown", "None", "2026-11-30T18:19:23Z", "2026-11-30T18:19", "2026-00-30T18:19:23"})
    EXPECT_FALSE(parse_local_time(bad)) << bad;
}

}  // namespace
}  // namespace rkit
