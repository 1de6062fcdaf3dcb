// rtrain's communication layer: a TCP key-value store for Gloo's rendezvous (Debian's
// Gloo has none) and a communicator that runs Gloo collectives on one worker thread.
#include "comm.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rtrain {

namespace {

using Clock = std::chrono::steady_clock;

// --- environment ----------------------------------------------------------------------

// NAME's value as an integer in [lo, hi]; Error(Usage) naming the variable otherwise.
int env_int(const char* name, const char* text, int lo, int hi, const char* expected) {
  const std::string s = text;
  int value = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, value);
  if (s.empty() || ec != std::errc() || p != end || value < lo || value > hi)
    throw Error(Exit::Usage, fmt::format("{}='{}' is not {}", name, s, expected));
  return value;
}

// --- sockets --------------------------------------------------------------------------

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, std::numeric_limits<int>::max()));
}

void put_u32(std::vector<char>& out, std::size_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

constexpr std::size_t kMaxKey = 4096;
constexpr std::size_t kMaxValue = std::size_t{256} << 20;
constexpr std::size_t kMaxKeys = 65536;

// True when every address `host` resolves to is a loopback one (127/8, ::1).
bool is_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  bool all = true;
  for (addrinfo* a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all = all && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      all = all && IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    } else {
      all = false;
    }
  }
  ::freeaddrinfo(res);
  return all;
}

// Gloo writes to its sockets with writev(2), which raises SIGPIPE when the peer is gone
// and so would kill the process before Gloo can report the error. Blocks SIGPIPE on this
// thread, and so in the threads it starts meanwhile (Gloo's device loop, the worker, the
// store's server), where it stays blocked; on exit, discards a SIGPIPE raised here and
// restores this thread's mask. The process's disposition is left alone.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    if (sigismember(&old_, SIGPIPE)) return;
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
      const timespec zero{};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_, old_;
};

