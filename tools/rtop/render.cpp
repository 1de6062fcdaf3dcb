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
    caches +=
        fmt::format("{}L{}{} {} ×{}", caches.empty() ? "" : ", ", c.level, kind, format_bytes(c.size_bytes), c.count);
  }
  out << fmt::format("caches    {}\n", caches.empty() ? "-" : caches);
  out << "numa\n";
  for (const auto& n : t.numa_nodes)
    out << fmt::format("  node {:<3} {:>10}  cores {:<10} cpus {}\n", n.os_index, format_bytes(n.memory_bytes),
                       format_cpu_list(n.cores), format_cpu_list(n.pus));
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

Json matrix_json(const Topology& t) {
  // Devices: GPUs then NICs, labelled as nvidia-smi does.
  Json devices = Json::array();
  for (const auto& g : t.gpus)
    devices.push_back({{"label", fmt::format("GPU{}", g.index)},
                       {"kind", "gpu"},
                       {"name", g.name},
                       {"cpus", format_cpu_list(g.cpus)},
                       {"numa_node", g.numa_node ? Json(*g.numa_node) : Json(nullptr)}});
  for (std::size_t i = 0; i < t.nics.size(); ++i)
    devices.push_back({{"label", fmt::format("NIC{}", i)},
                       {"kind", "nic"},
                       {"name", t.nics[i].name},
                       {"cpus", format_cpu_list(t.nics[i].cpus)},
                       {"numa_node", t.nics[i].numa_node ? Json(*t.nics[i].numa_node) : Json(nullptr)}});
  const std::size_t g = t.gpus.size(), n = devices.size();
  Json links = Json::array();
  for (std::size_t i = 0; i < n; ++i) {
    Json row = Json::array();
    for (std::size_t j = 0; j < n; ++j)
      row.push_back(i < g && j < g ? t.gpu_links[i][j]
                    : i < g        ? t.gpu_nic_links[i][j - g]
                    : j < g        ? t.gpu_nic_links[j][i - g]
                                   : t.nic_links[i - g][j - g]);
    links.push_back(std::move(row));
  }
  return Json{{"schema", "rkit.link_matrix.v1"}, {"devices", devices}, {"links", links}};
}

void print_matrix(const Json& m, Format format, std::ostream& out) {
  const Json& devs = m["devices"];
  if (format == Format::Json) {
    out << to_json_line(m) << '\n';
    return;
  }
  // One row per device: its label, a cell per device, then its CPU and NUMA affinity.
  std::vector<Column> columns{{"", "device"}};
  for (const auto& d : devs)
    columns.push_back({d["label"].get<std::string>(), "/links/" + d["label"].get<std::string>()});
  columns.push_back({"CPU Affinity", "cpus"});
  columns.push_back({"NUMA Affinity", "numa_node"});
  if (format == Format::Csv) {
    columns.front().header = "device";
    columns[columns.size() - 2].header = "cpu_affinity";
    columns.back().header = "numa_affinity";
  } else if (devs.empty()) {
    out << "no GPUs or NICs found\n";
    return;
  }
  {
    Printer printer(out, format, columns);
    for (std::size_t i = 0; i < devs.size(); ++i) {
      Json row{{"device", devs[i]["label"]},
               {"links", Json::object()},
               {"cpus", devs[i]["cpus"]},
               {"numa_node", devs[i]["numa_node"]}};
      if (format == Format::Table) {  // as nvidia-smi shows unknown affinities
        if (row["cpus"] == "") row["cpus"] = "-";
        if (row["numa_node"].is_null()) row["numa_node"] = "N/A";
      }
      for (std::size_t j = 0; j < devs.size(); ++j)
        row["links"][devs[j]["label"].get<std::string>()] = m["links"][i][j];
      printer.print(row);
    }
  }
  if (format != Format::Table) return;
  out << "\nLegend:\n\n"
         "  X    = Self\n"
         "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
         "  NODE = Connection traversing PCIe as well as the interconnect between PCIe host bridges within a NUMA "
         "node\n"
         "  PHB  = Connection traversing PCIe as well as a PCIe host bridge (typically the CPU)\n"
         "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe host bridge)\n"
         "  PIX  = Connection traversing at most a single PCIe bridge\n"
         "  NV#  = Connection traversing a bonded set of # NVLinks\n";
  bool first = true;
  for (const auto& d : devs)
    if (d["kind"] == "nic") {
      if (first) out << "\nNIC Legend:\n\n";
      first = false;
      out << fmt::format("  {}: {}\n", d["label"].get<std::string>(), d["name"].get<std::string>());
    }
}

std::vector<Column> placement_columns() {
  return {{"RANK", "rank"}, {"NUMA", "numa_node"}, {"CORES", "cores"},     {"CPUS", "cpuset"},
          {"GPUS", "gpus"}, {"NIC", "nic"},        {"LOCAL", "numa_local"}};
}

std::vector<Column> sample_columns() {
  auto pct = [](const Json& v) { return fmt::format("{:.1f}%", v.get<double>() * 100); };
  auto bytes = [](const Json& v) { return format_bytes(v.get<std::uint64_t>()); };
  auto watts = [](const Json& v) { return fmt::format("{:.0f} W", v.get<double>()); };
  auto clock = [](const Json& v) {
    auto t = static_cast<std::time_t>(v.get<double>());
    std::tm tm{};
    localtime_r(&t, &tm);
    return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
  };
  return {{"TIME", "time_unix_s", clock},
          {"CPU", "cpu_util", pct},
          {"MEM_USED", "memory_used_bytes", bytes},
          {"MEM_TOTAL", "memory_total_bytes", bytes},
          {"LOAD1", "load_1m"},
          {"GPU_UTIL", "gpu_util_mean", pct},
          {"GPU_POWER", "gpu_power_w_total", watts}};
}

}  // namespace rkit::rtop
