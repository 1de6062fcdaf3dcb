// File: rtrain/tcp_store.cpp — the authenticated, bounded TCP key-value store (tcp_store.hpp).
#include "tcp_store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>
#include <thread>

#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rtrain {

namespace {

using Clock = std::chrono::steady_clock;

// --- wire helpers ---------------------------------------------------------------------

constexpr char kHelloMagic[4] = {'R', 'K', 'S', '1'};
constexpr char kAuthMagic[4] = {'R', 'K', 'C', '1'};
constexpr char kOkMagic[4] = {'R', 'K', 'O', 'K'};
constexpr char kNoMagic[4] = {'R', 'K', 'N', 'O'};
constexpr std::size_t kNonce = 32, kTag = crypto_auth_hmacsha512256_BYTES;
constexpr std::size_t kHello = 4 + kNonce;        // "RKS1" Ns
constexpr std::size_t kAuth = 4 + kNonce + kTag;  // "RKC1" Nc proof
constexpr std::size_t kAnswer = 4 + kTag;         // "RKOK" proof ("RKNO": 4 bytes only)
constexpr std::size_t kKeyOverhead = 64;          // what a key costs beyond its bytes, for max_bytes
constexpr std::size_t kMaxAwaitMs = 60000;        // the longest an await waits
static_assert(kTag == 32);

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

void put_str(std::vector<char>& out, const std::string& s) {
  put_u32(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_bytes(std::vector<char>& out, const std::vector<char>& s) {
  put_u32(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Reads a payload's fields, never past its end.
class Cursor {
 public:
  Cursor(const char* p, std::size_t n) : p_(p), n_(n) {}
  bool u8(unsigned char& v) {
    if (n_ < 1) return false;
    v = static_cast<unsigned char>(*p_);
    ++p_, --n_;
    return true;
  }
  bool u32(std::size_t& v) {
    if (n_ < 4) return false;
    v = get_u32(p_);
    p_ += 4, n_ -= 4;
    return true;
  }
  bool str(std::string& s, std::size_t max) {
    std::size_t len = 0;
    if (!u32(len) || len > max || len > n_) return false;
    s.assign(p_, len);
    p_ += len, n_ -= len;
    return true;
  }
  bool bytes(std::vector<char>& s, std::size_t max) {
    std::size_t len = 0;
    if (!u32(len) || len > max || len > n_) return false;
    s.assign(p_, p_ + len);
    p_ += len, n_ -= len;
    return true;
  }
  bool keys(std::vector<std::string>& out, const StoreLimits& l) {
    std::size_t n = 0;
    if (!u32(n) || n > l.max_keys || n > n_ / 4) return false;
    out.resize(n);
    for (auto& k : out)
      if (!str(k, l.max_key)) return false;
    return true;
  }
  bool done() const { return n_ == 0; }

 private:
  const char* p_;
  std::size_t n_;
};

// HMAC(key, label || a || b): a handshake proof.
std::array<unsigned char, kTag> proof(const Key& key, const char* label, const unsigned char* a,
                                      const unsigned char* b) {
  crypto_auth_hmacsha512256_state st;
  crypto_auth_hmacsha512256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha512256_update(&st, reinterpret_cast<const unsigned char*>(label), std::strlen(label));
  crypto_auth_hmacsha512256_update(&st, a, kNonce);
  crypto_auth_hmacsha512256_update(&st, b, kNonce);
  std::array<unsigned char, kTag> out;
  crypto_auth_hmacsha512256_final(&st, out.data());
  return out;
}

// One direction's frame key: BLAKE2b-256 keyed by K over the direction's label and both nonces.
Key direction_key(const Key& key, const char* label, const unsigned char* ns, const unsigned char* nc) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, key.data(), key.size(), 32);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(label), std::strlen(label));
  crypto_generichash_update(&st, ns, kNonce);
  crypto_generichash_update(&st, nc, kNonce);
  Key out;
  crypto_generichash_final(&st, out.data(), out.size());
  return out;
}

constexpr const char* kClientLabel = "rtrain.store.client.1";
constexpr const char* kHostLabel = "rtrain.store.host.1";
constexpr const char* kToHost = "rtrain.store.to-host.1";
constexpr const char* kToClient = "rtrain.store.to-client.1";

// A frame's tag: HMAC(k, seq, length, payload).
std::array<unsigned char, kTag> frame_tag(const Key& k, std::uint64_t seq, const char* payload, std::size_t n) {
  unsigned char head[12];
  for (int i = 0; i < 8; ++i) head[i] = static_cast<unsigned char>((seq >> (8 * i)) & 0xff);
  for (int i = 0; i < 4; ++i) head[8 + i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  crypto_auth_hmacsha512256_state st;
  crypto_auth_hmacsha512256_init(&st, k.data(), k.size());
  crypto_auth_hmacsha512256_update(&st, head, sizeof head);
  crypto_auth_hmacsha512256_update(&st, reinterpret_cast<const unsigned char*>(payload), n);
  std::array<unsigned char, kTag> out;
  crypto_auth_hmacsha512256_final(&st, out.data());
  return out;
}

// Appends the frame of `payload` to `out`.
void seal(std::vector<char>& out, const Key& k, std::uint64_t seq, const std::vector<char>& payload) {
  put_u32(out, payload.size());
  out.insert(out.end(), payload.begin(), payload.end());
  const auto tag = frame_tag(k, seq, payload.data(), payload.size());
  out.insert(out.end(), tag.begin(), tag.end());
}

bool tag_ok(const Key& k, std::uint64_t seq, const char* payload, std::size_t n, const char* tag) {
  const auto want = frame_tag(k, seq, payload, n);
  return crypto_verify_32(want.data(), reinterpret_cast<const unsigned char*>(tag)) == 0;
}

// --- the kernel's word on who owns the other end --------------------------------------

// How /proc/net/tcp{,6} writes a socket's end: the address's 32-bit words as the kernel
// holds them (network order), in upper-case hex, then ':' and the port ("0100007F:1F90").
std::string proc_end(const sockaddr_storage& sa) {
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    return fmt::format("{:08X}:{:04X}", in->sin_addr.s_addr, ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
  std::uint32_t w[4];
  std::memcpy(w, &in6->sin6_addr, sizeof w);
  return fmt::format("{:08X}{:08X}{:08X}{:08X}:{:04X}", w[0], w[1], w[2], w[3], ntohs(in6->sin6_port));
}

// The uid owning the TCP socket of this host (network namespace) whose own end is `self`
// and whose peer is `other`, as /proc/net/tcp{,6} lists it; -1 when it is not listed.
long socket_uid(const sockaddr_storage& self, const sockaddr_storage& other) {
  UniqueFd fd(::open(self.ss_family == AF_INET6 ? "/proc/net/tcp6" : "/proc/net/tcp", O_RDONLY | O_CLOEXEC));
  if (!fd) return -1;
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  const std::string local = proc_end(self), remote = proc_end(other);
  // Each line: "  sl: local remote st tx:rx tr:when retrnsmt uid ..."
  std::string_view rest(text);
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    std::string_view field[8];
    std::size_t n = 0;
    for (std::size_t i = 0; i < line.size() && n < 8;) {
      while (i < line.size() && line[i] == ' ') ++i;
      const std::size_t start = i;
      while (i < line.size() && line[i] != ' ') ++i;
      if (i > start) field[n++] = line.substr(start, i - start);
    }
    if (n < 8 || field[1] != local || field[2] != remote) continue;
    long uid = -1;
    const auto [p, ec] = std::from_chars(field[7].data(), field[7].data() + field[7].size(), uid);
    return ec == std::errc() ? uid : -1;
  }
  return -1;
}

// The same from the kernel's socket diagnostics (NETLINK_SOCK_DIAG), one exact lookup by
// the 4-tuple instead of a walk of every socket: -1 when there is no such socket, -2 when
// the kernel cannot be asked (then /proc/net/tcp is read).
long diag_uid(const sockaddr_storage& self, const sockaddr_storage& other) {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd) return -2;
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<std::uint8_t>(self.ss_family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  auto& id = msg.req.id;
  if (self.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&self);
    const auto* b = reinterpret_cast<const sockaddr_in*>(&other);
    id.idiag_sport = a->sin_port, id.idiag_dport = b->sin_port;
    id.idiag_src[0] = a->sin_addr.s_addr, id.idiag_dst[0] = b->sin_addr.s_addr;
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&self);
    const auto* b = reinterpret_cast<const sockaddr_in6*>(&other);
    id.idiag_sport = a->sin6_port, id.idiag_dport = b->sin6_port;
    std::memcpy(id.idiag_src, &a->sin6_addr, 16);
    std::memcpy(id.idiag_dst, &b->sin6_addr, 16);
  }
  id.idiag_cookie[0] = id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) != sizeof msg)
    return -2;
  pollfd p{fd.get(), POLLIN, 0};
  if (::poll(&p, 1, 1000) != 1) return -2;
  alignas(nlmsghdr) char buf[8192];
  const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
  if (n < static_cast<ssize_t>(sizeof(nlmsghdr))) return -2;
  const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<unsigned>(n))) return -2;
  if (h->nlmsg_type == NLMSG_ERROR) {
    const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
    return e->error == -ENOENT ? -1 : -2;
  }
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) return -2;
  return static_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_uid;
}

