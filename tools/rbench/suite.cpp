#include "suite.hpp"

#include "rkit/cpus.hpp"
#include "rkit/interrupt.hpp"

#include <hwloc.h>

#include <algorithm>

namespace rkit::rbench {
namespace {

std::vector<std::unique_ptr<Suite>>& storage() {
  static std::vector<std::unique_ptr<Suite>> all;
  return all;
}

}  // namespace

Registrar::Registrar(std::unique_ptr<Suite> suite) { storage().push_back(std::move(suite)); }

std::vector<Suite*> suites() {
  std::vector<Suite*> out;
  for (auto& s : storage()) out.push_back(s.get());
  std::sort(out.begin(), out.end(), [](Suite* a, Suite* b) { return a->name() < b->name(); });
  return out;
}

Suite* find_suite(const std::string& name) {
  for (auto& s : storage())
    if (s->name() == name) return s.get();
  return nullptr;
}

std::vector<double> time_repetitions(int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(std::max(reps, 0)));
  for (int i = 0; i < reps; ++i) {
    check_interrupted();  // Ctrl-C stops a long suite between repetitions
    auto start = std::chrono::steady_clock::now();
    f();
    out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return out;
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

}  // namespace rkit::rbench
