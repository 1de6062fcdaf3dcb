// File: rkit/progress.hpp
//
// A progress bar on stderr for long work, counted in bytes. It draws only when stderr is a terminal,
// only after the work has run for `show_after_s` (short work stays silent), and at
// most ten times a second; finish() clears the line.
//
//   rkit::Progress bar("packing", total_bytes, !opts.quiet);
//   for (...) bar.update(done_bytes);
//   bar.finish();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace rkit {

class Progress {
 public:
  // `enabled` is the tool's wish (false with -q); the bar still needs a terminal.
  Progress(std::string label, std::uint64_t total, bool enabled, double show_after_s = 2.0);
  using Clock = std::chrono::steady_clock;
  // For tests: draw on `out` as if it were a terminal, with time read from `now`.
  Progress(std::string label, std::uint64_t total, std::ostream& out, double show_after_s,
           std::function<Clock::time_point()> now = Clock::now);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(std::uint64_t done);
  void finish();
  bool active() const { return out_ != nullptr; }
  // The line drawn for `done` of `total` ("label  [#####     ]  50%  1.2 GiB/s").
  std::string render(std::uint64_t done, double elapsed_s) const;

 private:
  std::string label_;
  std::uint64_t total_;
  std::ostream* out_ = nullptr;
  double show_after_s_;
  std::function<Clock::time_point()> now_ = Clock::now;
  Clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

}  // namespace rkit
