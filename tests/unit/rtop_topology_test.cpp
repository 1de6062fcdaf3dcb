// rtop's probe(): synthetic topologies, the dgx_like.xml fixture (every PCIe link
// type), GPU fixtures, and the exit category of each way the inputs can be wrong.
#include "rkit/topology.hpp"

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

using Matrix = std::vector<std::vector<std::string>>;
using fixtures::dgx;
using fixtures::kFixtures;
using fixtures::kSynthetic;
using fixtures::synthetic;
using rkit::testing::error_of;

std::vector<int> range(int from, int to) {  // [from, to)
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// --- synthetic -----------------------------------------------------------------

TEST(RtopTopologySynthetic, CountsCoresPusAndNumaNodes) {
  Topology t = synthetic();
  EXPECT_EQ(t.source, "synthetic");
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.cores.size(), 32u);
  EXPECT_EQ(t.pus, 64);
  ASSERT_EQ(t.numa_nodes.size(), 4u);
  for (std::size_t i = 0; i < t.numa_nodes.size(); ++i) {
    EXPECT_EQ(t.numa_nodes[i].os_index, static_cast<int>(i));
    EXPECT_EQ(t.numa_nodes[i].cores.size(), 8u);
    EXPECT_EQ(t.numa_nodes[i].pus.size(), 16u);
  }
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_TRUE(t.nics.empty());
  EXPECT_TRUE(t.gpu_links.empty());
  EXPECT_FALSE(t.nvml_error);  // NVML is for live probes only
}

TEST(RtopTopologySynthetic, NumaCoreListsAreDisjointAndComplete) {
  Topology t = synthetic();
  std::vector<int> cores, pus;
  for (const NumaNode& n : t.numa_nodes) {
    cores.insert(cores.end(), n.cores.begin(), n.cores.end());
    pus.insert(pus.end(), n.pus.begin(), n.pus.end());
    for (int c : n.cores) {
      const Core& core = t.cores.at(static_cast<std::size_t>(c));
      EXPECT_EQ(core.numa_node, n.os_index) << "core " << c;
      for (int pu : core.pus) EXPECT_TRUE(std::find(n.pus.begin(), n.pus.end(), pu) != n.pus.end()) << "PU " << pu;
    }
  }
  std::sort(cores.begin(), cores.end());
  std::sort(pus.begin(), pus.end());
  EXPECT_EQ(cores, range(0, 32));  // each core in exactly one node
  EXPECT_EQ(pus, range(0, 64));
  for (const Core& c : t.cores) {
    EXPECT_EQ(c.pus.size(), 2u);
    EXPECT_EQ(c.package, c.numa_node / 2);
  }
}

TEST(RtopTopologySynthetic, JsonRecordHasSchemaAndCounts) {
  Json j = synthetic().to_json();
  EXPECT_EQ(j["schema"], "rkit.topology.v1");
  EXPECT_EQ(j["source"], "synthetic");
  EXPECT_EQ(j["package_count"], 2);
  EXPECT_EQ(j["core_count"], 32);
  EXPECT_EQ(j["pu_count"], 64);
  EXPECT_EQ(j["numa_node_count"], 4);
  EXPECT_EQ(j["numa_nodes"].size(), 4u);
  EXPECT_EQ(j["cores"].size(), 32u);
  EXPECT_EQ(j["numa_nodes"][1]["cores"], Json(range(8, 16)));
  EXPECT_TRUE(j["gpus"].is_array() && j["gpus"].empty());
  EXPECT_TRUE(j["nvml_error"].is_null());
}

// --- dgx_like.xml ----------------------------------------------------------------

TEST(RtopTopologyDgx, CpuSide) {
  Topology t = dgx();
  EXPECT_EQ(t.source, "xml");
  EXPECT_EQ(t.hostname, "dgx-like");
  EXPECT_EQ(t.architecture, "x86_64");
  EXPECT_EQ(t.cpu_model, "Intel(R) Xeon(R) Gold 6334 CPU @ 3.60GHz");
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.cores.size(), 16u);
  EXPECT_EQ(t.pus, 32);
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[0].memory_bytes, 128ull << 30);
  EXPECT_EQ(t.numa_nodes[1].pus, range(16, 32));
  auto l3 = std::find_if(t.caches.begin(), t.caches.end(), [](const Cache& c) { return c.level == 3; });
  ASSERT_NE(l3, t.caches.end());
  EXPECT_EQ(l3->size_bytes, 18ull << 20);
  EXPECT_EQ(l3->count, 2);
}