// Gloo's error text without its "[file:line] " prefix, on one line.
std::string gloo_reason(const char* what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const auto close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

// --- DistEnv --------------------------------------------------------------------------

DistEnv DistEnv::from_env() {
  DistEnv env;
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (!rank && !world) return env;
  if (!rank || !world)
    throw Error(Exit::Usage, fmt::format("{} is set but {} is not", rank ? "RANK" : "WORLD_SIZE",
                                         rank ? "WORLD_SIZE" : "RANK"),
                "set both, as rtrain launch and torchrun do, or neither for one rank");
  constexpr int kMax = std::numeric_limits<int>::max();
  env.world = env_int("WORLD_SIZE", world, 1, kMax, "a positive integer");
  env.rank = env_int("RANK", rank, 0, kMax, "a non-negative integer");
  if (env.rank >= env.world)
    throw Error(Exit::Usage, fmt::format("RANK={} is not below WORLD_SIZE={}", env.rank, env.world));
  if (const char* v = std::getenv("LOCAL_RANK")) {
    env.local_rank = env_int("LOCAL_RANK", v, 0, kMax, "a non-negative integer");
    if (env.local_rank >= env.world)
      throw Error(Exit::Usage, fmt::format("LOCAL_RANK={} is not below WORLD_SIZE={}", env.local_rank, env.world));
  }
  if (const char* v = std::getenv("MASTER_ADDR")) {
    if (!*v) throw Error(Exit::Usage, "MASTER_ADDR is empty");
    env.master_addr = v;
  }
  if (const char* v = std::getenv("MASTER_PORT"))
    env.master_port = env_int("MASTER_PORT", v, 1, 65535, "a port number (1 to 65535)");
  return env;
}

// --- TcpStore: the server -------------------------------------------------------------

class TcpStore::Server {
 public:
  explicit Server(int port) {
    // Every interface, IPv6 and IPv4 alike where the host has IPv6 (MASTER_ADDR may name either).
    UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1, zero = 0;
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (fd.get() >= 0) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(static_cast<std::uint16_t>(port));
      len = sizeof(sockaddr_in6);
    } else {
      fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (fd.get() < 0) throw system_error("rendezvous store: socket", errno);
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(static_cast<std::uint16_t>(port));
      len = sizeof(sockaddr_in);
    }
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd.get(), 1024) != 0)
      throw Error(Exit::Unavailable, fmt::format("store: cannot listen on port {}: {}", port,
                                                 std::strerror(errno)),
                  "another job may be using MASTER_PORT; choose another port");
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
      throw system_error("rendezvous store: getsockname", errno);
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    set_nonblocking(fd.get());
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) throw system_error("rendezvous store: pipe", errno);
    wake_read_ = UniqueFd(pipe_fds[0]);
    wake_write_ = UniqueFd(pipe_fds[1]);
    listen_ = std::move(fd);
    thread_ = std::thread([this] { run(); });
  }

  ~Server() {
    const char c = 'q';
    [[maybe_unused]] auto n = ::write(wake_write_.get(), &c, 1);
    thread_.join();
  }

  int port() const { return port_; }

 private:
  struct Conn {
    UniqueFd fd;
    std::vector<char> in, out;
    std::size_t out_off = 0;
  };

  void run() {
    std::vector<Conn> conns;
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_read_.get(), POLLIN, 0});
      fds.push_back({listen_.get(), POLLIN, 0});
      for (auto& c : conns)
        fds.push_back({c.fd.get(), static_cast<short>(POLLIN | (c.out.size() > c.out_off ? POLLOUT : 0)), 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;  // cannot happen with valid descriptors; clients then time out
      }
      if (fds[0].revents) return;
      bool changed = false;  // a set happened: parked requests may now be answerable
      for (std::size_t i = 0; i + 2 < fds.size(); ++i) {
        const short ev = fds[i + 2].revents;
        Conn& c = conns[i];
        bool alive = true;
        if (ev & POLLIN) alive = read_some(c);
        else if (ev & (POLLERR | POLLHUP | POLLNVAL)) alive = false;
        if (alive) alive = serve(c, changed);
        if (alive && (ev & POLLOUT)) alive = flush(c);
        if (!alive) c.fd.reset();
      }
      while (changed) {
        changed = false;
        for (auto& c : conns)
          if (c.fd.get() >= 0 && !serve(c, changed)) c.fd.reset();
      }
      conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.fd.get() < 0; }),
                  conns.end());
      if (fds[1].revents & POLLIN) {
        for (;;) {
          const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conns.push_back(Conn{UniqueFd(fd), {}, {}, 0});
        }
      }
    }
  }

  static bool read_some(Conn& c) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
      if (n > 0) {
        c.in.insert(c.in.end(), buf, buf + n);
        if (static_cast<std::size_t>(n) < sizeof buf) return true;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n < 0 && errno == EINTR) continue;
      return false;  // closed or reset
    }
  }

  static bool flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.out_off += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.out_off = 0;
    return true;
  }

  // Answers the complete requests at the front of c.in, in order; stops at an incomplete
  // one or at a get/wait whose keys are missing (answered after a later set). False: a
  // malformed request, or the connection failed.
  bool serve(Conn& c, bool& changed) {
    std::size_t pos = 0;
    bool ok = true;
    for (;;) {
      const char* p = c.in.data() + pos;
      const std::size_t avail = c.in.size() - pos;
      if (avail < 5) break;
      const char op = p[0];
      const std::size_t a = get_u32(p + 1);
      if (op == 'S' || op == 'G') {
        if (a > kMaxKey) return false;
        if (avail < 5 + a) break;
        std::string key(p + 5, a);
        if (op == 'G') {
          auto it = kv_.find(key);
          if (it == kv_.end()) break;
          c.out.push_back(0);
          put_u32(c.out, it->second.size());
          c.out.insert(c.out.end(), it->second.begin(), it->second.end());
          pos += 5 + a;
        } else {
          if (avail < 9 + a) break;
          const std::size_t vlen = get_u32(p + 5 + a);
          if (vlen > kMaxValue) return false;
          if (avail < 9 + a + vlen) break;
          kv_[std::move(key)].assign(p + 9 + a, p + 9 + a + vlen);
          c.out.push_back(0);
          pos += 9 + a + vlen;
          changed = true;
        }
      } else if (op == 'W') {
        if (a > kMaxKeys) return false;
        std::size_t q = 5;
        bool complete = true, present = true;
        for (std::size_t k = 0; k < a; ++k) {
          if (avail < q + 4) { complete = false; break; }
          const std::size_t klen = get_u32(p + q);
          if (klen > kMaxKey) return false;
          if (avail < q + 4 + klen) { complete = false; break; }
          present = present && kv_.count(std::string(p + q + 4, klen)) > 0;
          q += 4 + klen;
        }
        if (!complete || !present) break;
        c.out.push_back(0);
        pos += q;
      } else {
        return false;
      }
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
    if (c.out.size() > c.out_off) ok = flush(c);
    return ok;
  }

  UniqueFd listen_, wake_read_, wake_write_;
  int port_ = 0;
  std::map<std::string, std::vector<char>> kv_;  // only the server thread touches it
  std::thread thread_;
};

