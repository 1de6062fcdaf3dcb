// File: rkit/interrupt.hpp
//
// Ctrl-C during long work: instead of dying with half-written temporaries on disk,
// the work notices the signal at its next check, unwinds (destructors remove
// temporaries), and main then dies of the same signal, so that the shell sees it.
//
//   int main(int argc, char** argv) {
//     rkit::InterruptGuard guard;                  // SIGINT, SIGTERM, SIGHUP
//     int rc = tool.run(argc, argv, [&] { ...; rkit::check_interrupted(); ... });
//     guard.reraise();                             // returns when no signal came
//     return rc;
//   }
#pragma once

namespace rkit {

class InterruptGuard {
 public:
  InterruptGuard();   // installs the handlers
  ~InterruptGuard();  // restores the previous ones and forgets the signal
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  // If a signal arrived: restores its default action and raises it (does not return).
  void reraise() const;
};

// The signal that arrived since the guard was installed, or 0.
int interrupt_signal();

// Throws Error(TempFail, "interrupted by SIGINT") when a signal arrived.
void check_interrupted();

}  // namespace rkit
