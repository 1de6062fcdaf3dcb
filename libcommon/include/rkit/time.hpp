// File: rkit/time.hpp
//
// Timestamps as the tools read and write them, in one place: Slurm's local
// "2026-11-30T18:19:23" (sacct, scontrol), ISO 8601 UTC "2026-11-30T18:19:23Z"
// (Kubernetes), and civil UTC dates from arithmetic. All are safe to call from several
// threads at once (rcost parses chunks in parallel).
//
//   std::optional<double> t = rkit::parse_local_time("2026-11-30T18:19:23");
//   double month = rkit::utc_seconds(2026, 11, 1);   // 2026-11-01T00:00:00Z
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

namespace rkit {

// Unix seconds of a civil UTC time (month 1 to 12), by arithmetic (Howard Hinnant's
// days_from_civil): no time-zone state. Days, hours, minutes and seconds out of their
// range carry over (day 0 is the last of the month before).
double utc_seconds(long year, int month, int day, int hour = 0, int minute = 0, int second = 0);

// "YYYY-MM-DDTHH:MM:SS" in the local time zone (as Slurm prints times); nullopt for
// anything else ("Unknown", "None", a date out of range).
std::optional<double> parse_local_time(std::string_view text);
// "YYYY-MM-DDTHH:MM:SSZ", UTC; nullopt for anything else.
std::optional<double> parse_utc_time(std::string_view text);

// The calendar fields of a Unix time, UTC.
std::tm utc_tm(double unix_s);
// A Unix time formatted by strftime(3) in UTC ("%Y-%m-%d %H:%M UTC").
std::string format_utc(double unix_s, const char* format);

// Now, in seconds since the Unix epoch (the records' time_unix_s).
double unix_now_s();

}  // namespace rkit