// --- TcpStore: the client -------------------------------------------------------------

TcpStore::TcpStore(const std::string& host, int port, bool is_host, std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  if (is_host) {
    server_ = std::make_unique<Server>(port);
    port_ = server_->port();
    host_ = "127.0.0.1";  // the host's own client: over loopback, whatever MASTER_ADDR names
  }
  std::lock_guard lock(mu_);
  connect_locked(Clock::now() + timeout_);
}

TcpStore::~TcpStore() {
  close_locked();
  server_.reset();
}

void TcpStore::close_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TcpStore::connect_locked(Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port_);
  const int rc = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &res);
  if (rc != 0)
    throw Error(Exit::Unavailable, fmt::format("store {}:{}: cannot resolve the host: {}", host_, port_,
                                               ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  std::string why = "timed out";
  for (;;) {
    for (addrinfo* a = res; a; a = a->ai_next) {
      UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      if (fd.get() < 0) continue;
      int err = 0;
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          pollfd pfd{fd.get(), POLLOUT, 0};
          const int n = ::poll(&pfd, 1, std::max(ms_left(deadline), 1));
          socklen_t len = sizeof err;
          if (n <= 0) err = ETIMEDOUT;
          else if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
      if (err == 0) {
        const int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd.release();
        return;
      }
      why = std::strerror(err);
    }
    if (Clock::now() >= deadline) break;
    // The host (rank 0) may not listen yet: try again shortly.
    std::this_thread::sleep_for(std::min(std::chrono::milliseconds(50),
                                         std::chrono::milliseconds(std::max(ms_left(deadline), 1))));
  }
  throw Error(Exit::Unavailable,
              fmt::format("store {}:{}: not reachable within {} ms: {}", host_, port_,
                          std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count(), why),
              "rank 0 hosts the store on MASTER_ADDR:MASTER_PORT; is it running?");
}

void TcpStore::request(const std::vector<char>& msg, bool with_value, std::vector<char>* value,
                       std::chrono::milliseconds timeout, const std::string& what) {
  std::lock_guard lock(mu_);
  const auto deadline = Clock::now() + timeout;
  if (fd_ < 0) connect_locked(deadline);
  const auto fail = [&](Exit code, const std::string& why) {
    close_locked();  // a reply may still come: this connection is out of step now
    return Error(code, fmt::format("store {}:{}: {}: {}", host_, port_, what, why));
  };
  std::size_t sent = 0;
  while (sent < msg.size()) {
    const ssize_t n = ::send(fd_, msg.data() + sent, msg.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw fail(Exit::Unavailable, std::strerror(errno));
    pollfd pfd{fd_, POLLOUT, 0};
    if (::poll(&pfd, 1, ms_left(deadline)) == 0)
      throw fail(Exit::Unavailable, fmt::format("timed out after {} ms", timeout.count()));
  }
  // The reply: a status byte, then (get) the value's length and bytes.
  std::vector<char> got;
  std::size_t need = with_value ? 5 : 1;
  char buf[65536];
  while (got.size() < need) {
    pollfd pfd{fd_, POLLIN, 0};
    const int n = ::poll(&pfd, 1, ms_left(deadline));
    if (n == 0) throw fail(Exit::Unavailable, fmt::format("timed out after {} ms", timeout.count()));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw fail(Exit::Unavailable, std::strerror(errno));
    }
    const ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, need - got.size()), 0);
    if (r == 0) throw fail(Exit::Unavailable, "the store host closed the connection (rank 0 gone?)");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw fail(Exit::Unavailable, std::strerror(errno));
    }
    got.insert(got.end(), buf, buf + r);
    if (with_value && got.size() == 5 && need == 5) need = 5 + get_u32(got.data() + 1);
  }
  if (got[0] != 0) throw fail(Exit::Software, "bad reply");
  if (value) value->assign(got.begin() + 5, got.end());
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  if (key.size() > kMaxKey || data.size() > kMaxValue)
    throw Error(Exit::Software, fmt::format("rendezvous store: key '{}' or its value is too long", key));
  std::vector<char> msg{'S'};
  put_u32(msg, key.size());
  msg.insert(msg.end(), key.begin(), key.end());
  put_u32(msg, data.size());
  msg.insert(msg.end(), data.begin(), data.end());
  request(msg, false, nullptr, timeout_, "set '" + key + "'");
}

