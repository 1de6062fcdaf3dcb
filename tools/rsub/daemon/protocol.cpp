// File: rsub/daemon/protocol.cpp — frames, peer credentials and the client's side (protocol.hpp).
#include "daemon/protocol.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rsub {

namespace {

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Reads exactly n bytes. 1: done, 0: the stream ended before the first byte, -1: it
// ended (or failed) in the middle. Throws when the deadline passes.
int read_exact(int fd, char* p, std::size_t n, const std::optional<std::chrono::steady_clock::time_point>& deadline) {
  std::size_t got = 0;
  while (got < n) {
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      pollfd pfd{fd, POLLIN, 0};
      const int rc = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
      if (rc == 0) throw Error(Exit::DataErr, "request: the peer sent nothing in time");
      if (rc < 0 && errno == EINTR) continue;
    }
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return got == 0 ? 0 : -1;
    got += static_cast<std::size_t>(r);
  }
  return 1;
}

}  // namespace

sockaddr_un unix_address(const std::string& path, socklen_t& length) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw Error(Exit::Config, fmt::format("socket {}: path too long for a Unix socket", path),
                "set rsub.state_dir (or RKIT_STATE_DIR) or rsub.socket to a shorter path");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return addr;
}

Peer peer_of(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) throw system_error("SO_PEERCRED", errno);
  Peer p{cred.uid, cred.gid, cred.pid, {}};
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      break;
    }
    if (errno != ERANGE || groups.size() > 65536) throw system_error("SO_PEERGROUPS", errno);
    groups.resize(size / sizeof(gid_t) + 1);
  }
  if (std::find(groups.begin(), groups.end(), p.gid) == groups.end()) groups.push_back(p.gid);
  p.groups = std::move(groups);
  return p;
}

bool write_frame(int fd, char kind, const void* data, std::size_t size) {
  char head[5] = {kind};
  const auto n = static_cast<std::uint32_t>(size);
  for (int i = 0; i < 4; ++i) head[1 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return write_all(fd, head, sizeof head) && write_all(fd, static_cast<const char*>(data), size);
}

std::optional<char> read_frame(int fd, std::string& out, std::uint32_t max_bytes,
                               std::optional<std::chrono::steady_clock::time_point> deadline) {
  unsigned char head[5];
  const int rc = read_exact(fd, reinterpret_cast<char*>(head), sizeof head, deadline);
  if (rc == 0) return std::nullopt;
  if (rc < 0) throw Error(Exit::DataErr, "frame: the stream ended inside a frame");
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= std::uint32_t{head[1 + i]} << (8 * i);
  if (n > max_bytes) throw Error(Exit::DataErr, fmt::format("frame: {} bytes, more than the {} allowed", n, max_bytes));
  // Grown as the bytes come, not to what the peer claims: a claim costs nothing.
  out.clear();
  for (std::size_t got = 0; got < n;) {
    const std::size_t chunk = std::min<std::size_t>(n - got, 1 << 16);
    out.resize(got + chunk);
    if (read_exact(fd, out.data() + got, chunk, deadline) != 1)
      throw Error(Exit::DataErr, "frame: the stream ended inside a frame");
    got += chunk;
  }
  return static_cast<char>(head[0]);
}

FrameBuf::FrameBuf(int fd, char kind) : fd_(fd), kind_(kind) { buf_.reserve(1 << 16); }
FrameBuf::~FrameBuf() { flush_buffer(); }

bool FrameBuf::flush_buffer() {
  if (buf_.empty() || broken_) {
    buf_.clear();
    return !broken_;
  }
  broken_ = !write_frame(fd_, kind_, buf_.data(), buf_.size());
  buf_.clear();
  return !broken_;
}

FrameBuf::int_type FrameBuf::overflow(int_type c) {
  if (broken_) return traits_type::eof();
  if (c != traits_type::eof()) {
    buf_.push_back(static_cast<char>(c));
    if (buf_.size() >= (1 << 16) && !flush_buffer()) return traits_type::eof();
  }
  return traits_type::not_eof(c);
}

std::streamsize FrameBuf::xsputn(const char* s, std::streamsize n) {
  if (broken_) return 0;
  buf_.insert(buf_.end(), s, s + n);
  if (buf_.size() >= (1 << 16) && !flush_buffer()) return 0;
  return n;
}

int FrameBuf::sync() { return flush_buffer() ? 0 : -1; }

int connect_daemon(const std::string& socket_path, uid_t daemon_uid) {
  socklen_t len = 0;
  const sockaddr_un addr = unix_address(socket_path, len);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return -1;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) return -1;
  const Peer daemon = peer_of(fd.get());
  if (daemon.uid != daemon_uid)
    throw Error(Exit::NoPerm,
                fmt::format("{}: the process listening there runs as uid {}, not as the rsub daemon's", socket_path,
                            daemon.uid),
                "another user's program holds the socket: tell an admin");
  return fd.release();
}

void write_to_own(int stream, std::string_view bytes) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t w = ::write(stream, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw system_error(stream == 1 ? "write stdout" : "write stderr", errno);
    done += static_cast<std::size_t>(w);
  }
}

int exchange(int fd, const std::string& request, const OutputSink& sink) {
  if (!write_frame(fd, 'q', request.data(), request.size()))
    throw Error(Exit::Unavailable, "the rsub daemon closed the connection before the request was sent");
  std::string payload;
  for (;;) {
    std::optional<char> kind;
    try {
      kind = read_frame(fd, payload, 1u << 20);
    } catch (const Error&) {
      kind.reset();
    }
    if (!kind) throw Error(Exit::Unavailable, "the rsub daemon went away before it answered", "see its log");
    if (*kind == 'x' && payload.size() == 4) {
      int code = 0;
      std::memcpy(&code, payload.data(), 4);
      return code;
    }
    const int out = *kind == 'o' ? 1 : *kind == 'e' ? 2 : -1;
    if (out < 0) throw Error(Exit::Unavailable, "the rsub daemon answered with a frame this rsub does not know");
    sink(out, payload);
  }
}

namespace {

// One buffer and room for one descriptor, as sendmsg and recvmsg take them.
struct FdMessage {
  FdMessage(void* data, std::size_t size) : iov{data, size} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
};

}  // namespace

bool send_with_fd(int socket, const void* data, std::size_t size, int fd) {
  FdMessage m(const_cast<void*>(data), size);
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return ::sendmsg(socket, &m.msg, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
}

ssize_t recv_with_fd(int socket, void* data, std::size_t size, int& fd) {
  fd = -1;
  FdMessage m(data, size);
  ssize_t n;
  do n = ::recvmsg(socket, &m.msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c; c = CMSG_NXTHDR(&m.msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  if ((m.msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && fd >= 0) {
    ::close(fd);
    fd = -1;
  }
  return n;
}

}  // namespace rkit::rsub