// The uid of the process at the other end of a connected TCP socket on this host; -1 unknown.
long peer_uid(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t a = sizeof mine, b = sizeof theirs;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &a) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &b) != 0)
    return -1;
  const long uid = diag_uid(theirs, mine);
  return uid != -2 ? uid : socket_uid(theirs, mine);
}

bool is_no_secret(const Key& key) { return sodium_is_zero(key.data(), key.size()) == 1; }

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

}  // namespace

std::size_t max_frame(const StoreLimits& l) { return l.max_value + l.max_key + 64; }

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

// --- the server -----------------------------------------------------------------------

class TcpStore::Server {
 public:
  Server(const std::string& host, int port, const Key& key, const StoreLimits& limits)
      : key_(key), same_user_(is_no_secret(key)), limits_(limits) {
    rlimit nofile{};
    if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur > 128)
      limits_.max_connections = std::min<std::size_t>(limits_.max_connections, nofile.rlim_cur - 64);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
      throw Error(Exit::Unavailable, fmt::format("store: cannot resolve {}: {}", host, ::gai_strerror(rc)));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
    int err = EADDRNOTAVAIL;
    for (addrinfo* a = res; a && !listen_; a = a->ai_next) {
      UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      if (!fd) {
        err = errno;
        continue;
      }
      const int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT only; not a second listener
      if (a->ai_family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 1024) != 0) {
        err = errno;
        continue;
      }
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
        throw system_error("store: getsockname", errno);
      port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      host_ = numeric_host(reinterpret_cast<sockaddr*>(&ss), len);
      listen_ = std::move(fd);
    }
    if (!listen_)
      throw Error(Exit::Unavailable, fmt::format("store: cannot listen on {}:{}: {}", host, port, std::strerror(err)),
                  err == EADDRINUSE ? "another job may be using this port; choose another (0: a free one)"
                                    : "the address must be one of this host's");
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) throw system_error("store: pipe", errno);
    wake_read_ = UniqueFd(pipe_fds[0]);
    wake_write_ = UniqueFd(pipe_fds[1]);
    thread_ = std::thread([this] { run(); });
  }

  ~Server() {
    const char c = 'q';
    [[maybe_unused]] auto n = ::write(wake_write_.get(), &c, 1);
    thread_.join();
  }

  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  struct Conn {
    UniqueFd fd;
    bool authed = false, dead = false, eof = false;
    Clock::time_point deadline;  // of the handshake
    unsigned char ns[kNonce];
    Key k_in{}, k_out{};
    std::uint64_t seq_in = 0, seq_out = 0;
    std::vector<char> in, out;
    std::size_t out_off = 0;
    std::vector<char> parked;  // a get or wait whose keys are missing: answered after a later set
    Clock::time_point parked_until = Clock::time_point::max();  // an await's: answered then in any case
    std::vector<std::string> watches;  // keys created with watch: KEY#closed is set when this closes
  };

  std::size_t in_cap(const Conn& c) const { return c.authed ? 4 + max_frame(limits_) + kTag : kAuth; }

  void run() {
    std::vector<Conn> conns;
    std::vector<pollfd> fds;
    Clock::time_point listen_paused_until{};
    for (;;) {
      const auto now = Clock::now();
      fds.clear();
      fds.push_back({wake_read_.get(), POLLIN, 0});
      fds.push_back({now >= listen_paused_until ? listen_.get() : -1, POLLIN, 0});
      int timeout = now >= listen_paused_until ? -1 : ms_left(listen_paused_until) + 1;
      for (auto& c : conns) {
        short ev = POLLRDHUP;
        if (c.in.size() < in_cap(c)) ev |= POLLIN;
        if (c.out.size() > c.out_off) ev |= POLLOUT;
        fds.push_back({c.fd.get(), ev, 0});
        const auto until = !c.authed ? c.deadline : !c.parked.empty() ? c.parked_until : Clock::time_point::max();
        if (until != Clock::time_point::max())
          timeout = timeout < 0 ? ms_left(until) + 1 : std::min(timeout, ms_left(until) + 1);
      }
      if (::poll(fds.data(), fds.size(), timeout) < 0) {
        if (errno == EINTR) continue;
        return;  // cannot happen with valid descriptors; clients then time out
      }
      if (fds[0].revents) return;
      bool changed = false;  // a set happened: parked requests may now be answerable
      const auto after = Clock::now();
      for (std::size_t i = 0; i < conns.size(); ++i) {
        Conn& c = conns[i];
        const short ev = fds[i + 2].revents;
        if (ev & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) read_some(c);
        if (ev & (POLLRDHUP | POLLHUP | POLLERR)) c.eof = true;  // it sends no more: served, then dropped
        if (ev & POLLOUT) flush(c);
        if (!c.dead) progress(c, changed);
        if (!c.authed && after >= c.deadline) c.dead = true;  // silent in its handshake: dropped
        if (c.eof || c.dead) drop(c, changed);
      }
      while (changed) {
        changed = false;
        for (auto& c : conns)
          if (c.fd && !c.parked.empty()) {
            progress(c, changed);
            if (c.dead) drop(c, changed);
          }
      }
      conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return !c.fd; }), conns.end());
      if (fds[1].revents & POLLIN) accept_all(conns, listen_paused_until);
    }
  }

  void accept_all(std::vector<Conn>& conns, Clock::time_point& paused_until) {
    for (;;) {
      const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors: the backlog waits; poll the listener again a little later
        // instead of spinning on it.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          paused_until = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      std::size_t pending = 0, authed = 0;
      for (const auto& c : conns) pending += c.fd && !c.authed, authed += c.fd && c.authed;
      if (authed >= limits_.max_connections) {
        ::close(fd);
        continue;
      }
      if (pending >= limits_.max_pending) {  // the oldest handshake goes: a flood cannot lock peers out
        auto oldest = conns.end();
        for (auto it = conns.begin(); it != conns.end(); ++it)
          if (it->fd && !it->authed && (oldest == conns.end() || it->deadline < oldest->deadline)) oldest = it;
        if (oldest != conns.end()) oldest->fd.reset();
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Conn c;
      c.fd = UniqueFd(fd);
      c.deadline = Clock::now() + limits_.handshake_timeout;
      ::randombytes_buf(c.ns, sizeof c.ns);
      c.out.insert(c.out.end(), kHelloMagic, kHelloMagic + 4);
      c.out.insert(c.out.end(), c.ns, c.ns + kNonce);
      flush(c);
      if (!c.dead) conns.push_back(std::move(c));
    }
  }

  void read_some(Conn& c) {
    char buf[65536];
    while (c.in.size() < in_cap(c)) {
      const ssize_t n = ::recv(c.fd.get(), buf, std::min(sizeof buf, in_cap(c) - c.in.size()), 0);
      if (n > 0) {
        c.in.insert(c.in.end(), buf, buf + n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      c.eof = true;  // closed or reset: what arrived before is still served
      return;
    }
  }

  void flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
        return;
      }
      c.out_off += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.out_off = 0;
  }

  // The connection goes: its watched keys get their KEY#closed.
  void drop(Conn& c, bool& changed) {
    for (const auto& k : c.watches) changed |= put(k + "#closed", {});
    c.watches.clear();
    if (c.fd && c.authed) --authed_;
    c.fd.reset();
  }

  // Handshake, then the requests at the front of c.in, in order; stops at an incomplete
  // frame, a parked request, or a reply not yet sent (so a peer that does not read its
  // replies makes this side hold one reply, not many).
  void progress(Conn& c, bool& changed) {
    if (!c.authed) {
      if (c.in.size() >= 4 && std::memcmp(c.in.data(), kAuthMagic, 4) != 0) {
        c.dead = true;  // not an rtrain store client: nothing is answered
        return;
      }
      if (c.in.size() < kAuth) return;
      const auto* nc = reinterpret_cast<const unsigned char*>(c.in.data() + 4);
      const auto want = proof(key_, kClientLabel, c.ns, nc);
      bool ok = crypto_verify_32(want.data(), nc + kNonce) == 0;
      if (ok && same_user_) ok = peer_uid(c.fd.get()) == static_cast<long>(::geteuid());
      if (ok && authed_ >= limits_.max_connections) {
        c.dead = true;  // full: closed without an answer, the client tries again
        return;
      }
      if (!ok) {
        [[maybe_unused]] auto n = ::send(c.fd.get(), kNoMagic, 4, MSG_NOSIGNAL | MSG_DONTWAIT);
        c.dead = true;
        return;
      }
      c.authed = true;
      ++authed_;
      c.k_in = direction_key(key_, kToHost, c.ns, nc);
      c.k_out = direction_key(key_, kToClient, c.ns, nc);
      const auto answer = proof(key_, kHostLabel, c.ns, nc);
      c.in.erase(c.in.begin(), c.in.begin() + kAuth);
      c.out.insert(c.out.end(), kOkMagic, kOkMagic + 4);
      c.out.insert(c.out.end(), answer.begin(), answer.end());
      flush(c);
    }
    if (!c.parked.empty()) {
      if (!answer(c, c.parked, changed, false)) return;  // still waiting
      c.parked.clear();
      c.parked_until = Clock::time_point::max();
      flush(c);
    }
    std::size_t pos = 0;
    while (!c.dead && c.parked.empty() && c.out.size() == c.out_off) {
      const std::size_t avail = c.in.size() - pos;
      if (avail < 4) break;
      const std::size_t n = get_u32(c.in.data() + pos);
      if (n > max_frame(limits_)) {
        c.dead = true;  // a claimed length past the limit: never buffered
        break;
      }
      if (avail < 4 + n + kTag) break;
      const char* payload = c.in.data() + pos + 4;
      if (!tag_ok(c.k_in, c.seq_in, payload, n, payload + n)) {
        c.dead = true;
        break;
      }
      ++c.seq_in;
      std::vector<char> request(payload, payload + n);
      pos += 4 + n + kTag;
      if (!answer(c, request, changed, true))
        c.parked = std::move(request);
      else
        flush(c);
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
  }

  void reply(Conn& c, const std::vector<char>& payload) { seal(c.out, c.k_out, c.seq_out++, payload); }

  void refuse(Conn& c, const std::string& why) {
    std::vector<char> p{1};
    p.insert(p.end(), why.begin(), why.end());
    reply(c, p);
  }

  // Sets key to value within the limits; false when the store is full.
  bool put(const std::string& key, const std::vector<char>& value) {
    auto it = kv_.find(key);
    const std::size_t old = it == kv_.end() ? 0 : key.size() + it->second.size() + kKeyOverhead;
    const std::size_t add = key.size() + value.size() + kKeyOverhead;
    if (it == kv_.end() && kv_.size() >= limits_.max_keys) return false;
    if (bytes_ - old + add > limits_.max_bytes) return false;
    bytes_ = bytes_ - old + add;
    if (it == kv_.end())
      kv_.emplace(key, value);
    else
      it->second = value;
    return true;
  }

  std::string full() const {
    return fmt::format("the store is full ({} keys, {} bytes; at most {} keys, {} bytes)", kv_.size(), bytes_,
                       limits_.max_keys, limits_.max_bytes);
  }

  // The reply to a look-up of `keys`: for each, present or not, and its value.
  void lookup_reply(Conn& c, const std::vector<std::string>& keys) {
    std::vector<char> p{0};
    for (const auto& k : keys) {
      auto it = kv_.find(k);
      p.push_back(it == kv_.end() ? 0 : 1);
      if (it != kv_.end()) put_bytes(p, it->second);
      if (p.size() > max_frame(limits_)) {
        refuse(c, "the values asked for are too large for one reply");
        return;
      }
    }
    reply(c, p);
  }

  // Serves one request: true when answered (a reply is queued, or the connection is to
  // close), false for a get or wait whose keys do not all exist yet, or an await whose
  // keys do not exist and whose time is not up. `fresh`: first seen (not parked yet).
  bool answer(Conn& c, const std::vector<char>& req, bool& changed, bool fresh) {
    Cursor in(req.data(), req.size());
    unsigned char op = 0;
    std::string key;
    std::vector<char> value;
    std::vector<std::string> keys;
    if (!in.u8(op)) return c.dead = true;
    switch (op) {
      case 'S':
        if (!in.str(key, limits_.max_key) || !in.bytes(value, limits_.max_value) || !in.done()) return c.dead = true;
        if (!put(key, value)) {
          refuse(c, full());
          return true;
        }
        changed = true;
        reply(c, {0});
        return true;
      case 'C': {
        unsigned char watch = 0;
        if (!in.str(key, limits_.max_key) || !in.bytes(value, limits_.max_value) || !in.u8(watch) || !in.done())
          return c.dead = true;
        if (kv_.count(key)) {
          reply(c, {0, 0});
          return true;
        }
        if (!put(key, value)) {
          refuse(c, full());
          return true;
        }
        changed = true;
        if (watch) c.watches.push_back(key);
        reply(c, {0, 1});
        return true;
      }
      case 'G': {
        if (!in.str(key, limits_.max_key) || !in.done()) return c.dead = true;
        auto it = kv_.find(key);
        if (it == kv_.end()) return false;
        std::vector<char> p{0};
        put_bytes(p, it->second);
        reply(c, p);
        return true;
      }
      case 'W':
        if (!in.keys(keys, limits_) || !in.done()) return c.dead = true;
        for (const auto& k : keys)
          if (!kv_.count(k)) return false;
        reply(c, {0});
        return true;
      case 'T':
        if (!in.keys(keys, limits_) || !in.done()) return c.dead = true;
        lookup_reply(c, keys);
        return true;
      case 'A': {  // await: as 'T', once one of the keys exists or the wait is over
        std::size_t wait_ms = 0;
        if (!in.u32(wait_ms) || !in.keys(keys, limits_) || !in.done()) return c.dead = true;
        const auto now = Clock::now();
        const auto until =
            fresh ? now + std::chrono::milliseconds(std::min<std::size_t>(wait_ms, kMaxAwaitMs)) : c.parked_until;
        const bool any = std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return kv_.count(k) > 0; });
        if (!any && now < until) {
          c.parked_until = until;
          return false;
        }
        lookup_reply(c, keys);
        return true;
      }
      case 'D':
        if (!in.keys(keys, limits_) || !in.done()) return c.dead = true;
        for (const auto& k : keys) {
          auto it = kv_.find(k);
          if (it == kv_.end()) continue;
          bytes_ -= k.size() + it->second.size() + kKeyOverhead;
          kv_.erase(it);
        }
        reply(c, {0});
        return true;
      default: return c.dead = true;
    }
  }

  Key key_;
  bool same_user_;
  StoreLimits limits_;
  UniqueFd listen_, wake_read_, wake_write_;
  int port_ = 0;
  std::string host_;
  std::map<std::string, std::vector<char>> kv_;  // only the server thread touches it
  std::size_t bytes_ = 0;
  std::size_t authed_ = 0;  // connections past their handshake
  std::thread thread_;
};

