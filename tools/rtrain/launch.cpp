// File: rtrain/launch.cpp — rtrain launch on one node (launch.hpp).
#include "launch.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <cstring>

#include "archive.hpp"  // rckpt's: a checkpoint is complete when it opens whole
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/process.hpp"
#include "rkit/topology.hpp"

namespace rkit::rtrain {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A port nobody listens on now, as torchrun picks one for --master-port 0.
int free_port(const std::string& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw system_error("socket", errno);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int e = errno;
    ::close(fd);
    throw system_error("pick a free port on " + addr, e);
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

class Events {
 public:
  explicit Events(const std::string& path) {
    if (path.empty()) return;
    if (path == "-") out_ = &std::cout;
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
  std::string heartbeat;
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


// A generation of this node's workers: started together, watched (output, exits,
// heartbeats), stopped together (SIGTERM, then SIGKILL after the grace).
class Group {
 public:
  Group(const LaunchOptions& o, const Layout& layout, int generation, const std::string& run_id,
        const std::string& hb_dir, SignalForwarder& forward, Events& events)
      : o_(o), generation_(generation), forward_(forward), events_(events), workers_(static_cast<std::size_t>(o.nproc)) {
    const std::string resume = o.ckpt_dir.empty() ? "" : newest_checkpoint(o.ckpt_dir);  // one answer for every rank
    for (int local = 0; local < o.nproc; ++local) {
      Worker& w = workers_[static_cast<std::size_t>(local)];
      w.rank = layout.offset + local;
      w.heartbeat = fmt::format("{}/heartbeat.{}", hb_dir, w.rank);
      std::ofstream(w.heartbeat).flush();  // touched now: the timeout counts from the start
      if (!o.log_dir.empty()) {
        w.out_log.open(fmt::format("{}/attempt-{}.rank-{}.out", o.log_dir, generation, w.rank));
        w.err_log.open(fmt::format("{}/attempt-{}.rank-{}.err", o.log_dir, generation, w.rank));
      }
      SpawnOptions s;
      s.argv = o.command;
      s.env = worker_env(o, local, layout, generation, run_id, w.heartbeat, resume);
      if (!o.placement.empty() && !o.placement[static_cast<std::size_t>(local)].gpus.empty()) {
        std::string gpus;
        for (int g : o.placement[static_cast<std::size_t>(local)].gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
        s.env.emplace_back("CUDA_VISIBLE_DEVICES", gpus);
        s.env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");  // indices as nvidia-smi and rtop count them
      }
      s.out = Redirect::pipe();
      s.err = Redirect::pipe();
      {
        // A child inherits its parent's CPU mask: the worker is started with its own
        // (this agent is single-threaded), so it runs bound from its first instruction.
        const CpuMask bound(o.placement.empty() ? std::vector<int>{} : o.placement[static_cast<std::size_t>(local)].pus);
        w.child = forward.spawn(s);
      }
      w.started = now_s();
      for (int fd : {w.child->stdout_fd(), w.child->stderr_fd()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    events_.emit("start", {{"generation", generation}, {"node_rank", layout.node_rank}, {"workers", o.nproc},
                           {"world_size", layout.world}, {"master_port", layout.master_port}, {"run_id", run_id}});
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
        events_.emit("worker_exit", {{"generation", generation_}, {"rank", w.rank}, {"exit_code", code_of(*st)},
                                     {"uptime_s", now - w.started}});
        // A worker that ends after the stop was asked for (or a signal to us, which reached
        // its group too) was stopped, not failed.
        if (!st->success() && stop_time_ == 0 && !forward_.last_signal())
          fail(w, fmt::format("rank {} on {} {} after {:.1f}s", w.rank, host(), st->describe(), now - w.started));
      } else if (o_.heartbeat_timeout_s > 0 && !why_ && stop_time_ == 0 && !forward_.last_signal()) {
        struct stat sb{};
        if (::stat(w.heartbeat.c_str(), &sb) == 0 &&
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
      if (w.status && (stop_time_ == 0 || w.ended <= stop_time_ || &w == failed_)) code = std::max(code, code_of(*w.status));
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
  SignalForwarder& forward_;
  Events& events_;
  std::vector<Worker> workers_;
  std::optional<std::string> why_;
  Worker* failed_ = nullptr;
  double stop_time_ = 0;
  bool killed_ = false;
};

// One line-based TCP connection between two agents.
class Peer {
 public:
  explicit Peer(int fd) : fd_(fd) {}
  Peer(Peer&& o) noexcept : fd_(std::exchange(o.fd_, -1)), buf_(std::move(o.buf_)) {}
  ~Peer() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  // False when the peer is gone.
  bool try_send(const std::string& line) const {
    const std::string msg = line + "\n";
    return ::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size());
  }
  void send(const std::string& line) const {
    if (!try_send(line)) throw Error(Exit::Unavailable, "rendezvous: lost a peer agent", "the agent of another node died");
  }
  // Reads what arrived (without waiting); false at end of file or on an error.
  bool fill() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) buf_.append(buf, static_cast<std::size_t>(n));
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }
  // The next complete line received, if any.
  std::optional<std::string> take_line() {
    const auto nl = buf_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string l = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    return l;
  }
  // Blocks until a line comes (nullopt: the peer is gone, or `timeout_s` passed).
  std::optional<std::string> wait_line(double timeout_s = -1) {
    const double deadline = now_s() + timeout_s;
    for (;;) {
      if (auto l = take_line()) return l;
      pollfd p{fd_, POLLIN, 0};
      const double left = deadline - now_s();
      if (timeout_s >= 0 && left <= 0) return std::nullopt;
      ::poll(&p, 1, timeout_s < 0 ? -1 : static_cast<int>(left * 1000) + 1);
      if (!fill()) return std::nullopt;
    }
  }

 private:
  int fd_;
  std::string buf_;
};

// A message's number field; -1 when it is not one.
int number(const std::string& text) {
  int v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() ? v : -1;
}

// The text after the first `fields` space-separated fields of a message.
std::string message_after(const std::string& line, int fields) {
  std::istringstream in(line);
  std::string skip, rest;
  for (int i = 0; i < fields; ++i) in >> skip;
  std::getline(in >> std::ws, rest);
  return rest;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

sockaddr_in address(const std::string& addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    throw Error(Exit::Usage, fmt::format("--master-addr {}: not an IPv4 address", addr));
  return sa;
}

}  // namespace
std::vector<std::pair<std::string, std::string>> worker_env(const LaunchOptions& o, int local_rank, const Layout& l,
                                                            int restart_count, const std::string& run_id,
                                                            const std::string& heartbeat_file, const std::string& resume_from) {
  const std::string rank = std::to_string(l.offset + local_rank), world = std::to_string(l.world);
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", rank}, {"LOCAL_RANK", std::to_string(local_rank)}, {"GROUP_RANK", std::to_string(l.node_rank)},
      {"ROLE_RANK", rank}, {"ROLE_NAME", "default"}, {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"WORLD_SIZE", world}, {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)}, {"ROLE_WORLD_SIZE", world},
      {"MASTER_ADDR", o.master_addr}, {"MASTER_PORT", std::to_string(l.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)}, {"TORCHELASTIC_RUN_ID", run_id},
      {"RKIT_HEARTBEAT_FILE", heartbeat_file}};
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

// The agent of node 0 (or of the only node): hosts the rendezvous, where the other nodes'
// agents join; decides each generation's layout and port, and when the run restarts or ends.
int lead(Run& run) {
  const LaunchOptions& o = run.o;
  std::vector<std::pair<int, Peer>> nodes;  // node rank → its agent
  std::map<int, int> nproc_of{{0, o.nproc}};
  if (o.nnodes > 1) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = address(o.master_addr, o.master_port);
    sa.sin_addr.s_addr = htonl(INADDR_ANY);  // whatever address the others reach this node by
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, o.nnodes) != 0) {
      const int e = errno;
      ::close(fd);
      throw Error(Exit::Unavailable, fmt::format("rendezvous: listen on {}:{}: {}", o.master_addr, o.master_port,
                                                 std::strerror(e)));
    }
    Peer listener(fd);
    const double join_deadline = now_s() + o.join_timeout_s;
    while (static_cast<int>(nodes.size()) < o.nnodes - 1) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) {
        if (const int sig = run.forward.last_signal()) return 128 + sig;
        if (now_s() > join_deadline)
          throw Error(Exit::Unavailable, fmt::format("rendezvous: {} of {} nodes joined within {:.0f}s", nodes.size() + 1,
                                                     o.nnodes, o.join_timeout_s));
        continue;
      }
      Peer peer(::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC));
      const auto join = words(peer.wait_line(10).value_or(""));
      const bool is_join = join.size() == 3 && join[0] == "join";
      const int node = is_join ? number(join[1]) : -1, nproc = is_join ? number(join[2]) : 0;
      if (node < 1 || node >= o.nnodes || nproc < 1 || nproc_of.count(node)) continue;  // not a node this run has
      nproc_of[node] = nproc;
      nodes.emplace_back(node, std::move(peer));
    }
  }
  int crash_loop = 0;  // generations in a row that failed within --min-uptime of their start
  const auto broadcast = [&](const std::string& line) {  // to the agents still there
    for (auto& [_, peer] : nodes) peer.try_send(line);
  };
  for (int generation = 0;; ++generation) {
    Layout l;
    l.nnodes = o.nnodes;
    for (const auto& [_, n] : nproc_of) l.world += n;
    // Workers meet at a port the agents' rendezvous does not hold: a fresh one per
    // generation across nodes (no TIME_WAIT), --master-port itself on one node.
    l.master_port = o.nnodes > 1 || o.master_port == 0 ? free_port(o.master_addr) : o.master_port;
    for (auto& [node, peer] : nodes) {
      int offset = 0;
      for (const auto& [r, n] : nproc_of) offset += r < node ? n : 0;
      peer.send(fmt::format("gen {} {} {} {} {}", generation, l.master_port, l.world, offset, run.run_id));
    }
    const double started = now_s();
    Group g(o, l, generation, run.run_id, run.hb_dir, run.forward, run.events);
    std::set<int> done, stopped;  // nodes whose workers ended well, or ended after a stop
    std::set<int> gone;           // nodes whose agent died
    std::optional<std::string> remote_failure;
    int remote_code = 0;
    bool stopping = false, abort = false;
    for (;;) {
      std::vector<pollfd> extra;
      for (auto& [node, peer] : nodes) extra.push_back({gone.count(node) ? -1 : peer.fd(), POLLIN, 0});  // -1: not polled
      g.step(extra, 50);
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        auto& [node, peer] = nodes[i];
        if (!extra[i].revents) continue;
        const bool alive = peer.fill();
        while (auto line = peer.take_line()) {
          const auto w = words(*line);
          if (w.size() < 2 || number(w[1]) != generation) continue;  // late news of an earlier generation
          if (w[0] == "done") done.insert(node);
          else if (w[0] == "stopped") stopped.insert(node);
          else if ((w[0] == "fail" || w[0] == "abort") && w.size() >= 4) {
            abort |= w[0] == "abort";  // that agent was stopped by a signal: no restart
            if (!remote_failure) {
              remote_code = std::max(1, number(w[2]));
              remote_failure = message_after(*line, 3);
            }
          }
        }
        if (!alive && !gone.count(node)) {  // its agent died: it cannot rejoin, so no restart
          gone.insert(node);
          stopped.insert(node);
          abort = true;
          if (!remote_failure) remote_failure = fmt::format("the agent of node {} is gone", node), remote_code = 1;
        }
      }
      const bool failed = g.failure() || remote_failure || run.forward.last_signal();
      if (failed && !stopping) {
        stopping = true;
        g.stop();
        broadcast(fmt::format("stop {}", generation));
      }
      const std::size_t peers = nodes.size();
      if (!g.running() && (stopping ? stopped.size() == peers : done.size() == peers)) break;
    }
    g.finish();
    if (!g.failure() && !remote_failure && !run.forward.last_signal()) {
      run.events.emit("done", {{"generation", generation}, {"exit_code", 0}});
      broadcast("exit 0");
      return 0;
    }
    if (const int sig = run.forward.last_signal()) {
      run.events.emit("done", {{"generation", generation}, {"signal", signal_name(sig)}});
      broadcast(fmt::format("exit {}", 128 + sig));
      return 128 + sig;
    }
    const std::string why = g.failure() ? *g.failure() : *remote_failure;
    if (g.failure()) report(g, generation);
    else std::cerr << fmt::format("rtrain: worker failed (generation {}): {}\n", generation, why);
    const int first_code = g.failure() ? g.failed_code() : remote_code;
    // A generation that fails within --min-uptime of its start crashed at start; so many in
    // a row are a crash loop, which restarting will not mend.
    crash_loop = o.min_uptime_s > 0 && now_s() - started < o.min_uptime_s ? crash_loop + 1 : 0;
    if (crash_loop >= kCrashLoopLimit)
      std::cerr << fmt::format("rtrain: {} generations in a row failed within --min-uptime {:.0f}s: a crash loop; "
                               "not restarting\n", crash_loop, o.min_uptime_s);
    if (abort || crash_loop >= kCrashLoopLimit || !restartable(o, generation, first_code)) {
      const int code = std::max({g.exit_code(), remote_code, 1});
      run.events.emit("done", {{"generation", generation}, {"exit_code", code}, {"root_cause", why}});
      broadcast(fmt::format("exit {}", code));
      return code;
    }
    run.events.emit("restart", {{"generation", generation + 1}, {"root_cause", why}});
  }
}

