// File: rkit/nvml.hpp
//
// NVML, loaded with dlopen at run time so that the tools (rtop, rbench) build and run
// where no NVIDIA driver is installed. $RKIT_NVML_LIBRARY names another library to
// load (tests use a fake NVML, libfake_nvml.so, since these machines have no GPU).
//
//   std::string why;
//   if (auto nvml = rkit::Nvml::load(why)) { nvml->device_count(); ... }
//   else { /* why: "libnvidia-ml.so.1: cannot open shared object file" */ }
//
// NVLinks: each active link of a GPU is counted either in `nvlinks`, by the PCI bus id
// of the GPU at its far end, or in `nvswitch_links` when its far end is an NVSwitch
// (HGX/DGX A100, H100, H200: there every link ends at a switch, whose bus id matches no
// GPU). The far end's kind comes from nvmlDeviceGetNvLinkRemoteDeviceType; a driver
// without it (or a link it cannot answer for) leaves the link under its remote bus id,
// as before. A link NVML reports an error for is skipped, not the links after it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rkit {

struct NvmlDevice {
  std::string name, uuid, pci_bus_id;  // bus id normalised: "0000:3b:00.0"
  std::optional<std::uint64_t> memory_bytes;
  std::map<std::string, int> nvlinks;  // peer GPU's PCI bus id → number of active links
  int nvswitch_links = 0;              // active links whose far end is an NVSwitch
};

struct NvmlUsage {
  std::optional<double> util;  // 0..1
  std::optional<std::uint64_t> memory_used_bytes, memory_total_bytes, memory_free_bytes;
  std::optional<double> power_w;
  // Energy used since the driver was last loaded, in millijoules, as NVML counts it
  // (nvmlDeviceGetTotalEnergyConsumption: Volta and later; absent before).
  std::optional<std::uint64_t> total_energy_mj;
};

class Nvml {
 public:
  // nullptr when the library is absent or nvmlInit fails; `why` says which.
  static std::unique_ptr<Nvml> load(std::string& why);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  std::string driver_version() const;
  // All GPUs, including those NVML refuses to open (nvmlDeviceGetCount_v2 counts GPUs
  // that a cgroup or permissions hide from this process).
  int device_count() const;
  // nullopt when NVML refuses the GPU's handle (e.g. "Insufficient Permissions"); `why`
  // then says so.
  std::optional<NvmlDevice> device(int index, std::string* why = nullptr) const;
  std::optional<NvmlUsage> usage(int index) const;

  struct Api;  // function pointers resolved from the library

 private:
  Nvml() = default;
  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
};

}  // namespace rkit
