// File: rtrain/tcp_store_server.cpp — the store's host side (tcp_store_server.hpp): the
// listener, the poll loop, the handshake, and the requests answered from its map.
#include "tcp_store_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
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
#include <cstring>

#include "rkit/error.hpp"
#include "tcp_store_auth.hpp"

namespace rkit::rtrain {

using namespace detail;

namespace {

constexpr std::size_t kKeyOverhead = 64;  // what a key costs beyond its bytes, for max_bytes

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

}  // namespace

TcpStore::Server::Server(const std::string& host, int port, const Key& key, const StoreLimits& limits)
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

TcpStore::Server::~Server() {
  const char c = 'q';
  [[maybe_unused]] auto n = ::write(wake_write_.get(), &c, 1);
  thread_.join();
}

std::size_t TcpStore::Server::in_cap(const Conn& c) const { return c.authed ? 4 + max_frame(limits_) + kTag : kAuth; }

void TcpStore::Server::run() {
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

void TcpStore::Server::accept_all(std::vector<Conn>& conns, Clock::time_point& paused_until) {
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

void TcpStore::Server::read_some(Conn& c) {
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

void TcpStore::Server::flush(Conn& c) {
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
void TcpStore::Server::drop(Conn& c, bool& changed) {
  for (const auto& k : c.watches) changed |= put(k + "#closed", {});
  c.watches.clear();
  if (c.fd && c.authed) --authed_;
  c.fd.reset();
}

// Handshake, then the requests at the front of c.in, in order; stops at an incomplete
// frame, a parked request, or a reply not yet sent (so a peer that does not read its
// replies makes this side hold one reply, not many).
void TcpStore::Server::progress(Conn& c, bool& changed) {
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

void TcpStore::Server::reply(Conn& c, const std::vector<char>& payload) { seal(c.out, c.k_out, c.seq_out++, payload); }

void TcpStore::Server::refuse(Conn& c, const std::string& why) {
  std::vector<char> p{1};
  p.insert(p.end(), why.begin(), why.end());
  reply(c, p);
}

// Sets key to value within the limits; false when the store is full.
bool TcpStore::Server::put(const std::string& key, const std::vector<char>& value) {
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

std::string TcpStore::Server::full() const {
  return fmt::format("the store is full ({} keys, {} bytes; at most {} keys, {} bytes)", kv_.size(), bytes_,
                     limits_.max_keys, limits_.max_bytes);
}

// The reply to a look-up of `keys`: for each, present or not, and its value.
void TcpStore::Server::lookup_reply(Conn& c, const std::vector<std::string>& keys) {
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
bool TcpStore::Server::answer(Conn& c, const std::vector<char>& req, bool& changed, bool fresh) {
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

}  // namespace rkit::rtrain