// --- the client -----------------------------------------------------------------------

namespace {

// Sends all of data before the deadline: "" when done, else why not.
std::string send_all(int fd, const char* data, std::size_t n, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < n) {
    const ssize_t r = ::send(fd, data + sent, n - sent, MSG_NOSIGNAL);
    if (r >= 0) {
      sent += static_cast<std::size_t>(r);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return std::strerror(errno);
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, ms_left(deadline)) == 0) return "timed out";
  }
  return "";
}

// Receives exactly n bytes before the deadline: "" when done, else why not.
std::string recv_all(int fd, char* data, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    pollfd pfd{fd, POLLIN, 0};
    const int p = ::poll(&pfd, 1, ms_left(deadline));
    if (p == 0) return "timed out";
    if (p < 0) {
      if (errno == EINTR) continue;
      return std::strerror(errno);
    }
    const ssize_t r = ::recv(fd, data + got, n - got, 0);
    if (r == 0) return "closed";
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return std::strerror(errno);
    }
    got += static_cast<std::size_t>(r);
  }
  return "";
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, bool is_host, std::chrono::milliseconds timeout, const Key& key,
                   StoreLimits limits)
    : host_(host), port_(port), timeout_(timeout), key_(key), limits_(limits) {
  sodium_ready();
  if (is_no_secret(key_) && !is_loopback(host))
    throw Error(Exit::Usage,
                fmt::format("store {}:{}: without a run secret the store is for loopback addresses only", host, port),
                "set RKIT_RUN_SECRET (the same on every rank), as rtrain launch does");
  if (is_host) {
    server_ = std::make_unique<Server>(host, port, key_, limits_);
    port_ = server_->port();
    host_ = server_->host();  // the host's own client: where it listens
  }
  std::lock_guard lock(mu_);
  connect_locked(Clock::now() + timeout_);
}