// The agent of another node: joins node 0's rendezvous and runs the generations it is told.
int follow(Run& run) {
  const LaunchOptions& o = run.o;
  const auto deadline = now_s() + o.join_timeout_s;
  int fd = -1;
  for (;;) {  // node 0's agent may not listen yet
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa = address(o.master_addr, o.master_port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) break;
    ::close(fd);
    if (const int sig = run.forward.last_signal()) return 128 + sig;
    if (now_s() > deadline)
      throw Error(Exit::Unavailable, fmt::format("rendezvous: no agent of node 0 at {}:{} within {:.0f}s", o.master_addr,
                                                 o.master_port, o.join_timeout_s));
    ::usleep(100000);
  }
  Peer lead(fd);
  lead.send(fmt::format("join {} {}", o.node_rank, o.nproc));
  for (;;) {
    const auto line = lead.wait_line();
    if (!line) throw Error(Exit::Unavailable, "rendezvous: the agent of node 0 is gone");
    const auto w = words(*line);
    if (w.size() == 2 && w[0] == "exit") return std::max(0, number(w[1]));
    if (w.size() != 6 || w[0] != "gen") continue;
    const int generation = number(w[1]);
    run.run_id = w[5];  // node 0's: one TORCHELASTIC_RUN_ID for the whole run
    Layout l{o.node_rank, o.nnodes, number(w[3]), number(w[4]), number(w[2])};
    if (generation < 0 || l.world < 1 || l.offset < 0 || l.master_port < 1)
      throw Error(Exit::Unavailable, "rendezvous: node 0's agent sent \"" + *line + "\"", "the agents' rtrain versions differ?");
    Group g(o, l, generation, run.run_id, run.hb_dir, run.forward, run.events);
    bool told_to_stop = false, reported = false, lead_gone = false;
    while (g.running()) {
      std::vector<pollfd> extra{{lead_gone ? -1 : lead.fd(), POLLIN, 0}};
      g.step(extra, 50);
      if (extra[0].revents) {
        if (!lead.fill()) lead_gone = true, g.stop();  // node 0's agent died: end our workers, then say so
        while (auto l2 = lead.take_line())
          if (words(*l2) == std::vector<std::string>{"stop", std::to_string(generation)}) told_to_stop = true, g.stop();
      }
      // A signal first: its workers' deaths are not failures of theirs.
      if (const int sig = run.forward.last_signal(); sig && !reported) {
        reported = true;  // the whole run ends, as it would had node 0's agent got the signal
        lead.send(fmt::format("abort {} {} the agent of node {} got {}", generation, 128 + sig, o.node_rank,
                              signal_name(sig)));
      }
      if (g.failure() && !reported) {
        reported = true;
        lead.send(fmt::format("fail {} {} {}", generation, g.failed_code(), *g.failure()));
      }
    }
    g.finish();
    if (lead_gone) throw Error(Exit::Unavailable, "rendezvous: the agent of node 0 is gone");
    if (g.failure()) report(g, generation);
    // Node 0 waits for "stopped" after it said stop, for "done" otherwise.
    if (!told_to_stop && !reported) lead.send(fmt::format("done {}", generation));
    while (!told_to_stop) {
      if (const int sig = run.forward.last_signal(); sig && !reported) {  // between generations
        reported = true;
        lead.try_send(fmt::format("abort {} {} the agent of node {} got {}", generation, 128 + sig, o.node_rank,
                                  signal_name(sig)));
      }
      std::optional<std::string> next = lead.take_line();
      if (!next) {
        pollfd p{lead.fd(), POLLIN, 0};
        ::poll(&p, 1, 200);
        if (p.revents && !lead.fill()) throw Error(Exit::Unavailable, "rendezvous: the agent of node 0 is gone");
        continue;
      }
      const auto nw = words(*next);
      if (nw.size() == 2 && nw[0] == "exit") return std::max(0, number(nw[1]));
      if (nw == std::vector<std::string>{"stop", std::to_string(generation)}) told_to_stop = true;
    }
    lead.send(fmt::format("stopped {}", generation));
  }
}

}  // namespace

