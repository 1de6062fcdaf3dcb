// File: rtrain/launch.cpp — rtrain launch (launch.hpp): its options, the workers'
// environment, and the entry that readies a run and hands it to this node's agent
// (launch_agents.hpp, which runs the generations of launch_group.hpp).
#include "launch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>

#include "launch_agents.hpp"
#include "rkit/ckpt/archive.hpp"  // rckpt's: a checkpoint is complete when it opens whole
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/process.hpp"
#include "rkit/topology.hpp"
#include "run_secret.hpp"

namespace rkit::rtrain {

std::vector<std::pair<std::string, std::string>> worker_env(const LaunchOptions& o, int local_rank, const Layout& l,
                                                            int restart_count, const std::string& run_id,
                                                            const std::string& heartbeat_file,
                                                            const std::string& resume_from,
                                                            const std::string& run_secret) {
  const std::string rank = std::to_string(l.offset + local_rank), world = std::to_string(l.world);
  std::vector<std::pair<std::string, std::string>> env = {{"RANK", rank},
                                                          {"LOCAL_RANK", std::to_string(local_rank)},
                                                          {"GROUP_RANK", std::to_string(l.node_rank)},
                                                          {"ROLE_RANK", rank},
                                                          {"ROLE_NAME", "default"},
                                                          {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
                                                          {"WORLD_SIZE", world},
                                                          {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
                                                          {"ROLE_WORLD_SIZE", world},
                                                          {"MASTER_ADDR", o.master_addr},
                                                          {"MASTER_PORT", std::to_string(l.master_port)},
                                                          {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count)},
                                                          {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
                                                          {"TORCHELASTIC_RUN_ID", run_id},
                                                          {"RKIT_HEARTBEAT_FILE", heartbeat_file}};
  if (!run_secret.empty()) env.emplace_back("RKIT_RUN_SECRET", run_secret);
  if (!o.run_record.empty()) {
    env.emplace_back("RKIT_RUN_RECORD", o.run_record);
    env.emplace_back("RKIT_RUN_STORE", o.run_store);
    env.emplace_back("RKIT_METRICS_FILE",
                     fmt::format("{}/{}{}.jsonl", o.metrics_dir, metrics_file_prefix(o.run_record), rank));
    if (!o.project_dir.empty()) env.emplace_back("RKIT_PROJECT_DIR", o.project_dir);
  }
  if (!o.ckpt_dir.empty()) {
    env.emplace_back("RKIT_CKPT_DIR", o.ckpt_dir);
    env.emplace_back("RKIT_RESUME_FROM", resume_from);
  }
  if (o.nproc > 1 && !std::getenv("OMP_NUM_THREADS")) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

int nproc_per_node(const std::string& text) {
  constexpr int kMax = kMaxNproc;
  if (text == "auto") {
    const Topology t = probe(ProbeOptions{});
    return std::clamp(static_cast<int>(t.gpus.empty() ? t.cores.size() : t.gpus.size()), 1, kMax);
  }
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > kMax)
    throw Error(Exit::Usage, fmt::format("--nproc-per-node {}: must be 1 to {}, or auto", text, kMax));
  return n;
}

std::string newest_checkpoint(const std::string& dir) {
  std::vector<std::pair<std::filesystem::file_time_type, std::string>> archives;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".rkpt" && entry.is_regular_file(ec))
      archives.emplace_back(entry.last_write_time(ec), entry.path().string());
  std::sort(archives.rbegin(), archives.rend());
  for (const auto& [_, path] : archives)
    if (rckpt::Archive::complete(path)) return path;
  return {};
}

std::vector<WorkerPlacement> load_placement(const std::string& path, int nproc) {
  const std::string source = input_name(path);
  std::vector<std::optional<WorkerPlacement>> by_rank(static_cast<std::size_t>(nproc));
  std::istringstream in(read_file(path, 1 << 20));
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", source, line_no);
    const Json rec = parse_json(line, where);
    try {
      if (rec.value("schema", "") != "rkit.placement.v1")
        throw Error(Exit::DataErr, fmt::format("{}: not an rkit.placement.v1 record (rtop place --json)", where));
      const int rank = rec.at("rank").get<int>();
      if (rank < 0 || rank >= nproc) continue;  // a rank of another node's share
      by_rank[static_cast<std::size_t>(rank)] =
          WorkerPlacement{rec.at("pus").get<std::vector<int>>(), rec.value("gpus", std::vector<int>{})};
    } catch (const Json::exception& e) {
      throw Error(Exit::DataErr, fmt::format("{}: {}", where, e.what()));
    }
  }
  std::vector<WorkerPlacement> out;
  for (int rank = 0; rank < nproc; ++rank) {
    if (!by_rank[static_cast<std::size_t>(rank)])
      throw Error(Exit::DataErr,
                  fmt::format("{}: no placement for local rank {} (--nproc-per-node {})", source, rank, nproc),
                  fmt::format("rtop place --ranks {} --json", nproc));
    out.push_back(*by_rank[static_cast<std::size_t>(rank)]);
  }
  return out;
}

void slurm_defaults(LaunchOptions& o, bool nnodes_given, bool node_rank_given, bool master_addr_given) {
  const char* nnodes = std::getenv("SLURM_NNODES");
  const char* node_id = std::getenv("SLURM_NODEID");
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  if (!nnodes || !node_id || !nodelist) return;
  if (!nnodes_given) o.nnodes = std::max(1, std::atoi(nnodes));
  if (!node_rank_given) o.node_rank = std::atoi(node_id);
  if (master_addr_given) return;
  // Node 0 is the allocation's first host: its name from Slurm's own expansion of the
  // node list ("vm[01-04]"), then its IPv4 address, which the rendezvous needs.
  SpawnOptions s;
  s.argv = {"scontrol", "show", "hostnames", nodelist};
  s.out = Redirect::pipe();
  s.err = Redirect::pipe();
  const RunResult r = run(s, 30);
  const std::string host = r.out.substr(0, r.out.find('\n'));
  if (!r.status.success() || host.empty())
    throw Error(Exit::Unavailable,
                fmt::format("under Slurm: scontrol show hostnames {}: {}", nodelist, r.err.substr(0, r.err.find('\n'))),
                "pass --master-addr");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    throw Error(Exit::Unavailable, fmt::format("under Slurm: node 0 ({}): {}", host, ::gai_strerror(rc)),
                "pass --master-addr");
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(found);
  o.master_addr = text;
}

namespace {

// The run's secret: --secret-file, else the environment's (RKIT_RUN_SECRET, then
// RKIT_RUN_SECRET_FILE), else, on one node only, a new one: the agents of several nodes
// cannot agree on one they did not share beforehand.
RunSecret run_secret(const LaunchOptions& o) {
  if (!o.secret_file.empty()) return RunSecret::from_file(o.secret_file);
  if (auto s = RunSecret::from_env()) return *s;
  if (o.nnodes > 1)
    throw Error(
        Exit::Usage,
        fmt::format("--nnodes {} needs the run's secret on every node: --secret-file, RKIT_RUN_SECRET_FILE or "
                    "RKIT_RUN_SECRET",
                    o.nnodes),
        "e.g. (umask 077; openssl rand -hex 32 >~/.rtrain-secret), then --secret-file ~/.rtrain-secret on every node");
  return RunSecret::generate();
}

// A fresh private folder (0700, made by mkdtemp: it cannot have been there before) for
// the heartbeat files, under $XDG_RUNTIME_DIR, else $TMPDIR, else /tmp.
std::string private_dir(const std::string& run_id, int node_rank) {
  std::string base;
  struct stat sb {};
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x == '/' && ::stat(x, &sb) == 0 && S_ISDIR(sb.st_mode))
    base = x;
  else
    base = std::filesystem::temp_directory_path().string();
  std::string id;  // the run id as far as it is harmless in a file name
  for (char c : run_id.substr(0, 32))
    id += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  std::string path = fmt::format("{}/rtrain-{}-{}.XXXXXX", base, id, node_rank);
  if (!::mkdtemp(path.data())) throw system_error("create a heartbeat folder in " + base, errno);
  return path;
}

}  // namespace