TcpStore::~TcpStore() {
  close_locked();
  server_.reset();
}

void TcpStore::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  timeout_ = timeout;
}

void TcpStore::close_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TcpStore::connect_locked(Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port_);
  const int rc = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &res);
  if (rc != 0)
    throw Error(Exit::Unavailable,
                fmt::format("store {}:{}: cannot resolve the host: {}", host_, port_, ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  const bool same_user = is_no_secret(key_);
  const auto refused = [&](const std::string& why, const std::string& hint) {
    return Error(Exit::NoPerm, fmt::format("store {}:{}: {}", host_, port_, why), hint);
  };
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
          if (n <= 0)
            err = ETIMEDOUT;
          else if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        }
      }
      if (err != 0) {
        why = std::strerror(err);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (same_user) {
        const long uid = peer_uid(fd.get());
        if (uid != static_cast<long>(::geteuid()))
          throw refused(uid < 0 ? "cannot tell who listens there"
                                : fmt::format("the listener there is another user's (uid {})", uid),
                        "not this run's store: a stranger may hold the port; set RKIT_RUN_SECRET on every rank");
      }
      // The handshake; a host that says nothing in time, or drops us (it sheds handshakes
      // under a flood), is tried again until the deadline.
      const auto hs_deadline = std::min(deadline, Clock::now() + limits_.handshake_timeout);
      char hello[kHello];
      if (auto r = recv_all(fd.get(), hello, sizeof hello, hs_deadline); !r.empty()) {
        why = "no store handshake: " + r;
        continue;
      }
      if (std::memcmp(hello, kHelloMagic, 4) != 0)
        throw refused("the listener there is not an rtrain store", "another program holds the port");
      const auto* ns = reinterpret_cast<const unsigned char*>(hello + 4);
      unsigned char nc[kNonce];
      ::randombytes_buf(nc, sizeof nc);
      const auto mine = proof(key_, kClientLabel, ns, nc);
      char auth[kAuth];
      std::memcpy(auth, kAuthMagic, 4);
      std::memcpy(auth + 4, nc, kNonce);
      std::memcpy(auth + 4 + kNonce, mine.data(), kTag);
      if (auto r = send_all(fd.get(), auth, sizeof auth, hs_deadline); !r.empty()) {
        why = "handshake: " + r;
        continue;
      }
      char answer[kAnswer];
      if (auto r = recv_all(fd.get(), answer, 4, hs_deadline); !r.empty()) {
        why = "handshake: " + r;
        continue;
      }
      if (std::memcmp(answer, kNoMagic, 4) == 0)
        throw refused(
            same_user ? "refused this client (it wants the run's secret, or another user's)"
                      : "refused this client's run secret",
            "every peer of a run needs the same secret (RKIT_RUN_SECRET, RKIT_RUN_SECRET_FILE, --secret-file)");
      if (std::memcmp(answer, kOkMagic, 4) != 0)
        throw refused("a bad handshake answer", "another program holds the port");
      if (auto r = recv_all(fd.get(), answer + 4, kTag, hs_deadline); !r.empty()) {
        why = "handshake: " + r;
        continue;
      }
      const auto want = proof(key_, kHostLabel, ns, nc);
      if (crypto_verify_32(want.data(), reinterpret_cast<const unsigned char*>(answer + 4)) != 0)
        throw refused("the listener there does not prove the run's secret: not this run's store",
                      "another run's store, or a stranger who took the port");
      k_out_ = direction_key(key_, kToHost, ns, nc);
      k_in_ = direction_key(key_, kToClient, ns, nc);
      seq_out_ = seq_in_ = 0;
      fd_ = fd.release();
      return;
    }
    if (Clock::now() >= deadline) break;
    // The host (rank 0) may not listen yet: try again shortly.
    std::this_thread::sleep_for(
        std::min(std::chrono::milliseconds(50), std::chrono::milliseconds(std::max(ms_left(deadline), 1))));
  }
  throw Error(Exit::Unavailable,
              fmt::format("store {}:{}: not reachable within {} ms: {}", host_, port_,
                          std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count(), why),
              "rank 0 hosts the store on MASTER_ADDR:MASTER_PORT; is it running?");
}

