// File: rkit/topology.hpp
//
// The machine as rkit sees it (what `rtop` prints and placement plans on): CPUs, NUMA
// nodes, caches, GPUs, NICs and disks, and how devices connect (the link types of
// `nvidia-smi topo -m`). Built from hwloc (live, an XML file from another machine, or a
// synthetic description), NVML when it can be loaded, and optionally a GPU fixture for
// tests and planning.
//
//   rkit::ProbeOptions opt;
//   opt.synthetic = "pack:2 numa:2 core:8 pu:2";
//   rkit::Topology t = rkit::probe(opt);
//   std::cout << rkit::to_json_line(t.to_json());   // one rkit.topology.v1 record
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit {

struct ProbeOptions {
  std::optional<std::string> xml_path;     // --input: hwloc XML of another machine ("-": stdin)
  std::optional<std::string> synthetic;    // --synthetic: hwloc synthetic description
  std::optional<std::string> gpu_fixture;  // --gpus: JSON fixture of GPUs (rkit.gpu_fixture.v1)
  bool use_nvml = true;                    // live probes only
};

struct Cache {
  int level = 0;
  std::string type;  // "data", "instruction", "unified"
  std::uint64_t size_bytes = 0;
  int count = 0;
};

struct Core {
  int index = 0;         // logical index (0..cores-1)
  int package = 0;       // logical package index
  int numa_node = 0;     // OS index of the NUMA node holding this core's memory
  std::vector<int> pus;  // OS indices of its hardware threads
};

struct NumaNode {
  int os_index = 0;
  std::uint64_t memory_bytes = 0;
  std::vector<int> cores;  // logical core indices
  std::vector<int> pus;    // OS PU indices
};

struct Gpu {
  int index = 0;
  std::string name;
  std::optional<std::string> uuid;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::string> pci_bus_id;  // "0000:3b:00.0"
  std::optional<int> numa_node;
  std::optional<std::string> driver;  // driver version when NVML answered, else null
  std::string source;                 // "nvml", "pci" or "fixture"
  std::vector<int> cpus;              // OS PU indices local to the GPU
};

struct Nic {
  std::string name;  // mlx5_0 when an RDMA device exists, else the netdev
  std::optional<std::string> netdev;
  std::string kind;  // "ethernet", "infiniband", "network"
  std::optional<std::string> address;
  std::optional<std::string> pci_bus_id;
  std::optional<int> numa_node;
  std::vector<int> cpus;
};

struct Disk {
  std::string name;
  bool nvme = false;
  std::optional<std::uint64_t> size_bytes;
  std::optional<std::string> pci_bus_id;
  std::optional<int> numa_node;
};

struct Topology {
  std::string source;  // "live", "xml", "synthetic"
  std::string hostname, os, architecture, cpu_model;
  int packages = 0;
  std::vector<NumaNode> numa_nodes;
  std::vector<Core> cores;
  int pus = 0;
  std::vector<Cache> caches;
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  std::vector<Disk> disks;
  // Link types as `nvidia-smi topo -m` prints them: X, NV#, PIX, PXB, PHB, NODE, SYS.
  std::vector<std::vector<std::string>> gpu_links;      // gpus × gpus
  std::vector<std::vector<std::string>> gpu_nic_links;  // gpus × nics
  std::vector<std::vector<std::string>> nic_links;      // nics × nics
  std::optional<std::string> nvml_error;                // why NVML gave nothing, on a live probe

  // The rkit.topology.v1 record (schema documented in rkit(7)).
  Json to_json() const;
};

// Probes the topology. Errors: Error(Usage) for a bad synthetic description,
// Error(DataErr) for a malformed XML or fixture, Error(NoInput) for missing files.
Topology probe(const ProbeOptions& options);

// "0-3,8-11" for {0,1,2,3,8,9,10,11}.
std::string format_cpu_list(const std::vector<int>& cpus);

// Normalises a PCI bus id to "dddd:bb:dd.f" in lower case ("00000000:3B:00.0" too).
std::string normalize_bus_id(const std::string& bus_id);

}  // namespace rkit
