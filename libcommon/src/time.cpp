#include "rkit/time.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <mutex>

namespace rkit {
namespace {

struct Civil {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
};

// The fields of "YYYY-MM-DDTHH:MM:SS", each in range (a leap second allowed).
std::optional<Civil> civil(std::string_view s) {
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':') return std::nullopt;
  auto num = [&](std::size_t at, std::size_t len, int& out) {
    auto [p, ec] = std::from_chars(s.data() + at, s.data() + at + len, out);
    return ec == std::errc() && p == s.data() + at + len;
  };
  Civil c;
  if (!num(0, 4, c.year) || !num(5, 2, c.month) || !num(8, 2, c.day) || !num(11, 2, c.hour) || !num(14, 2, c.minute) ||
      !num(17, 2, c.second))
    return std::nullopt;
  if (c.year < 0 || c.month < 1 || c.month > 12 || c.day < 1 || c.day > 31 || c.hour < 0 || c.hour > 23 ||
      c.minute < 0 || c.minute > 59 || c.second < 0 || c.second > 60)
    return std::nullopt;
  return c;
}

}  // namespace

double utc_seconds(long year, int month, int day, int hour, int minute, int second) {
  const long m = month;
  long y = year - (m <= 2);
  const long era = (y >= 0 ? y : y - 399) / 400;
  const long yoe = y - era * 400;
  const long doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + day - 1;
  const long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const long days = era * 146097 + doe - 719468;
  return static_cast<double>(days) * 86400.0 + hour * 3600.0 + minute * 60.0 + second;
}

std::optional<double> parse_local_time(std::string_view text) {
  const auto c = civil(text);
  if (!c) return std::nullopt;
  std::tm tm{};
  tm.tm_year = c->year - 1900;
  tm.tm_mon = c->month - 1;
  tm.tm_mday = c->day;
  tm.tm_hour = c->hour;
  tm.tm_min = c->minute;
  tm.tm_sec = c->second;
  tm.tm_isdst = -1;
  // mktime() keeps its time zone state in statics.
  static std::mutex lock;
  const std::lock_guard<std::mutex> hold(lock);
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return static_cast<double>(t);
}

std::optional<double> parse_utc_time(std::string_view text) {
  if (text.empty() || text.back() != 'Z') return std::nullopt;
  const auto c = civil(text.substr(0, text.size() - 1));
  if (!c) return std::nullopt;
  return utc_seconds(c->year, c->month, c->day, c->hour, c->minute, c->second);
}

std::tm utc_tm(double unix_s) {
  const auto t = static_cast<std::time_t>(std::floor(unix_s));
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  return tm;
}

std::string format_utc(double unix_s, const char* format) {
  const std::tm tm = utc_tm(unix_s);
  char buf[128];
  const std::size_t n = std::strftime(buf, sizeof buf, format, &tm);
  return std::string(buf, n);
}

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace rkit
