// File: rtrain/launch.cpp — rtrain launch on one node (launch.hpp).
#include "launch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include "rkit/ckpt/archive.hpp"  // rckpt's: a checkpoint is complete when it opens whole
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/process.hpp"
#include "rkit/topology.hpp"
#include "run_secret.hpp"
#include "tcp_store.hpp"

namespace rkit::rtrain {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// A port nobody listens on now at `addr`, as torchrun picks one for --master-port 0.
int free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &res); rc != 0)
    throw Error(Exit::Unavailable, fmt::format("pick a free port on {}: {}", addr, ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  int err = EADDRNOTAVAIL;
  for (addrinfo* a = res; a; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (!fd || ::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      err = errno;
      continue;
    }
    return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  }
  throw system_error("pick a free port on " + addr, err);
}

class Events {
 public:
  explicit Events(const std::string& path) {
    if (path.empty()) return;
    if (path == "-")
      out_ = &std::cout;
    else {
      file_.open(path, std::ios::app);
      if (!file_) throw system_error("open " + path, errno);
      out_ = &file_;
    }
  }
  void emit(const std::string& event, Json fields) {
    if (!out_) return;
    Json rec{{"schema", "rkit.train.event.v1"}, {"event", event}, {"time_unix_s", now_s()}};
    rec.update(fields);
    *out_ << to_json_line(rec) << '\n' << std::flush;
  }

 private:
  std::ofstream file_;
  std::ostream* out_ = nullptr;
};

// One worker of a generation: its process, its output pipes, the tail of its stderr.
struct Worker {
  int rank = 0;
  std::optional<Child> child;
  std::string out_buf, err_buf;
  std::deque<std::string> err_tail;
  std::ofstream out_log, err_log;
  std::string heartbeat, heartbeat_name;  // the path the worker gets; the name in the heartbeat folder
  double started = 0;
  std::optional<ExitStatus> status;
  double ended = 0;
};

// Copies what fd has to the terminal stream, line by line with the rank in front, and to
// the log file. Returns false at end of file.
bool pump(int fd, Worker& w, bool err) {
  char buf[65536];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n <= 0) return n < 0 && errno == EAGAIN;
  std::string& pending = err ? w.err_buf : w.out_buf;
  pending.append(buf, static_cast<std::size_t>(n));
  (err ? w.err_log : w.out_log).write(buf, n);
  for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
    const std::string line = pending.substr(0, nl);
    (err ? std::cerr : std::cout) << fmt::format("[{}]: {}\n", w.rank, line);
    if (err) {
      w.err_tail.push_back(line);
      if (w.err_tail.size() > 5) w.err_tail.pop_front();
    }
    pending.erase(0, nl + 1);
  }
  return true;
}

int code_of(const ExitStatus& s) { return s.shell_code(); }

// This node's name, for root causes ("rank 3 on gpu07 ...").
const std::string& host() {
  static const std::string name = [] {
    char buf[256] = {};
    ::gethostname(buf, sizeof buf - 1);
    return std::string(buf);
  }();
  return name;
}

// Sets this thread's CPU mask to `pus` (nothing when empty) and restores it when it goes.
class CpuMask {
 public:
  explicit CpuMask(const std::vector<int>& pus) {
    if (pus.empty()) return;
    if (::sched_getaffinity(0, sizeof saved_, &saved_) != 0) throw system_error("read this agent's CPU mask", errno);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int pu : pus) CPU_SET(pu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) throw system_error("bind a worker to its CPUs", errno);
    active_ = true;
  }
  ~CpuMask() {
    if (active_) ::sched_setaffinity(0, sizeof saved_, &saved_);
  }
  CpuMask(const CpuMask&) = delete;
  CpuMask& operator=(const CpuMask&) = delete;

 private:
  cpu_set_t saved_{};
  bool active_ = false;
};

