#include "gpu_runtime.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/topology.hpp"

namespace rkit::rbench {
namespace {

// The first line of a sysfs file, or "".
std::string read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A PCIe link's speed and width from a device's sysfs directory ("32.0 GT/s PCIe", "16");
// 0 where the files are absent or say "Unknown".
struct PcieLink {
  double gts = 0;
  int lanes = 0;
};
PcieLink read_pcie_link(const std::filesystem::path& dir) {
  PcieLink link;
  const std::string speed = read_line(dir / "max_link_speed"), width = read_line(dir / "max_link_width");
  link.gts = std::strtod(speed.c_str(), nullptr);
  link.lanes = static_cast<int>(std::strtol(width.c_str(), nullptr, 10));
  if (!(link.gts > 0) || link.lanes <= 0) return {};
  return link;
}

}  // namespace

std::map<std::string, NvmlDevice> nvml_devices_by_bus_id() {
  std::map<std::string, NvmlDevice> out;
  std::string why;
  auto nvml = Nvml::load(why);
  if (!nvml) return out;
  for (int i = 0, n = nvml->device_count(); i < n; ++i)
    if (auto device = nvml->device(i); device && !device->pci_bus_id.empty()) out[device->pci_bus_id] = *device;
  return out;
}

double pcie_link_gbs(const std::string& bus_id, std::string* description) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::canonical("/sys/bus/pci/devices/" + bus_id, ec);
  if (ec) return 0;
  PcieLink link = read_pcie_link(dir);
  if (link.lanes == 0) return 0;
  // The link runs at the lower of both ends' maxima; the parent is the port above
  // (a root port or a switch), or the host bridge's directory, which has no such files.
  if (PcieLink port = read_pcie_link(dir.parent_path()); port.lanes > 0) {
    link.gts = std::min(link.gts, port.gts);
    link.lanes = std::min(link.lanes, port.lanes);
  }
  if (description)
    *description =
        fmt::format("PCIe {:g} GT/s x{} (sysfs max_link_speed/width of {} and its port)", link.gts, link.lanes, bus_id);
  return pcie_gbs(link.gts, link.lanes);
}

namespace {

Exit exit_for(cudaError_t rc) {
  switch (rc) {
    case cudaErrorMemoryAllocation:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorNoKernelImageForDevice: return Exit::Unavailable;
    default: return Exit::Software;
  }
}

std::string describe(cudaError_t rc) { return fmt::format("{} ({})", cudaGetErrorString(rc), cudaGetErrorName(rc)); }

}  // namespace

void cuda_check(cudaError_t rc, std::string_view what) {
  if (rc != cudaSuccess) throw Error(exit_for(rc), fmt::format("{}: {}", what, describe(rc)));
}

std::string cuda_unavailable() {
  static std::once_flag once;
  static std::string why;
  std::call_once(once, [] {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
      why = "no usable CUDA device: cudaGetDeviceCount: " + describe(rc);
      (void)cudaGetLastError();  // not sticky, but leave nothing behind for later checks
    } else if (count == 0) {
      why = "no CUDA device: cudaGetDeviceCount found none";
    }
  });
  return why;
}

int cuda_device_count() {
  if (std::string why = cuda_unavailable(); !why.empty()) throw Error(Exit::Unavailable, why);
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

CudaDevice cuda_device(int index) {
  CudaDevice d;
  d.index = index;
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, index), fmt::format("cudaGetDeviceProperties({})", index));
  d.name = prop.name;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) == cudaSuccess) d.pci_bus_id = normalize_bus_id(bus);
  (void)cudaGetLastError();
  // Attributes a driver may not report are left 0 (peaks then say "unknown").
  auto attribute = [&](cudaDeviceAttr attr) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attr, index) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return value;
  };
  d.clocks.cc_major = attribute(cudaDevAttrComputeCapabilityMajor);
  d.clocks.cc_minor = attribute(cudaDevAttrComputeCapabilityMinor);
  d.clocks.sm_count = attribute(cudaDevAttrMultiProcessorCount);
  d.clocks.clock_khz = attribute(cudaDevAttrClockRate);
  d.clocks.memory_clock_khz = attribute(cudaDevAttrMemoryClockRate);
  d.clocks.memory_bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth);
  d.l2_bytes = static_cast<std::uint64_t>(attribute(cudaDevAttrL2CacheSize));
  return d;
}

Json device_identity(const CudaDevice& dev, const std::string& prefix) {
  Json out = Json::object();
  out[prefix + "_bus_id"] = dev.pci_bus_id.empty() ? Json(nullptr) : Json(dev.pci_bus_id);
  out[prefix + "_name"] = dev.name;
  return out;
}

std::vector<Measurement> for_each_device(const std::function<std::vector<Measurement>(int device)>& measure) {
  std::vector<Measurement> out;
  for (int device = 0, n = cuda_device_count(); device < n; ++device)
    for (Measurement& m : measure(device)) out.push_back(std::move(m));
  return out;
}

DeviceSelection::DeviceSelection(int index) {
  cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
  cuda_check(cudaSetDevice(index), fmt::format("cudaSetDevice({})", index));
}

DeviceSelection::~DeviceSelection() { (void)cudaSetDevice(previous_); }

Stream::Stream() { cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }

Stream::~Stream() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void Stream::synchronize() const { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  cuda_check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after a copy)");
}

void memset_and_wait(void* dst, int byte, std::size_t bytes, cudaStream_t stream) {
  cuda_check(cudaMemsetAsync(dst, byte, bytes, stream), "cudaMemsetAsync");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (after a memset)");
}

std::vector<double> time_on_stream(cudaStream_t stream, int warmup, int reps, const std::function<void()>& enqueue) {
  // Two events, destroyed however this returns.
  struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
      if (start) (void)cudaEventDestroy(start);
      if (stop) (void)cudaEventDestroy(stop);
    }
  } events;
  cuda_check(cudaEventCreate(&events.start), "cudaEventCreate");
  cuda_check(cudaEventCreate(&events.stop), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) {
    check_interrupted();
    enqueue();
    cuda_check(cudaStreamSynchronize(stream), "warm-up run");
  }
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(std::max(reps, 0)));
  for (int i = 0; i < reps; ++i) {
    check_interrupted();
    cuda_check(cudaEventRecord(events.start, stream), "cudaEventRecord");
    enqueue();
    cuda_check(cudaEventRecord(events.stop, stream), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(events.stop), "timed run");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, events.start, events.stop), "cudaEventElapsedTime");
    out.push_back(static_cast<double>(ms) / 1e3);
  }
  return out;
}

}  // namespace rkit::rbench
