#include "rkit/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "rkit/units.hpp"

namespace rkit {

Progress::Progress(std::string label, std::uint64_t total, bool enabled, double show_after_s)
    : label_(std::move(label)), total_(total), show_after_s_(show_after_s), start_(Clock::now()) {
  if (enabled && ::isatty(STDERR_FILENO)) out_ = &std::cerr;
}

Progress::Progress(std::string label, std::uint64_t total, std::ostream& out, double show_after_s,
                   std::function<Clock::time_point()> now)
    : label_(std::move(label)),
      total_(total),
      out_(&out),
      show_after_s_(show_after_s),
      now_(std::move(now)),
      start_(now_()) {}

Progress::~Progress() { finish(); }

std::string Progress::render(std::uint64_t done, double elapsed_s) const {
  constexpr int kWidth = 30;
  double frac = total_ ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total_)) : 0.0;
  int filled = static_cast<int>(frac * kWidth);
  double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0;
  return fmt::format("{}  [{}{}] {:3.0f}%  {}/s", label_, std::string(filled, '#'), std::string(kWidth - filled, ' '),
                     frac * 100, format_bytes(static_cast<std::uint64_t>(rate)));
}

void Progress::update(std::uint64_t done) {
  if (!out_) return;
  auto now = now_();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < show_after_s_) return;
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  drawn_ = true;
  *out_ << '\r' << render(done, elapsed) << "\x1b[K" << std::flush;
}

void Progress::finish() {
  if (out_ && drawn_) *out_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
  out_ = nullptr;
}

}  // namespace rkit
