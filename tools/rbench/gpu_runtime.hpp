// File: gpu_runtime.hpp
//
// What the gpu.* suites share: whether CUDA can run here, CUDA errors as rkit::Error,
// owners of device memory, pinned memory, streams and events, a timing loop on CUDA
// events, the loop over devices, and the facts about a device that peaks are computed
// from and that name it in a record.
//
//   class MySuite : public Suite {
//     std::string unavailable() const override { return cuda_unavailable(); }
//     std::vector<Measurement> run(const RunOptions& opt, const Progress&) override {
//       DeviceSelection on(0);                        // cudaSetDevice(0), restored after
//       Stream stream;
//       DeviceMemory buf(bytes);
//       auto seconds = time_on_stream(stream.get(), opt.warmup, opt.reps,
//                                     [&] { cuda_check(cudaMemsetAsync(buf.get(), 0, bytes, stream.get()),
//                                     "cudaMemsetAsync"); });
//       ...
//
// Compiled only into the GPU plug-in (rbench_gpu.so, see gpu_plugin.hpp), which exists
// only in CUDA builds; a build without CUDA says so through gpu_plugin.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_specs.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/nvml.hpp"
#include "suite.hpp"

namespace rkit::rbench {

// "" when a CUDA device can be used here; else why not, from cudaGetDeviceCount ("no
// usable CUDA device: cudaGetDeviceCount: CUDA driver version is insufficient for CUDA
// runtime version (cudaErrorInsufficientDriver)").
// Asks CUDA once per process. Thread-safe.
std::string cuda_unavailable();

// The GPUs NVML reports, by PCI bus id ("0000:3b:00.0"), for link peaks; empty where
// NVML is absent (no driver) or fails.
std::map<std::string, NvmlDevice> nvml_devices_by_bus_id();

// A PCIe link's bandwidth per direction in GB/s from sysfs: the lower of the device's
// and its upstream port's max_link_speed x max_link_width; 0 when sysfs does not say.
// `description` gets e.g. "PCIe 32 GT/s x16 (sysfs max_link_speed/width of 0000:3b:00.0)".
double pcie_link_gbs(const std::string& bus_id, std::string* description);

// Throws rkit::Error for rc != cudaSuccess: "what: message (cudaErrorName)", exit 69
// (unavailable) for out-of-memory and missing devices, 70 (internal) for the rest.
void cuda_check(cudaError_t rc, std::string_view what);

// The number of visible devices; throws as cuda_check when there is none.
int cuda_device_count();

// What the suites need to know of device `index`.
struct CudaDevice {
  int index = 0;           // the CUDA ordinal (CUDA_DEVICE_ORDER; fastest first by default)
  std::string name;        // "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;  // "0000:3b:00.0", lower case as NVML and sysfs spell it; "" when CUDA does not say
  GpuClocks clocks;
  std::uint64_t l2_bytes = 0;
};
CudaDevice cuda_device(int index);

// The params that name `dev` in a record: {PREFIX_bus_id: "0000:3b:00.0" (null when
// CUDA does not say), PREFIX_name: "NVIDIA H100 80GB HBM3"}. CUDA numbers devices
// fastest first, host.gpus lists them in NVML's (PCI) order: the bus id is what ties a
// result to its GPU in host.gpus.
Json device_identity(const CudaDevice& dev, const std::string& prefix);

// Runs measure(device) for every visible device, in CUDA's order, and returns all their
// measurements in that order. Throws as cuda_device_count() and measure do.
std::vector<Measurement> for_each_device(const std::function<std::vector<Measurement>(int device)>& measure);

// Makes `index` the current device for its lifetime, then restores the previous one.
class DeviceSelection {
 public:
  explicit DeviceSelection(int index);
  ~DeviceSelection();
  DeviceSelection(const DeviceSelection&) = delete;
  DeviceSelection& operator=(const DeviceSelection&) = delete;

 private:
  int previous_ = 0;
};

// How CudaMemory allocates and frees: device memory on the current device (cudaMalloc),
// or page-locked host memory (cudaHostAlloc, portable: fast to and from every device).
struct DeviceAllocator {
  static constexpr const char* kName = "cudaMalloc";
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
  static cudaError_t free(void* p) { return cudaFree(p); }
};
struct PinnedAllocator {
  static constexpr const char* kName = "cudaHostAlloc (pinned)";
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocPortable); }
  static cudaError_t free(void* p) { return cudaFreeHost(p); }
};

// `bytes` of memory from Allocator (at least 1), freed on destruction; throws as
// cuda_check when the allocation fails.
template <typename Allocator>
class CudaMemory {
 public:
  explicit CudaMemory(std::size_t bytes) {
    cuda_check(Allocator::allocate(&ptr_, bytes > 0 ? bytes : 1),
               std::string(Allocator::kName) + "(" + std::to_string(bytes) + " bytes)");
  }
  ~CudaMemory() {
    if (ptr_) (void)Allocator::free(ptr_);
  }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};
using DeviceMemory = CudaMemory<DeviceAllocator>;
using PinnedMemory = CudaMemory<PinnedAllocator>;

// A non-blocking stream on the current device.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// Copies `bytes` on `stream` (after the work already on it) and waits until it is done.
// The suites move data this way rather than with cudaMemcpy/cudaMemset, which run on the
// legacy default stream and are not ordered with their non-blocking streams.
void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
// Sets `bytes` of device memory to `byte` on `stream` and waits until it is done.
void memset_and_wait(void* dst, int byte, std::size_t bytes, cudaStream_t stream);

// Runs enqueue() (which puts work on `stream`) `warmup` times untimed, then `reps`
// times, each between two CUDA events recorded on `stream`, and returns each timed
// run's seconds as the events measure them. Checks for Ctrl-C before each run
// (Error(TempFail)); throws for any CUDA error. The stream's device must be current.
std::vector<double> time_on_stream(cudaStream_t stream, int warmup, int reps, const std::function<void()>& enqueue);

}  // namespace rkit::rbench
