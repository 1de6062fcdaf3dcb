// File: rkit/cpus.hpp
//
// The CPUs this process may run on (its affinity mask, as set by taskset, cgroups,
// Slurm or a container), for sizing thread pools and pinning threads.
//
//   unsigned threads = rkit::usable_cpus();        // e.g. 2 inside `taskset -c 0,1`
//   for (int cpu : rkit::allowed_cpus()) ...       // their numbers, ascending
#pragma once

#include <vector>

namespace rkit {

// The numbers of the CPUs in the affinity mask; empty when it cannot be read.
std::vector<int> allowed_cpus();

// How many there are (hardware threads, not physical cores); at least 1.
unsigned usable_cpus();

// Physical cores among them (SMT siblings counted once); usable_cpus() when hwloc
// cannot tell.
unsigned physical_cores();

}  // namespace rkit
