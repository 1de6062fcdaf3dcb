#include "rkit/topology.hpp"

#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <map>
#include <memory>
#include <regex>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/gpu_fixture.hpp"
#include "rkit/nvml.hpp"

namespace rkit {
namespace {

using TopoPtr = std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)>;

std::vector<int> cpus_of(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  if (!set) return out;
  unsigned i;
  hwloc_bitmap_foreach_begin(i, set) { out.push_back(static_cast<int>(i)); }
  hwloc_bitmap_foreach_end();
  return out;
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* v = obj ? hwloc_obj_get_info_by_name(obj, name) : nullptr;
  return v ? v : "";
}

// hwloc builds a synthetic topology object by object: refuse descriptions with more
// hardware threads than any machine has, before hwloc spends minutes on them.
void check_synthetic_size(const std::string& desc) {
  constexpr double kMaxPus = 1 << 20;
  static const std::regex kLevel(":([0-9]+)");
  double pus = 1;
  for (auto it = std::sregex_iterator(desc.begin(), desc.end(), kLevel); it != std::sregex_iterator(); ++it)
    pus *= std::stod((*it)[1].str());
  if (pus > kMaxPus)
    throw Error(Exit::Usage,
                fmt::format("synthetic topology '{}' has {:.0f} hardware threads: at most {:.0f}", desc, pus, kMaxPus));
}

TopoPtr load_hwloc(const ProbeOptions& opt) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error(Exit::Software, "hwloc_topology_init failed");
  TopoPtr topo(raw, hwloc_topology_destroy);
  std::string xml;  // must outlive hwloc_topology_load
  if (opt.synthetic) {
    check_synthetic_size(*opt.synthetic);
    if (opt.synthetic->empty() || hwloc_topology_set_synthetic(raw, opt.synthetic->c_str()) != 0)
      throw Error(Exit::Usage, fmt::format("invalid synthetic topology '{}'", *opt.synthetic),
                  "e.g. \"pack:2 numa:2 core:8 pu:2\"");
  } else if (opt.xml_path) {
    if (opt.xml_path->empty()) throw Error(Exit::Usage, "--input needs a file name (or - for stdin)");
    xml = read_file(*opt.xml_path);  // from a buffer, so that "-" (stdin) works too
    if (hwloc_topology_set_xmlbuffer(raw, xml.data(), static_cast<int>(xml.size())) != 0)
      throw Error(Exit::DataErr, fmt::format("{}: not an hwloc XML topology", input_name(*opt.xml_path)));
  }
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_icache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);  // as lstopo shows them
  if (hwloc_topology_load(raw) != 0) {
    if (opt.xml_path)
      throw Error(Exit::DataErr, fmt::format("{}: not an hwloc XML topology", input_name(*opt.xml_path)));
    throw Error(Exit::Unavailable, "hwloc could not load the topology of this machine");
  }
  return topo;
}

std::string bus_id_of(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", a.domain, a.bus, a.dev, a.func);
}

// The NUMA nodes (OS indices) of `nodeset` that hold ordinary memory. Besides its DRAM
// node a package may hold special ones (HBM, CXL or GPU memory, which hwloc marks with
// a subtype); when the set has only special nodes, all of them.
std::vector<int> dram_nodes(hwloc_topology_t topo, hwloc_const_nodeset_t nodeset) {
  std::vector<int> dram, all;
  if (!nodeset) return dram;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    if (!hwloc_bitmap_isset(nodeset, n->os_index)) continue;
    all.push_back(static_cast<int>(n->os_index));
    if (!n->subtype || !*n->subtype) dram.push_back(static_cast<int>(n->os_index));
  }
  return dram.empty() ? all : dram;
}

// The NUMA node a device hangs off, when there is one answer; cores use the same rule.
std::optional<int> numa_of(hwloc_topology_t topo, hwloc_obj_t obj) {
  if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) == 1)
    return static_cast<int>(hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, 0)->os_index);
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  std::vector<int> nodes = dram_nodes(topo, anc ? anc->nodeset : nullptr);
  if (nodes.size() == 1) return nodes.front();
  return std::nullopt;
}

