#include "gpu_plugin.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "rkit/error.hpp"
#include "rkit/host.hpp"

// tools/rbench/CMakeLists.txt defines RKIT_BENCH_GPU_PLUGIN_NAME ("rbench_gpu.so") and
// RKIT_BENCH_GPU_PLUGIN_DIR ("../lib/rkit": where it is installed, relative to the
// directory of the installed rbench), and RKIT_HAVE_CUDA.

namespace rkit::rbench {
namespace {

namespace fs = std::filesystem;

// What stands in for a GPU suite the plug-in did not provide.
class UnavailableSuite : public Suite {
 public:
  UnavailableSuite(const GpuSuiteName& suite, std::string why)
      : name_(suite.name), description_(suite.description), why_(std::move(why)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  std::string unavailable() const override { return why_; }
  std::vector<Measurement> run(const RunOptions&, const Progress&) override {
    throw Error(Exit::Unavailable, name_ + ": " + why_);
  }

 private:
  std::string name_, description_, why_;
};

// Finds and loads the plug-in. Sets `loaded` to its path when it loaded; returns why not
// otherwise.
std::string find_and_open_plugin(fs::path& loaded) {
  const PluginPlaces places = plugin_places(kGpuPluginEnv, RKIT_BENCH_GPU_PLUGIN_NAME, RKIT_BENCH_GPU_PLUGIN_DIR);
  if (!RKIT_HAVE_CUDA && !places.named) return "built without CUDA (nvcc was not found, or -DRKIT_CUDA=OFF)";
  const Plugin p = load_plugin(places);
  switch (p.failure) {
    case Plugin::Failure::None: loaded = p.path; return {};
    case Plugin::Failure::MissingDependency:
      return "CUDA libraries not found: " + p.error + " (loading " + p.path.string() + ")";
    case Plugin::Failure::Broken: return "GPU plug-in " + p.path.string() + " does not load: " + p.error;
    case Plugin::Failure::NotFound: break;
  }
  return "GPU plug-in " + p.error +
         (places.named ? std::string(" (from ") + kGpuPluginEnv + ")"
                       : std::string(" (") + kGpuPluginEnv + " names another)");
}

}  // namespace

std::vector<std::unique_ptr<Suite>> load_gpu_plugin(const std::function<bool(std::string_view)>& registered) {
  fs::path loaded;
  std::string why = find_and_open_plugin(loaded);
  if (why.empty()) why = "the GPU plug-in " + loaded.string() + " does not provide it";
  std::vector<std::unique_ptr<Suite>> stand_ins;
  for (const GpuSuiteName& suite : kGpuSuites)
    if (!registered(suite.name)) stand_ins.push_back(std::make_unique<UnavailableSuite>(suite, why));
  return stand_ins;
}

}  // namespace rkit::rbench
