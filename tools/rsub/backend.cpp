// File: rsub/backend.cpp — what the backends share (backend.hpp): make_backend and how
// they run their commands. The Slurm backend is slurm.cpp, Kubernetes kube_backend.cpp.
#include "backend.hpp"

#include <fmt/format.h>
#include <pwd.h>

#include <chrono>
#include <thread>

#include "rkit/error.hpp"
#include "rkit/process.hpp"

namespace rkit::rsub {

std::unique_ptr<Backend> make_slurm_backend(const BackendConfig& config);
std::unique_ptr<Backend> make_kube_backend(const BackendConfig& config);

namespace {

// The first line of a command's complaint, without its "sbatch: error: " prefix.
std::string message_of(const std::string& program, std::string_view text) {
  text = text.substr(0, text.find('\n'));
  for (std::string_view prefix : {program + ": ", std::string("error: ")})
    if (text.starts_with(prefix)) text.remove_prefix(prefix.size());
  return std::string(text.empty() ? "(no message)" : text);
}

}  // namespace

RunResult run_backend_command(const BackendCall& how, std::vector<std::string> argv,
                              const std::vector<std::pair<std::string, std::string>>& env, const std::string& input,
                              double retry_s) {
  SpawnOptions o;
  const std::string program = argv.front();
  if (how.run_as_uid) {
    passwd pw{}, *found = nullptr;  // the daemon's request threads: the reentrant lookup
    char buf[4096];
    if (::getpwuid_r(*how.run_as_uid, &pw, buf, sizeof buf, &found) != 0 || !found)
      throw Error(Exit::NoPerm, fmt::format("{}: uid {} has no user name", how.who, *how.run_as_uid));
    argv.insert(argv.begin(), {"setpriv", fmt::format("--reuid={}", found->pw_uid),
                               fmt::format("--regid={}", found->pw_gid), "--init-groups", "--"});
    // The user's command gets none of the daemon's environment: a plain PATH, who it
    // is, and what the backend sets (SLURM_CONF ...).
    o.clear_env = true;
    o.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"HOME", found->pw_dir}, {"USER", found->pw_name},
             {"LOGNAME", found->pw_name}};
  }
  o.argv = std::move(argv);
  o.env.insert(o.env.end(), env.begin(), env.end());
  o.in = input.empty() ? Redirect::null() : Redirect::pipe();
  o.out = Redirect::pipe();
  o.err = Redirect::pipe();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(retry_s);
  for (double pause = 0.25;; pause = std::min(pause * 2, 4.0)) {
    RunResult r;
    try {
      r = run(o, 120.0, 5.0, input);
    } catch (const Error& e) {
      throw Error(Exit::Unavailable, fmt::format("{}: {}", how.who, e.what()), "is its client installed and in PATH?");
    }
    if (r.status.success() || !(r.timed_out || how.unreachable(r.err))) return r;
    if (std::chrono::steady_clock::now() + std::chrono::duration<double>(pause) > deadline)
      throw Error(Exit::Unavailable,
                  fmt::format("{}: cannot reach {} ({}: {})", how.who, how.peer, program,
                              r.timed_out ? std::string("timed out") : message_of(program, r.err)),
                  "nothing was changed there; try again when it is back");
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
  }
}

void backend_refused(const BackendCall& how, const std::string& what, const RunResult& r) {
  const std::string message = message_of(what.substr(0, what.find(' ')), r.err.empty() ? r.out : r.err);
  throw Error(Exit::DataErr, fmt::format("{}: {} failed: {}", how.who, what, message));
}

std::unique_ptr<Backend> make_backend(const BackendConfig& config) {
  if (config.kind == BackendKind::Kubernetes) return make_kube_backend(config);
  return make_slurm_backend(config);
}

}  // namespace rkit::rsub
