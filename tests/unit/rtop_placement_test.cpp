// rtop's place(): cores, GPUs and NICs per rank on the synthetic topology (with and
// without the gpus4.json fixture) and on dgx_like.xml.
#include "rkit/placement.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "rkit/error.hpp"
#include "rtop_fixtures.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

using fixtures::dgx;
using fixtures::synthetic;
using rkit::testing::error_of;

// A request; cpus_per_rank 0 leaves the default (an equal share).
PlaceRequest request(int ranks, int cpus_per_rank = 0, int gpus_per_rank = 0, Policy policy = Policy::Pack) {
  PlaceRequest r;
  r.ranks = ranks;
  if (cpus_per_rank != 0) r.cpus_per_rank = cpus_per_rank;
  r.gpus_per_rank = gpus_per_rank;
  r.policy = policy;
  return r;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// What every placement must satisfy: no core shared, pus exactly the PUs of the
// cores, numa_node set exactly when the cores are in one node.
void expect_consistent(const Topology& t, const std::vector<RankPlacement>& ps) {
  std::set<int> used;
  for (const RankPlacement& p : ps) {
    std::vector<int> pus;
    std::set<int> nodes;
    for (int c : p.cores) {
      EXPECT_TRUE(used.insert(c).second) << "core " << c << " given twice";
      const Core& core = t.cores.at(static_cast<std::size_t>(c));
      pus.insert(pus.end(), core.pus.begin(), core.pus.end());
      nodes.insert(core.numa_node);
    }
    std::sort(pus.begin(), pus.end());
    EXPECT_EQ(p.pus, pus) << "rank " << p.rank;
    if (nodes.size() == 1)
      EXPECT_EQ(p.numa_node, *nodes.begin()) << "rank " << p.rank;
    else
      EXPECT_FALSE(p.numa_node) << "rank " << p.rank;
  }
}

std::vector<int> nodes_of(const std::vector<RankPlacement>& ps) {
  std::vector<int> out;
  for (const auto& p : ps) out.push_back(p.numa_node.value_or(-1));
  return out;
}

TEST(RtopPlacement, FourRanksOfFourCoresStayInsideNumaNodes) {
  Topology t = synthetic();
  auto ps = place(t, request(4, 4));
  ASSERT_EQ(ps.size(), 4u);
  expect_consistent(t, ps);
  for (std::size_t r = 0; r < ps.size(); ++r) {
    const RankPlacement& p = ps[r];
    EXPECT_EQ(p.rank, static_cast<int>(r));
    EXPECT_EQ(p.ranks, 4);
    EXPECT_EQ(p.cores.size(), 4u);
    EXPECT_EQ(p.pus.size(), 8u);
    ASSERT_TRUE(p.numa_node);
    for (int c : p.cores) EXPECT_EQ(t.cores[static_cast<std::size_t>(c)].numa_node, *p.numa_node);
    EXPECT_TRUE(p.numa_local);
    EXPECT_TRUE(p.gpus.empty());
    EXPECT_FALSE(p.nic);  // the synthetic topology has no NICs
  }
  Json j = ps[1].to_json();
  EXPECT_EQ(j["schema"], "rkit.placement.v1");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["cpuset"], "8-15");  // pack: cores 4-7 of node 0
  EXPECT_TRUE(j["nic"].is_null());
}

