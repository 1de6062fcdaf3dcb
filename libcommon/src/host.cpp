// Host facts and the plug-in loader (rkit/host.hpp).
#include "rkit/host.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pwd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>

namespace rkit {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

std::string kernel_name() {
  utsname u{};
  if (::uname(&u) != 0) return {};
  return std::string(u.sysname) + " " + u.release;
}

std::string user_name(std::uint32_t uid) {
  passwd pw{}, *found = nullptr;
  char buf[4096];
  return ::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found ? found->pw_name : std::to_string(uid);
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
}

std::filesystem::path self_exe() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe;
}

PluginPlaces plugin_places(const char* env, std::string_view file, std::string_view install_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* named = env ? std::getenv(env) : nullptr; named && *named) return {{fs::absolute(named, ec)}, true};
  const fs::path exe = self_exe();
  if (exe.empty()) return {};
  const fs::path dir = exe.parent_path();
  return {{dir / file, (dir / install_dir / file).lexically_normal()}, false};
}

void* Plugin::symbol(const char* name) const { return handle ? ::dlsym(handle, name) : nullptr; }

Plugin load_plugin(const PluginPlaces& where) {
  Plugin p;
  std::error_code ec;
  for (const std::filesystem::path& path : where.places) {
    if (!std::filesystem::exists(path, ec)) continue;
    p.path = path;
    p.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (p.handle) return p;
    const char* said = ::dlerror();
    p.error = said ? said : "unknown error";
    p.error = p.error.substr(0, p.error.find('\n'));
    // dlopen says "FILE: cannot open shared object file" for the file that is missing:
    // when FILE is another than the plug-in, a library the plug-in needs is missing.
    const bool other_file = p.error.rfind(path.string(), 0) != 0;
    p.failure = other_file && p.error.find("cannot open shared object file") != std::string::npos
                    ? Plugin::Failure::MissingDependency
                    : Plugin::Failure::Broken;
    return p;
  }
  p.failure = Plugin::Failure::NotFound;
  std::vector<std::string> looked;
  for (const auto& path : where.places) looked.push_back(path.string());
  p.error = looked.empty() ? std::string("not found (this program's own path, /proc/self/exe, cannot be read)")
                           : fmt::format("not found: {}", fmt::join(looked, ", "));
  return p;
}

}  // namespace rkit