// Creates (or empties) the heartbeat file `name` in the folder open as `dir_fd` and sets
// its modification time to now: never through a symbolic link, never a FIFO or device
// someone left there.
void touch_heartbeat(int dir_fd, const std::string& name) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (!fd) throw system_error("heartbeat file " + name, errno);
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0 || !S_ISREG(sb.st_mode))
    throw Error(Exit::IoErr, "heartbeat file " + name + ": not a regular file");
  ::futimens(fd.get(), nullptr);
}

// A generation of this node's workers: started together, watched (output, exits,
// heartbeats), stopped together (SIGTERM, then SIGKILL after the grace).
class Group {
 public:
  Group(const LaunchOptions& o, const Layout& layout, int generation, const std::string& run_id,
        const std::string& hb_dir, int hb_fd, const std::string& secret, SignalForwarder& forward, Events& events)
      : o_(o),
        generation_(generation),
        hb_fd_(hb_fd),
        forward_(forward),
        events_(events),
        workers_(static_cast<std::size_t>(o.nproc)) {
    const std::string resume = o.ckpt_dir.empty() ? "" : newest_checkpoint(o.ckpt_dir);  // one answer for every rank
    for (int local = 0; local < o.nproc; ++local) {
      Worker& w = workers_[static_cast<std::size_t>(local)];
      w.rank = layout.offset + local;
      w.heartbeat_name = fmt::format("heartbeat.{}", w.rank);
      w.heartbeat = fmt::format("{}/{}", hb_dir, w.heartbeat_name);
      touch_heartbeat(hb_fd, w.heartbeat_name);  // touched now: the timeout counts from the start
      if (!o.log_dir.empty()) {
        w.out_log.open(fmt::format("{}/attempt-{}.rank-{}.out", o.log_dir, generation, w.rank));
        w.err_log.open(fmt::format("{}/attempt-{}.rank-{}.err", o.log_dir, generation, w.rank));
      }
      SpawnOptions s;
      s.argv = o.command;
      s.env = worker_env(o, local, layout, generation, run_id, w.heartbeat, resume, secret);
      if (!o.placement.empty() && !o.placement[static_cast<std::size_t>(local)].gpus.empty()) {
        std::string gpus;
        for (int g : o.placement[static_cast<std::size_t>(local)].gpus)
          gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
        s.env.emplace_back("CUDA_VISIBLE_DEVICES", gpus);
        s.env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");  // indices as nvidia-smi and rtop count them
      }
      s.out = Redirect::pipe();
      s.err = Redirect::pipe();
      {
        // A child inherits its parent's CPU mask: the worker is started with its own
        // (this agent is single-threaded), so it runs bound from its first instruction.
        const CpuMask bound(o.placement.empty() ? std::vector<int>{}
                                                : o.placement[static_cast<std::size_t>(local)].pus);
        w.child = forward.spawn(s);
      }
      w.started = now_s();
      for (int fd : {w.child->stdout_fd(), w.child->stderr_fd()})
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    events_.emit("start", {{"generation", generation},
                           {"node_rank", layout.node_rank},
                           {"workers", o.nproc},
                           {"world_size", layout.world},
                           {"master_port", layout.master_port},
                           {"run_id", run_id}});
  }

  bool running() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.status; });
  }
  const std::optional<std::string>& failure() const { return why_; }
  // The exit code of the first failure (128 + signal; 143 for a hung worker stopped).
  int failed_code() const { return failed_ && failed_->status ? code_of(*failed_->status) : 1; }
  const Worker* failed_worker() const { return failed_; }

  // Reads output, reaps, checks heartbeats, escalates a stop; waits up to timeout_ms, also
  // for `extra` (whose revents it fills).
  void step(std::vector<pollfd>& extra, int timeout_ms) {
    std::vector<pollfd> fds = extra;
    std::vector<std::pair<Worker*, bool>> owners;
    for (auto& w : workers_)
      for (bool err : {false, true})
        if (const int fd = err ? w.child->stderr_fd() : w.child->stdout_fd(); fd >= 0) {
          fds.push_back({fd, POLLIN, 0});
          owners.emplace_back(&w, err);
        }
    ::poll(fds.data(), fds.size(), timeout_ms);
    for (std::size_t i = 0; i < extra.size(); ++i) extra[i].revents = fds[i].revents;
    for (std::size_t i = 0; i < owners.size(); ++i) {
      const pollfd& p = fds[extra.size() + i];
      auto& [w, err] = owners[i];
      if (p.revents && !pump(p.fd, *w, err)) ::close(err ? w->child->take_stderr_fd() : w->child->take_stdout_fd());
    }
    const double now = now_s();
    for (auto& w : workers_) {
      if (w.status) continue;
      if (auto st = w.child->try_wait()) {
        w.status = st;
        w.ended = now;
        events_.emit("worker_exit", {{"generation", generation_},
                                     {"rank", w.rank},
                                     {"exit_code", code_of(*st)},
                                     {"uptime_s", now - w.started}});
        // A worker that ends after the stop was asked for (or a signal to us, which reached
        // its group too) was stopped, not failed.
        if (!st->success() && stop_time_ == 0 && !forward_.last_signal())
          fail(w, fmt::format("rank {} on {} {} after {:.1f}s", w.rank, host(), st->describe(), now - w.started));
      } else if (o_.heartbeat_timeout_s > 0 && !why_ && stop_time_ == 0 && !forward_.last_signal()) {
        struct stat sb {};
        if (::fstatat(hb_fd_, w.heartbeat_name.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            now - static_cast<double>(sb.st_mtim.tv_sec) - sb.st_mtim.tv_nsec / 1e9 > o_.heartbeat_timeout_s) {
          events_.emit("hang_detected", {{"generation", generation_}, {"rank", w.rank}});
          fail(w, fmt::format("rank {} on {} hung: no heartbeat for {:.0f}s", w.rank, host(), o_.heartbeat_timeout_s));
        }
      }
    }
    if ((why_ || forward_.last_signal()) && stop_time_ == 0) stop();
    if (stop_time_ > 0 && now - stop_time_ > o_.kill_grace_s && !killed_) {
      killed_ = true;
      for (auto& w : workers_) w.child->signal(SIGKILL);  // the groups: what the workers left behind too
    }
  }

  void stop() {
    if (stop_time_ > 0) return;
    stop_time_ = now_s();
    // Every worker's group, also of those that ended: processes they started may remain.
    for (auto& w : workers_) w.child->signal(SIGTERM);
  }

  // As srun: the highest exit code of the workers that ended on their own (not those the
  // stop ended), and of the hung one.
  int exit_code() const {
    int code = 0;
    for (const auto& w : workers_)
      if (w.status && (stop_time_ == 0 || w.ended <= stop_time_ || &w == failed_))
        code = std::max(code, code_of(*w.status));
    return code;
  }

  // What the workers wrote last (the pipes may hold it after they exit; a process they
  // left behind may keep a pipe open, so only what is there now); then they are no
  // longer signalled.
  void finish() {
    for (auto& w : workers_) {
      for (bool err : {false, true}) {
        const int fd = err ? w.child->stderr_fd() : w.child->stdout_fd();
        if (fd >= 0)
          while (pump(fd, w, err) && ::poll(std::vector<pollfd>{{fd, POLLIN, 0}}.data(), 1, 0) > 0) {
          }
        std::string& rest = err ? w.err_buf : w.out_buf;  // a last line without its newline
        if (!rest.empty()) (err ? std::cerr : std::cout) << fmt::format("[{}]: {}\n", w.rank, rest);
      }
      w.child->signal(SIGKILL);  // nothing of a generation outlives it (data loaders, wrappers' children)
      forward_.remove(*w.child);
    }
  }

 private:
  void fail(Worker& w, std::string why) {
    if (why_) return;
    why_ = std::move(why);
    failed_ = &w;
  }

  const LaunchOptions& o_;
  int generation_;
  int hb_fd_;  // the heartbeat folder, open
  SignalForwarder& forward_;
  Events& events_;
  std::vector<Worker> workers_;
  std::optional<std::string> why_;
  Worker* failed_ = nullptr;
  double stop_time_ = 0;
  bool killed_ = false;
};