int nproc_per_node(const std::string& text) {
  constexpr int kMax = 64;  // SignalForwarder's worker groups
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
      throw Error(Exit::DataErr, fmt::format("{}: no placement for local rank {} (--nproc-per-node {})", source, rank, nproc),
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
    throw Error(Exit::Unavailable, fmt::format("under Slurm: scontrol show hostnames {}: {}", nodelist,
                                               r.err.substr(0, r.err.find('\n'))),
                "pass --master-addr");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    throw Error(Exit::Unavailable, fmt::format("under Slurm: node 0 ({}): {}", host, ::gai_strerror(rc)), "pass --master-addr");
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(found);
  o.master_addr = text;
}

int launch(const LaunchOptions& o) {
  if (o.command.empty()) throw Error(Exit::Usage, "nothing to run: rtrain launch [options] -- COMMAND");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw Error(Exit::Usage, fmt::format("--node-rank {}: must be 0 to {} for --nnodes {}", o.node_rank, o.nnodes - 1, o.nnodes));
  if (o.nnodes > 1 && o.master_port == 0)
    throw Error(Exit::Usage, "--master-port 0 works on one node only: the other nodes' agents must know node 0's port");
  const std::string run_id = o.run_id.empty() ? fmt::format("{:08x}", std::random_device{}()) : o.run_id;
  const std::string hb_dir =
      o.log_dir.empty() ? fmt::format("{}/rtrain-{}-{}", std::filesystem::temp_directory_path().string(), run_id, o.node_rank)
                        : o.log_dir;
  std::error_code ec;
  std::filesystem::create_directories(hb_dir, ec);
  if (ec) throw Error(Exit::IoErr, "create " + hb_dir + ": " + ec.message());
  // Without --log-dir the heartbeat files live in a folder of their own, removed at the end.
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{o.log_dir.empty() ? hb_dir : std::string()};
  if (!o.ckpt_dir.empty()) {
    std::filesystem::create_directories(o.ckpt_dir, ec);
    if (ec) throw Error(Exit::IoErr, "create " + o.ckpt_dir + ": " + ec.message());
  }
  Run run{o, run_id, hb_dir, Events(o.events_path), {}};
  return o.node_rank == 0 ? lead(run) : follow(run);
}

}  // namespace rkit::rtrain