std::vector<char> TcpStore::get(const std::string& key) {
  if (key.size() > kMaxKey) throw Error(Exit::Software, fmt::format("rendezvous store: key '{}' is too long", key));
  std::vector<char> msg{'G'};
  put_u32(msg, key.size());
  msg.insert(msg.end(), key.begin(), key.end());
  std::vector<char> value;
  request(msg, true, &value, timeout_, "get '" + key + "'");
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  if (keys.size() > kMaxKeys) throw Error(Exit::Software, "rendezvous store: too many keys to wait for");
  std::vector<char> msg{'W'};
  put_u32(msg, keys.size());
  std::string names;
  for (const auto& k : keys) {
    if (k.size() > kMaxKey) throw Error(Exit::Software, fmt::format("rendezvous store: key '{}' is too long", k));
    put_u32(msg, k.size());
    msg.insert(msg.end(), k.begin(), k.end());
    names += (names.empty() ? "'" : ", '") + k + "'";
  }
  request(msg, false, nullptr, timeout, "wait for " + names);
}

// --- CommTimes ------------------------------------------------------------------------

double CommTimes::hidden_fraction() const {
  if (comm_s <= 0) return 1;
  return std::clamp(1 - exposed_s / comm_s, 0.0, 1.0);
}

// --- Communicator ---------------------------------------------------------------------

// The Gloo context and the thread that runs the collectives, one at a time in order.
struct Communicator::Worker {
  struct Task {
    std::string op, detail;                  // "allreduce", "bucket 2, 1024 floats": for errors
    std::function<void(std::uint32_t)> run;  // the argument: the collective's Gloo tag
    bool timed = false;                      // a bucket all-reduce: counts in step_comm_s
  };

  int rank = 0, world = 1;
  std::unique_ptr<TcpStore> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  std::uint64_t submitted = 0, completed = 0;  // tasks; a skipped one (after an error) counts as completed
  std::exception_ptr error;                    // the first failure: the communicator is broken
  bool stopping = false;
  double step_comm_s = 0;
  std::thread thread;

  ~Worker() {
    if (thread.joinable()) {
      {
        std::lock_guard lock(mu);
        stopping = true;
      }
      cv.notify_all();
      thread.join();
    }
    context.reset();  // closes the pairs: the peers see this rank go
    device.reset();
    store.reset();    // rank 0: stops the store's server
  }

  std::uint64_t submit(Task t) {
    std::lock_guard lock(mu);
    if (error) std::rethrow_exception(error);
    queue.push_back(std::move(t));
    const std::uint64_t seq = ++submitted;
    cv.notify_all();
    return seq;
  }