int launch(const LaunchOptions& options) {
  LaunchOptions o = options;
  if (o.command.empty()) throw Error(Exit::Usage, "nothing to run: rtrain launch [options] -- COMMAND");
  if (o.nproc < 1 || o.nproc > kMaxNproc || o.nnodes < 1 || o.nnodes > kMaxNodes)
    throw Error(Exit::Usage, fmt::format("{} workers on each of {} nodes: must be 1 to {} on 1 to {}", o.nproc,
                                         o.nnodes, kMaxNproc, kMaxNodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw Error(Exit::Usage,
                fmt::format("--node-rank {}: must be 0 to {} for --nnodes {}", o.node_rank, o.nnodes - 1, o.nnodes));
  if (o.nnodes > 1 && o.master_port == 0)
    throw Error(Exit::Usage,
                fmt::format("--nnodes {} needs --master-port (not 0): the other nodes' agents must know node 0's port",
                            o.nnodes));
  if (o.nnodes > 1) {
    in_addr a{};
    if (::inet_pton(AF_INET, o.master_addr.c_str(), &a) != 1)
      throw Error(Exit::Usage, fmt::format("--master-addr {}: not an IPv4 address", o.master_addr));
  }
  const RunSecret secret = run_secret(o);
  const std::string run_id = o.run_id.empty() ? fmt::format("{:08x}", std::random_device{}()) : o.run_id;
  std::string hb_dir;
  std::error_code ec;
  if (o.log_dir.empty()) {
    hb_dir = private_dir(run_id, o.node_rank);
  } else {
    hb_dir = o.log_dir;
    std::filesystem::create_directories(hb_dir, ec);
    if (ec) throw Error(Exit::IoErr, "create " + hb_dir + ": " + ec.message());
  }
  // Without --log-dir the heartbeat files live in a folder of their own, removed at the end.
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{o.log_dir.empty() ? hb_dir : std::string()};
  // The workers' metrics files are always in a private folder (a --log-dir may be shared:
  // another user must not plant a file there that the record reads, or a FIFO a worker
  // blocks on). They are copied into the record as they come, so the folder goes at the end.
  const bool tracking = o.track.enabled && o.node_rank == 0;
  Cleanup metrics_cleanup{tracking && !o.log_dir.empty() ? private_dir(run_id + "-metrics", o.node_rank) : ""};
  const std::string metrics_dir = metrics_cleanup.dir.empty() ? hb_dir : metrics_cleanup.dir;
  const UniqueFd hb_fd(::open(hb_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!hb_fd) throw system_error("open " + hb_dir, errno);
  if (!o.ckpt_dir.empty()) {
    std::filesystem::create_directories(o.ckpt_dir, ec);
    if (ec) throw Error(Exit::IoErr, "create " + o.ckpt_dir + ": " + ec.message());
  }
  // The run's record, on node 0: the workers' metrics files sit beside their heartbeats.
  std::optional<LaunchTracker> tracker;
  if (tracking) {
    runs::NewRun d;
    d.params = {
        {"launch.nproc_per_node", o.nproc}, {"launch.nnodes", o.nnodes}, {"launch.max_restarts", o.max_restarts}};
    d.command = o.command;
    d.code = code_revision(std::filesystem::current_path().string());
    d.system = system_facts();
    d.job = job_of_environment();
    tracker.emplace(o.track, std::move(d), metrics_dir, o.nproc);
    o.run_record = tracker->id();
    o.run_store = tracker->store_path();
    o.metrics_dir = metrics_dir;
    if (!o.track.project.empty()) o.project_dir = std::filesystem::absolute(o.track.project).string();
  }
  Run run{o, run_id, hb_dir, hb_fd.get(), secret, Events(o.events_path), {}, {}};
  if (tracker) run.tick = [&] { tracker->poll(); };
  int code = 0;
  try {
    code = o.node_rank == 0 ? lead(run) : follow(run);
  } catch (const Error& e) {
    if (tracker) tracker->finish(static_cast<int>(e.code()), run.forward.last_signal() != 0, {{"error", e.what()}});
    throw;
  }
  if (tracker) {
    tracker->finish(code, run.forward.last_signal() != 0, {});
    std::cerr << fmt::format("rtrain: run {} recorded\n", tracker->id());
  }
  return code;
}

}  // namespace rkit::rtrain