std::vector<char> TcpStore::request(const std::vector<char>& payload, std::chrono::milliseconds timeout,
                                    const std::string& what) {
  std::lock_guard lock(mu_);
  const auto deadline = Clock::now() + timeout;
  if (fd_ < 0) connect_locked(deadline);
  const auto fail = [&](Exit code, const std::string& why) {
    close_locked();  // a reply may still come: this connection is out of step now
    return Error(code, fmt::format("store {}:{}: {}: {}", host_, port_, what, why));
  };
  const auto io_failure = [&](const std::string& r) {
    if (r == "timed out") return fail(Exit::Unavailable, fmt::format("timed out after {} ms", timeout.count()));
    if (r == "closed") return fail(Exit::Unavailable, "the store host closed the connection (rank 0 gone?)");
    return fail(Exit::Unavailable, r);
  };
  std::vector<char> frame;
  seal(frame, k_out_, seq_out_++, payload);
  if (auto r = send_all(fd_, frame.data(), frame.size(), deadline); !r.empty()) throw io_failure(r);
  char head[4];
  if (auto r = recv_all(fd_, head, 4, deadline); !r.empty()) throw io_failure(r);
  const std::size_t n = get_u32(head);
  if (n < 1 || n > max_frame(limits_) + 64) throw fail(Exit::Software, "a reply of a bad length");
  std::vector<char> reply(n + kTag);
  if (auto r = recv_all(fd_, reply.data(), reply.size(), deadline); !r.empty()) throw io_failure(r);
  if (!tag_ok(k_in_, seq_in_, reply.data(), n, reply.data() + n))
    throw fail(Exit::Software, "a reply that fails its check");
  ++seq_in_;
  reply.resize(n);
  if (reply[0] == 1)
    throw Error(Exit::Software,
                fmt::format("store {}:{}: {}: {}", host_, port_, what, std::string(reply.begin() + 1, reply.end())));
  if (reply[0] != 0) throw fail(Exit::Software, "bad reply");
  return reply;
}

