// File: rtrain/tcp_store.cpp — the authenticated, bounded TCP key-value store (tcp_store.hpp):
// the client, its connection and handshake, and its requests; the host's side is
// tcp_store_server.cpp, the framing tcp_store_wire.hpp, the proofs tcp_store_auth.cpp.
#include "tcp_store.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "tcp_store_auth.hpp"
#include "tcp_store_server.hpp"
#include "tcp_store_wire.hpp"

namespace rkit::rtrain {

using namespace detail;

std::size_t max_frame(const StoreLimits& l) { return l.max_value + l.max_key + 64; }

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
