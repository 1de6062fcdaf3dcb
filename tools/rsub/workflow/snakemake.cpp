// File: rsub/workflow/snakemake.cpp — rsub as Snakemake's cluster (snakemake.hpp).
#include "workflow/snakemake.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "commands/commands.hpp"
#include "core/store.hpp"
#include "daemon/protocol.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/host.hpp"
#include "rkit/process.hpp"

extern char** environ;

namespace rkit::rsub {

namespace {

constexpr std::string_view kTool = "rsub snakemake";

std::string current_dir() {
  char cwd[PATH_MAX];
  return ::getcwd(cwd, sizeof cwd) ? std::string(cwd) : std::string(".");
}

std::string workflow_name() {
  const char* named = std::getenv("RSUB_WORKFLOW");
  return named && *named ? std::string(named) : default_workflow(current_dir());
}

// A resource's number (Snakemake passes integers; a float or a numeric string is taken too).
double resource_number(const Json& value, std::string_view key) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (!text.empty() && end && *end == '\0') return v;
  }
  throw Error(Exit::DataErr, fmt::format("job script: resource {} must be a number, not {}", key, value.dump()));
}

int whole(double v, std::string_view key, int min) {
  if (!std::isfinite(v) || v < min || v > INT_MAX || v != std::floor(v))
    throw Error(Exit::DataErr, fmt::format("job script: resource {} must be a whole number, at least {}", key, min));
  return static_cast<int>(v);
}

std::string resource_text(const Json& value, std::string_view key) {
  if (value.is_string()) return value.get<std::string>();
  throw Error(Exit::DataErr, fmt::format("job script: resource {} must be text, not {}", key, value.dump()));
}

// The daemon's JSON output, one record a line.
std::vector<Json> records_of(const Answer& a) {
  std::vector<Json> records;
  for (std::size_t at = 0; at < a.out.size();) {
    const std::size_t end = std::min(a.out.find('\n', at), a.out.size());
    if (end > at)
      records.push_back(parse_json(std::string_view(a.out).substr(at, end - at), "the rsub daemon's answer"));
    at = end + 1;
  }
  return records;
}

Json first_record(const Answer& a) {
  std::vector<Json> records = records_of(a);
  if (records.empty()) throw Error(Exit::Software, "the rsub daemon's answer has no record");
  return std::move(records.front());
}

std::map<std::string, std::string> states_of(const Answer& a) {
  std::map<std::string, std::string> states;
  for (const Json& job : records_of(a)) states[job.value("id", "")] = job.value("state", "");
  return states;
}

// The sidecar's answer to a frame of `kind` ('q': the status of job `id`; 's': job `id`
// was submitted by this run), or nullopt when there is no sidecar to ask.
std::optional<std::string> ask_sidecar(const SidecarVars& vars, char kind, const std::string& id) {
  const int fd = connect_daemon(vars.socket, ::geteuid());  // refuses a listener of another user
  if (fd < 0) return std::nullopt;
  UniqueFd conn(fd);
  if (!write_frame(fd, kind, id.data(), id.size())) return std::nullopt;
  std::string word;
  const auto answer = read_frame(fd, word, 64, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  if (answer != 'o') return std::nullopt;
  return word;
}

// Snakemake stops its sidecar when it ends, however it ends (its Ctrl-C too: the profile
// leaves --cluster-cancel out, since Snakemake 7.21 given both never exits after one);
// this run's jobs that still wait or run are cancelled then: those of the workflow that
// its submits named to the sidecar, and those submitted from this folder since it started
// (a job in a container, on Kubernetes, has no folder here).
void cancel_run(const AskDaemon& ask, const std::string& workflow, double started_s,
                const std::set<std::string>& submitted) {
  try {
    const Answer active = ask({{"cmd", "ls"}, {"workflow", workflow}, {"format", "json"}});
    if (active.code != 0) throw Error(Exit::Unavailable, active.err);
    const Json cwd = bytes_json(current_dir());  // as records write the workdir
    std::vector<std::string> ids;
    for (const Json& job : records_of(active))
      if (std::string id = job.value("id", "");
          submitted.count(id) || (job.value("submit_unix_s", 0.0) >= started_s && job.value("workdir", Json()) == cwd))
        ids.push_back(std::move(id));
    if (ids.empty()) return;
    const Answer a = ask({{"cmd", "cancel"}, {"ids", ids}});
    std::cerr << a.err;
  } catch (const Error& e) {
    warn(kTool, fmt::format("workflow {}: its jobs were not cancelled: {}", workflow, e.what()), std::cerr);
  }
}

}  // namespace