namespace {

void check_key(const std::string& key, const StoreLimits& l) {
  if (key.size() > l.max_key)
    throw Error(Exit::Software,
                fmt::format("rendezvous store: key '{}...' is longer than {} bytes", key.substr(0, 32), l.max_key));
}

std::vector<char> keys_request(char op, const std::vector<std::string>& keys, const StoreLimits& l) {
  if (keys.size() > l.max_keys) throw Error(Exit::Software, "rendezvous store: too many keys in one request");
  std::vector<char> msg{op};
  put_u32(msg, keys.size());
  std::size_t total = 5;
  for (const auto& k : keys) {
    check_key(k, l);
    put_str(msg, k);
    total += 4 + k.size();
  }
  if (total > max_frame(l)) throw Error(Exit::Software, "rendezvous store: the keys of one request are too long");
  return msg;
}

std::string names_of(const std::vector<std::string>& keys) {
  std::string names;
  for (const auto& k : keys) {
    if (names.size() > 200) return names + ", ...";
    names += (names.empty() ? "'" : ", '") + k + "'";
  }
  return names;
}

}  // namespace

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  check_key(key, limits_);
  if (data.size() > limits_.max_value)
    throw Error(Exit::Software,
                fmt::format("rendezvous store: the value of '{}' is longer than {} bytes", key, limits_.max_value));
  std::vector<char> msg{'S'};
  put_str(msg, key);
  put_bytes(msg, data);
  request(msg, timeout_, "set '" + key + "'");
}

