// File: rtrain/launch.cpp — rtrain launch on one node (launch.hpp).
#include "launch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "rkit/error.hpp"
#include "rkit/jsonl.hpp"
#include "rkit/process.hpp"

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

}  // namespace

std::vector<std::pair<std::string, std::string>> worker_env(const LaunchOptions& o, int rank, int restart_count,
                                                            const std::string& run_id, int master_port,
                                                            const std::string& heartbeat_file) {
  const std::string n = std::to_string(o.nproc), r = std::to_string(rank);
  std::vector<std::pair<std::string, std::string>> env = {
      {"RANK", r}, {"LOCAL_RANK", r}, {"GROUP_RANK", "0"}, {"ROLE_RANK", r}, {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", n}, {"WORLD_SIZE", n}, {"GROUP_WORLD_SIZE", "1"}, {"ROLE_WORLD_SIZE", n},
      {"MASTER_ADDR", o.master_addr}, {"MASTER_PORT", std::to_string(master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)}, {"TORCHELASTIC_RUN_ID", run_id},
      {"RKIT_HEARTBEAT_FILE", heartbeat_file}};
  if (o.nproc > 1 && !std::getenv("OMP_NUM_THREADS")) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

int launch(const LaunchOptions& o) {
  if (o.command.empty()) throw Error(Exit::Usage, "nothing to run: rtrain launch [options] -- COMMAND");
  const std::string run_id = o.run_id.empty() ? fmt::format("{:08x}", std::random_device{}()) : o.run_id;
  const int port = o.master_port == 0 ? free_port(o.master_addr) : o.master_port;
  const std::string hb_dir =
      o.log_dir.empty() ? fmt::format("{}/rtrain-{}", std::filesystem::temp_directory_path().string(), run_id)
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
  Events events(o.events_path);
  SignalForwarder forward;  // SIGINT/SIGTERM/SIGHUP to us reach every worker's group

  for (int generation = 0;; ++generation) {
    std::vector<Worker> workers(static_cast<std::size_t>(o.nproc));
    for (int rank = 0; rank < o.nproc; ++rank) {
      Worker& w = workers[static_cast<std::size_t>(rank)];
      w.rank = rank;
      w.heartbeat = fmt::format("{}/heartbeat.{}", hb_dir, rank);
      std::ofstream(w.heartbeat).flush();  // touched now: the timeout counts from the start
      if (!o.log_dir.empty()) {
        w.out_log.open(fmt::format("{}/attempt-{}.rank-{}.out", o.log_dir, generation, rank));
        w.err_log.open(fmt::format("{}/attempt-{}.rank-{}.err", o.log_dir, generation, rank));
      }
      SpawnOptions s;
      s.argv = o.command;
      s.env = worker_env(o, rank, generation, run_id, port, w.heartbeat);
      s.out = Redirect::pipe();
      s.err = Redirect::pipe();
      w.child = forward.spawn(s);
      w.started = now_s();
      for (int fd : {w.child->stdout_fd(), w.child->stderr_fd()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    events.emit("start", {{"generation", generation}, {"workers", o.nproc}, {"master_port", port}, {"run_id", run_id}});

    // Watch until every worker has ended, or one failed (then the others are stopped).
    std::optional<int> failed;  // the first failing rank
    std::string why;
    auto running = [&] {
      return std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return !w.status; });
    };
    double stop_time = 0;  // when the group was told to stop
    while (running()) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Worker*, bool>> owners;
      for (auto& w : workers)
        for (bool err : {false, true}) {
          const int fd = err ? w.child->stderr_fd() : w.child->stdout_fd();
          if (fd >= 0) {
            fds.push_back({fd, POLLIN, 0});
            owners.emplace_back(&w, err);
          }
        }
      ::poll(fds.data(), fds.size(), 50);
      for (std::size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents && !pump(fds[i].fd, *owners[i].first, owners[i].second)) {
          if (owners[i].second) ::close(owners[i].first->child->take_stderr_fd());
          else ::close(owners[i].first->child->take_stdout_fd());
        }
      const double now = now_s();
      for (auto& w : workers) {
        if (w.status) continue;
        if (auto st = w.child->try_wait()) {
          w.status = st;
          w.ended = now;
          events.emit("worker_exit", {{"generation", generation}, {"rank", w.rank}, {"exit_code", code_of(*st)},
                                      {"uptime_s", now - w.started}});
          if (!st->success() && !failed) {
            failed = w.rank;
            why = fmt::format("rank {} {} after {:.1f}s", w.rank, st->describe(), now - w.started);
          }
        } else if (o.heartbeat_timeout_s > 0 && !failed) {
          struct stat sb{};
          if (::stat(w.heartbeat.c_str(), &sb) == 0 &&
              now - static_cast<double>(sb.st_mtim.tv_sec) - sb.st_mtim.tv_nsec / 1e9 > o.heartbeat_timeout_s) {
            failed = w.rank;
            why = fmt::format("rank {} hung: no heartbeat for {:.0f}s", w.rank, o.heartbeat_timeout_s);
            events.emit("hang_detected", {{"generation", generation}, {"rank", w.rank}});
          }
        }
      }
      if ((failed || forward.last_signal()) && stop_time == 0) {
        stop_time = now;  // the group ends together: SIGTERM now, SIGKILL after the grace
        for (auto& w : workers)
          if (!w.status) w.child->signal(SIGTERM);
      }
      if (stop_time > 0 && now - stop_time > o.kill_grace_s)
        for (auto& w : workers)
          if (!w.status) w.child->signal(SIGKILL);
    }
    // What the workers wrote last (the pipes may hold it after they exit; a process they
    // left behind may keep a pipe open, so only what is there now).
    for (auto& w : workers)
      for (bool err : {false, true}) {
        const int fd = err ? w.child->stderr_fd() : w.child->stdout_fd();
        if (fd >= 0)
          while (pump(fd, w, err) && ::poll(std::vector<pollfd>{{fd, POLLIN, 0}}.data(), 1, 0) > 0) {
          }
        std::string& rest = err ? w.err_buf : w.out_buf;  // a last line without its newline
        if (!rest.empty()) (err ? std::cerr : std::cout) << fmt::format("[{}]: {}\n", w.rank, rest);
      }
    for (auto& w : workers) forward.remove(*w.child);  // ended: no longer signalled
    if (!failed && !forward.last_signal()) {
      events.emit("done", {{"generation", generation}, {"exit_code", 0}});
      return 0;
    }
    // As srun: the highest exit code, of the workers that ended on their own (not the
    // ones this stop ended), and of the hung one.
    int code = 0;
    for (const auto& w : workers)
      if (w.status && (w.ended <= stop_time || (failed && w.rank == *failed))) code = std::max(code, code_of(*w.status));
    if (forward.last_signal()) {
      events.emit("done", {{"generation", generation}, {"signal", signal_name(forward.last_signal())}});
      return 128 + forward.last_signal();
    }
    const Worker& first = workers[static_cast<std::size_t>(*failed)];
    std::cerr << fmt::format("rtrain: worker failed (generation {}): {}\n", generation, why);
    for (const auto& line : first.err_tail) std::cerr << fmt::format("rtrain:   [{}]: {}\n", first.rank, line);
    const int first_code = first.status ? code_of(*first.status) : 0;
    const bool qualifies =
        o.restart_on.empty() || std::find(o.restart_on.begin(), o.restart_on.end(), first_code) != o.restart_on.end();
    if (generation >= o.max_restarts || !qualifies) {
      events.emit("done", {{"generation", generation}, {"exit_code", code}, {"root_cause", why}});
      return code == 0 ? 1 : code;
    }
    events.emit("restart", {{"generation", generation + 1}, {"root_cause", why}});
  }
}

}  // namespace rkit::rtrain