std::string default_workflow(const std::string& cwd) {
  const std::string name = base_name(cwd);
  return name.empty() || name == "/" || name == "." ? std::string("workflow") : valid_name(name);
}

JobSpec spec_of_jobscript(std::string_view script, const std::string& workflow, const std::string& quick) {
  constexpr std::string_view kMark = "# properties = ";
  std::size_t at = 0;
  while (at < script.size() && script.compare(at, kMark.size(), kMark) != 0) {
    at = script.find('\n', at);
    at = at == std::string_view::npos ? script.size() : at + 1;
  }
  if (at >= script.size())
    throw Error(Exit::DataErr, "job script: no \"# properties = \" line (is it one that Snakemake wrote?)");
  const std::size_t end = std::min(script.find('\n', at), script.size());
  const Json props = parse_json(script.substr(at + kMark.size(), end - at - kMark.size()), "job script properties");
  if (!props.is_object()) throw Error(Exit::DataErr, "job script: its properties are not a JSON object");

  JobSpec spec;
  spec.workflow = workflow;
  const bool group = props.value("type", "single") == "group";
  spec.rule = props.value(group ? "groupid" : "rule", "");
  spec.name = spec.rule.empty() ? "snakejob" : spec.rule;
  spec.command = {"/bin/sh", "-c", std::string(script)};
  constexpr std::string_view kModule = " -m snakemake ";
  if (const std::size_t m = script.find(kModule, end); !quick.empty() && m != std::string_view::npos) {
    // Where the job's machine lacks the file (another filesystem), plain -m snakemake.
    const std::string quoted = sh_quote(quick);
    spec.command[2] =
        fmt::format("{}\nif [ -r {} ]; then set -- {}; else set -- -m snakemake; fi{} \"$@\" {}", script.substr(0, end),
                    quoted, quoted, script.substr(end, m - end), script.substr(m + kModule.size()));
  }
  if (const auto threads = props.find("threads"); threads != props.end())
    spec.resources.cpus_per_task = whole(resource_number(*threads, "threads"), "threads", 1);
  const auto resources = props.find("resources");
  if (resources != props.end() && resources->is_object()) {
    std::optional<double> mem_mb, mem_mib;  // Snakemake 7.21 gives both (mem_mib from mem_mb)
    for (const auto& [key, value] : resources->items()) {
      if (key == "mem_mb") {
        mem_mb = resource_number(value, key);
      } else if (key == "mem_mib") {
        mem_mib = resource_number(value, key);
      } else if (key == "gpus" || key == "gpu") {
        spec.resources.gpus_per_task = whole(resource_number(value, key), key, 0);
      } else if (key == "runtime") {
        const double minutes = resource_number(value, key);
        if (!std::isfinite(minutes) || minutes < 0)
          throw Error(Exit::DataErr, "job script: resource runtime must be minutes, at least 0");
        if (minutes > 0) spec.time_limit_s = minutes * 60;
      } else if (key == "tenant") {
        spec.tenant = resource_text(value, key);
      } else if (key == "project") {
        spec.project = resource_text(value, key);
      } else if (key == "backend") {
        spec.backend = resource_text(value, key);
      } else if (key == "partition") {
        spec.slurm.partition = resource_text(value, key);
      } else if (key == "gpu_type") {
        spec.resources.gpu_type = resource_text(value, key);
      }
    }
    if (mem_mb || mem_mib) {
      const double bytes = mem_mb ? *mem_mb * 1e6 : *mem_mib * 1048576.0;
      if (!std::isfinite(bytes) || bytes < 0 || bytes > 1e18)
        throw Error(Exit::DataErr,
                    fmt::format("job script: resource {} must be at least 0", mem_mb ? "mem_mb" : "mem_mib"));
      spec.resources.memory_bytes = static_cast<std::uint64_t>(bytes);
    }
  }
  apply_overrides(spec, {});  // validates it as a submit would
  return spec;
}

std::string_view snakemake_status_word(std::string_view state) {
  if (state == "COMPLETED") return "success";
  if (state == "PENDING" || state == "RUNNING" || state.empty()) return "running";
  return "failed";  // FAILED, CANCELLED, TIMEOUT, LOST, OUT_OF_MEMORY
}

