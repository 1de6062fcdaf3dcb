// File: rsub/daemon/server.cpp — the daemon's request server (server.hpp).
#include "daemon/server.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <sstream>

#include "commands/commands.hpp"
#include "daemon/protocol.hpp"
#include "rkit/error.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rsub {

SettingsSource::SettingsSource(Settings initial) : settings_(std::make_shared<const Settings>(std::move(initial))) {
  stamp_ = stamp();
}

std::string SettingsSource::stamp() const {
  const std::string& path = settings_->config_path;
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return fmt::format("{}:{}:{}.{}", st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

std::shared_ptr<const Settings> SettingsSource::current() {
  std::lock_guard lock(mu_);
  reload_if_changed();
  return settings_;
}

void SettingsSource::reload_if_changed() {
  const std::string now = stamp();
  if (now == stamp_) return;
  stamp_ = now;
  try {
    settings_ = std::make_shared<const Settings>(load_settings(load_config(settings_->config_path)));
  } catch (const std::exception& e) {
    warn(
        "rsub daemon",
        fmt::format("{} changed and does not load: {} (keeping the settings it had)", settings_->config_path, e.what()),
        std::cerr);
  }
}

std::shared_ptr<const Settings> SettingsSource::use(const std::string& path) {
  std::lock_guard lock(mu_);
  if (path == settings_->config_path) {
    reload_if_changed();
  } else {
    auto next = std::make_shared<const Settings>(load_settings(load_config(path)));
    if (next->dir != settings_->dir || next->socket != settings_->socket)
      throw Error(Exit::Config, fmt::format("{} names another rsub state directory or socket than this daemon's ({})",
                                            path, settings_->dir));
    settings_ = std::move(next);
    stamp_ = stamp();
  }
  return settings_;
}

std::size_t json_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

RequestServer::RequestServer(int listen_fd, SettingsSource& settings, std::function<void()> wake,
                             std::function<Explanation(std::int64_t)> explain, std::function<std::uint64_t()> passes,
                             bool personal)
    : listen_fd_(listen_fd),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      settings_(settings),
      wake_(std::move(wake)),
      explain_(std::move(explain)),
      passes_(std::move(passes)),
      personal_(personal) {
  if (stop_fd_ < 0) throw system_error("eventfd", errno);
}

RequestServer::~RequestServer() {
  if (!stop()) std::abort();  // threads still use this server
  ::close(stop_fd_);
  ::close(listen_fd_);
}

void RequestServer::start() {
  acceptor_ = std::thread([this] { accept_loop(); });
}

bool RequestServer::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);  // their reads and writes end now
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
  if (acceptor_.joinable()) acceptor_.join();
  // Requests still in a store call finish it; the process may end meanwhile.
  std::unique_lock lock(mu_);
  return idle_.wait_for(lock, std::chrono::seconds(5), [this] { return open_.empty(); });
}

namespace {

// Turns a connection away before its request is read: the error as every rsub error is
// answered (serve's too), its one-line message for the client's stderr and its kind as the
// exit code; then the connection is closed.
void refuse(int fd, const Error& e) {
  std::ostringstream line;
  const int code = report_error("rsub", e, line);
  const std::string text = line.str();
  write_frame(fd, 'e', text.data(), text.size());
  write_frame(fd, 'x', &code, sizeof code);
  ::close(fd);
}

}  // namespace

void RequestServer::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::poll(nullptr, 0, 50);  // let connections end first
      continue;
    }
    Peer peer;
    try {
      peer = peer_of(fd);
    } catch (const Error&) {
      ::close(fd);
      continue;
    }
    // A personal daemon serves its user alone (and root, who may do anything anyway).
    if (personal_ && peer.uid != ::geteuid() && peer.uid != 0) {
      refuse(fd, Error(Exit::NoPerm, "this rsub daemon is another user's: it serves its own user only"));
      continue;
    }
    {
      std::lock_guard lock(mu_);
      int& mine = per_user_[peer.uid];
      if (stopping_ || static_cast<int>(open_.size()) >= kMaxConnections || mine >= kMaxConnectionsPerUser) {
        refuse(fd, stopping_ ? Error(Exit::TempFail, "the rsub daemon is stopping", "try again once it is back")
                             : Error(Exit::TempFail, "the rsub daemon is serving too many requests", "try again"));
        continue;
      }
      ++mine;
      open_.insert(fd);
    }
    std::thread([this, fd, peer] {
      serve(fd, peer.uid, peer.groups);
      std::lock_guard lock(mu_);
      open_.erase(fd);
      if (--per_user_[peer.uid] == 0) per_user_.erase(peer.uid);
      ::close(fd);
      idle_.notify_all();
    }).detach();
  }
}

void RequestServer::serve(int fd, uid_t uid, const std::vector<gid_t>& groups) {
  std::string payload;
  try {
    const auto kind = read_frame(fd, payload, kMaxRequestBytes, std::chrono::steady_clock::now() + kRequestDeadline);
    if (!kind || *kind != 'q') return;
  } catch (const Error&) {  // silent, torn or oversized: nothing to answer
    return;
  }
  // A client that stops reading holds nothing for long: a write that makes no progress
  // for 30 s fails, and the request with it.
  const timeval send_timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  FrameBuf out_buf(fd, 'o'), err_buf(fd, 'e');
  std::ostream out(&out_buf), err(&err_buf);
  Context ctx;
  ctx.me = user_of(uid);
  ctx.groups = groups;
  ctx.out = &out;
  ctx.err = &err;
  ctx.wake = wake_;
  ctx.explain = explain_;
  ctx.passes = passes_;
  ctx.gone = [fd] {
    pollfd p{fd, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  };
  int code = 0;
  bool verbose = false;
  try {
    if (json_depth(payload) > 32) throw Error(Exit::DataErr, "request: nested deeper than 32 levels");
    const Json request = parse_json(payload, "request");
    verbose = request.is_object() && request.value("verbose", false);
    // A personal daemon follows its user's configuration; a shared one keeps its own.
    const auto at = request.is_object() ? request.find("config") : request.end();
    const std::string config = at != request.end() && !at->is_null() ? bytes_of(*at, "request: config") : std::string();
    ctx.settings = personal_ && !config.empty() ? *settings_.use(config) : *settings_.current();
    {
      std::lock_guard lock(mu_);
      if (!stores_.empty()) {
        ctx.open_store = std::move(stores_.back());
        stores_.pop_back();
      }
    }
    code = handle_request(ctx, request);
    if (ctx.open_store) {  // a request that failed gives its connection up: it is not reused
      std::lock_guard lock(mu_);
      if (stores_.size() < 16) stores_.push_back(std::move(ctx.open_store));
    }
  } catch (const std::exception& e) {
    out.flush();
    code = report_error("rsub", e, err, verbose);
  }
  out.flush();
  err.flush();
  write_frame(fd, 'x', &code, sizeof code);
}

}  // namespace rkit::rsub