std::vector<int> local_cpus(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  return anc ? cpus_of(anc->cpuset) : std::vector<int>{};
}

// Number of PCI bridges strictly between `obj` and `ancestor`.
int bridges_between(hwloc_obj_t obj, hwloc_obj_t ancestor) {
  int n = 0;
  for (hwloc_obj_t p = obj->parent; p && p != ancestor; p = p->parent)
    if (p->type == HWLOC_OBJ_BRIDGE) ++n;
  return n;
}

// A device for link classification: its PCI object (when hwloc knows it) and NUMA node.
struct Endpoint {
  hwloc_obj_t pci = nullptr;
  std::optional<int> numa;
};

// The nearest object above both. Not hwloc_get_common_ancestor_obj: it compares
// depths, and I/O objects have negative virtual depths, so for two devices at
// different PCI depths it climbs past the root and dereferences null.
hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b) {
  for (hwloc_obj_t x = a; x; x = x->parent)
    for (hwloc_obj_t y = b; y; y = y->parent)
      if (x == y) return x;
  return nullptr;
}

std::string classify(const Endpoint& a, const Endpoint& b) {
  if (a.pci && b.pci) {
    if (a.pci == b.pci) return "X";
    hwloc_obj_t anc = common_ancestor(a.pci, b.pci);
    if (anc && anc->type == HWLOC_OBJ_BRIDGE) {
      if (anc->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) return "PHB";
      return std::max(bridges_between(a.pci, anc), bridges_between(b.pci, anc)) <= 1 ? "PIX" : "PXB";
    }
    if (anc && anc->type == HWLOC_OBJ_PCI_DEVICE) return "PIX";
  }
  if (a.numa && b.numa && *a.numa == *b.numa) return "NODE";
  return "SYS";
}

// GPUs on the PCI bus: NVIDIA and AMD display/3D controllers.
bool is_gpu(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  unsigned cls = a.class_id;
  bool display = cls == 0x0300 || cls == 0x0302 || cls == 0x0380;
  return display && (a.vendor_id == 0x10de || a.vendor_id == 0x1002);
}

}  // namespace

std::string normalize_bus_id(const std::string& bus_id) {
  // Accept "dddddddd:bb:dd.f" (NVML) and "dddd:bb:dd.f"; keep the last 4 domain digits.
  std::string s;
  for (char c : bus_id) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto colon = s.find(':');
  if (colon != std::string::npos && s.find(':', colon + 1) != std::string::npos && colon > 4) s = s.substr(colon - 4);
  return s;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::vector<int> v = cpus;
  std::sort(v.begin(), v.end());
  std::string out;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", v[i]) : fmt::format("{}-{}", v[i], v[j]);
    i = j + 1;
  }
  return out;
}

