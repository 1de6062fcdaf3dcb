// make_device: the CPU device, or the CUDA one from the plug-in rtrain_cuda.so.
#include <fmt/format.h>

#include "device.hpp"
#include "rkit/error.hpp"
#include "rkit/host.hpp"

namespace rkit::rtrain {

std::unique_ptr<Device> make_cpu_device(int threads);  // cpu_device.cpp

std::unique_ptr<Device> make_device(const std::string& kind, int threads, int local_rank) {
  if (kind == "cpu") return make_cpu_device(threads);
  if (kind != "cuda") throw Error(Exit::Usage, fmt::format("unknown device '{}' (expected cpu or cuda)", kind));
  // $RKIT_RTRAIN_CUDA_PLUGIN, else beside the executable (the build tree), else
  // ../lib/rkit/ from it (installed).
  const Plugin p = load_plugin(plugin_places("RKIT_RTRAIN_CUDA_PLUGIN", RKIT_RTRAIN_CUDA_PLUGIN_NAME, "../lib/rkit"));
  std::string why = fmt::format("rtrain was built without CUDA (no {})", RKIT_RTRAIN_CUDA_PLUGIN_NAME);
  if (p.failure == Plugin::Failure::None) {
    using Factory = Device* (*)(int local_rank, char* error, std::size_t error_size);
    auto factory = reinterpret_cast<Factory>(p.symbol("rkit_rtrain_make_cuda_device"));
    if (!factory)
      throw Error(Exit::Unavailable,
                  fmt::format("--device cuda: {} has no rkit_rtrain_make_cuda_device", p.path.string()));
    char error[512] = {};
    Device* dev = factory(local_rank, error, sizeof error);
    if (!dev) throw Error(Exit::Unavailable, fmt::format("--device cuda: {}", error));
    return std::unique_ptr<Device>(dev);  // the library stays loaded for the process's life
  }
  if (p.failure != Plugin::Failure::NotFound) why = fmt::format("cannot load {}: {}", p.path.string(), p.error);
  throw Error(Exit::Unavailable, "--device cuda: " + why);
}

}  // namespace rkit::rtrain