TEST(RtopTopologyDgx, GpusFromThePciBus) {
  Topology t = dgx();
  const std::vector<std::string> bus = {"0000:05:00.0", "0000:06:00.0", "0000:09:00.0", "0000:83:00.0", "0000:84:00.0"};
  const std::vector<int> numa = {0, 0, 0, 1, 1};
  ASSERT_EQ(t.gpus.size(), bus.size());
  for (std::size_t i = 0; i < bus.size(); ++i) {
    const Gpu& g = t.gpus[i];
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_EQ(g.source, "pci");
    EXPECT_FALSE(g.driver) << "no NVML, no driver version";
    EXPECT_TRUE(contains(g.name, "A100")) << g.name;
    EXPECT_EQ(g.pci_bus_id, bus[i]);
    EXPECT_EQ(g.numa_node, numa[i]);
    EXPECT_EQ(g.cpus, numa[i] == 0 ? range(0, 16) : range(16, 32));
  }
  Json j = t.to_json();
  EXPECT_TRUE(j["gpus"][0]["driver"].is_null());
  EXPECT_EQ(j["gpus"][0]["source"], "pci");
}

TEST(RtopTopologyDgx, NicsAndNvme) {
  Topology t = dgx();
  ASSERT_EQ(t.nics.size(), 4u);
  const std::vector<std::string> bus = {"0000:0a:00.0", "0000:0d:00.0", "0000:22:00.0", "0000:85:00.0"};
  const std::vector<int> numa = {0, 0, 0, 1};
  for (std::size_t i = 0; i < t.nics.size(); ++i) {
    const Nic& n = t.nics[i];
    EXPECT_EQ(n.name, "mlx5_" + std::to_string(i));  // the RDMA name wins over the netdev
    EXPECT_EQ(n.netdev, "ib" + std::to_string(i));
    EXPECT_EQ(n.kind, "infiniband");
    EXPECT_TRUE(n.address);
    EXPECT_EQ(n.pci_bus_id, bus[i]);
    EXPECT_EQ(n.numa_node, numa[i]);
    EXPECT_EQ(n.cpus, numa[i] == 0 ? range(0, 16) : range(16, 32));
  }
  auto nvme = std::find_if(t.disks.begin(), t.disks.end(), [](const Disk& d) { return d.name == "nvme0n1"; });
  ASSERT_NE(nvme, t.disks.end());
  EXPECT_TRUE(nvme->nvme);
  EXPECT_EQ(nvme->size_bytes, 1875374424ull * 1024);  // hwloc's Size is in KiB
  EXPECT_EQ(nvme->pci_bus_id, "0000:21:00.0");
  EXPECT_EQ(nvme->numa_node, 0);
}

