/* File: tests/fakes/fake_nvml.c
 *
 * FAKE NVML, for tests only: libfake_nvml.so exports the NVML entry points that
 * rkit resolves with dlsym (libcommon/src/nvml.cpp), with the real NVML C ABI, and
 * answers with invented GPUs. These machines have no GPU and no NVIDIA driver, so
 * the tests point rtop at this library:
 *
 *   RKIT_NVML_LIBRARY=$build/tests/fakes/libfake_nvml.so rtop --json
 *
 * Behaviour, set by environment variables read at nvmlInit_v2:
 *   RKIT_FAKE_NVML_GPUS=N       number of GPUs, 0..16 (default 2)
 *   RKIT_FAKE_NVML_FAIL_INIT=1  nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (9)
 *   RKIT_FAKE_NVML_DENY=1,3     GPUs whose handle is refused with NVML_ERROR_NO_PERMISSION
 *                               (4), as for GPUs a cgroup hides; they are still counted
 *   RKIT_FAKE_NVML_NVSWITCH=1   NVSwitch machine (HGX/DGX H100): see below
 *   RKIT_FAKE_NVML_FAIL_LINKS=0,5  link indices whose nvmlDeviceGetNvLinkState fails with
 *                               NVML_ERROR_UNKNOWN (999) on every GPU
 *   RKIT_FAKE_NVML_NO_ENERGY=1  nvmlDeviceGetTotalEnergyConsumption says NVML_ERROR_NOT_SUPPORTED
 *                               (3), as on GPUs before Volta
 *
 * GPU n: name "FAKE NVML GPU n", UUID "GPU-fake-000n", 80 GiB of memory (20 GiB used),
 * PCI bus id "00000000:1n:00.0" (bus 0x10 + n), utilisation 37 %, power 312500 mW;
 * driver version "999.99-fake". Its energy counter (nvmlDeviceGetTotalEnergyConsumption)
 * starts at (n + 1) × 10^9 mJ at the first nvmlInit_v2 and grows at the power drawn,
 * 312.5 mJ per millisecond of CLOCK_MONOTONIC, so that it is a live counter. Every pair of GPUs is joined by 4 active NVLinks: on
 * GPU n, links 4k..4k+3 go to the k-th other GPU in index order; links past those are
 * inactive, and a link index >= 18 (NVML_NVLINK_MAX_LINKS) is NVML_ERROR_INVALID_ARGUMENT.
 * With more than 5 GPUs, 4 links per pair would not fit in 18, so every pair gets
 * 18 / (GPUs - 1) links instead (NV3 for 7 GPUs), the same number seen from both ends.
 * nvmlDeviceGetNvLinkRemoteDeviceType says NVML_NVLINK_DEVICE_TYPE_GPU (0) for these.
 *
 * With RKIT_FAKE_NVML_NVSWITCH=1, as on HGX H100, every GPU has all 18 links active and
 * each ends at one of 4 NVSwitches (link l at switch l % 4): the remote PCI info is the
 * switch's, bus id "00000000:Cs:00.0" (bus 0xc0 + s, never a GPU's), and the remote
 * device type is NVML_NVLINK_DEVICE_TYPE_SWITCH (2); no link joins two GPUs directly.
 * On an inactive link the remote PCI info and device type are NVML_ERROR_NOT_SUPPORTED.
 *
 * Built twice: libfake_nvml.so, and libfake_nvml_old_driver.so (FAKE_NVML_OLD_DRIVER
 * defined), which, like drivers before nvmlDeviceGetNvLinkRemoteDeviceType, lacks it.
 * Calls before nvmlInit_v2 (or after the matching nvmlShutdown) return
 * NVML_ERROR_UNINITIALIZED, as the real library does; init is reference counted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_API __attribute__((visibility("default")))

/* NVML types, laid out as the NVML API reference defines them. */
typedef int nvmlReturn_t;
typedef int nvmlEnableState_t;
typedef enum nvmlIntNvLinkDeviceType_enum {
  NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
  NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
  NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
  NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999
};
enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 };

#define FAKE_MAX_GPUS 16
#define FAKE_MAX_LINKS 18 /* NVML_NVLINK_MAX_LINKS */
#define FAKE_LINKS_PER_PEER 4
#define FAKE_NVSWITCHES 4
#define FAKE_GIB (1024ULL * 1024ULL * 1024ULL)

struct nvmlDevice_st {
  unsigned int index;
};

static struct nvmlDevice_st devices[FAKE_MAX_GPUS];
static unsigned int gpu_count;
static int denied[FAKE_MAX_GPUS];
static int nvswitch_mode;
static int failing_link[FAKE_MAX_LINKS];
static int no_energy;
static int init_count;
static double energy_epoch_ms; /* CLOCK_MONOTONIC at the first nvmlInit_v2 */

static double fake_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int fake_env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = NULL;
  long n = strtol(v, &end, 10);
  if (*end != '\0') return fallback;
  return (int)n;
}

/* Copies `s` into `buf` of `length` bytes, as NVML's string getters do. */
static nvmlReturn_t fake_copy(const char* s, char* buf, unsigned int length) {
  if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(buf, s, strlen(s) + 1);
  return NVML_SUCCESS;
}

