#include "rkit/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace rkit {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

unsigned usable_cpus() {
  std::size_t n = allowed_cpus().size();
  return n > 0 ? static_cast<unsigned>(n) : std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace rkit