// The layout is drawn in tests/fixtures/README.md.
TEST(RtopTopologyDgx, LinkMatrixHasEveryPcieLinkType) {
  Topology t = dgx();
  const Matrix gpu = {
      {"X", "PIX", "PXB", "SYS", "SYS"}, {"PIX", "X", "PXB", "SYS", "SYS"}, {"PXB", "PXB", "X", "SYS", "SYS"},
      {"SYS", "SYS", "SYS", "X", "PIX"}, {"SYS", "SYS", "SYS", "PIX", "X"},
  };
  const Matrix gpu_nic = {
      {"PXB", "PHB", "NODE", "SYS"}, {"PXB", "PHB", "NODE", "SYS"}, {"PIX", "PHB", "NODE", "SYS"},
      {"SYS", "SYS", "SYS", "PIX"},  {"SYS", "SYS", "SYS", "PIX"},
  };
  const Matrix nic = {
      {"X", "PHB", "NODE", "SYS"},
      {"PHB", "X", "NODE", "SYS"},
      {"NODE", "NODE", "X", "SYS"},
      {"SYS", "SYS", "SYS", "X"},
  };
  EXPECT_EQ(t.gpu_links, gpu);
  EXPECT_EQ(t.gpu_nic_links, gpu_nic);
  EXPECT_EQ(t.nic_links, nic);

  // Each type, named by the layout that makes it.
  EXPECT_EQ(t.gpu_links[0][1], "PIX") << "GPU0, GPU1: one switch (SW1) between them";
  EXPECT_EQ(t.gpu_nic_links[2][0], "PIX") << "GPU2, NIC0: one switch (SW2)";
  EXPECT_EQ(t.gpu_links[3][4], "PIX") << "GPU3, GPU4: one switch (SW4)";
  EXPECT_EQ(t.gpu_links[0][2], "PXB") << "GPU0, GPU2: nested switches SW1, SW0, SW2";
  EXPECT_EQ(t.gpu_nic_links[0][0], "PXB") << "GPU0, NIC0: nested switches";
  EXPECT_EQ(t.gpu_nic_links[0][1], "PHB") << "GPU0, NIC1: same host bridge, other root port";
  EXPECT_EQ(t.gpu_nic_links[1][2], "NODE") << "GPU1, NIC2: other host bridge of package 0";
  EXPECT_EQ(t.gpu_links[2][3], "SYS") << "GPU2, GPU3: across packages";
  EXPECT_EQ(t.gpu_nic_links[3][1], "SYS") << "GPU3, NIC1: across packages";

  std::set<std::string> seen;
  for (const Matrix* m : {&t.gpu_links, &t.gpu_nic_links, &t.nic_links})
    for (const auto& row : *m) seen.insert(row.begin(), row.end());
  EXPECT_EQ(seen, (std::set<std::string>{"X", "PIX", "PXB", "PHB", "NODE", "SYS"}));

  Json j = t.to_json();
  EXPECT_EQ(j["gpu_links"][0][2], "PXB");
  EXPECT_EQ(j["gpu_nic_links"][0][2], "NODE");
}

// NVLink counts belong to GPU pairs; NIC i and NIC j must not borrow GPU i–j's.
TEST(RtopTopologyDgx, NvlinksDoNotLeakIntoTheNicMatrix) {
  rkit::testing::TempDir dir;
  // dgx_like.xml with its GPUs turned into co-processors (not GPUs to rtop), so
  // that fixture GPUs take indices 0 and 1, the same as NIC0 and NIC1.
  std::string xml = rkit::testing::slurp(kFixtures + "/dgx_like.xml");
  for (std::size_t pos; (pos = xml.find("\"0302 [10de:")) != std::string::npos;) xml.replace(pos, 5, "\"0b40");
  rkit::testing::write(dir.file("no_gpus.xml"), xml);
  rkit::testing::write(dir.file("gpus.json"), R"({"schema": "rkit.gpu_fixture.v1", "gpus": [
      {"name": "FAKE GPU 0", "numa_node": 0, "nvlinks": {"1": 8}},
      {"name": "FAKE GPU 1", "numa_node": 1}]})");
  ProbeOptions opt;
  opt.xml_path = dir.file("no_gpus.xml");
  opt.gpu_fixture = dir.file("gpus.json");
  Topology t = probe(opt);
  ASSERT_EQ(t.gpus.size(), 2u);
  ASSERT_EQ(t.nics.size(), 4u);
  EXPECT_EQ(t.gpu_links, (Matrix{{"X", "NV8"}, {"NV8", "X"}}));
  EXPECT_EQ(t.nic_links[0][1], "PHB");
  EXPECT_EQ(t.nic_links[1][0], "PHB");
  // Fixture GPUs without a PCI object are placed by NUMA node only.
  EXPECT_EQ(t.gpu_nic_links[0], (std::vector<std::string>{"NODE", "NODE", "NODE", "SYS"}));
}

// --- GPU fixtures ----------------------------------------------------------------

TEST(RtopGpuFixture, FourFakeGpusOnTheSyntheticTopology) {
  Topology t = synthetic("gpus4.json");
  ASSERT_EQ(t.gpus.size(), 4u);
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const Gpu& g = t.gpus[i];
    EXPECT_EQ(g.index, static_cast<int>(i));
    EXPECT_EQ(g.source, "fixture");
    EXPECT_TRUE(contains(g.name, "FAKE")) << g.name;
    EXPECT_TRUE(g.uuid);
    EXPECT_EQ(g.memory_bytes, 80ull << 30);
    EXPECT_FALSE(g.driver);
    ASSERT_EQ(g.numa_node, static_cast<int>(i));
    EXPECT_EQ(g.cpus, t.numa_nodes[i].pus) << "GPU" << i << " is local to its NUMA node's PUs";
  }
  EXPECT_EQ(t.gpus[0].pci_bus_id, "0000:1b:00.0");  // normalised from "00000000:1B:00.0"
  EXPECT_EQ(t.gpus[3].pci_bus_id, "0000:c1:00.0");
  const Matrix links = {
      {"X", "NV4", "NV2", "SYS"},
      {"NV4", "X", "SYS", "NV2"},
      {"NV2", "SYS", "X", "NV4"},
      {"SYS", "NV2", "NV4", "X"},
  };
  EXPECT_EQ(t.gpu_links, links);
  EXPECT_TRUE(t.gpu_nic_links.size() == 4 && t.gpu_nic_links[0].empty());
  Json j = t.to_json();
  EXPECT_EQ(j["gpus"].size(), 4u);
  EXPECT_EQ(j["gpus"][2]["source"], "fixture");
}