/* NVML_SUCCESS when `d` is one of this library's handles and NVML is initialised. */
static nvmlReturn_t fake_check(nvmlDevice_t d) {
  if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!d || d < devices || d >= devices + gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

static void fake_pci(unsigned int index, nvmlPciInfo_t* pci) {
  memset(pci, 0, sizeof *pci);
  pci->domain = 0;
  pci->bus = 0x10 + index;
  pci->device = 0;
  pci->pciDeviceId = 0xfa4e10deu; /* fake device id 0xfa4e, NVIDIA's vendor id 0x10de */
  pci->pciSubSystemId = 0;
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
  snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
}

/* Sets flags[k] for each k in the comma-separated list in $name (0 <= k < n). */
static void fake_env_list(const char* name, int* flags, int n) {
  memset(flags, 0, sizeof *flags * (size_t)n);
  const char* list = getenv(name);
  for (const char* p = list ? list : ""; *p;) {
    char* end = NULL;
    long k = strtol(p, &end, 10);
    if (end == p) break;
    if (k >= 0 && k < n) flags[k] = 1;
    p = *end == ',' ? end + 1 : end;
  }
}

/* The PCI info of NVSwitch `s`: not a GPU, and on no GPU's bus. */
static void fake_switch_pci(unsigned int s, nvmlPciInfo_t* pci) {
  memset(pci, 0, sizeof *pci);
  pci->bus = 0xc0 + s;
  pci->pciDeviceId = 0xfa5710deu; /* fake device id 0xfa57, NVIDIA's vendor id */
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
  snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
}

/* The GPU that `link` of GPU `index` reaches, or -1 when the link is inactive or, in
 * NVSwitch mode, ends at a switch. */
static int fake_peer(unsigned int index, unsigned int link) {
  if (nvswitch_mode) return -1;
  unsigned int per_peer = FAKE_LINKS_PER_PEER;
  if (gpu_count > 1 && per_peer * (gpu_count - 1) > FAKE_MAX_LINKS) per_peer = FAKE_MAX_LINKS / (gpu_count - 1);
  unsigned int k = link / per_peer; /* k-th other GPU */
  if (k + 1 >= gpu_count) return -1;
  return (int)(k < index ? k : k + 1);
}

FAKE_API nvmlReturn_t nvmlInit_v2(void) {
  if (fake_env_int("RKIT_FAKE_NVML_FAIL_INIT", 0) == 1) return NVML_ERROR_DRIVER_NOT_LOADED;
  if (init_count == 0) {
    int n = fake_env_int("RKIT_FAKE_NVML_GPUS", 2);
    if (n < 0) n = 0;
    if (n > FAKE_MAX_GPUS) n = FAKE_MAX_GPUS;
    gpu_count = (unsigned int)n;
    for (unsigned int i = 0; i < gpu_count; ++i) devices[i].index = i;
    fake_env_list("RKIT_FAKE_NVML_DENY", denied, FAKE_MAX_GPUS);
    fake_env_list("RKIT_FAKE_NVML_FAIL_LINKS", failing_link, FAKE_MAX_LINKS);
    nvswitch_mode = fake_env_int("RKIT_FAKE_NVML_NVSWITCH", 0) == 1;
    no_energy = fake_env_int("RKIT_FAKE_NVML_NO_ENERGY", 0) == 1;
    if (energy_epoch_ms == 0) energy_epoch_ms = fake_now_ms();
  }
  ++init_count;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlShutdown(void) {
  if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  --init_count;
  return NVML_SUCCESS;
}

FAKE_API const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

FAKE_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  return fake_copy("999.99-fake", version, length);
}

FAKE_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = gpu_count;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
  if (denied[index]) return NVML_ERROR_NO_PERMISSION;
  *device = &devices[index];
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  char s[64];
  snprintf(s, sizeof s, "FAKE NVML GPU %u", device->index);
  return fake_copy(s, name, length);
}

FAKE_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  char s[64];
  snprintf(s, sizeof s, "GPU-fake-%04u", device->index);
  return fake_copy(s, uuid, length);
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = 80 * FAKE_GIB;
  memory->used = 20 * FAKE_GIB;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  fake_pci(device->index, pci);
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = 37;
  utilization->memory = 25;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!power) return NVML_ERROR_INVALID_ARGUMENT;
  *power = 312500; /* milliwatts */
  return NVML_SUCCESS;
}

/* Millijoules since the driver loaded: (index + 1) × 10^9 at the first init, then 312.5 W. */
FAKE_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
  if (no_energy) return NVML_ERROR_NOT_SUPPORTED;
  double elapsed_ms = fake_now_ms() - energy_epoch_ms;
  *energy = (unsigned long long)(device->index + 1) * 1000000000ULL + (unsigned long long)(elapsed_ms * 312.5);
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!isActive || link >= FAKE_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
  if (failing_link[link]) return NVML_ERROR_UNKNOWN;
  int active = nvswitch_mode || fake_peer(device->index, link) >= 0;
  *isActive = active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!pci || link >= FAKE_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvswitch_mode) {
    fake_switch_pci(link % FAKE_NVSWITCHES, pci);
    return NVML_SUCCESS;
  }
  int peer = fake_peer(device->index, link);
  if (peer < 0) return NVML_ERROR_NOT_SUPPORTED; /* an inactive link reaches nothing */
  fake_pci((unsigned int)peer, pci);
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          nvmlIntNvLinkDeviceType_t* pNvLinkDeviceType) {
  nvmlReturn_t rc = fake_check(device);
  if (rc != NVML_SUCCESS) return rc;
  if (!pNvLinkDeviceType || link >= FAKE_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
  if (nvswitch_mode) {
    *pNvLinkDeviceType = NVML_NVLINK_DEVICE_TYPE_SWITCH;
    return NVML_SUCCESS;
  }
  if (fake_peer(device->index, link) < 0) return NVML_ERROR_NOT_SUPPORTED;
  *pNvLinkDeviceType = NVML_NVLINK_DEVICE_TYPE_GPU;
  return NVML_SUCCESS;
}
#endif
