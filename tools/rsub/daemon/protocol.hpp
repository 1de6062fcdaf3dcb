// File: rsub/daemon/protocol.hpp
//
// How rsub's clients talk to its daemon: one Unix stream socket, one request per
// connection. The daemon alone reads and writes the job store; a client sends what the
// user asked (a JSON request) and prints what comes back. Who asks is never part of the
// request: the daemon takes the peer's uid, gid and groups from the kernel
// (SO_PEERCRED, SO_PEERGROUPS), and the client checks the daemon's uid the same way, so
// that a listener another user put in place is refused (rsub(1), SECURITY).
//
// Framing, both ways: one byte of kind, a little-endian u32 length, that many bytes.
//   client → daemon   'q' the request (JSON), at most kMaxRequestBytes, within kRequestDeadline
//   daemon → client   'o' bytes for stdout, 'e' bytes for stderr, then 'x' the exit code (4 bytes)
//
//   Peer peer = peer_of(fd);                         // the daemon: who is calling
//   int code = call_daemon(path, request, accept);   // the client: prints, returns the exit code
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace rkit::rsub {

inline constexpr std::uint32_t kMaxRequestBytes = 8u << 20;  // a job's command and environment fit
inline constexpr std::chrono::milliseconds kRequestDeadline{5000};

// Who is at the other end of a Unix socket, as the kernel says.
struct Peer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS), the primary one included
};
// Error(IoErr) when the kernel cannot say.
Peer peer_of(int fd);

// Writes one frame (all of it, retrying short writes; no SIGPIPE). False when the peer
// is gone.
bool write_frame(int fd, char kind, const void* data, std::size_t size);
// Reads one frame: its kind, and its payload into `out`. nullopt at a clean end of the
// stream. Error(DataErr) for a frame over `max_bytes`, a torn frame, or `deadline`
// passing (steady clock) before the frame is whole.
std::optional<char> read_frame(int fd, std::string& out, std::uint32_t max_bytes,
                               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

// An output stream buffer that sends what is written as frames of `kind` ('o' or 'e')
// on `fd`, in pieces of up to 64 KiB. A write after the peer left sets badbit (the
// stream's user sees it as a failed write).
class FrameBuf : public std::streambuf {
 public:
  FrameBuf(int fd, char kind);
  ~FrameBuf() override;
  FrameBuf(const FrameBuf&) = delete;
  FrameBuf& operator=(const FrameBuf&) = delete;

 protected:
  int_type overflow(int_type c) override;
  int sync() override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  bool flush_buffer();
  int fd_;
  char kind_;
  std::vector<char> buf_;
  bool broken_ = false;
};

// Connects to the daemon's socket. Returns the connected descriptor, or -1 with errno
// set (ENOENT, ECONNREFUSED: no daemon listens). Error(NoPerm) when the listener does not
// run as `daemon_uid` (another user's process): root for a shared daemon, our own uid for
// a personal one.
int connect_daemon(const std::string& socket_path, uid_t daemon_uid);

// Where a client puts the daemon's output: stream 1 (its stdout) or 2 (its stderr).
using OutputSink = std::function<void(int stream, std::string_view bytes)>;
// Copies bytes to our own descriptor 1 or 2 (Error(IoErr) when that write fails).
void write_to_own(int stream, std::string_view bytes);

// Sends `request` on a connected descriptor, hands the daemon's output to `sink` (by
// default: our stdout and stderr), and returns the exit code it sends.
// Error(Unavailable) when the daemon goes away before its answer ends.
int exchange(int fd, const std::string& request, const OutputSink& sink = write_to_own);

// The address of a Unix socket at `path`, and its length; Error(Config) when the path is
// too long for one (108 bytes).
sockaddr_un unix_address(const std::string& path, socklen_t& length);

// One message with a descriptor (SCM_RIGHTS) on a SOCK_SEQPACKET socket: the daemon hands
// its launcher a request and the attempt's lock. send_with_fd: true when all `size` bytes
// went. recv_with_fd: the message's length (0: the peer closed, -1: an error), the
// descriptor received (close-on-exec) in `fd`, -1 when none came or the message was cut.
bool send_with_fd(int socket, const void* data, std::size_t size, int fd);
ssize_t recv_with_fd(int socket, void* data, std::size_t size, int& fd);

}  // namespace rkit::rsub
