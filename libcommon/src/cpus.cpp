#include "rkit/cpus.hpp"

#include <hwloc.h>
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

unsigned physical_cores() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return usable_cpus();
  unsigned cores = 0;
  hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
  if (allowed && hwloc_topology_load(topo) == 0 && hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS) == 0)
    cores = static_cast<unsigned>(hwloc_get_nbobjs_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_CORE));
  hwloc_bitmap_free(allowed);
  hwloc_topology_destroy(topo);
  return cores > 0 ? cores : usable_cpus();
}

}  // namespace rkit
