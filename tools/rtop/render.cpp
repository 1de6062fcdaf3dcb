#include "render.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "rkit/units.hpp"

namespace rkit::rtop {
namespace {

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

std::string where(const std::optional<int>& numa, const std::optional<std::string>& bus) {
  std::string s = numa ? fmt::format("NUMA {}", *numa) : "NUMA ?";
  if (bus) s += ", " + *bus;
  return s;
}

struct MatrixDevice {
  std::string label;  // GPU0, NIC1
  std::string cpus;
  std::optional<int> numa;
};

std::vector<MatrixDevice> matrix_devices(const Topology& t) {
  std::vector<MatrixDevice> d;
  for (const auto& g : t.gpus) d.push_back({fmt::format("GPU{}", g.index), format_cpu_list(g.cpus), g.numa_node});
  for (std::size_t i = 0; i < t.nics.size(); ++i)
    d.push_back({fmt::format("NIC{}", i), format_cpu_list(t.nics[i].cpus), t.nics[i].numa_node});
  return d;
}

std::string link(const Topology& t, std::size_t i, std::size_t j) {
  const std::size_t g = t.gpus.size();
  if (i < g && j < g) return t.gpu_links[i][j];
  if (i < g) return t.gpu_nic_links[i][j - g];
  if (j < g) return t.gpu_nic_links[j][i - g];
  return t.nic_links[i - g][j - g];
}

}  // namespace

void print_summary(const Topology& t, std::ostream& out) {
  std::uint64_t mem = 0;
  for (const auto& n : t.numa_nodes) mem += n.memory_bytes;
  out << fmt::format("host      {}  ({})\n", or_dash(t.hostname), t.source);
  if (!t.os.empty()) out << fmt::format("os        {} {}\n", t.os, t.architecture);
  out << fmt::format("cpu       {}\n", or_dash(t.cpu_model));
  out << fmt::format("layout    {} socket{}, {} NUMA node{}, {} cores, {} threads, {} memory\n", t.packages,
                     t.packages == 1 ? "" : "s", t.numa_nodes.size(), t.numa_nodes.size() == 1 ? "" : "s",
                     t.cores.size(), t.pus, format_bytes(mem));
  std::string caches;
  for (const auto& c : t.caches) {
    std::string kind = c.type == "data" ? "d" : c.type == "instruction" ? "i" : "";
    caches += fmt::format("{}L{}{} {} ×{}", caches.empty() ? "" : ", ", c.level, kind, format_bytes(c.size_bytes), c.count);
  }
  out << fmt::format("caches    {}\n", caches.empty() ? "-" : caches);
  out << "numa\n";
  for (const auto& n : t.numa_nodes) {
    std::vector<int> cores = n.cores;
    out << fmt::format("  node {:<3} {:>10}  cores {:<10} cpus {}\n", n.os_index, format_bytes(n.memory_bytes),
                       format_cpu_list(cores), format_cpu_list(n.pus));
  }
  out << (t.gpus.empty() ? "gpus      none\n" : "gpus\n");
  for (const auto& g : t.gpus)
    out << fmt::format("  GPU{:<3} {}  {}  ({}){}{}\n", g.index, g.name,
                       g.memory_bytes ? format_bytes(*g.memory_bytes) : std::string("-"),
                       where(g.numa_node, g.pci_bus_id), g.driver ? "  driver " + *g.driver : std::string(),
                       g.source == "fixture" ? "  [fixture]" : "");
  out << (t.nics.empty() ? "nics      none\n" : "nics\n");
  for (const auto& n : t.nics)
    out << fmt::format("  {:<10} {:<10} ({}){}\n", n.name, n.kind, where(n.numa_node, n.pci_bus_id),
                       n.netdev && *n.netdev != n.name ? "  netdev " + *n.netdev : std::string());
  std::vector<const Disk*> nvme;
  for (const auto& d : t.disks)
    if (d.nvme) nvme.push_back(&d);
  out << (nvme.empty() ? "nvme      none\n" : "nvme\n");
  for (const Disk* d : nvme)
    out << fmt::format("  {:<10} {:>10}  ({})\n", d->name, d->size_bytes ? format_bytes(*d->size_bytes) : "-",
                       where(d->numa_node, d->pci_bus_id));
}

void print_matrix(const Topology& t, std::ostream& out) {
  auto devs = matrix_devices(t);
  if (devs.empty()) {
    out << "no GPUs or NICs found\n";
    return;
  }
  std::string head = fmt::format("{:<8}", "");
  for (const auto& d : devs) head += fmt::format("{:<8}", d.label);
  out << head << "CPU Affinity    NUMA Affinity\n";
  for (std::size_t i = 0; i < devs.size(); ++i) {
    std::string row = fmt::format("{:<8}", devs[i].label);
    for (std::size_t j = 0; j < devs.size(); ++j) row += fmt::format("{:<8}", link(t, i, j));
    row += fmt::format("{:<16}{}", or_dash(devs[i].cpus), devs[i].numa ? std::to_string(*devs[i].numa) : "N/A");
    out << row << '\n';
  }
  out << "\nLegend:\n\n"
         "  X    = Self\n"
         "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
         "  NODE = Connection traversing PCIe as well as the interconnect between PCIe host bridges within a NUMA node\n"
         "  PHB  = Connection traversing PCIe as well as a PCIe host bridge (typically the CPU)\n"
         "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe host bridge)\n"
         "  PIX  = Connection traversing at most a single PCIe bridge\n"
         "  NV#  = Connection traversing a bonded set of # NVLinks\n";
  if (!t.nics.empty()) {
    out << "\nNIC Legend:\n\n";
    for (std::size_t i = 0; i < t.nics.size(); ++i) out << fmt::format("  NIC{}: {}\n", i, t.nics[i].name);
  }
}

void print_matrix_csv(const Topology& t, std::ostream& out) {
  auto devs = matrix_devices(t);
  std::vector<Column> columns{{"device", "device"}};
  for (const auto& d : devs) columns.push_back({d.label, "/links/" + d.label});
  columns.push_back({"cpu_affinity", "cpu_affinity"});
  columns.push_back({"numa_affinity", "numa_affinity"});
  Printer printer(out, Format::Csv, columns);
  for (std::size_t i = 0; i < devs.size(); ++i) {
    Json row{{"device", devs[i].label}, {"links", Json::object()}, {"cpu_affinity", devs[i].cpus},
             {"numa_affinity", devs[i].numa ? Json(*devs[i].numa) : Json(nullptr)}};
    for (std::size_t j = 0; j < devs.size(); ++j) row["links"][devs[j].label] = link(t, i, j);
    printer.print(row);
  }
  printer.finish();
}

Json matrix_json(const Topology& t) {
  auto devs = matrix_devices(t);
  Json j;
  j["schema"] = "rkit.link_matrix.v1";
  j["devices"] = Json::array();
  for (std::size_t i = 0; i < devs.size(); ++i) {
    bool gpu = i < t.gpus.size();
    j["devices"].push_back({{"label", devs[i].label}, {"kind", gpu ? "gpu" : "nic"},
                            {"name", gpu ? t.gpus[i].name : t.nics[i - t.gpus.size()].name},
                            {"cpus", devs[i].cpus},
                            {"numa_node", devs[i].numa ? Json(*devs[i].numa) : Json(nullptr)}});
  }
  Json links = Json::array();
  for (std::size_t i = 0; i < devs.size(); ++i) {
    Json row = Json::array();
    for (std::size_t j2 = 0; j2 < devs.size(); ++j2) row.push_back(link(t, i, j2));
    links.push_back(row);
  }
  j["links"] = links;
  return j;
}

std::vector<Column> placement_columns() {
  return {{"RANK", "rank"}, {"NUMA", "numa_node"}, {"CORES", "cores"}, {"CPUS", "cpuset"},
          {"GPUS", "gpus"}, {"NIC", "nic"}, {"LOCAL", "numa_local"}};
}

std::vector<Column> sample_columns() {
  auto pct = [](const Json& v) { return fmt::format("{:.1f}%", v.get<double>() * 100); };
  auto bytes = [](const Json& v) { return format_bytes(v.get<std::uint64_t>()); };
  auto gpu_util = [](const Json& gpus) {
    std::string s;
    for (const auto& g : gpus)
      s += (s.empty() ? "" : " ") + (g["util"].is_null() ? std::string("-") : fmt::format("{:.0f}%", g["util"].get<double>() * 100));
    return s.empty() ? std::string("-") : s;
  };
  auto gpu_power = [](const Json& gpus) {
    double w = 0;
    bool any = false;
    for (const auto& g : gpus)
      if (!g["power_w"].is_null()) {
        w += g["power_w"].get<double>();
        any = true;
      }
    return any ? fmt::format("{:.0f} W", w) : std::string("-");
  };
  auto clock = [](const Json& v) {
    auto t = static_cast<std::time_t>(v.get<double>());
    std::tm tm{};
    localtime_r(&t, &tm);
    return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
  };
  return {{"TIME", "time_unix_s", clock},         {"CPU", "cpu_util", pct},
          {"MEM_USED", "memory_used_bytes", bytes}, {"MEM_TOTAL", "memory_total_bytes", bytes},
          {"LOAD1", "load_1m"},                     {"GPU_UTIL", "gpus", gpu_util},
          {"GPU_POWER", "gpus", gpu_power}};
}

}  // namespace rkit::rtop
