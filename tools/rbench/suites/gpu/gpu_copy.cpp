// Suite gpu.copy: copy bandwidth between host and GPUs and between GPUs, as nvbandwidth
// measures it with the copy engines (cudaMemcpyAsync).
//
// Buffers of 256 MiB (64 MiB with --quick); host memory is pinned (cudaHostAlloc,
// portable). Metrics: h2d and d2h for each GPU, and d2d for each ordered pair of GPUs
// (from == to: a copy within one GPU; else cudaMemcpyPeerAsync on the source's stream,
// direct when peer access is possible, staged through the host when not). Each sample
// repeats the copy until it moves kMinSampleBytes, timed with CUDA events; bytes are
// counted once (GB/s = 1e9 B/s). Check: the source holds a splitmix64 pattern, the
// destination is cleared first, and every byte copied is compared with the pattern.
// Peaks: PCIe for h2d/d2h (sysfs link speed x width of the GPU and its port); half the
// memory bandwidth within a GPU (a copy reads and writes each byte); between GPUs the
// NVLinks NVML counts between them (or, behind NVSwitches, the fewer of their links)
// x the per-link rate, else PCIe when peer access goes over it. Params name each GPU
// side by label ("gpu0", the CUDA ordinal), PCI bus id and name. Peer access the suite
// enables is disabled again when it ends.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_runtime.hpp"
#include "gpu_specs.hpp"
#include "rkit/error.hpp"
#include "rkit/units.hpp"
#include "suite.hpp"

namespace rkit::rbench {
namespace {

constexpr double kMinSampleBytes = 1.0 * (1ull << 30);

std::string gpu_label(int device) { return fmt::format("gpu{}", device); }

// The per-device state: its facts, a stream, a source buffer holding the pattern and a
// destination buffer.
struct DeviceSide {
  CudaDevice dev;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<DeviceMemory> source, destination;
};

class CopyBench {
 public:
  CopyBench(std::size_t bytes, const RunOptions& opt) : bytes_(bytes), opt_(opt), pattern_(bytes), landing_(bytes) {
    auto* words = pattern_.as<std::uint64_t>();
    for (std::size_t i = 0; i < bytes / sizeof(std::uint64_t); ++i) words[i] = mix64(i + 1);
  }

  // Times `copy` (one copy of bytes_ on `stream`, whose device is current) and checks
  // what it left in the destination with `verify`.
  Measurement measure(const char* metric, Json params, cudaStream_t stream, const std::function<void()>& copy,
                      const std::function<bool()>& verify, const Peak& peak) {
    const int calls = std::max(1, static_cast<int>(std::ceil(kMinSampleBytes / static_cast<double>(bytes_))));
    Measurement m;
    m.metric = metric;
    m.unit = "GB/s";
    m.params = std::move(params);
    for (double s : time_on_stream(stream, opt_.warmup, opt_.reps, [&] {
           for (int i = 0; i < calls; ++i) copy();
         }))
      m.samples.push_back(calls * static_cast<double>(bytes_) / s / 1e9);
    m.correct = verify();
    m.check = fmt::format("the {} copied {} the source's pattern byte for byte", format_bytes(bytes_),
                          m.correct ? "equal" : "DIFFER from");
    m.peak = peak.value;
    m.peak_source = peak.source;
    return m;
  }

  // Whether device memory `p` (bytes_ of it, on the device of `stream`) holds the
  // pattern once the work on `stream` is done.
  bool device_holds_pattern(const void* p, cudaStream_t stream) {
    std::memset(landing_.get(), 0, bytes_);
    copy_and_wait(landing_.get(), p, bytes_, cudaMemcpyDeviceToHost, stream);
    return host_holds_pattern();
  }
  bool host_holds_pattern() const { return std::memcmp(landing_.get(), pattern_.get(), bytes_) == 0; }

  std::size_t bytes() const { return bytes_; }
  void* pattern() const { return pattern_.get(); }
  void* landing() const { return landing_.get(); }

 private:
  std::size_t bytes_;
  const RunOptions& opt_;
  PinnedMemory pattern_;  // the source of h2d, and of every device's source buffer
  PinnedMemory landing_;  // the destination of d2h, and where checks read device memory
};

// Peer access between GPUs that this suite enabled, disabled again when it is destroyed
// (however the suite ends), so that the process is left as it was found. Access that
// was on already (enabled by someone else) is left on.
class PeerAccess {
 public:
  PeerAccess() = default;
  PeerAccess(const PeerAccess&) = delete;
  PeerAccess& operator=(const PeerAccess&) = delete;
  ~PeerAccess() {
    int current = 0;
    const bool known = cudaGetDevice(&current) == cudaSuccess;
    for (auto [from, to] : enabled_) {
      if (cudaSetDevice(from) != cudaSuccess) continue;
      (void)cudaDeviceSynchronize();  // no copy may still be using the mapping (an error path)
      (void)cudaDeviceDisablePeerAccess(to);
    }
    if (known) (void)cudaSetDevice(current);
    (void)cudaGetLastError();  // leave nothing behind for later checks
  }