// A message's number field; -1 when it is not one (or is out of int's range).
int number(const std::string& text) {
  int v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty() ? v : -1;
}

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<char>& v) { return {v.begin(), v.end()}; }

}  // namespace

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
  if (!o.ckpt_dir.empty()) {
    env.emplace_back("RKIT_CKPT_DIR", o.ckpt_dir);
    env.emplace_back("RKIT_RESUME_FROM", resume_from);
  }
  if (o.nproc > 1 && !std::getenv("OMP_NUM_THREADS")) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

namespace {

// What every agent keeps for the run.
struct Run {
  const LaunchOptions& o;
  std::string run_id, hb_dir;
  int hb_fd;         // hb_dir, open: heartbeat files are opened and checked relative to it
  RunSecret secret;  // the workers' RKIT_RUN_SECRET; on several nodes, the agents' too
  Events events;
  SignalForwarder forward;  // SIGINT/SIGTERM/SIGHUP to us reach every worker's group
};

// Prints the root cause of a failed generation on stderr.
void report(const Group& g, int generation) {
  std::cerr << fmt::format("rtrain: worker failed (generation {}): {}\n", generation, *g.failure());
  if (const Worker* w = g.failed_worker())
    for (const auto& line : w->err_tail) std::cerr << fmt::format("rtrain:   [{}]: {}\n", w->rank, line);
}

bool restartable(const LaunchOptions& o, int generation, int code) {
  return generation < o.max_restarts &&
         (o.restart_on.empty() || std::find(o.restart_on.begin(), o.restart_on.end(), code) != o.restart_on.end());
}

// The agents' rendezvous, on several nodes: node 0's agent hosts an authenticated store
// (tcp_store.hpp, the key "agents" of the run's secret) on --master-addr:--master-port, the
// others are its clients. Keys:
//   node/R                 node R's worker count, created by its agent: a second agent with
//                          rank R is refused. Watched: node/R#closed appears once that agent's
//                          connection closes (it exited or died).
//   gen/G                  node 0: generation G's layout, {"master_port", "world_size",
//                          "run_id", "offsets"} (JSON; offsets by node rank)
//   stop/G                 node 0: stop generation G's workers
//   fail/G/R, abort/G/R    node R: "CODE WHY": a worker failed; the agent got a signal
//   done/G/R, stopped/G/R  node R: its workers ended well; they ended after stop/G
//   exit                   node 0: the run's exit code, which every agent exits with
// An agent waits for keys with await_any (node 0's store holds the request until one
// exists, at most 40 to 200 ms, then the agent looks at its workers and signals again);
// node 0 erases a generation's keys when the next one starts.
constexpr auto kAgentTimeout = std::chrono::seconds(60);  // one request to node 0's store
constexpr double kExitWait_s = 10;                        // node 0 waits so long for the others to read "exit"

// Node R's join value: its worker count, 1 to kMaxNproc.
int join_count(int node, const std::vector<char>& value) {
  const int n = number(text_of(value));
  if (n < 1 || n > kMaxNproc)
    throw Error(Exit::DataErr,
                fmt::format("rendezvous: node {} joined with '{}' workers: not 1 to {}", node,
                            text_of(value).substr(0, 20), kMaxNproc),
                "the agents' rtrain versions differ?");
  return n;
}

// Tells the other agents the run's exit code, then waits (a while) until each one still
// there has read it and gone: node 0's store must outlive their last look.
void end_run(TcpStore& store, int code, const std::vector<int>& followers, const std::set<int>& gone) {
  store.set("exit", bytes_of(std::to_string(code)));
  std::vector<std::string> keys;
  for (int r : followers)
    if (!gone.count(r)) keys.push_back(fmt::format("node/{}#closed", r));
  const double deadline = now_s() + kExitWait_s;
  while (!keys.empty() && now_s() < deadline) {
    const auto got = store.await_any(keys, std::chrono::milliseconds(200));
    std::vector<std::string> left;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (!got[i]) left.push_back(keys[i]);
    keys = std::move(left);
  }
}

// The agent of node 0 (or of the only node): hosts the rendezvous, where the other nodes'
// agents join; decides each generation's layout and port, and when the run restarts or ends.
int lead(Run& run) {
  const LaunchOptions& o = run.o;
  std::unique_ptr<TcpStore> store;
  std::map<int, int> nproc_of{{0, o.nproc}};
  std::vector<int> followers;
  for (int r = 1; r < o.nnodes; ++r) followers.push_back(r);
  std::set<int> gone;  // nodes whose agent died
  if (o.nnodes > 1) {
    store = std::make_unique<TcpStore>(o.master_addr, o.master_port, true, std::chrono::milliseconds(kAgentTimeout),
                                       run.secret.key("agents"));
    std::vector<int> missing = followers;
    const double join_deadline = now_s() + o.join_timeout_s;
    while (!missing.empty()) {
      std::vector<std::string> keys;
      for (int r : missing) keys.push_back(fmt::format("node/{}", r));
      const auto got = store->await_any(keys, std::chrono::milliseconds(200));
      std::vector<int> left;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i])
          nproc_of[missing[i]] = join_count(missing[i], *got[i]);
        else
          left.push_back(missing[i]);
      }
      missing = std::move(left);
      if (missing.empty()) break;
      if (const int sig = run.forward.last_signal()) {
        end_run(*store, 128 + sig, {}, gone);
        return 128 + sig;
      }
      if (now_s() > join_deadline)
        throw Error(Exit::Unavailable,
                    fmt::format("rendezvous: {} of {} nodes joined within {:.0f}s",
                                o.nnodes - static_cast<int>(missing.size()), o.nnodes, o.join_timeout_s));
    }
  }
  int crash_loop = 0;  // generations in a row that failed within --min-uptime of their start
  const auto finish_run = [&](int code) {
    if (store) end_run(*store, code, followers, gone);
    return code;
  };
  for (int generation = 0;; ++generation) {
    const std::string gen = std::to_string(generation);
    Layout l;
    l.nnodes = o.nnodes;
    long long world = 0;
    for (const auto& [_, n] : nproc_of) world += n;
    if (world > kMaxWorld) throw Error(Exit::Usage, fmt::format("{} workers in all: more than {}", world, kMaxWorld));
    l.world = static_cast<int>(world);
    // Workers meet at a port the agents' rendezvous does not hold: a fresh one per
    // generation across nodes (no TIME_WAIT), --master-port itself on one node.
    l.master_port = o.nnodes > 1 || o.master_port == 0 ? free_port(o.master_addr) : o.master_port;
    if (store) {
      if (generation > 0) {  // every agent is past generation - 1: its keys can go
        const std::string prev = std::to_string(generation - 1);
        std::vector<std::string> old{"gen/" + prev, "stop/" + prev};
        for (int r : followers)
          for (const char* k : {"fail", "abort", "done", "stopped"}) old.push_back(fmt::format("{}/{}/{}", k, prev, r));
        store->erase(old);
      }
      Json offsets = Json::array();
      int offset = 0;
      for (const auto& [_, n] : nproc_of) offsets.push_back(offset), offset += n;
      const Json layout{
          {"master_port", l.master_port}, {"world_size", l.world}, {"run_id", run.run_id}, {"offsets", offsets}};
      store->set("gen/" + gen, bytes_of(layout.dump()));
    }
    const double started = now_s();
    Group g(o, l, generation, run.run_id, run.hb_dir, run.hb_fd, run.secret.text(), run.forward, run.events);
    std::set<int> done, stopped;  // nodes whose workers ended well, or ended after a stop
    std::set<int> reported;       // nodes that reported a failure or a signal
    std::optional<std::string> remote_failure;
    int remote_code = 0;
    bool stopping = false, abort = false;
    for (;;) {
      std::vector<pollfd> none;
      g.step(none, store ? 10 : 50);  // with other nodes, the rest of the wait is on their news
      if (store) {
        std::vector<std::string> keys;
        std::vector<std::pair<int, char>> what;  // the node and kind of each key
        const auto ask = [&](int r, char kind, const std::string& key) {
          keys.push_back(key);
          what.emplace_back(r, kind);
        };
        for (int r : followers) {
          if (gone.count(r)) continue;
          if (!reported.count(r))
            ask(r, 'f', fmt::format("fail/{}/{}", gen, r)), ask(r, 'a', fmt::format("abort/{}/{}", gen, r));
          if (!done.count(r)) ask(r, 'd', fmt::format("done/{}/{}", gen, r));
          if (!stopped.count(r)) ask(r, 's', fmt::format("stopped/{}/{}", gen, r));
          ask(r, 'x', fmt::format("node/{}#closed", r));
        }
        const auto got =
            keys.empty() ? decltype(store->try_get(keys)){} : store->await_any(keys, std::chrono::milliseconds(40));
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (!got[i]) continue;
          const auto [r, kind] = what[i];
          if (kind == 'f' || kind == 'a') {
            if (!reported.insert(r).second) continue;  // fail and abort both: the first one counts
            abort |= kind == 'a';                      // that agent was stopped by a signal: no restart
            if (!remote_failure) {
              const std::string msg = text_of(*got[i]);
              const auto space = msg.find(' ');
              remote_code = std::clamp(number(msg.substr(0, space)), 1, 255);
              remote_failure = space == std::string::npos ? std::string("a failure on node ") + std::to_string(r)
                                                          : msg.substr(space + 1);
            }
          } else if (kind == 'd') {
            done.insert(r);
          } else if (kind == 's') {
            stopped.insert(r);
          } else if (!gone.count(r)) {  // its agent died: it cannot rejoin, so no restart
            gone.insert(r);
            stopped.insert(r);
            abort = true;
            if (!remote_failure) remote_failure = fmt::format("the agent of node {} is gone", r), remote_code = 1;
          }
        }
      }
      const bool failed = g.failure() || remote_failure || run.forward.last_signal();
      if (failed && !stopping) {
        stopping = true;
        g.stop();
        if (store) store->set("stop/" + gen, {});
      }
      const std::size_t peers = followers.size();
      if (!g.running() && (stopping ? stopped.size() == peers : done.size() == peers)) break;
    }
    g.finish();
    if (!g.failure() && !remote_failure && !run.forward.last_signal()) {
      run.events.emit("done", {{"generation", generation}, {"exit_code", 0}});
      return finish_run(0);
    }
    if (const int sig = run.forward.last_signal()) {
      run.events.emit("done", {{"generation", generation}, {"signal", signal_name(sig)}});
      return finish_run(128 + sig);
    }
    const std::string why = g.failure() ? *g.failure() : *remote_failure;
    if (g.failure())
      report(g, generation);
    else
      std::cerr << fmt::format("rtrain: worker failed (generation {}): {}\n", generation, why);
    const int first_code = g.failure() ? g.failed_code() : remote_code;
    // A generation that fails within --min-uptime of its start crashed at start; so many in
    // a row are a crash loop, which restarting will not mend.
    crash_loop = o.min_uptime_s > 0 && now_s() - started < o.min_uptime_s ? crash_loop + 1 : 0;
    if (crash_loop >= kCrashLoopLimit)
      std::cerr << fmt::format(
          "rtrain: {} generations in a row failed within --min-uptime {:.0f}s: a crash loop; "
          "not restarting\n",
          crash_loop, o.min_uptime_s);
    if (abort || crash_loop >= kCrashLoopLimit || !restartable(o, generation, first_code)) {
      const int code = std::max({g.exit_code(), remote_code, 1});
      run.events.emit("done", {{"generation", generation}, {"exit_code", code}, {"root_cause", why}});
      return finish_run(code);
    }
    run.events.emit("restart", {{"generation", generation + 1}, {"root_cause", why}});
  }
}