namespace {

// Everything the probe learns about devices besides the Topology itself: the hwloc
// objects and NUMA nodes used to classify links, and NVLink counts.
struct Links {
  std::vector<Endpoint> gpus, nics;
  std::map<std::pair<int, int>, int> nvlinks;  // (gpu, gpu) → links, both orders
  std::vector<int> nvswitch_links;             // per GPU: links into an NVSwitch fabric
};

// `source` names the input in errors ("topo.xml", "<stdin>").
void probe_cpus(hwloc_topology_t topo, const std::string& source, Topology& t) {
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  t.hostname = info(root, "HostName");
  t.os = info(root, "OSName").empty() ? "" : info(root, "OSName") + " " + info(root, "OSRelease");
  t.architecture = info(root, "Architecture");
  t.packages = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  t.cpu_model = info(hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0), "CPUModel");
  t.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);

  std::map<int, std::size_t> node_slot;  // OS index → position in t.numa_nodes
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); o;
       o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o)) {
    NumaNode n;
    n.os_index = static_cast<int>(o->os_index);
    n.memory_bytes = o->attr->numanode.local_memory;
    n.pus = cpus_of(o->cpuset);
    node_slot[n.os_index] = t.numa_nodes.size();
    t.numa_nodes.push_back(std::move(n));
  }
  // Every core belongs to exactly one node: its (first DRAM) local node, or the
  // machine's first node when the topology gives it none. Cores must not share PUs.
  std::vector<int> machine_nodes = dram_nodes(topo, hwloc_get_root_obj(topo)->nodeset);
  hwloc_bitmap_t seen = hwloc_bitmap_alloc();
  for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE); ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    if (hwloc_bitmap_intersects(seen, o->cpuset)) {
      hwloc_bitmap_free(seen);
      throw Error(Exit::DataErr, fmt::format("{}: core {} shares hardware threads with another core", source, i));
    }
    hwloc_bitmap_or(seen, seen, o->cpuset);
    Core c;
    c.index = static_cast<int>(o->logical_index);
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o);
    c.package = pkg ? static_cast<int>(pkg->logical_index) : 0;
    c.pus = cpus_of(o->cpuset);
    std::vector<int> nodes = dram_nodes(topo, o->nodeset);
    if (nodes.empty()) nodes = machine_nodes;
    if (!nodes.empty()) {
      c.numa_node = nodes.front();
      t.numa_nodes[node_slot[c.numa_node]].cores.push_back(c.index);
    }
    t.cores.push_back(std::move(c));
  }
  hwloc_bitmap_free(seen);

  for (hwloc_obj_type_t type : {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L1ICACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L2ICACHE,
                                HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L3ICACHE, HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L5CACHE}) {
    int n = hwloc_get_nbobjs_by_type(topo, type);
    if (n <= 0) continue;
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, 0);
    Cache c;
    c.level = static_cast<int>(o->attr->cache.depth);
    c.type = o->attr->cache.type == HWLOC_OBJ_CACHE_DATA          ? "data"
             : o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION ? "instruction"
                                                                  : "unified";
    c.size_bytes = o->attr->cache.size;
    c.count = n;
    t.caches.push_back(c);
  }
}

// NICs (one per PCI function; the RDMA name wins over the netdev name) and disks.
void probe_nics_and_disks(hwloc_topology_t topo, Topology& t, Links& links) {
  std::map<hwloc_obj_t, std::size_t> nic_by_pci;
  for (hwloc_obj_t os = hwloc_get_next_osdev(topo, nullptr); os; os = hwloc_get_next_osdev(topo, os)) {
    auto kind = os->attr->osdev.type;
    hwloc_obj_t pci = os->parent && os->parent->type == HWLOC_OBJ_PCI_DEVICE ? os->parent : nullptr;
    if (kind == HWLOC_OBJ_OSDEV_NETWORK || kind == HWLOC_OBJ_OSDEV_OPENFABRICS) {
      if (!pci) continue;  // virtual interfaces have no place in the topology
      auto [it, fresh] = nic_by_pci.emplace(pci, t.nics.size());
      if (fresh) {
        Nic n;
        n.pci_bus_id = bus_id_of(pci);
        n.numa_node = numa_of(topo, pci);
        n.cpus = local_cpus(topo, pci);
        n.kind = pci->attr->pcidev.class_id == 0x0207   ? "infiniband"
                 : pci->attr->pcidev.class_id == 0x0200 ? "ethernet"
                                                        : "network";
        t.nics.push_back(n);
        links.nics.push_back({pci, n.numa_node});
      }
      Nic& n = t.nics[it->second];
      if (kind == HWLOC_OBJ_OSDEV_OPENFABRICS) {
        n.name = os->name;
      } else {
        n.netdev = os->name;
        if (n.name.empty()) n.name = os->name;
        if (std::string a = info(os, "Address"); !a.empty()) n.address = a;
      }
    } else if (kind == HWLOC_OBJ_OSDEV_BLOCK) {
      Disk d;
      d.name = os->name;
      d.nvme = d.name.rfind("nvme", 0) == 0;
      std::string size = info(os, "Size");  // KiB
      std::uint64_t kib = 0;
      auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), kib);
      if (!size.empty() && ec == std::errc() && end == size.data() + size.size() && kib < (UINT64_MAX >> 10))
        d.size_bytes = kib << 10;
      if (pci) {
        d.pci_bus_id = bus_id_of(pci);
        d.numa_node = numa_of(topo, pci);
      }
      t.disks.push_back(d);
    }
  }
}