TEST(RtopPlacement, PackFillsNodesSpreadDealsThem) {
  Topology t = synthetic();
  auto pack = place(t, request(4, 4, 0, Policy::Pack));
  auto spread = place(t, request(4, 4, 0, Policy::Spread));
  expect_consistent(t, pack);
  expect_consistent(t, spread);
  EXPECT_EQ(nodes_of(pack), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(nodes_of(spread), (std::vector<int>{0, 1, 2, 3}));
  // Spread wraps round once every node has a rank.
  auto five = place(t, request(5, 2, 0, Policy::Spread));
  EXPECT_EQ(nodes_of(five), (std::vector<int>{0, 1, 2, 3, 0}));
}

TEST(RtopPlacement, DefaultIsAnEqualShareOfAllCores) {
  Topology t = synthetic();
  auto four = place(t, request(4));
  expect_consistent(t, four);
  for (const auto& p : four) {
    EXPECT_EQ(p.cores.size(), 8u);  // 32 cores / 4 ranks: one whole NUMA node each
    EXPECT_TRUE(p.numa_local);
  }
  EXPECT_EQ(nodes_of(four), (std::vector<int>{0, 1, 2, 3}));
  auto three = place(t, request(3));
  expect_consistent(t, three);
  for (const auto& p : three) EXPECT_EQ(p.cores.size(), 10u);  // 32 / 3, rounded down
  auto one = place(t, request(1));
  EXPECT_EQ(one[0].cores.size(), 32u);
  EXPECT_FALSE(one[0].numa_local);  // all four nodes
  EXPECT_FALSE(one[0].numa_node);
}

TEST(RtopPlacement, OneGpuPerRankGetsCoresOnTheGpusNode) {
  Topology t = synthetic("gpus4.json");
  auto ps = place(t, request(4, 4, 1));
  ASSERT_EQ(ps.size(), 4u);
  expect_consistent(t, ps);
  std::set<int> gpus;
  for (const auto& p : ps) {
    ASSERT_EQ(p.gpus.size(), 1u);
    EXPECT_TRUE(gpus.insert(p.gpus[0]).second) << "GPU " << p.gpus[0] << " given twice";
    const Gpu& g = t.gpus[static_cast<std::size_t>(p.gpus[0])];
    ASSERT_TRUE(g.numa_node);
    EXPECT_EQ(p.numa_node, g.numa_node) << "rank " << p.rank;
    for (int c : p.cores) EXPECT_EQ(t.cores[static_cast<std::size_t>(c)].numa_node, *g.numa_node);
    EXPECT_TRUE(p.numa_local) << "rank " << p.rank;
  }
  // Spread puts the same ranks on the same GPUs here (one GPU per node), still local.
  for (const auto& p : place(t, request(4, 8, 1, Policy::Spread))) EXPECT_TRUE(p.numa_local);
}

TEST(RtopPlacement, ImpossibleRequestsSayWhatIsShort) {
  Topology t = synthetic("gpus4.json");
  Error cores = error_of([&] { place(t, request(5, 8)); });
  EXPECT_EQ(cores.code(), Exit::DataErr);
  EXPECT_TRUE(contains(cores.what(), "not enough cores")) << cores.what();
  EXPECT_TRUE(contains(cores.what(), "need 40")) << cores.what();
  EXPECT_TRUE(contains(cores.what(), "has 32")) << cores.what();

  Error more_ranks = error_of([&] { place(t, request(33)); });  // an equal share is 0 cores
  EXPECT_EQ(more_ranks.code(), Exit::DataErr);
  EXPECT_TRUE(contains(more_ranks.what(), "not enough cores")) << more_ranks.what();

  Error gpus = error_of([&] { place(t, request(3, 2, 2)); });
  EXPECT_EQ(gpus.code(), Exit::DataErr);
  EXPECT_TRUE(contains(gpus.what(), "not enough GPUs")) << gpus.what();
  EXPECT_TRUE(contains(gpus.what(), "need 6")) << gpus.what();
  EXPECT_TRUE(contains(gpus.what(), "has 4")) << gpus.what();

  Error none = error_of([] { place(synthetic(), request(1, 0, 1)); });
  EXPECT_EQ(none.code(), Exit::DataErr);
  EXPECT_TRUE(contains(none.hint(), "--gpus")) << "hint: " << none.hint();
}

TEST(RtopPlacement, BadCountsAreUsageErrors) {
  Topology t = synthetic();
  EXPECT_EQ(error_of([&] { place(t, request(0)); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([&] { place(t, request(-2)); }).code(), Exit::Usage);
  PlaceRequest zero_cores = request(2);
  zero_cores.cpus_per_rank = 0;
  EXPECT_EQ(error_of([&] { place(t, zero_cores); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([&] { place(t, request(2, 0, -1)); }).code(), Exit::Usage);
}

// Lower is nearer, as nvidia-smi ranks link types.
int nearness(const std::string& link) {
  if (link.rfind("NV", 0) == 0) return 1;
  const std::vector<std::string> order = {"PIX", "PXB", "PHB", "NODE", "SYS"};
  return 2 + static_cast<int>(std::find(order.begin(), order.end(), link) - order.begin());
}

TEST(RtopPlacement, EachRankGetsTheNicNearestItsGpu) {
  Topology t = dgx();
  ASSERT_EQ(t.gpus.size(), 5u);
  auto ps = place(t, request(5, 2, 1));
  expect_consistent(t, ps);
  std::vector<std::string> nics;
  for (const auto& p : ps) {
    ASSERT_EQ(p.gpus.size(), 1u);
    ASSERT_TRUE(p.nic);
    EXPECT_TRUE(p.numa_local);
    const auto& row = t.gpu_nic_links[static_cast<std::size_t>(p.gpus[0])];
    int best = 99, mine = 99;
    for (std::size_t k = 0; k < row.size(); ++k) {
      best = std::min(best, nearness(row[k]));
      if (t.nics[k].name == *p.nic) mine = nearness(row[k]);
    }
    EXPECT_EQ(mine, best) << "rank " << p.rank << " GPU" << p.gpus[0] << " got " << *p.nic;
    nics.push_back(*p.nic);
  }
  // GPU0, GPU1: PXB to mlx5_0; GPU2: PIX to mlx5_0; GPU3, GPU4: PIX to mlx5_3.
  EXPECT_EQ(nics, (std::vector<std::string>{"mlx5_0", "mlx5_0", "mlx5_0", "mlx5_3", "mlx5_3"}));
}

TEST(RtopPlacement, PackKeepsGpuRanksOnANodeSpreadDealsThem) {
  Topology t = dgx();
  auto pack = place(t, request(2, 4, 1, Policy::Pack));
  auto spread = place(t, request(2, 4, 1, Policy::Spread));
  expect_consistent(t, pack);
  expect_consistent(t, spread);
  EXPECT_EQ(pack[0].gpus, std::vector<int>{0});
  EXPECT_EQ(pack[1].gpus, std::vector<int>{1});
  EXPECT_EQ(nodes_of(pack), (std::vector<int>{0, 0}));
  EXPECT_EQ(spread[0].gpus, std::vector<int>{0});
  EXPECT_EQ(spread[1].gpus, std::vector<int>{3});
  EXPECT_EQ(nodes_of(spread), (std::vector<int>{0, 1}));
  EXPECT_EQ(spread[1].nic, "mlx5_3");
  for (const auto& p : pack) EXPECT_TRUE(p.numa_local);
  for (const auto& p : spread) EXPECT_TRUE(p.numa_local);
}

TEST(RtopPlacement, RanksWithoutGpusShareOutEquallyNearNics) {
  Topology t = dgx();
  // Four ranks packed on NUMA node 0, which has three NICs (mlx5_0-2): least used wins.
  auto ps = place(t, request(4, 2));
  std::vector<std::string> nics;
  for (const auto& p : ps) {
    EXPECT_EQ(p.numa_node, 0);
    nics.push_back(p.nic.value_or("-"));
  }
  EXPECT_EQ(nics, (std::vector<std::string>{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_0"}));
  // Spread: the rank on node 1 takes node 1's NIC.
  auto spread = place(t, request(2, 8, 0, Policy::Spread));
  EXPECT_EQ(spread[0].nic, "mlx5_0");
  EXPECT_EQ(spread[1].nic, "mlx5_3");
}

TEST(RtopPlacement, GpuRanksGoWhereTheirCoresAreFree) {
  // Node 0 has GPUs 0-2 but only 8 cores: two ranks of 4 fill it, so the third GPU
  // rank goes to node 1 (GPU3) rather than taking GPU2 with cores from node 1.
  Topology t = dgx();
  auto ps = place(t, request(4, 4, 1));
  expect_consistent(t, ps);
  std::vector<int> gpus;
  for (const auto& p : ps) {
    EXPECT_TRUE(p.numa_local) << "rank " << p.rank;
    gpus.push_back(p.gpus.at(0));
  }
  EXPECT_EQ(gpus, (std::vector<int>{0, 1, 3, 4}));
  EXPECT_EQ(nodes_of(ps), (std::vector<int>{0, 0, 1, 1}));
  // With 3 ranks of 6 cores no node can hold two, and node 1 has two GPUs: the
  // third rank keeps a GPU but its cores must come from elsewhere.
  auto tight = place(t, request(3, 5, 1));
  expect_consistent(t, tight);
  EXPECT_TRUE(tight[0].numa_local);
  EXPECT_TRUE(tight[1].numa_local);
  EXPECT_FALSE(tight[2].numa_local);
}

TEST(RtopPlacement, BusyCoresAndGpusAreLeftAlone) {
  // A scheduler places a job beside running ones: GPUs 0 and 1 and cores 0-5 are taken.
  Topology t = dgx();
  PlaceRequest req = request(2, 2, 1);
  req.busy_cores = {0, 1, 2, 3, 4, 5};
  req.busy_gpus = {0, 1};
  auto ps = place(t, req);
  expect_consistent(t, ps);
  for (const auto& p : ps) {
    for (int c : p.cores) EXPECT_GE(c, 6) << "rank " << p.rank << " got busy core " << c;
    for (int g : p.gpus) EXPECT_GE(g, 2) << "rank " << p.rank << " got busy GPU " << g;
  }
  // Short of free GPUs: the message counts the free ones.
  req.busy_gpus = {0, 1, 2, 3};
  try {
    place(t, req);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_TRUE(contains(e.what(), "has free 1")) << e.what();
  }
}

}  // namespace
}  // namespace rkit
