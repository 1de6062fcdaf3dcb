#include "rkit/gpu_fixture.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <regex>

#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit {
namespace {

constexpr int kMaxNvLinks = 64;  // more than any GPU has (H100: 18)
constexpr int kMaxGpus = 1024;   // more than any machine has; bounds the link matrix

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw Error(Exit::DataErr, fmt::format("{}: {}", where, what));
}

std::string string_field(const Json& g, const char* key, const std::string& where) {
  const Json& v = g.at(key);
  if (!v.is_string()) bad(where, fmt::format("\"{}\" must be a string", key));
  return v.get<std::string>();
}

// A whole number in [lo, hi] (JSON integers only: 1.5 and "1" are refused).
long long integer_field(const Json& v, const std::string& name, long long lo, long long hi, const std::string& where) {
  if (!v.is_number_integer()) bad(where, fmt::format("{} must be an integer", name));
  if (v.is_number_unsigned() && v.get<unsigned long long>() > static_cast<unsigned long long>(hi))
    bad(where, fmt::format("{} must be at most {}", name, hi));
  long long n = v.get<long long>();
  if (n < lo || n > hi) bad(where, fmt::format("{} must be between {} and {}", name, lo, hi));
  return n;
}

}  // namespace

std::vector<FixtureGpu> read_gpu_fixture(const std::string& path, const std::vector<NumaNode>& numas) {
  return parse_gpu_fixture(read_file(path), input_name(path), numas);
}

std::vector<FixtureGpu> parse_gpu_fixture(std::string_view text, const std::string& path,
                                          const std::vector<NumaNode>& numas) {
  Json doc = parse_json(text, path);
  check_schema(doc, "rkit.gpu_fixture", 1, path);
  if (!doc.contains("gpus") || !doc["gpus"].is_array()) bad(path, "\"gpus\" must be an array");
  // PCI bus ids: bb:dd.f with a 4-digit domain, or NVML's 8-digit one (upper half 0).
  static const std::regex kBusId("((0000)?[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]");
  const int count = static_cast<int>(doc["gpus"].size());
  if (count > kMaxGpus) bad(path, fmt::format("{} GPUs: at most {} are supported", count, kMaxGpus));
  std::map<std::string, int> bus_ids;
  std::vector<FixtureGpu> out;
  for (int i = 0; i < count; ++i) {
    const Json& g = doc["gpus"][static_cast<std::size_t>(i)];
    std::string where = fmt::format("{}: gpus[{}]", path, i);
    if (!g.is_object()) bad(where, "expected an object");
    if (!g.contains("name")) bad(where, "\"name\" is missing");
    FixtureGpu f;
    f.gpu.index = i;
    f.gpu.source = "fixture";
    f.gpu.name = string_field(g, "name", where);
    if (f.gpu.name.empty()) bad(where, "\"name\" is empty");
    if (g.contains("uuid")) f.gpu.uuid = string_field(g, "uuid", where);
    if (g.contains("memory_bytes"))
      f.gpu.memory_bytes =
          static_cast<std::uint64_t>(integer_field(g["memory_bytes"], "\"memory_bytes\"", 0, LLONG_MAX, where));
    if (g.contains("pci_bus_id")) {
      std::string bus = string_field(g, "pci_bus_id", where);
      if (!std::regex_match(bus, kBusId)) bad(where, fmt::format("\"pci_bus_id\" '{}' is not [dddd:]bb:dd.f", bus));
      f.gpu.pci_bus_id = normalize_bus_id(bus.find(':') == bus.rfind(':') ? "0000:" + bus : bus);
      if (auto [it, fresh] = bus_ids.emplace(*f.gpu.pci_bus_id, i); !fresh)
        bad(where, fmt::format("pci_bus_id {} is also GPU {}'s", *f.gpu.pci_bus_id, it->second));
    }
    if (g.contains("numa_node")) {
      int n = static_cast<int>(integer_field(g["numa_node"], "\"numa_node\"", 0, INT_MAX, where));
      auto it = std::find_if(numas.begin(), numas.end(), [&](const NumaNode& m) { return m.os_index == n; });
      if (it == numas.end())
        bad(where, fmt::format("numa_node {} is not in the topology ({} NUMA nodes)", n, numas.size()));
      f.gpu.numa_node = n;
      f.gpu.cpus = it->pus;
    }
    if (g.contains("nvlinks")) {
      if (!g["nvlinks"].is_object()) bad(where, "\"nvlinks\" must map a GPU index to a link count");
      for (const auto& [key, value] : g["nvlinks"].items()) {
        int peer = -1;
        auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), peer);
        if (ec != std::errc() || end != key.data() + key.size() || key != std::to_string(peer) || peer < 0 ||
            peer >= count)
          bad(where, fmt::format("nvlinks names GPU '{}', but the fixture has GPUs 0-{}", key, count - 1));
        if (peer == i) bad(where, "nvlinks names the GPU itself");
        f.nvlinks[peer] = static_cast<int>(integer_field(value, "an NVLink count", 0, kMaxNvLinks, where));
      }
    }
    out.push_back(std::move(f));
  }
  for (const auto& f : out)
    for (const auto& [peer, links] : f.nvlinks) {
      auto back = out[static_cast<std::size_t>(peer)].nvlinks.find(f.gpu.index);
      if (back != out[static_cast<std::size_t>(peer)].nvlinks.end() && back->second != links)
        bad(path, fmt::format("GPUs {} and {} disagree on their NVLinks ({} and {})", f.gpu.index, peer, links,
                              back->second));
    }
  return out;
}

}  // namespace rkit
