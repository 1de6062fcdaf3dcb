#include "rkit/interrupt.hpp"

#include <csignal>

#include <atomic>

#include "rkit/error.hpp"
#include "rkit/process.hpp"

namespace rkit {
namespace {

std::atomic<int> g_signal{0};
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[sizeof kSignals / sizeof kSignals[0]];

extern "C" void record_signal(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = record_signal;
  // Restart interrupted system calls (the work notices at its next check); a second
  // signal of the same kind takes the default action, so a stuck program still dies.
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
}

InterruptGuard::~InterruptGuard() {
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_signal = 0;  // without a guard, nothing is interrupted
}

void InterruptGuard::reraise() const {
  int sig = g_signal.load();
  if (sig == 0) return;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int interrupt_signal() { return g_signal.load(std::memory_order_relaxed); }

void check_interrupted() {
  if (int sig = interrupt_signal()) throw Error(Exit::TempFail, "interrupted by " + signal_name(sig));
}

}  // namespace rkit