// GPUs from NVML. GPUs NVML will not open (hidden by a cgroup, no permission) are
// not ours to use; indices stay dense because placement indexes GPUs by them.
void probe_nvml_gpus(hwloc_topology_t topo, const Nvml& nvml, const std::map<std::string, hwloc_obj_t>& pci_by_bus,
                     Topology& t, Links& links) {
  std::string driver = nvml.driver_version();
  int count = nvml.device_count();
  std::string refused;
  std::map<std::string, std::map<std::string, int>> nvlinks_by_bus;
  for (int i = 0; i < count; ++i) {
    std::optional<NvmlDevice> d = nvml.device(i, &refused);
    if (!d) continue;
    Gpu g;
    g.index = static_cast<int>(t.gpus.size());
    g.name = d->name;
    if (!d->uuid.empty()) g.uuid = d->uuid;
    g.memory_bytes = d->memory_bytes;
    if (!d->pci_bus_id.empty()) g.pci_bus_id = d->pci_bus_id;
    if (!driver.empty()) g.driver = driver;
    g.source = "nvml";
    Endpoint e;
    if (auto it = pci_by_bus.find(d->pci_bus_id); it != pci_by_bus.end()) {
      e.pci = it->second;
      g.numa_node = numa_of(topo, e.pci);
      g.cpus = local_cpus(topo, e.pci);
    }
    e.numa = g.numa_node;
    if (g.pci_bus_id) nvlinks_by_bus[*g.pci_bus_id] = d->nvlinks;
    links.nvswitch_links.push_back(d->nvswitch_links);
    t.gpus.push_back(g);
    links.gpus.push_back(e);
  }
  if (count > 0 && t.gpus.empty())
    t.nvml_error = fmt::format("nvmlDeviceGetHandleByIndex: {} (all {} GPUs)", refused, count);
  for (const Gpu& a : t.gpus)
    for (const Gpu& b : t.gpus)
      if (a.index != b.index && a.pci_bus_id && b.pci_bus_id)
        if (auto it = nvlinks_by_bus[*a.pci_bus_id].find(*b.pci_bus_id); it != nvlinks_by_bus[*a.pci_bus_id].end())
          links.nvlinks[{a.index, b.index}] = it->second;
}

// GPUs as the PCI bus shows them (no NVML): NVIDIA and AMD display/3D controllers.
void probe_pci_gpus(hwloc_topology_t topo, const std::map<std::string, hwloc_obj_t>& pci_by_bus, Topology& t,
                    Links& links) {
  for (const auto& [bus, pci] : pci_by_bus) {
    if (!is_gpu(pci)) continue;
    Gpu g;
    g.index = static_cast<int>(t.gpus.size());
    std::string vendor = info(pci, "PCIVendor"), device = info(pci, "PCIDevice");
    g.name = !device.empty()
                 ? (vendor.empty() ? device : vendor + " " + device)
                 : fmt::format("PCI {:04x}:{:04x}", pci->attr->pcidev.vendor_id, pci->attr->pcidev.device_id);
    g.pci_bus_id = bus;
    g.numa_node = numa_of(topo, pci);
    g.cpus = local_cpus(topo, pci);
    g.source = "pci";
    t.gpus.push_back(g);
    links.gpus.push_back({pci, g.numa_node});
    links.nvswitch_links.push_back(0);
  }
}