std::optional<SidecarVars> sidecar_vars(const char* env_value) {
  if (!env_value || !*env_value) return std::nullopt;
  try {
    const Json j = parse_json(env_value, "SNAKEMAKE_CLUSTER_SIDECAR_VARS");
    SidecarVars v{j.value("socket", ""), j.value("workflow", "")};
    if (v.socket.empty() || v.workflow.empty()) return std::nullopt;
    return v;
  } catch (const Error&) {
    return std::nullopt;
  }
}

int snakemake_submit(const std::string& jobscript, const AskDaemon& ask, std::ostream& out) {
  const auto vars = sidecar_vars(std::getenv("SNAKEMAKE_CLUSTER_SIDECAR_VARS"));
  std::string quick;
  if (const char* off = std::getenv("RSUB_SNAKEMAKE_QUICK"); !off || std::string_view(off) != "0")
    if (const std::string profile = snakemake_profile(); !profile.empty()) quick = profile + "/rsub-smk-job.py";
  if (!quick.empty() && ::access(quick.c_str(), R_OK) != 0) quick.clear();
  const JobSpec spec =
      spec_of_jobscript(read_file(jobscript, 64u << 20), vars ? vars->workflow : workflow_name(), quick);
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) environment.emplace_back(*e);
  Json request = submit_request(spec, false, environment);
  request["format"] = "json";
  const Answer a = ask(std::move(request));
  std::cerr << a.err;
  if (a.code != 0) return a.code;
  const std::string id = first_record(a).value("id", "");
  if (vars) {  // so that the sidecar cancels it when snakemake ends
    try {
      if (!ask_sidecar(*vars, 's', id)) warn(kTool, fmt::format("job {}: the sidecar did not answer", id), std::cerr);
    } catch (const Error& e) {
      warn(kTool, fmt::format("job {}: the sidecar did not answer ({})", id, e.what()), std::cerr);
    }
  }
  out << id << '\n';
  return 0;
}

int snakemake_status(const std::string& id, const AskDaemon& ask, std::ostream& out) {
  if (const auto vars = sidecar_vars(std::getenv("SNAKEMAKE_CLUSTER_SIDECAR_VARS"))) {
    try {
      if (const auto word = ask_sidecar(*vars, 'q', id)) {
        out << *word << '\n';
        return 0;
      }
    } catch (const Error& e) {
      warn(kTool, fmt::format("the sidecar did not answer ({}): asking the daemon", e.what()), std::cerr);
    }
  }
  std::string_view word = "running";  // whenever it cannot tell: a non-zero exit ends the workflow
  try {
    const Answer a = ask({{"cmd", "show"}, {"ids", {id}}, {"format", "json"}});
    if (a.code == 0) {
      word = snakemake_status_word(first_record(a).value("state", ""));
    } else if (a.code == static_cast<int>(Exit::NoInput) || a.code == static_cast<int>(Exit::Usage)) {
      word = "failed";  // no such job: it cannot succeed
      warn(kTool, fmt::format("job {}: rsub has no such job; saying failed", id), std::cerr);
    } else {
      std::cerr << a.err;
    }
  } catch (const Error& e) {
    warn(kTool, fmt::format("job {}: {}; saying running", id, e.what()), std::cerr);
  }
  out << word << '\n';
  return 0;
}

int snakemake_cancel(const std::vector<std::string>& ids, const AskDaemon& ask) {
  const Answer a = ask({{"cmd", "cancel"}, {"ids", ids}});
  std::cerr << a.err;
  return a.code;
}

std::string_view RoundCache::status(const std::string& id) {
  // A job asked about again: a new round. A job the last query did not have (submitted
  // after it): once, unless a round already queried for one.
  const bool again = asked_.count(id) > 0;
  const bool unknown = !states_.count(id) && !queried_for_unknown_;
  if (queries_ == 0 || again || unknown) {
    ++queries_;
    if (auto states = query_()) states_ = std::move(*states);
    asked_.clear();
    queried_for_unknown_ = !again && unknown;
  }
  asked_.insert(id);
  const auto it = states_.find(id);
  return it == states_.end() ? std::string_view("running") : snakemake_status_word(it->second);
}

