// File: rkit/placement.hpp
//
// Rank placement: which cores, GPUs and NIC each of N ranks should use.
// Rules: ranks never share a core (a rank owns all hardware threads of its cores);
// a rank's GPUs and cores come from one NUMA node that has enough of both, so GPU
// ranks go to the nodes where their cores are free; only when no node has both does
// a rank take its GPUs on one node and cores elsewhere (numa_local false). `pack`
// fills nodes in order, `spread` deals ranks round-robin over them.
// The nearest NIC is the one with the best link to the rank's first GPU (else on its
// NUMA node), spread over ranks when several are equally near.
//
//   PlaceRequest req{.ranks = 4, .cpus_per_rank = 4, .gpus_per_rank = 1};
//   for (const RankPlacement& p : place(topology, req)) printer.print(p.to_json());
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rkit/config.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/topology.hpp"

namespace rkit {

enum class Policy { Pack, Spread };

// "pack" or "spread"; nullopt for anything else.
std::optional<Policy> parse_policy(std::string_view text);
// The policy in the configuration's rtop.policy (default pack). A value that is not a
// policy throws Error(Config) naming file:line:column.
Policy policy_from_config(const Config& config);

struct PlaceRequest {
  int ranks = 1;
  std::optional<int> cpus_per_rank;  // cores per rank; default: an equal share of all cores
  int gpus_per_rank = 0;
  Policy policy = Policy::Pack;
  // Cores (logical indices) and GPUs (indices) that others hold: placement uses the
  // rest, so a scheduler can place a job beside running ones. Unknown indices are ignored.
  std::vector<int> busy_cores;
  std::vector<int> busy_gpus;
};

struct RankPlacement {
  int rank = 0;
  int ranks = 1;
  std::optional<int> numa_node;  // the node holding its cores (null when they span nodes)
  std::vector<int> cores;        // logical core indices
  std::vector<int> pus;          // OS PU indices (what taskset and sched_setaffinity take)
  std::vector<int> gpus;         // GPU indices
  std::optional<std::string> nic;
  bool numa_local = true;  // cores in one node, and the same node as its GPUs

  Json to_json() const;  // rkit.placement.v1
};

// Throws Error(Usage) for ranks < 1 or negative counts, Error(DataErr) when the
// topology (less the busy cores and GPUs) is short of cores or GPUs (the message says
// what is short).
std::vector<RankPlacement> place(const Topology& topology, const PlaceRequest& request);

}  // namespace rkit
