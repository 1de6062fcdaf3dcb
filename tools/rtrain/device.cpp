// make_device: the CPU device, or the CUDA one from the plug-in rtrain_cuda.so.
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "device.hpp"
#include "rkit/error.hpp"

namespace rkit::rtrain {

std::unique_ptr<Device> make_cpu_device(int threads);  // cpu_device.cpp

namespace {

// Where the CUDA plug-in is: $RKIT_RTRAIN_CUDA_PLUGIN, else beside the executable
// (the build tree), else ../lib/rkit/ from it (installed).
std::vector<std::string> plugin_candidates() {
  if (const char* env = std::getenv("RKIT_RTRAIN_CUDA_PLUGIN"); env && *env) return {env};
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return {(exe.parent_path() / RKIT_RTRAIN_CUDA_PLUGIN_NAME).string(),
          (exe.parent_path() / "../lib/rkit" / RKIT_RTRAIN_CUDA_PLUGIN_NAME).lexically_normal().string()};
}

}  // namespace

std::unique_ptr<Device> make_device(const std::string& kind, int threads, int local_rank) {
  if (kind == "cpu") return make_cpu_device(threads);
  if (kind != "cuda") throw Error(Exit::Usage, fmt::format("unknown device '{}' (expected cpu or cuda)", kind));
  std::string why = fmt::format("rtrain was built without CUDA (no {})", RKIT_RTRAIN_CUDA_PLUGIN_NAME);
  for (const std::string& path : plugin_candidates()) {
    if (!std::filesystem::exists(path)) continue;
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      why = fmt::format("cannot load {}: {}", path, ::dlerror());
      break;
    }
    using Factory = Device* (*)(int local_rank, char* error, std::size_t error_size);
    auto factory = reinterpret_cast<Factory>(::dlsym(lib, "rkit_rtrain_make_cuda_device"));
    if (!factory) {
      why = fmt::format("{} has no rkit_rtrain_make_cuda_device", path);
      break;
    }
    char error[512] = {};
    Device* dev = factory(local_rank, error, sizeof error);
    if (!dev) throw Error(Exit::Unavailable, fmt::format("--device cuda: {}", error));
    return std::unique_ptr<Device>(dev);  // the library stays loaded for the process's life
  }
  throw Error(Exit::Unavailable, "--device cuda: " + why);
}

}  // namespace rkit::rtrain