int snakemake_sidecar(const AskDaemon& ask, std::ostream& out) {
  const std::string workflow = workflow_name();
  const char* base = std::getenv("XDG_RUNTIME_DIR");
  if (!base || !*base) base = std::getenv("TMPDIR");
  std::string dir = fmt::format("{}/rsub-sidecar.XXXXXX", base && *base ? base : "/tmp");
  if (!::mkdtemp(dir.data())) throw system_error("create a folder under " + parent_dir(dir), errno);
  const std::string path = dir + "/socket";
  struct Cleanup {
    std::string dir, path;
    ~Cleanup() {
      ::unlink(path.c_str());
      ::rmdir(dir.c_str());
    }
  } cleanup{dir, path};

  // Snakemake stops its sidecar with SIGTERM; its death ends us too.
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, s);
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  UniqueFd signals(::signalfd(-1, &stop, SFD_CLOEXEC));
  if (signals.get() < 0) throw system_error("signalfd", errno);
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  const double started_s = now_s() - 1;  // every job of this run is submitted after
  if (::getppid() != parent) return 0;

  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t length = 0;
  const sockaddr_un address = unix_address(path, length);
  if (listener.get() < 0 || ::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      ::listen(listener.get(), 128) != 0)
    throw system_error("listen on " + path, errno);
  out << Json{{"socket", path}, {"workflow", workflow}}.dump() << std::endl;

  RoundCache cache([&]() -> std::optional<std::map<std::string, std::string>> {
    try {
      const Answer a = ask({{"cmd", "ls"}, {"all", true}, {"workflow", workflow}, {"format", "json"}});
      if (a.code == 0) return states_of(a);
      warn(kTool, fmt::format("workflow {}: the daemon answered {}: {}", workflow, a.code, a.err), std::cerr);
    } catch (const Error& e) {
      warn(kTool, fmt::format("workflow {}: {}", workflow, e.what()), std::cerr);
    }
    return std::nullopt;
  });
  std::set<std::string> submitted;  // the ids this run's submits named
  constexpr std::size_t kMaxSubmitted = 1 << 20;
  bool full_warned = false;
  for (;;) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {signals.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw system_error("poll", errno);
    }
    if (fds[1].revents) {
      cancel_run(ask, workflow, started_s, submitted);
      return 0;
    }
    if (!(fds[0].revents & POLLIN)) continue;
    UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) continue;
    try {
      if (peer_of(conn.get()).uid != ::geteuid()) continue;  // the folder is ours alone; refuse anyone else
      std::string id;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      const auto kind = read_frame(conn.get(), id, 64, deadline);
      if (kind == 's') {
        if (id.empty()) continue;
        if (submitted.size() < kMaxSubmitted) {
          submitted.insert(id);
        } else if (!full_warned) {
          full_warned = true;
          warn(kTool,
               fmt::format("workflow {}: more than {} jobs; later ones are cancelled only from this folder", workflow,
                           kMaxSubmitted),
               std::cerr);
        }
        write_frame(conn.get(), 'o', "ok", 2);
      } else if (kind == 'q') {
        const std::string_view word = cache.status(id);
        write_frame(conn.get(), 'o', word.data(), word.size());
      }
    } catch (const Error& e) {
      warn(kTool, e.what(), std::cerr);
    }
  }
}

std::string snakemake_profile() {
  for (const auto& place : plugin_places("RSUB_SNAKEMAKE_PROFILE", "snakemake/rkit", "../share/rkit").places)
    if (::access((place / "config.yaml").c_str(), R_OK) == 0) return place.string();
  return {};
}

void run_workflow(const std::vector<std::string>& args) {
  const std::string profile = snakemake_profile();
  if (profile.empty()) {
    const char* named = std::getenv("RSUB_SNAKEMAKE_PROFILE");
    throw Error(
        Exit::Unavailable, "rkit's Snakemake profile is not installed (no snakemake/rkit/config.yaml)",
        named && *named ? "RSUB_SNAKEMAKE_PROFILE names a folder without config.yaml" : "make install installs it");
  }
  if (const auto exe = self_exe(); !exe.empty()) {
    const char* path = std::getenv("PATH");
    const std::string mine = exe.parent_path().string() + (path && *path ? ":" + std::string(path) : "");
    ::setenv("PATH", mine.c_str(), 1);
  }
  ::setenv("CI", "true", 0);
  std::vector<std::string> argv{"snakemake", "--profile", profile};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::cout.flush();
  ::execvp("snakemake", c_argv.data());
  const int e = errno;
  throw Error(e == ENOENT ? Exit::Unavailable : Exit::Software, fmt::format("run snakemake: {}", std::strerror(e)),
              e == ENOENT ? "install Snakemake 7 (Debian: apt-get install snakemake)" : "");
}

}  // namespace rkit::rsub