  // Blocks until task `seq` (and so every earlier one) has run; rethrows the first failure.
  void wait_for(std::uint64_t seq) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return completed >= seq; });
    if (error) std::rethrow_exception(error);
  }

  void run_blocking(Task t) { wait_for(submit(std::move(t))); }

  // "rank 0 of 2: allreduce #7 (bucket 1, 4096 floats) with rank 1: Connection closed by peer [10.0.0.2]:4711"
  // (the peer's rank is known for two ranks; else Gloo's message names its address).
  Error failure(const Task& t, std::uint32_t tag, Exit code, const std::string& why) const {
    const std::string peer = world == 2 ? fmt::format(" with rank {}", 1 - rank) : "";
    return Error(code, fmt::format("rank {} of {}: {} #{} ({}){}: {}", rank, world, t.op, tag, t.detail, peer, why),
                 code == Exit::Unavailable ? "a peer rank exited, was killed, or stalled past the timeout; see its log"
                                           : "");
  }

  void loop() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);  // see SigpipeBlocked
    std::uint32_t tag = 0;  // the next collective's; the same sequence on every rank
    for (;;) {
      Task t;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping) return;
        t = std::move(queue.front());
        queue.pop_front();
        if (error) {  // out of step with the other ranks: run nothing more
          ++completed;
          cv.notify_all();
          continue;
        }
      }
      const std::uint32_t my_tag = tag++;
      std::exception_ptr failed;
      const auto start = Clock::now();
      try {
        t.run(my_tag);
      } catch (const Error&) {
        failed = std::current_exception();
      } catch (const gloo::Exception& e) {
        failed = std::make_exception_ptr(failure(t, my_tag, Exit::Unavailable, gloo_reason(e.what())));
      } catch (const std::exception& e) {
        failed = std::make_exception_ptr(failure(t, my_tag, Exit::Software, gloo_reason(e.what())));
      } catch (...) {
        failed = std::make_exception_ptr(failure(t, my_tag, Exit::Software, "unknown exception"));
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      {
        std::lock_guard lock(mu);
        if (failed && !error) error = failed;
        if (t.timed) step_comm_s += seconds;
        ++completed;
      }
      cv.notify_all();
    }
  }
};

namespace {

using ReduceFunc = void (*)(void*, const void*, const void*, std::size_t);

template <typename T>
void gloo_allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, T* data, std::size_t n, std::uint32_t tag) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(data, n);
  opts.setReduceFunction(static_cast<ReduceFunc>(&gloo::sum<T>));
  opts.setTag(tag);
  gloo::allreduce(opts);  // ring (the default): a fixed order of additions, the same result on every rank
}

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(const DistEnv& env, std::chrono::milliseconds timeout) {
  if (env.world < 1 || env.rank < 0 || env.rank >= env.world)
    throw Error(Exit::Usage, fmt::format("rank {} of world size {} is out of range", env.rank, env.world));
  if (env.world > 1 && (env.master_port < 1 || env.master_port > 65535))
    throw Error(Exit::Usage, fmt::format("master port {} is not a port number (1 to 65535)", env.master_port));
  std::unique_ptr<Communicator> c(new Communicator());
  c->rank_ = env.rank;
  c->world_ = env.world;
  if (env.world == 1) return c;

  const SigpipeBlocked no_sigpipe;  // here and in every thread started below
  auto w = std::make_unique<Worker>();
  w->rank = env.rank;
  w->world = env.world;
  const std::string where = fmt::format("rank {} of {}: rendezvous", env.rank, env.world);
  const std::string hint = "every rank must start and reach rank 0's store (MASTER_ADDR:MASTER_PORT) within the "
                           "timeout; see the other ranks' logs";
  try {
    w->store = std::make_unique<TcpStore>(env.master_addr, env.master_port, env.rank == 0, timeout);
    gloo::transport::tcp::attr attr;
    if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) {
      attr.iface = iface;
    } else if (is_loopback(env.master_addr)) {
      attr.hostname = "127.0.0.1";
    } else {
      char name[256] = {};
      if (::gethostname(name, sizeof name - 1) != 0) throw system_error("gethostname", errno);
      attr.hostname = name;
    }
    w->device = gloo::transport::tcp::CreateDevice(attr);
    w->context = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world);
    w->context->setTimeout(timeout);
    w->context->connectFullMesh(*w->store, w->device);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", where, e.what()), e.hint().empty() ? hint : e.hint());
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet
    throw Error(Exit::Unavailable, fmt::format("{}: {}", where, gloo_reason(e.what())), hint);
  }
  w->thread = std::thread([wp = w.get()] { wp->loop(); });
  c->worker_ = std::move(w);
  return c;
}

Communicator::~Communicator() = default;

void Communicator::allreduce_sum(float* data, std::size_t n) {
  if (!worker_ || n == 0) return;
  auto ctx = worker_->context;
  worker_->run_blocking({"allreduce", fmt::format("{} floats", n),
                         [ctx, data, n](std::uint32_t tag) { gloo_allreduce_sum(ctx, data, n, tag); }});
}

