// File: tools/rtop/serve_connection.cpp — one client of rtop serve against its limits
// (serve.hpp: ClientConnection, request_refusal): reading, answering, sending, lingering.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "serve.hpp"
#include "serve_http.hpp"

namespace rkit::rtop {

// --- HTTP ------------------------------------------------------------------------------

int request_refusal(std::string_view method, const std::string* content_length, bool has_transfer_encoding,
                    const ServeLimits& limits) {
  if (content_length) {
    const std::string& v = *content_length;
    if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return 400;
    if (std::stoull(v) > limits.max_body_bytes) return 413;
  }
  if (has_transfer_encoding) return 411;
  if (method != "GET" && method != "HEAD") return 405;
  return 0;
}

namespace {

using namespace detail;

Clock::time_point after(Clock::time_point t, double s) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

constexpr std::size_t kReadChunk = 4096;

}  // namespace

ClientConnection::ClientConnection(int fd, const ServeLimits& limits, Clock::time_point accepted)
    : fd_(fd), limits_(limits), accepted_(accepted), stage_deadline_(after(accepted, limits.read_timeout_s)) {}

ClientConnection::~ClientConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void ClientConnection::close_now(End why) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  stage_ = Stage::Done;
  if (end_ == End::None) end_ = why;
}

short ClientConnection::events() const {
  return stage_ == Stage::Sending ? POLLOUT : stage_ == Stage::Reading || stage_ == Stage::Lingering ? POLLIN : 0;
}

Clock::time_point ClientConnection::deadline() const { return stage_deadline_; }

ClientConnection::Stage ClientConnection::advance(Clock::time_point now) {
  switch (stage_) {
    case Stage::Reading: {
      const std::size_t cap = limits_.max_head_bytes + limits_.max_body_bytes;
      while (received_ < cap) {
        const std::size_t old = in_.size();
        in_.resize(old + std::min(kReadChunk, cap - received_));
        const ssize_t n = ::recv(fd_, in_.data() + old, in_.size() - old, MSG_DONTWAIT);
        if (n <= 0) {
          in_.resize(old);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && would_block(errno)) break;
          close_now(n == 0 ? End::PeerClosed : End::Failed);
          return stage_;
        }
        in_.resize(old + static_cast<std::size_t>(n));
        received_ += static_cast<std::size_t>(n);
        // The head ends at its blank line (httplib skips a line without its CR).
        const std::size_t from = old >= 2 ? old - 2 : 0;
        if (std::string_view(in_.data() + from, in_.size() - from).find("\n\r\n") != std::string_view::npos)
          return stage_ = Stage::Answering;
      }
      if (received_ >= cap) return stage_ = Stage::Answering;  // the worker answers 400
      if (now >= stage_deadline_) close_now(End::Deadline);
      return stage_;
    }
    case Stage::Sending: {
      while (out_off_ < out_.size()) {
        const ssize_t n = ::send(fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
          out_off_ += static_cast<std::size_t>(n);
        } else if (would_block(errno)) {
          break;
        } else if (errno != EINTR) {
          close_now(End::Failed);
          return stage_;
        }
      }
      if (out_off_ < out_.size()) {
        if (now >= stage_deadline_) close_now(End::Deadline);
        return stage_;
      }
      std::string().swap(out_);
      ::shutdown(fd_, SHUT_WR);
      stage_ = Stage::Lingering;
      stage_deadline_ = after(now, limits_.linger_s);
      [[fallthrough]];
    }
    case Stage::Lingering: {
      // Closing with unread input makes the kernel send a reset, which can destroy the
      // response before the client has read it: what it still sends is taken, for a while.
      char scratch[kReadChunk];
      while (discarded_ < limits_.linger_bytes) {
        const ssize_t n = ::recv(fd_, scratch, sizeof scratch, MSG_DONTWAIT);
        if (n > 0) {
          discarded_ += static_cast<std::size_t>(n);
        } else if (n < 0 && would_block(errno)) {
          break;
        } else if (n == 0 || errno != EINTR) {
          close_now(n == 0 ? End::PeerClosed : End::Failed);
          return stage_;
        }
      }
      if (discarded_ >= limits_.linger_bytes || now >= stage_deadline_) close_now(End::Deadline);
      return stage_;
    }
    case Stage::Answering:
    case Stage::Done: return stage_;
  }
  return stage_;
}

void ClientConnection::answered(Clock::time_point now) {
  if (stage_ != Stage::Answering) return;
  std::vector<char>().swap(in_);
  in_off_ = 0;
  stage_ = Stage::Sending;
  stage_deadline_ = after(now, limits_.write_timeout_s);
}

void ClientConnection::refuse(std::string_view response) {
  if (fd_ < 0) return;
  // What has come is read first, so that closing sends a FIN rather than a reset.
  char scratch[kReadChunk];
  for (int i = 0; i < 4 && ::recv(fd_, scratch, sizeof scratch, MSG_DONTWAIT) > 0; ++i) {
  }
  if (!response.empty()) {
    [[maybe_unused]] const ssize_t n = ::send(fd_, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::shutdown(fd_, SHUT_WR);
  close_now(End::Refused);
}

ssize_t ClientConnection::read(char* out, std::size_t size) {
  if (size == 0) return 0;
  if (in_off_ >= in_.size()) {
    if (end_ == End::None)
      end_ = received_ >= limits_.max_head_bytes + limits_.max_body_bytes ? End::TooLong : End::Incomplete;
    return -1;
  }
  const std::size_t n = std::min(size, in_.size() - in_off_);
  std::memcpy(out, in_.data() + in_off_, n);
  in_off_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ClientConnection::write(const char* data, std::size_t size) {
  if (stage_ == Stage::Done) return -1;
  out_.append(data, size);
  return static_cast<ssize_t>(size);
}

}  // namespace rkit::rtop
