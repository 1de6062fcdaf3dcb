#include "rkit/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "rkit/error.hpp"

namespace rkit {
namespace {

// Lower is nearer, as nvidia-smi ranks link types.
int link_rank(const std::string& link) {
  if (link == "X") return 0;
  if (link.rfind("NV", 0) == 0) return 1;
  static const std::vector<std::string> kOrder = {"PIX", "PXB", "PHB", "NODE", "SYS"};
  auto it = std::find(kOrder.begin(), kOrder.end(), link);
  return it == kOrder.end() ? 9 : 2 + static_cast<int>(it - kOrder.begin());
}

}  // namespace

std::optional<Policy> parse_policy(std::string_view text) {
  if (text == "pack") return Policy::Pack;
  if (text == "spread") return Policy::Spread;
  return std::nullopt;
}

Policy policy_from_config(const Config& config) {
  const std::optional<std::string> text = config.get_choice("rtop.policy", {"pack", "spread"});
  return text ? *parse_policy(*text) : Policy::Pack;
}

Json RankPlacement::to_json() const {
  Json j;
  j["schema"] = "rkit.placement.v1";
  j["rank"] = rank;
  j["ranks"] = ranks;
  j["numa_node"] = numa_node ? Json(*numa_node) : Json(nullptr);
  j["cores"] = cores;
  j["pus"] = pus;
  j["cpuset"] = format_cpu_list(pus);
  j["gpus"] = gpus;
  j["nic"] = nic ? Json(*nic) : Json(nullptr);
  j["numa_local"] = numa_local;
  return j;
}

std::vector<RankPlacement> place(const Topology& t, const PlaceRequest& req) {
  if (req.ranks < 1) throw Error(Exit::Usage, "--ranks must be at least 1");
  if (req.gpus_per_rank < 0) throw Error(Exit::Usage, "--gpus-per-rank must not be negative");
  if (req.cpus_per_rank && *req.cpus_per_rank < 1) throw Error(Exit::Usage, "--cpus-per-rank must be at least 1");
  const std::set<int> busy_cores(req.busy_cores.begin(), req.busy_cores.end());
  const std::set<int> busy_gpus(req.busy_gpus.begin(), req.busy_gpus.end());
  const bool some_busy = !busy_cores.empty() || !busy_gpus.empty();
  const char* has = some_busy ? "has free" : "has";
  int total_cores = 0;
  for (const auto& core : t.cores) total_cores += !busy_cores.count(core.index);
  int total_gpus = 0;
  for (const auto& gpu : t.gpus) total_gpus += !busy_gpus.count(gpu.index);
  const int n = req.ranks;
  const int c = req.cpus_per_rank.value_or(total_cores / n);
  if (c < 1 || static_cast<long>(n) * c > total_cores)
    throw Error(Exit::DataErr, fmt::format("not enough cores: {} ranks × {} cores need {}, the topology {} {}", n,
                                           std::max(c, 1), static_cast<long>(n) * std::max(c, 1), has, total_cores));
  const int g = req.gpus_per_rank;
  if (static_cast<long>(n) * g > total_gpus)
    throw Error(Exit::DataErr,
                fmt::format("not enough GPUs: {} ranks × {} GPUs need {}, the topology {} {}", n, g,
                            static_cast<long>(n) * g, has, total_gpus),
                t.gpus.empty() ? "--gpus FILE adds GPUs from a fixture" : "");

  // Free cores per NUMA node, in core order; node order as the topology lists them.
  std::vector<int> node_ids;
  std::map<int, std::vector<int>> free_cores;
  for (const auto& node : t.numa_nodes) {
    node_ids.push_back(node.os_index);
    auto& pool = free_cores[node.os_index];
    for (int core : node.cores)
      if (!busy_cores.count(core)) pool.push_back(core);
  }
  auto take = [&](int node, int count, std::vector<int>& into) {
    auto& pool = free_cores[node];
    int k = std::min<int>(count, static_cast<int>(pool.size()));
    into.insert(into.end(), pool.begin(), pool.begin() + k);
    pool.erase(pool.begin(), pool.begin() + k);
    return k;
  };

  std::vector<RankPlacement> out(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    out[r].rank = r;
    out[r].ranks = n;
  }

  // GPUs by NUMA node (-1: unknown). Ranks visit nodes from a cursor: pack stays on a
  // node while it can take another rank, spread moves on after each rank. A node can
  // take a rank when it has G free GPUs and C free cores; failing that, a node with G
  // free GPUs (the cores then come from elsewhere, and the record says numa_local false).
  std::map<int, std::vector<int>> gpus_by_node;
  for (const auto& gpu : t.gpus)
    if (!busy_gpus.count(gpu.index)) gpus_by_node[gpu.numa_node.value_or(-1)].push_back(gpu.index);
  std::vector<int> order;
  if (g == 0) {
    order = node_ids;
  } else {
    for (const auto& [node, list] : gpus_by_node)
      if (node >= 0) order.push_back(node);
    if (gpus_by_node.count(-1)) order.push_back(-1);
  }
  auto free_gpus = [&](int node) { return static_cast<int>(gpus_by_node[node].size()); };
  auto has_cores = [&](int node) { return node >= 0 && static_cast<int>(free_cores[node].size()) >= c; };
  std::size_t cursor = 0;
  for (int r = 0; r < n; ++r) {
    std::optional<std::size_t> pick;
    for (int pass = 0; pass < 2 && !pick; ++pass)
      for (std::size_t step = 0; step < order.size() && !pick; ++step) {
        std::size_t k = (cursor + step) % order.size();
        int node = order[k];
        bool gpus_ok = free_gpus(node) >= g;
        if (gpus_ok && (pass == 0 ? has_cores(node) : g > 0)) pick = k;
      }
    RankPlacement& p = out[static_cast<std::size_t>(r)];
    if (!pick) {
      // No node has G free GPUs (or, without GPUs, C free cores): gather GPUs from
      // several nodes; the cores come from the spill pass below.
      for (int node : order)
        while (static_cast<int>(p.gpus.size()) < g && free_gpus(node) > 0) {
          p.gpus.push_back(gpus_by_node[node].front());
          gpus_by_node[node].erase(gpus_by_node[node].begin());
        }
      continue;
    }
    int node = order[*pick];
    auto& list = gpus_by_node[node];
    p.gpus.assign(list.begin(), list.begin() + g);
    list.erase(list.begin(), list.begin() + g);
    if (node >= 0) take(node, c, p.cores);
    cursor = req.policy == Policy::Spread ? *pick + 1 : *pick;
  }

  // Ranks still short of cores take the nearest ones left: on the node of the rank's
  // GPU (or of the cores it has), then in the same package, then anywhere.
  std::map<int, int> package_of;  // NUMA node → package of its first core
  for (const auto& node : t.numa_nodes)
    if (!node.cores.empty()) package_of[node.os_index] = t.cores[static_cast<std::size_t>(node.cores.front())].package;
  for (auto& p : out) {
    int short_by = c - static_cast<int>(p.cores.size());
    if (short_by == 0) continue;
    std::optional<int> near;
    if (!p.gpus.empty()) near = t.gpus[static_cast<std::size_t>(p.gpus.front())].numa_node;
    if (!near && !p.cores.empty()) near = t.cores[static_cast<std::size_t>(p.cores.front())].numa_node;
    auto distance = [&](int node) {
      if (!near || !package_of.count(node) || !package_of.count(*near)) return 2;
      return node == *near ? 0 : package_of[node] == package_of[*near] ? 1 : 2;
    };
    std::vector<int> by_distance = node_ids;
    std::stable_sort(by_distance.begin(), by_distance.end(), [&](int a, int b) { return distance(a) < distance(b); });
    for (int node : by_distance) short_by -= take(node, short_by, p.cores);
    if (short_by > 0)  // cannot happen while every core belongs to a node; keep the promise anyway
      throw Error(Exit::DataErr, fmt::format("not enough cores: rank {} is {} short", p.rank, short_by));
  }

  std::map<std::string, int> nic_use;
  for (auto& p : out) {
    std::sort(p.cores.begin(), p.cores.end());
    std::set<int> nodes;
    for (int core : p.cores) {
      const Core& info = t.cores[static_cast<std::size_t>(core)];
      p.pus.insert(p.pus.end(), info.pus.begin(), info.pus.end());
      nodes.insert(info.numa_node);
    }
    std::sort(p.pus.begin(), p.pus.end());
    if (nodes.size() == 1) p.numa_node = *nodes.begin();
    p.numa_local = nodes.size() == 1;
    for (int gi : p.gpus) {
      const auto& gpu = t.gpus[static_cast<std::size_t>(gi)];
      if (gpu.numa_node && p.numa_node != gpu.numa_node) p.numa_local = false;
    }
    // Nearest NIC: best link from the first GPU, else same NUMA node; least used wins ties.
    int best = std::numeric_limits<int>::max();  // keys are score * 1000 + uses
    for (std::size_t k = 0; k < t.nics.size(); ++k) {
      int score = 8;
      if (!p.gpus.empty() && static_cast<std::size_t>(p.gpus.front()) < t.gpu_nic_links.size())
        score = link_rank(t.gpu_nic_links[static_cast<std::size_t>(p.gpus.front())][k]);
      else if (t.nics[k].numa_node && t.nics[k].numa_node == p.numa_node)
        score = 5;
      const std::string& name = t.nics[k].name;
      int key = score * 1000 + nic_use[name];
      if (key < best) {
        best = key;
        p.nic = name;
      }
    }
    if (p.nic) ++nic_use[*p.nic];
  }
  return out;
}

}  // namespace rkit
