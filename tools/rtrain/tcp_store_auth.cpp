// File: rtrain/tcp_store_auth.cpp — the store's handshake proofs and keys, and who owns the
// other end of a socket (tcp_store_auth.hpp); is_loopback (tcp_store.hpp).
#include "tcp_store_auth.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>

#include "rkit/file.hpp"

namespace rkit::rtrain {

namespace detail {

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

namespace {

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

}  // namespace

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

}  // namespace detail

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

}  // namespace rkit::rtrain