void add_fixture_gpus(hwloc_topology_t topo, const std::string& path,
                      const std::map<std::string, hwloc_obj_t>& pci_by_bus, Topology& t, Links& links) {
  const int base = static_cast<int>(t.gpus.size());
  for (FixtureGpu& f : read_gpu_fixture(path, t.numa_nodes)) {
    Gpu g = std::move(f.gpu);
    g.index += base;
    for (int k = 0; k < base && g.pci_bus_id; ++k)
      if (t.gpus[static_cast<std::size_t>(k)].pci_bus_id == g.pci_bus_id)
        throw Error(Exit::DataErr, fmt::format("{}: gpus[{}]: pci_bus_id {} is GPU{}, found on this machine", path,
                                               g.index - base, *g.pci_bus_id, k));
    Endpoint e;
    if (g.pci_bus_id)
      if (auto it = pci_by_bus.find(*g.pci_bus_id); it != pci_by_bus.end()) {
        e.pci = it->second;
        if (!g.numa_node) g.numa_node = numa_of(topo, e.pci);
        if (g.cpus.empty()) g.cpus = local_cpus(topo, e.pci);
      }
    e.numa = g.numa_node;
    for (const auto& [peer, count] : f.nvlinks)
      if (count > 0) {
        links.nvlinks[{g.index, base + peer}] = count;
        links.nvlinks[{base + peer, g.index}] = count;
      }
    t.gpus.push_back(std::move(g));
    links.gpus.push_back(e);
    links.nvswitch_links.push_back(0);
  }
}

// The GPU↔GPU link: NV# for direct NVLinks or a shared NVSwitch fabric (every GPU
// reaches every other through it, as `nvidia-smi topo -m` shows NV18 on HGX H100),
// else what the PCIe tree says.
std::string gpu_link(const Links& links, int a, int b) {
  if (a == b) return "X";
  auto it = links.nvlinks.find({a, b});
  if (it != links.nvlinks.end() && it->second > 0) return fmt::format("NV{}", it->second);
  int sa = links.nvswitch_links[static_cast<std::size_t>(a)], sb = links.nvswitch_links[static_cast<std::size_t>(b)];
  if (sa > 0 && sb > 0) return fmt::format("NV{}", std::min(sa, sb));
  return classify(links.gpus[static_cast<std::size_t>(a)], links.gpus[static_cast<std::size_t>(b)]);
}

std::vector<std::vector<std::string>> pcie_matrix(const std::vector<Endpoint>& rows,
                                                  const std::vector<Endpoint>& cols) {
  std::vector<std::vector<std::string>> m(rows.size(), std::vector<std::string>(cols.size()));
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < cols.size(); ++j) m[i][j] = classify(rows[i], cols[j]);
  return m;
}

}  // namespace

Topology probe(const ProbeOptions& opt) {
  if (opt.synthetic && opt.xml_path) throw Error(Exit::Usage, "--input and --synthetic exclude each other");
  if (opt.gpu_fixture && opt.gpu_fixture->empty())
    throw Error(Exit::Usage, "--gpus needs a file name (or - for stdin)");
  if (opt.xml_path == "-" && opt.gpu_fixture == "-")
    throw Error(Exit::Usage, "--input and --gpus cannot both read stdin");
  TopoPtr holder = load_hwloc(opt);
  hwloc_topology_t topo = holder.get();
  Topology t;
  t.source = opt.synthetic ? "synthetic" : opt.xml_path ? "xml" : "live";
  probe_cpus(topo, opt.xml_path ? input_name(*opt.xml_path) : t.source, t);

  Links links;
  probe_nics_and_disks(topo, t, links);
  std::map<std::string, hwloc_obj_t> pci_by_bus;
  for (hwloc_obj_t p = hwloc_get_next_pcidev(topo, nullptr); p; p = hwloc_get_next_pcidev(topo, p))
    pci_by_bus[bus_id_of(p)] = p;
  // GPUs: NVML on live machines; otherwise (or when NVML has none) the PCI bus.
  if (t.source == "live" && opt.use_nvml) {
    std::string why;
    if (std::unique_ptr<Nvml> nvml = Nvml::load(why))
      probe_nvml_gpus(topo, *nvml, pci_by_bus, t, links);
    else
      t.nvml_error = why;
  }
  if (t.gpus.empty()) probe_pci_gpus(topo, pci_by_bus, t, links);
  if (opt.gpu_fixture) add_fixture_gpus(topo, *opt.gpu_fixture, pci_by_bus, t, links);

  const std::size_t n = t.gpus.size();
  t.gpu_links.assign(n, std::vector<std::string>(n));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) t.gpu_links[i][j] = gpu_link(links, static_cast<int>(i), static_cast<int>(j));
  t.gpu_nic_links = pcie_matrix(links.gpus, links.nics);
  t.nic_links = pcie_matrix(links.nics, links.nics);
  for (std::size_t i = 0; i < t.nics.size(); ++i) t.nic_links[i][i] = "X";
  return t;
}

