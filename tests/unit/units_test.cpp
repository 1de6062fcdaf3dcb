#include "rkit/units.hpp"

#include <gtest/gtest.h>

#include "rkit/error.hpp"

namespace rkit {
namespace {

TEST(ParseDuration, AcceptsUnitsAndSequences) {
  EXPECT_DOUBLE_EQ(parse_duration("90s"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("1h30m"), 5400);
  EXPECT_DOUBLE_EQ(parse_duration("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(parse_duration("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(parse_duration("2d"), 172800);
  EXPECT_DOUBLE_EQ(parse_duration("42"), 42);
  EXPECT_DOUBLE_EQ(parse_duration("1H"), 3600);
}

TEST(ParseDuration, RejectsGarbageWithUsageError) {
  for (const char* bad : {"", "s", "-5s", "1x", "1h30", "abc", "1..5s", "5 s"}) {
    try {
      parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::Usage) << bad;
      EXPECT_NE(std::string(e.what()).find("invalid duration"), std::string::npos);
    }
  }
}

TEST(ParseSize, BinaryAndDecimalSuffixes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("512M"), 512ull << 20);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_size("10GB"), 10'000'000'000ull);
  EXPECT_EQ(parse_size("1.5k"), 1536u);
  EXPECT_EQ(parse_size("3 MiB"), 3ull << 20);
  EXPECT_EQ(parse_size("7b"), 7u);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "M", "-1", "1.5", "12Q", "1e3", "99999999999P"}) {
    EXPECT_THROW(parse_size(bad), Error) << bad;
  }
}

TEST(FormatBytes, ReadableUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(2ull << 30), "2 GiB");
  EXPECT_EQ(format_bytes(123ull << 20), "123 MiB");
}

TEST(FormatDuration, ShortForms) {
  EXPECT_EQ(format_duration(0.25), "0.25s");
  EXPECT_EQ(format_duration(90), "1m30s");
  EXPECT_EQ(format_duration(5400), "1h30m");
  EXPECT_EQ(format_duration(183600), "2d3h");
}

}  // namespace
}  // namespace rkit
