#include "rkit/nvml.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "rkit/topology.hpp"

namespace rkit {
namespace {

// The few NVML types used here, as the NVML API reference defines them.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInvalidArgument = 2;
constexpr int kNvmlNvLinkMaxLinks = 18;
constexpr int kNvmlFeatureEnabled = 1;
// nvmlIntNvLinkDeviceType_t, a C enum: GPU 0x00, IBMNPU 0x01, SWITCH 0x02, UNKNOWN 0xFF
using nvmlIntNvLinkDeviceType_t = int;
constexpr nvmlIntNvLinkDeviceType_t kNvmlNvLinkDeviceTypeGpu = 0x00;
constexpr nvmlIntNvLinkDeviceType_t kNvmlNvLinkDeviceTypeSwitch = 0x02;
constexpr nvmlIntNvLinkDeviceType_t kNvmlNvLinkDeviceTypeUnknown = 0xFF;

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};

template <typename F>
F resolve(void* lib, const char* name) {
  return reinterpret_cast<F>(::dlsym(lib, name));
}

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*) = nullptr;  // mJ; absent from old drivers
  nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned int, int*) = nullptr;
  nvmlReturn_t (*nvlink_remote_pci)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*) = nullptr;
  // absent from older drivers
  nvmlReturn_t (*nvlink_remote_type)(nvmlDevice_t, unsigned int, nvmlIntNvLinkDeviceType_t*) = nullptr;
  nvmlDevice_t device(int index, std::string* why = nullptr) const {
    nvmlDevice_t d = nullptr;
    nvmlReturn_t rc = handle(static_cast<unsigned int>(index), &d);
    if (rc != kNvmlSuccess) {
      if (why) *why = error_string ? error_string(rc) : "error " + std::to_string(rc);
      return nullptr;
    }
    return d;
  }
};