bool TcpStore::create(const std::string& key, const std::vector<char>& data, bool watch) {
  check_key(key, limits_);
  if (data.size() > limits_.max_value)
    throw Error(Exit::Software,
                fmt::format("rendezvous store: the value of '{}' is longer than {} bytes", key, limits_.max_value));
  std::vector<char> msg{'C'};
  put_str(msg, key);
  put_bytes(msg, data);
  msg.push_back(watch ? 1 : 0);
  const auto r = request(msg, timeout_, "create '" + key + "'");
  return r.size() == 2 && r[1] == 1;
}

std::vector<char> TcpStore::get(const std::string& key) {
  check_key(key, limits_);
  std::vector<char> msg{'G'};
  put_str(msg, key);
  const auto r = request(msg, timeout_, "get '" + key + "'");
  Cursor in(r.data() + 1, r.size() - 1);
  std::vector<char> value;
  if (!in.bytes(value, limits_.max_value + limits_.max_key + 64) || !in.done())
    throw Error(Exit::Software, fmt::format("store {}:{}: get '{}': bad reply", host_, port_, key));
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  request(keys_request('W', keys, limits_), timeout, "wait for " + names_of(keys));
}

std::vector<std::optional<std::vector<char>>> TcpStore::try_get(const std::vector<std::string>& keys) {
  return parse_lookup(request(keys_request('T', keys, limits_), timeout_, "look up " + names_of(keys)), keys.size());
}

