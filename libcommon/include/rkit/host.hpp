// File: rkit/host.hpp
//
// Facts about this machine and this process, asked of the kernel in one place, and the
// loader of rkit's plug-ins (shared libraries a tool opens at run time, as rbench's GPU
// suites and rtrain's CUDA device are).
//
//   std::string host = rkit::host_name();              // "gpu07"
//   rkit::Plugin p = rkit::load_plugin(rkit::plugin_places("RKIT_X", "x.so", "../lib/rkit"));
//   if (!p.handle) fail(p.error);
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace rkit {

// This machine's name (gethostname); "" when the kernel will not say.
std::string host_name();

// The kernel, as uname names it: "Linux 6.1.0-18-amd64".
std::string kernel_name();

// The name of user `uid` (the password database's), or its number when it has none.
std::string user_name(std::uint32_t uid);

// Physical memory in bytes; 0 when unknown.
std::uint64_t physical_memory_bytes();

// This program's own executable (/proc/self/exe, resolved); empty when it cannot be read.
std::filesystem::path self_exe();

// Where a plug-in named `file` may be, in the order to try: only $`env` when that is set
// (made absolute: dlopen must not search the library path), else beside the executable
// (the build tree), else in `install_dir` relative to it (the install tree, e.g.
// "../lib/rkit"). `named` says the environment chose.
struct PluginPlaces {
  std::vector<std::filesystem::path> places;
  bool named = false;
};
PluginPlaces plugin_places(const char* env, std::string_view file, std::string_view install_dir);

// A plug-in opened (RTLD_NOW: a missing symbol fails here, not in the middle of a run;
// RTLD_LOCAL; kept open for the process's life), or why not.
struct Plugin {
  enum class Failure {
    None,
    NotFound,           // none of the places holds the file
    MissingDependency,  // the file is there; a library it needs is not
    Broken,             // the file is there and does not load (not a library, a symbol missing)
  };
  void* handle = nullptr;
  std::filesystem::path path;  // the file opened (or that failed to open)
  Failure failure = Failure::None;
  std::string error;  // one line: what the loader said, or the places looked in

  // The symbol `name` of the plug-in, or nullptr.
  void* symbol(const char* name) const;
};
Plugin load_plugin(const PluginPlaces& where);

}  // namespace rkit