std::unique_ptr<Nvml> Nvml::load(std::string& why) {
  const char* override_path = std::getenv("RKIT_NVML_LIBRARY");
  const char* path = override_path && *override_path ? override_path : "libnvidia-ml.so.1";
  void* lib = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = ::dlerror();
    why = err ? err : "cannot load NVML";
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  api->init = resolve<decltype(api->init)>(lib, "nvmlInit_v2");
  api->shutdown = resolve<decltype(api->shutdown)>(lib, "nvmlShutdown");
  api->error_string = resolve<decltype(api->error_string)>(lib, "nvmlErrorString");
  api->driver_version = resolve<decltype(api->driver_version)>(lib, "nvmlSystemGetDriverVersion");
  api->count = resolve<decltype(api->count)>(lib, "nvmlDeviceGetCount_v2");
  api->handle = resolve<decltype(api->handle)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  api->name = resolve<decltype(api->name)>(lib, "nvmlDeviceGetName");
  api->uuid = resolve<decltype(api->uuid)>(lib, "nvmlDeviceGetUUID");
  api->memory = resolve<decltype(api->memory)>(lib, "nvmlDeviceGetMemoryInfo");
  api->pci = resolve<decltype(api->pci)>(lib, "nvmlDeviceGetPciInfo_v3");
  api->utilization = resolve<decltype(api->utilization)>(lib, "nvmlDeviceGetUtilizationRates");
  api->power = resolve<decltype(api->power)>(lib, "nvmlDeviceGetPowerUsage");
  api->energy = resolve<decltype(api->energy)>(lib, "nvmlDeviceGetTotalEnergyConsumption");
  api->nvlink_state = resolve<decltype(api->nvlink_state)>(lib, "nvmlDeviceGetNvLinkState");
  api->nvlink_remote_pci = resolve<decltype(api->nvlink_remote_pci)>(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  api->nvlink_remote_type = resolve<decltype(api->nvlink_remote_type)>(lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (!api->init || !api->shutdown || !api->count || !api->handle || !api->name || !api->pci) {
    why = std::string(path) + ": not a usable NVML (missing symbols)";
    ::dlclose(lib);
    return nullptr;
  }
  nvmlReturn_t rc = api->init();
  if (rc != kNvmlSuccess) {
    why = "nvmlInit: " + std::string(api->error_string ? api->error_string(rc) : "error " + std::to_string(rc));
    ::dlclose(lib);
    return nullptr;
  }
  std::unique_ptr<Nvml> nvml(new Nvml());
  nvml->lib_ = lib;
  nvml->api_ = std::move(api);
  return nvml;
}

Nvml::~Nvml() {
  if (api_) api_->shutdown();
  if (lib_) ::dlclose(lib_);
}

std::string Nvml::driver_version() const {
  char buf[96] = {};
  if (!api_->driver_version || api_->driver_version(buf, sizeof buf) != kNvmlSuccess) return {};
  return buf;
}

int Nvml::device_count() const {
  unsigned int n = 0;
  if (api_->count(&n) != kNvmlSuccess) return 0;
  return static_cast<int>(n);
}

std::optional<NvmlDevice> Nvml::device(int index, std::string* why) const {
  NvmlDevice out;
  nvmlDevice_t d = api_->device(index, why);
  if (!d) return std::nullopt;
  char buf[96] = {};
  if (api_->name(d, buf, sizeof buf) == kNvmlSuccess) out.name = buf;
  char uuid[96] = {};
  if (api_->uuid && api_->uuid(d, uuid, sizeof uuid) == kNvmlSuccess) out.uuid = uuid;
  nvmlPciInfo_t pci{};
  if (api_->pci(d, &pci) == kNvmlSuccess) out.pci_bus_id = normalize_bus_id(pci.busId);
  nvmlMemory_t mem{};
  if (api_->memory && api_->memory(d, &mem) == kNvmlSuccess) out.memory_bytes = mem.total;
  if (api_->nvlink_state) {
    for (unsigned int link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
      int active = 0;
      nvmlReturn_t rc = api_->nvlink_state(d, link, &active);
      if (rc == kNvmlErrorInvalidArgument) break;                         // past this GPU's last link
      if (rc != kNvmlSuccess || active != kNvmlFeatureEnabled) continue;  // one bad link hides no other
      nvmlIntNvLinkDeviceType_t type = kNvmlNvLinkDeviceTypeUnknown;
      if (api_->nvlink_remote_type && api_->nvlink_remote_type(d, link, &type) != kNvmlSuccess)
        type = kNvmlNvLinkDeviceTypeUnknown;
      if (type == kNvmlNvLinkDeviceTypeSwitch) {
        ++out.nvswitch_links;
        continue;
      }
      // An IBM NPU (a POWER9 CPU) is no GPU. A GPU, or unknown (an older driver, or the
      // call failed): counted under the remote bus id, which names the GPU, if any.
      if (type != kNvmlNvLinkDeviceTypeGpu && type != kNvmlNvLinkDeviceTypeUnknown) continue;
      nvmlPciInfo_t remote{};
      if (api_->nvlink_remote_pci && api_->nvlink_remote_pci(d, link, &remote) == kNvmlSuccess)
        ++out.nvlinks[normalize_bus_id(remote.busId)];
    }
  }
  return out;
}

std::optional<NvmlUsage> Nvml::usage(int index) const {
  NvmlUsage out;
  nvmlDevice_t d = api_->device(index);
  if (!d) return std::nullopt;
  nvmlUtilization_t u{};
  if (api_->utilization && api_->utilization(d, &u) == kNvmlSuccess) out.util = u.gpu / 100.0;
  nvmlMemory_t mem{};
  if (api_->memory && api_->memory(d, &mem) == kNvmlSuccess) {
    out.memory_used_bytes = mem.used;
    out.memory_total_bytes = mem.total;
    out.memory_free_bytes = mem.free;
  }
  unsigned int mw = 0;
  if (api_->power && api_->power(d, &mw) == kNvmlSuccess) out.power_w = mw / 1000.0;
  unsigned long long mj = 0;
  if (api_->energy && api_->energy(d, &mj) == kNvmlSuccess) out.total_energy_mj = mj;
  return out;
}

}  // namespace rkit