std::vector<std::optional<std::vector<char>>> TcpStore::await_any(const std::vector<std::string>& keys,
                                                                  std::chrono::milliseconds wait) {
  const auto ms = std::clamp<long long>(wait.count(), 0, static_cast<long long>(kMaxAwaitMs));
  auto msg = keys_request('T', keys, limits_);
  msg[0] = 'A';
  std::vector<char> head;
  put_u32(head, static_cast<std::size_t>(ms));
  msg.insert(msg.begin() + 1, head.begin(), head.end());
  return parse_lookup(request(msg, timeout_ + std::chrono::milliseconds(ms), "await " + names_of(keys)), keys.size());
}

std::vector<std::optional<std::vector<char>>> TcpStore::parse_lookup(const std::vector<char>& r, std::size_t n) {
  Cursor in(r.data() + 1, r.size() - 1);
  std::vector<std::optional<std::vector<char>>> out(n);
  for (auto& v : out) {
    unsigned char present = 0;
    if (!in.u8(present)) throw Error(Exit::Software, fmt::format("store {}:{}: bad reply", host_, port_));
    if (!present) continue;
    v.emplace();
    if (!in.bytes(*v, max_frame(limits_)))
      throw Error(Exit::Software, fmt::format("store {}:{}: bad reply", host_, port_));
  }
  return out;
}

void TcpStore::erase(const std::vector<std::string>& keys) {
  request(keys_request('D', keys, limits_), timeout_, "erase " + names_of(keys));
}

}  // namespace rkit::rtrain
