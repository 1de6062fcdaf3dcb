#include "gpu_plugin.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "rkit/error.hpp"

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

std::string first_line(const char* text) {
  std::string s = text ? text : "unknown error";
  return s.substr(0, s.find('\n'));
}

// Where the plug-in may be when $RKIT_BENCH_GPU_PLUGIN is not set: beside the executable,
// then in the install tree; empty where /proc/self/exe cannot be read.
std::vector<fs::path> default_locations() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const fs::path dir = exe.parent_path();
  return {dir / RKIT_BENCH_GPU_PLUGIN_NAME,
          (dir / RKIT_BENCH_GPU_PLUGIN_DIR / RKIT_BENCH_GPU_PLUGIN_NAME).lexically_normal()};
}

// Loads the plug-in at `path`, a file that exists (RTLD_NOW: a symbol rbench lacks fails
// here, not in the middle of a run); "" when loaded, else why not.
std::string open_plugin(const fs::path& path) {
  if (::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return {};  // kept open for the process's life
  const std::string err = first_line(::dlerror());
  // A library the plug-in needs is missing when the error names another file than it.
  if (err.find("cannot open shared object file") != std::string::npos && err.rfind(path.string(), 0) != 0)
    return "CUDA libraries not found: " + err + " (loading " + path.string() + ")";
  return "GPU plug-in " + path.string() + " does not load: " + err;
}

// Finds and loads the plug-in. Sets `loaded` to its path when it loaded; returns why not
// otherwise.
std::string find_and_open_plugin(fs::path& loaded) {
  const char* env = std::getenv(kGpuPluginEnv);
  const bool named = env && *env;
  std::vector<fs::path> places;
  std::error_code ec;
  if (named)
    places = {fs::absolute(env, ec)};  // absolute: dlopen must not search the library path
  else if (RKIT_HAVE_CUDA)
    places = default_locations();
  else
    return "built without CUDA (nvcc was not found, or -DRKIT_CUDA=OFF)";
  for (const fs::path& path : places) {
    if (!fs::exists(path, ec)) continue;
    std::string why = open_plugin(path);
    if (why.empty()) loaded = path;
    return why;
  }
  std::string looked;
  for (const fs::path& path : places) looked += (looked.empty() ? "" : ", ") + path.string();
  return "GPU plug-in not found: " + looked +
         (named ? std::string(" (from ") + kGpuPluginEnv + ")" : std::string(" (") + kGpuPluginEnv + " names another)");
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
