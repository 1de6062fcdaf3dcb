#include "suite.hpp"

#include "gpu_plugin.hpp"
#include "rkit/cpus.hpp"
#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hwloc.h>

#include <algorithm>
#include <iostream>
#include <mutex>

namespace rkit::rbench {
namespace {

// The registered suites, as registered so far (rbench's own, at start-up).
std::vector<std::unique_ptr<Suite>>& storage() {
  static std::vector<std::unique_ptr<Suite>> all;
  return all;
}

Suite* find_registered(std::string_view name) {
  for (auto& s : storage())
    if (s->name() == name) return s.get();
  return nullptr;
}

// Every suite: rbench's own, then the GPU plug-in's (whose registrars run as it loads)
// or their stand-ins. Loads the plug-in on first use only, so that compare, report and
// the workers of CPU suites do not pay for loading CUDA's libraries.
std::vector<std::unique_ptr<Suite>>& all_suites() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto& stand_in : load_gpu_plugin([](std::string_view name) { return find_registered(name) != nullptr; }))
      storage().push_back(std::move(stand_in));
  });
  return storage();
}

std::vector<Suite*> by_name(const std::vector<std::unique_ptr<Suite>>& all) {
  std::vector<Suite*> out;
  for (auto& s : all) out.push_back(s.get());
  std::sort(out.begin(), out.end(), [](Suite* a, Suite* b) { return a->name() < b->name(); });
  return out;
}

// Whether a SUITE argument selects the suite called `suite`: its name, or a prefix before a dot.
bool selects(std::string_view name, std::string_view suite) {
  return suite == name ||
         (suite.size() > name.size() && suite.substr(0, name.size()) == name && suite[name.size()] == '.');
}

}  // namespace

Registrar::Registrar(std::unique_ptr<Suite> suite) { storage().push_back(std::move(suite)); }

std::vector<Suite*> suites() { return by_name(all_suites()); }

Suite* find_suite(const std::string& name) {
  if (Suite* own = find_registered(name)) return own;  // a CPU suite's worker needs no plug-in
  all_suites();
  return find_registered(name);
}

std::vector<Suite*> select_suites(const std::vector<std::string>& names) {
  // The plug-in is hundreds of MB of CUDA libraries: loaded only when a name may need it.
  auto needs_plugin = [](const std::string& name) {
    for (const GpuSuiteName& gpu : kGpuSuites)
      if (selects(name, gpu.name)) return true;
    return std::none_of(storage().begin(), storage().end(), [&](auto& s) { return selects(name, s->name()); });
  };
  const bool load = names.empty() || std::any_of(names.begin(), names.end(), needs_plugin);
  std::vector<Suite*> all = load ? suites() : by_name(storage());
  if (names.empty()) return all;
  std::vector<Suite*> out;
  for (const auto& name : names) {
    bool found = false;
    for (Suite* s : all)
      if (selects(name, s->name())) {
        if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
        found = true;
      }
    if (!found) {
      std::vector<std::string> known;
      for (Suite* s : all) known.push_back(s->name());
      throw Error(Exit::Usage, fmt::format("unknown suite '{}' (known: {})", name, fmt::join(known, ", ")));
    }
  }
  return out;
}

std::size_t run_suites(const std::vector<Suite*>& chosen, const RunOptions& opt, const Progress& progress,
                       const std::function<void(const Suite&, const Measurement&)>& result,
                       const std::function<void(const Suite&, const std::string& why)>& skipped) {
  std::size_t finished = 0;
  for (Suite* s : chosen) {
    check_interrupted();
    std::vector<Measurement> measurements;
    try {
      measurements = s->run(opt, progress);
    } catch (const Error& e) {
      if (e.code() != Exit::Unavailable) throw;
      std::string why = e.what();
      if (const std::string own = s->name() + ": "; why.rfind(own, 0) == 0) why.erase(0, own.size());
      if (!e.hint().empty()) why += " (hint: " + e.hint() + ")";
      if (skipped) skipped(*s, why);
      continue;
    }
    for (const Measurement& m : measurements) result(*s, m);
    ++finished;
  }
  return finished;
}

int Suite::worker(const std::vector<std::string>&) { throw Error(Exit::Usage, name() + " starts no worker processes"); }

int run_worker(int argc, char** argv) {
  try {
    Suite* suite = argc > 0 ? find_suite(argv[0]) : nullptr;
    if (!suite)
      throw Error(Exit::Usage, std::string(kWorkerCommand) + ": no such suite: " + (argc > 0 ? argv[0] : "(none)"));
    return suite->worker(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    return report_error("rbench", e, std::cerr);
  }
}

std::vector<double> time_repetitions(int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(std::max(reps, 0)));
  for (int i = 0; i < reps; ++i) {
    check_interrupted();  // Ctrl-C stops a long suite between repetitions
    auto start = std::chrono::steady_clock::now();
    f();
    out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return out;
}

}  // namespace rkit::rbench