  // Lets device `from` access device `to` directly where the two can; whether a copy
  // between them then goes direct (else cudaMemcpyPeerAsync stages it through the host).
  bool enable(int from, int to) {
    int can = 0;
    cuda_check(cudaDeviceCanAccessPeer(&can, from, to), "cudaDeviceCanAccessPeer");
    if (!can) return false;
    DeviceSelection on(from);
    const cudaError_t rc = cudaDeviceEnablePeerAccess(to, 0);
    if (rc == cudaSuccess) {
      enabled_.emplace_back(from, to);
      return true;
    }
    if (rc == cudaErrorPeerAccessAlreadyEnabled || rc == cudaErrorTooManyPeers) {
      (void)cudaGetLastError();
      return rc == cudaErrorPeerAccessAlreadyEnabled;  // too many peers: this pair's copy is staged
    }
    cuda_check(rc, fmt::format("cudaDeviceEnablePeerAccess(gpu{} -> gpu{})", from, to));
    return false;
  }

 private:
  std::vector<std::pair<int, int>> enabled_;
};

// The peak of a copy between two different GPUs.
Peak peer_peak(const DeviceSide& from, const DeviceSide& to, bool peer_access,
               const std::map<std::string, NvmlDevice>& nvml) {
  auto f = nvml.find(from.dev.pci_bus_id), t = nvml.find(to.dev.pci_bus_id);
  const double per_link = nvlink_gbs_per_link(from.dev.clocks.cc_major, from.dev.clocks.cc_minor);
  if (f != nvml.end() && t != nvml.end()) {
    if (auto direct = f->second.nvlinks.find(to.dev.pci_bus_id);
        direct != f->second.nvlinks.end() && direct->second > 0) {
      if (per_link > 0)
        return {direct->second * per_link,
                fmt::format("{} NVLinks between them (NVML) x {:g} GB/s per direction", direct->second, per_link)};
      return {std::nullopt, "unknown: NVLinks of an unknown generation"};
    }
    if (f->second.nvswitch_links > 0 && t->second.nvswitch_links > 0) {
      const int links = std::min(f->second.nvswitch_links, t->second.nvswitch_links);
      if (per_link > 0)
        return {
            links * per_link,
            fmt::format("NVSwitch: the fewer of their NVLinks (NVML), {}, x {:g} GB/s per direction", links, per_link)};
      return {std::nullopt, "unknown: NVLinks of an unknown generation"};
    }
  }
  if (!peer_access) return {std::nullopt, "unknown: no peer access, the copy is staged through host memory"};
  std::string from_link, to_link;
  const double a = pcie_link_gbs(from.dev.pci_bus_id, &from_link), b = pcie_link_gbs(to.dev.pci_bus_id, &to_link);
  if (a > 0 && b > 0) return {std::min(a, b), fmt::format("the slower PCIe link: {}; {}", from_link, to_link)};
  return {std::nullopt, "unknown: no NVLink (NVML) and no PCIe link speed in sysfs"};
}

std::vector<Measurement> run_copies(const RunOptions& opt, const Progress& progress) {
  const int count = cuda_device_count();
  const std::size_t bytes = opt.quick ? std::size_t{64} << 20 : std::size_t{256} << 20;
  CopyBench bench(bytes, opt);
  const auto nvml = nvml_devices_by_bus_id();
  std::vector<DeviceSide> sides(static_cast<std::size_t>(count));
  for (int d = 0; d < count; ++d) {
    DeviceSelection on(d);
    DeviceSide& side = sides[static_cast<std::size_t>(d)];
    side.dev = cuda_device(d);
    side.stream = std::make_unique<Stream>();
    side.source = std::make_unique<DeviceMemory>(bytes);
    side.destination = std::make_unique<DeviceMemory>(bytes);
    copy_and_wait(side.source->get(), bench.pattern(), bytes, cudaMemcpyHostToDevice, side.stream->get());
  }
  PeerAccess peers;  // destroyed before the buffers and streams, after the last copy
  auto say = [&](const std::string& what) {
    if (progress) progress(fmt::format("gpu.copy {} x {}", what, format_bytes(bytes)));
  };
  // "from"/"to" and the GPU's identity: {"from": "gpu0", "from_bus_id": ..., "from_name": ...}.
  auto side_params = [&](Json& params, const char* role, int d) {
    params[role] = gpu_label(d);
    params.update(device_identity(sides[static_cast<std::size_t>(d)].dev, role));
  };

  std::vector<Measurement> out;
  for (int d = 0; d < count; ++d) {
    DeviceSelection on(d);
    DeviceSide& side = sides[static_cast<std::size_t>(d)];
    cudaStream_t s = side.stream->get();
    std::string link;
    const double pcie = pcie_link_gbs(side.dev.pci_bus_id, &link);
    const Peak pcie_peak =
        pcie > 0 ? Peak{pcie, link}
                 : Peak{std::nullopt, fmt::format("unknown: sysfs has no PCIe link speed for {}", side.dev.pci_bus_id)};
    say("host -> " + gpu_label(d));
    memset_and_wait(side.destination->get(), 0, bytes, s);
    Json h2d_params = {{"from", "host"}};
    side_params(h2d_params, "to", d);
    h2d_params.update(Json{{"bytes", bytes}, {"pinned", true}});
    out.push_back(bench.measure(
        "h2d", std::move(h2d_params), s,
        [&] {
          cuda_check(cudaMemcpyAsync(side.destination->get(), bench.pattern(), bytes, cudaMemcpyHostToDevice, s),
                     "cudaMemcpyAsync (h2d)");
        },
        [&] { return bench.device_holds_pattern(side.destination->get(), s); }, pcie_peak));

    say(gpu_label(d) + " -> host");
    std::memset(bench.landing(), 0, bytes);
    Json d2h_params = Json::object();
    side_params(d2h_params, "from", d);
    d2h_params.update(Json{{"to", "host"}, {"bytes", bytes}, {"pinned", true}});
    out.push_back(bench.measure(
        "d2h", std::move(d2h_params), s,
        [&] {
          cuda_check(cudaMemcpyAsync(bench.landing(), side.source->get(), bytes, cudaMemcpyDeviceToHost, s),
                     "cudaMemcpyAsync (d2h)");
        },
        [&] { return bench.host_holds_pattern(); }, pcie_peak));
  }

  for (int from = 0; from < count; ++from) {
    for (int to = 0; to < count; ++to) {
      DeviceSide& src = sides[static_cast<std::size_t>(from)];
      DeviceSide& dst = sides[static_cast<std::size_t>(to)];
      const bool peer_access = from != to && peers.enable(from, to);
      {
        DeviceSelection on(to);
        memset_and_wait(dst.destination->get(), 0, bytes, dst.stream->get());
      }
      DeviceSelection on(from);
      cudaStream_t s = src.stream->get();
      Peak peak;
      if (from == to) {
        const Peak memory = memory_peak(src.dev.name, src.dev.clocks);
        peak = {memory.value ? std::optional<double>(*memory.value / 2) : std::nullopt,
                "half the memory bandwidth (a copy reads and writes each byte); " + memory.source};
      } else {
        peak = peer_peak(src, dst, peer_access, nvml);
      }
      Json params = Json::object();
      side_params(params, "from", from);
      side_params(params, "to", to);
      params["bytes"] = bytes;
      if (from != to) params["peer_access"] = peer_access;
      say(gpu_label(from) + " -> " + gpu_label(to));
      out.push_back(bench.measure(
          "d2d", std::move(params), s,
          [&] {
            if (from == to)
              cuda_check(cudaMemcpyAsync(dst.destination->get(), src.source->get(), bytes, cudaMemcpyDeviceToDevice, s),
                         "cudaMemcpyAsync (d2d)");
            else
              cuda_check(cudaMemcpyPeerAsync(dst.destination->get(), to, src.source->get(), from, bytes, s),
                         "cudaMemcpyPeerAsync");
          },
          [&] {
            DeviceSelection on_destination(to);  // after the copy, which time_on_stream waited for
            return bench.device_holds_pattern(dst.destination->get(), dst.stream->get());
          },
          peak));
    }
  }
  return out;
}

class GpuCopy : public Suite {
 public:
  std::string name() const override { return "gpu.copy"; }
  std::string description() const override {
    return "copy bandwidth host<->GPU (pinned) and GPU<->GPU, every pair, with the copy engines";
  }
  std::string unavailable() const override { return cuda_unavailable(); }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    return run_copies(opt, progress);
  }
};

}  // namespace
RKIT_BENCH_SUITE(GpuCopy);
}  // namespace rkit::rbench