void Communicator::allreduce_sum(double* data, std::size_t n) {
  if (!worker_ || n == 0) return;
  auto ctx = worker_->context;
  worker_->run_blocking({"allreduce", fmt::format("{} doubles", n),
                         [ctx, data, n](std::uint32_t tag) { gloo_allreduce_sum(ctx, data, n, tag); }});
}

void Communicator::broadcast(void* data, std::size_t bytes, int root) {
  if (root < 0 || root >= world_)
    throw Error(Exit::Usage, fmt::format("broadcast: root {} is not a rank of {}", root, world_));
  if (!worker_ || bytes == 0) return;
  std::shared_ptr<gloo::Context> ctx = worker_->context;
  worker_->run_blocking({"broadcast", fmt::format("{} bytes from rank {}", bytes, root),
                         [ctx, data, bytes, root](std::uint32_t tag) {
                           gloo::BroadcastOptions opts(ctx);
                           opts.setOutput(static_cast<std::uint8_t*>(data), bytes);
                           opts.setRoot(root);
                           opts.setTag(tag);
                           gloo::broadcast(opts);
                         }});
}

void Communicator::barrier() {
  if (!worker_) return;
  std::shared_ptr<gloo::Context> ctx = worker_->context;
  worker_->run_blocking({"barrier", "all ranks", [ctx](std::uint32_t tag) {
                           gloo::BarrierOptions opts(ctx);
                           opts.setTag(tag);
                           gloo::barrier(opts);
                         }});
}

void Communicator::set_buckets(float* grads, std::vector<std::pair<std::size_t, std::size_t>> buckets, float scale) {
  if (step_open_) throw Error(Exit::Software, "set_buckets: a step is open; call wait() first");
  for (const auto& [offset, count] : buckets)
    if (offset + count < offset) throw Error(Exit::Software, "set_buckets: a bucket's range overflows");
  grads_ = grads;
  buckets_ = std::move(buckets);
  scale_ = scale;
  readied_.assign(buckets_.size(), false);
}

void Communicator::begin_step() {
  if (step_open_) throw Error(Exit::Software, "begin_step: the previous step was not waited for");
  std::fill(readied_.begin(), readied_.end(), false);
  step_open_ = true;
  step_last_ = 0;
  if (worker_) {
    std::lock_guard lock(worker_->mu);
    worker_->step_comm_s = 0;  // no bucket task is in flight between steps
  }
}

void Communicator::ready(std::size_t bucket) {
  if (!step_open_) throw Error(Exit::Software, "ready: no step is open; call begin_step() first");
  if (bucket >= buckets_.size())
    throw Error(Exit::Software, fmt::format("ready: bucket {} of {} does not exist", bucket, buckets_.size()));
  if (readied_[bucket]) throw Error(Exit::Software, fmt::format("ready: bucket {} readied twice in one step", bucket));
  readied_[bucket] = true;
  float* p = grads_ + buckets_[bucket].first;
  const std::size_t n = buckets_[bucket].second;
  const float scale = scale_;
  const auto scale_all = [p, n, scale] {
    if (scale != 1.0f)
      for (std::size_t i = 0; i < n; ++i) p[i] *= scale;
  };
  if (!worker_) {
    scale_all();
    return;
  }
  auto ctx = worker_->context;
  Worker::Task t{"allreduce", fmt::format("bucket {}, {} floats", bucket, n),
                 [ctx, p, n, scale_all](std::uint32_t tag) {
                   if (n > 0) gloo_allreduce_sum(ctx, p, n, tag);
                   scale_all();  // after the sum, the same on every rank: identical results
                 },
                 true};
  step_last_ = worker_->submit(std::move(t));
}

CommTimes Communicator::wait() {
  if (!step_open_) throw Error(Exit::Software, "wait: no step is open; call begin_step() first");
  for (std::size_t b = 0; b < readied_.size(); ++b)
    if (!readied_[b]) throw Error(Exit::Software, fmt::format("wait: bucket {} was never readied this step", b));
  step_open_ = false;
  CommTimes t;
  if (!worker_) return t;
  const auto start = Clock::now();
  worker_->wait_for(step_last_);
  t.exposed_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard lock(worker_->mu);
  t.comm_s = worker_->step_comm_s;
  return t;
}

}  // namespace rkit::rtrain