TEST(RtopGpuFixture, MalformedFixturesAreDataErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpus_bad_not_json.json", "invalid JSON"},
      {"gpus_bad_schema_version.json", "rkit.gpu_fixture.v9"},
      {"gpus_bad_numa_node.json", "numa_node 7"},
      {"gpus_bad_gpus_not_array.json", "\"gpus\" must be an array"},
      {"gpus_bad_missing_name.json", "gpus[1]: \"name\""},
      {"gpus_bad_nvlink_peer.json", "GPU '5'"},
      {"gpus_bad_nvlink_key.json", "GPU '1abc'"},
      {"gpus_bad_nvlink_self.json", "the GPU itself"},
      {"gpus_bad_nvlink_mismatch.json", "GPUs 0 and 1 disagree on their NVLinks (3 and 5)"},
      {"gpus_bad_memory_negative.json", "\"memory_bytes\" must be between 0 and"},
      {"gpus_bad_numa_huge.json", "\"numa_node\" must be at most"},
      {"gpus_bad_numa_fraction.json", "\"numa_node\" must be an integer"},
      {"gpus_bad_bus_id.json", "'garbage' is not [dddd:]bb:dd.f"},
  };
  for (const auto& [file, message] : cases) {
    Error e = error_of([&] { synthetic(file); });
    EXPECT_EQ(e.code(), Exit::DataErr) << file;
    EXPECT_TRUE(contains(e.what(), file)) << e.what();
    EXPECT_TRUE(contains(e.what(), message)) << e.what();
  }
}

TEST(RtopGpuFixture, MissingFixtureIsNoInput) {
  Error e = error_of([] { synthetic("no_such_fixture.json"); });
  EXPECT_EQ(e.code(), Exit::NoInput);
  EXPECT_TRUE(contains(e.what(), "no_such_fixture.json")) << e.what();
}

// --- bad inputs ------------------------------------------------------------------

TEST(RtopTopologyErrors, BadSyntheticDescriptionIsUsage) {
  ProbeOptions opt;
  opt.synthetic = "pack:2 bogus:3";
  Error e = error_of([&] { probe(opt); });
  EXPECT_EQ(e.code(), Exit::Usage);
  EXPECT_TRUE(contains(e.what(), "bogus")) << e.what();
}

TEST(RtopTopologyErrors, NonXmlInputIsDataErr) {
  ProbeOptions opt;
  opt.xml_path = kFixtures + "/gpus4.json";
  Error e = error_of([&] { probe(opt); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_TRUE(contains(e.what(), "not an hwloc XML topology")) << e.what();
}

TEST(RtopTopologyErrors, MissingXmlIsNoInput) {
  ProbeOptions opt;
  opt.xml_path = kFixtures + "/no_such_topology.xml";
  EXPECT_EQ(error_of([&] { probe(opt); }).code(), Exit::NoInput);
}

TEST(RtopTopologyErrors, XmlAndSyntheticTogetherIsUsage) {
  ProbeOptions opt;
  opt.xml_path = kFixtures + "/dgx_like.xml";
  opt.synthetic = kSynthetic;
  EXPECT_EQ(error_of([&] { probe(opt); }).code(), Exit::Usage);
}

TEST(RtopTopologyFormat, CpuListsAndBusIds) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
  EXPECT_EQ(format_cpu_list({5, 1, 3, 2}), "1-3,5");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(normalize_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalize_bus_id("0000:3b:00.0"), "0000:3b:00.0");
}

}  // namespace
}  // namespace rkit