// Generation `generation`'s layout for this node, from node 0's gen/G; Error(Unavailable)
// for one that does not fit (another rtrain, or a bug): ranks are never guessed.
Layout parse_layout(const std::vector<char>& value, const LaunchOptions& o, std::string& run_id) {
  const Json j = Json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  const auto bad = [&] {
    return Error(Exit::Unavailable, "rendezvous: node 0's agent sent a layout that does not fit this node",
                 "the agents' rtrain versions differ, or their --nnodes?");
  };
  if (!j.is_object() || !j.contains("master_port") || !j.contains("world_size") || !j.contains("offsets") ||
      !j.contains("run_id") || !j["master_port"].is_number_integer() || !j["world_size"].is_number_integer() ||
      !j["offsets"].is_array() || !j["run_id"].is_string() || j["offsets"].size() != static_cast<std::size_t>(o.nnodes))
    throw bad();
  const auto& off = j["offsets"][static_cast<std::size_t>(o.node_rank)];
  if (!off.is_number_integer()) throw bad();
  const long long port = j["master_port"].get<long long>(), world = j["world_size"].get<long long>(),
                  offset = off.get<long long>();
  if (port < 1 || port > 65535 || world < 1 || world > kMaxWorld || offset < 0 || offset + o.nproc > world) throw bad();
  run_id = j["run_id"].get<std::string>();  // node 0's: one TORCHELASTIC_RUN_ID for the whole run
  return Layout{o.node_rank, o.nnodes, static_cast<int>(world), static_cast<int>(offset), static_cast<int>(port)};
}