namespace {
template <typename T>
Json opt_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}
}  // namespace

Json Topology::to_json() const {
  Json j;
  j["schema"] = "rkit.topology.v1";
  j["source"] = source;
  j["hostname"] = hostname.empty() ? Json(nullptr) : Json(hostname);
  j["os"] = os.empty() ? Json(nullptr) : Json(os);
  j["architecture"] = architecture.empty() ? Json(nullptr) : Json(architecture);
  j["cpu_model"] = cpu_model.empty() ? Json(nullptr) : Json(cpu_model);
  j["package_count"] = packages;
  j["numa_node_count"] = numa_nodes.size();
  j["core_count"] = cores.size();
  j["pu_count"] = pus;
  std::uint64_t mem = 0;
  for (const auto& n : numa_nodes) mem += n.memory_bytes;
  j["memory_bytes"] = mem;
  j["numa_nodes"] = Json::array();
  for (const auto& n : numa_nodes)
    j["numa_nodes"].push_back(
        {{"os_index", n.os_index}, {"memory_bytes", n.memory_bytes}, {"cores", n.cores}, {"pus", n.pus}});
  j["caches"] = Json::array();
  for (const auto& c : caches)
    j["caches"].push_back({{"level", c.level}, {"type", c.type}, {"size_bytes", c.size_bytes}, {"count", c.count}});
  j["cores"] = Json::array();
  for (const auto& c : cores)
    j["cores"].push_back({{"index", c.index}, {"package", c.package}, {"numa_node", c.numa_node}, {"pus", c.pus}});
  j["gpus"] = Json::array();
  for (const auto& g : gpus)
    j["gpus"].push_back({{"index", g.index},
                         {"name", g.name},
                         {"uuid", opt_json(g.uuid)},
                         {"memory_bytes", opt_json(g.memory_bytes)},
                         {"pci_bus_id", opt_json(g.pci_bus_id)},
                         {"numa_node", opt_json(g.numa_node)},
                         {"cpus", g.cpus},
                         {"driver", opt_json(g.driver)},
                         {"source", g.source}});
  j["nics"] = Json::array();
  for (const auto& n : nics)
    j["nics"].push_back({{"name", n.name},
                         {"netdev", opt_json(n.netdev)},
                         {"kind", n.kind},
                         {"address", opt_json(n.address)},
                         {"pci_bus_id", opt_json(n.pci_bus_id)},
                         {"numa_node", opt_json(n.numa_node)},
                         {"cpus", n.cpus}});
  j["disks"] = Json::array();
  for (const auto& d : disks)
    j["disks"].push_back({{"name", d.name},
                          {"nvme", d.nvme},
                          {"size_bytes", opt_json(d.size_bytes)},
                          {"pci_bus_id", opt_json(d.pci_bus_id)},
                          {"numa_node", opt_json(d.numa_node)}});
  j["gpu_links"] = gpu_links;
  j["gpu_nic_links"] = gpu_nic_links;
  j["nic_links"] = nic_links;
  j["nvml_error"] = opt_json(nvml_error);
  return j;
}

}  // namespace rkit