// The exit code node 0 decided ("exit"), 0 to 255.
int exit_code_of(const std::vector<char>& value) { return std::clamp(number(text_of(value)), 0, 255); }

// The agent of another node: joins node 0's rendezvous and runs the generations it is told.
int follow(Run& run) {
  const LaunchOptions& o = run.o;
  const auto deadline = now_s() + o.join_timeout_s;
  const Key key = run.secret.key("agents");
  std::unique_ptr<TcpStore> store;
  while (!store) {  // node 0's agent may not listen yet; a refused handshake ends it at once
    try {
      const double left_ms = std::clamp((deadline - now_s()) * 1000, 1.0, 1000.0);
      store = std::make_unique<TcpStore>(o.master_addr, o.master_port, false,
                                         std::chrono::milliseconds(static_cast<long long>(left_ms)), key);
    } catch (const Error& e) {
      if (e.code() != Exit::Unavailable) throw;
      if (const int sig = run.forward.last_signal()) return 128 + sig;
      if (now_s() > deadline)
        throw Error(Exit::Unavailable, fmt::format("rendezvous: no agent of node 0 at {}:{} within {:.0f}s",
                                                   o.master_addr, o.master_port, o.join_timeout_s));
    }
  }
  store->set_timeout(kAgentTimeout);
  if (!store->create(fmt::format("node/{}", o.node_rank), bytes_of(std::to_string(o.nproc)), /*watch=*/true))
    throw Error(Exit::Unavailable, fmt::format("rendezvous: node rank {} has joined already", o.node_rank),
                "every agent needs its own --node-rank");
  const auto gone = [] { return Error(Exit::Unavailable, "rendezvous: the agent of node 0 is gone"); };
  // Waits a little for one of the keys (a signal to this agent cuts no wait short: 100 ms).
  const auto look = [&](const std::vector<std::string>& keys) {
    try {
      return store->await_any(keys, std::chrono::milliseconds(100));
    } catch (const Error& e) {
      if (e.code() == Exit::Unavailable) throw gone();
      throw;
    }
  };
  const auto tell = [&](const std::string& key, const std::string& value) {
    try {
      store->set(key, bytes_of(value));
    } catch (const Error& e) {
      if (e.code() == Exit::Unavailable) throw gone();
      throw;
    }
  };
  const std::string me = std::to_string(o.node_rank);
  bool signalled = false;  // this agent's signal was reported: it runs no more workers
  const auto report_signal = [&](const std::string& gen) {
    const int sig = run.forward.last_signal();
    if (!sig || signalled) return false;
    signalled = true;  // the whole run ends, as it would had node 0's agent got the signal
    tell(fmt::format("abort/{}/{}", gen, me),
         fmt::format("{} the agent of node {} got {}", 128 + sig, o.node_rank, signal_name(sig)));
    return true;
  };
  for (int generation = 0;; ++generation) {
    const std::string gen = std::to_string(generation);
    // The generation's layout, or the end of the run.
    std::optional<std::vector<char>> layout;
    while (!layout) {
      auto got = look({"gen/" + gen, "exit"});
      if (got[1]) return exit_code_of(*got[1]);
      layout = std::move(got[0]);
      if (!layout) report_signal(gen);
    }
    bool reported = signalled, told_to_stop = false;
    if (!signalled) {
      const Layout l = parse_layout(*layout, o, run.run_id);
      Group g(o, l, generation, run.run_id, run.hb_dir, run.hb_fd, run.secret.text(), run.forward, run.events);
      bool lead_gone = false;
      while (g.running()) {
        std::vector<pollfd> none;
        g.step(none, 50);
        if (lead_gone) continue;
        try {
          if (!told_to_stop && store->try_get({"stop/" + gen})[0]) told_to_stop = true, g.stop();
          // A signal first: its workers' deaths are not failures of theirs.
          if (!reported && report_signal(gen)) reported = true;
          if (g.failure() && !reported) {
            reported = true;
            tell(fmt::format("fail/{}/{}", gen, me), fmt::format("{} {}", g.failed_code(), *g.failure()));
          }
        } catch (const Error& e) {
          if (e.code() != Exit::Unavailable) throw;
          lead_gone = true, g.stop();  // node 0's agent died: end our workers, then say so
        }
      }
      g.finish();
      if (lead_gone) throw gone();
      if (g.failure()) report(g, generation);
      // Node 0 waits for "stopped" after it said stop, for "done" otherwise.
      if (!told_to_stop && !reported) tell(fmt::format("done/{}/{}", gen, me), "");
    }
    while (!told_to_stop) {
      if (report_signal(gen)) reported = true;  // between generations
      const auto got = look({"stop/" + gen, "exit"});
      if (got[1]) return exit_code_of(*got[1]);
      if (got[0]) told_to_stop = true;
    }
    tell(fmt::format("stopped/{}/{}", gen, me), "");
  }
}

}  // namespace

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

int launch(const LaunchOptions& o) {
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
  const UniqueFd hb_fd(::open(hb_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!hb_fd) throw system_error("open " + hb_dir, errno);
  if (!o.ckpt_dir.empty()) {
    std::filesystem::create_directories(o.ckpt_dir, ec);
    if (ec) throw Error(Exit::IoErr, "create " + o.ckpt_dir + ": " + ec.message());
  }
  Run run{o, run_id, hb_dir, hb_fd.get(), secret, Events(o.events_path), {}};
  return o.node_rank == 0 ? lead(run) : follow(run);
}

}  // namespace rkit::rtrain
