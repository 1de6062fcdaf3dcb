// File: tools/rtop/serve.cpp — rtop serve's HTTP server (serve.hpp): --listen, the listener,
// the frontend thread that does all socket I/O, the workers, and the routes.
#include "serve.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/interrupt.hpp"
#include "serve_http.hpp"

namespace rkit::rtop {

// --- --listen ---------------------------------------------------------------------

std::string ListenAddress::text() const { return text(port); }

std::string ListenAddress::text(int bound_port) const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, bound_port)
                                             : fmt::format("{}:{}", host, bound_port);
}

ListenAddress parse_listen(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return Error(Exit::Usage, fmt::format("--listen {}: {}", text, why),
                 "give HOST:PORT, e.g. 127.0.0.1:9464, [::1]:9464, or :9464 for every interface");
  };
  ListenAddress out;
  std::string_view port;
  if (text.starts_with('[')) {
    const auto close = text.find("]:");
    if (close == std::string_view::npos) throw bad("an IPv6 address in brackets must be followed by :PORT");
    out.host = std::string(text.substr(1, close - 1));
    if (out.host.empty()) throw bad("empty address in brackets");
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad("no :PORT");
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) throw bad("an IPv6 address goes in brackets, e.g. [::1]:9464");
    if (out.host.empty()) out.host = "0.0.0.0";
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw bad("the port must be a number from 0 to 65535");
  out.port = std::stoi(std::string(port));
  if (out.port > 65535) throw bad("the port must be a number from 0 to 65535");
  return out;
}

namespace {

using namespace detail;

// httplib parses a request and writes its response over this Stream, which never
// waits: the request has come whole (or as far as the cap), the response is buffered.
class LimitedStream final : public httplib::Stream {
 public:
  explicit LimitedStream(ClientConnection& c) : c_(c) {}
  bool is_readable() const override { return c_.readable(); }
  bool is_writable() const override { return c_.stage() != Stage::Done; }
  ssize_t read(char* ptr, size_t size) override { return c_.read(ptr, size); }
  ssize_t write(const char* ptr, size_t size) override { return c_.write(ptr, size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(::getsockname, ip, port); }
  socket_t socket() const override { return c_.fd(); }

 private:
  template <typename F>
  void address_of(F get, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    if (get(c_.fd(), reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  ClientConnection& c_;
};

// httplib's Server for its routing, request parsing and response writing, without its
// accept loop and socket streams: their timeouts are per read, its queue has no bound,
// and a slow client holds one of its threads.
class LimitedServer : public httplib::Server {
 public:
  void answer(ClientConnection& c) {
    LimitedStream stream(c);
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, nullptr);
  }
};

// Workers that answer connections whose request has come, from a bounded queue, and
// hand them back for sending.
class WorkerPool {
 public:
  WorkerPool(LimitedServer& server, const ServeLimits& limits, int wake_fd)
      : server_(server), limits_(limits), wake_fd_(wake_fd) {
    for (std::size_t i = 0; i < std::max<std::size_t>(limits.workers, 1); ++i)
      threads_.emplace_back([this] { work(); });
  }
  ~WorkerPool() { stop(); }

  // Takes `c` (leaving it null) unless workers + queue connections are already queued
  // or being answered.
  bool offer(std::unique_ptr<ClientConnection>& c) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ || queued_.size() + answering_ >= threads_.size() + limits_.queue) return false;
      queued_.push_back(std::move(c));
    }
    cv_.notify_one();
    return true;
  }

  // The connections answered since the last call, to send.
  std::vector<std::unique_ptr<ClientConnection>> take_answered() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(answered_, {});
  }

  // Connections queued, being answered or answered and not yet taken.
  std::size_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return queued_.size() + answering_ + answered_.size();
  }

  // Drops the queued connections and waits for the workers to finish their answers.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
      queued_.clear();
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::unique_ptr<ClientConnection> c;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
        if (queued_.empty()) return;
        c = std::move(queued_.front());
        queued_.pop_front();
        ++answering_;
      }
      try {
        server_.answer(*c);
      } catch (...) {
        // httplib makes a handler's exception a 500; anything else costs this connection only
        c->refuse({});
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --answering_;
        answered_.push_back(std::move(c));
      }
      [[maybe_unused]] const ssize_t n = ::write(wake_fd_, "x", 1);  // a full pipe already wakes
    }
  }

  LimitedServer& server_;
  ServeLimits limits_;
  int wake_fd_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<ClientConnection>> queued_;
  std::vector<std::unique_ptr<ClientConnection>> answered_;
  std::size_t answering_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Why binding `l` failed (errno `err`, 0 when no address could be tried).
Error bind_error(const ListenAddress& l, int err) {
  const std::string what = "--listen " + l.text();
  switch (err) {
    case EADDRINUSE:
      return Error(Exit::Unavailable, what + ": address already in use",
                   "another program listens there: choose another port, or port 0 for any free one");
    case EACCES:
    case EPERM:
      return Error(Exit::NoPerm, what + ": permission denied", "ports below 1024 need root or CAP_NET_BIND_SERVICE");
    case EADDRNOTAVAIL: return Error(Exit::Usage, what + ": not an address of this machine");
    case 0: return Error(Exit::Unavailable, what + ": cannot listen there");
    default: return Error(Exit::Unavailable, fmt::format("{}: {}", what, std::strerror(err)));
  }
}

// A listening socket on exactly `l`'s address (the first of its name's addresses that
// binds): close-on-exec, so that rsub and a daemon it starts never inherit it; with
// SO_REUSEADDR but not SO_REUSEPORT, with which a second exporter would share the port
// silently. Sets `port` to the port bound.
int open_listener(const ListenAddress& l, int& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(l.host.c_str(), std::to_string(l.port).c_str(), &hints, &found);
  if (rc != 0)
    throw Error(rc == EAI_AGAIN ? Exit::TempFail : Exit::Usage,
                fmt::format("--listen {}: {}", l.text(), ::gai_strerror(rc)));
  int err = 0, fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) throw bind_error(l, err);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

const std::string& busy_response() {
  static const std::string text = [] {
    const std::string_view body = "rtop serve: too many connections, try again\n";
    return fmt::format(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n"
        "Retry-After: 1\r\nConnection: close\r\n\r\n{}",
        body.size(), body);
  }();
  return text;
}

// The thread that listens: it accepts, reads every request and sends every response
// without blocking, and hands requests that have come to the workers.
class Frontend {
 public:
  Frontend(int listener, const ServeLimits& limits, WorkerPool& pool, int wake_fd)
      : listener_(listener), limits_(limits), pool_(pool), wake_fd_(wake_fd) {}
  ~Frontend() {
    if (listener_ >= 0) ::close(listener_);
  }
  Frontend(const Frontend&) = delete;
  Frontend& operator=(const Frontend&) = delete;

  // Until a signal comes; then stops listening (closing the listener), drops what is
  // still being read, and sends the answers in progress.
  void run() {
    while (!interrupt_signal()) step(std::chrono::milliseconds(100), true);
    ::close(listener_);
    listener_ = -1;
    std::erase_if(open_, [](const auto& c) { return c->stage() == Stage::Reading; });
    pool_.stop();
    stopping_ = true;
    do step(std::chrono::milliseconds(100), false);  // the first one takes the last answers
    while (!open_.empty());
  }

 private:
  void step(std::chrono::milliseconds most, bool accepting) {
    fds_.clear();
    fds_.push_back({accepting ? listener_ : -1, POLLIN, 0});
    fds_.push_back({wake_fd_, POLLIN, 0});
    Clock::time_point until = Clock::now() + most;
    for (const auto& c : open_) {
      fds_.push_back({c->fd(), c->events(), 0});
      until = std::min(until, c->deadline());
    }
    const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    if (::poll(fds_.data(), fds_.size(), static_cast<int>(std::max<long long>(wait_ms, 0))) < 0 && errno != EINTR)
      throw system_error("poll", errno);
    const Clock::time_point now = Clock::now();
    for (std::size_t i = 0; i < open_.size(); ++i) {
      std::unique_ptr<ClientConnection>& c = open_[i];
      if (fds_[i + 2].revents == 0 && now < c->deadline()) continue;
      advance(c, now);
    }
    std::erase_if(open_, [](const auto& c) { return !c || c->stage() == Stage::Done; });
    if (fds_[1].revents & POLLIN) {
      char drain[64];
      while (::read(wake_fd_, drain, sizeof drain) > 0) {
      }
    }
    for (std::unique_ptr<ClientConnection>& c : pool_.take_answered()) {
      c->answered(now);
      advance(c, now);
      if (c && c->stage() != Stage::Done) open_.push_back(std::move(c));
    }
    if (accepting && (fds_[0].revents & POLLIN)) accept_some(now);
  }

  // Moves `c` on; one whose request has come goes to the workers (null here then), or
  // is refused when they have enough.
  void advance(std::unique_ptr<ClientConnection>& c, Clock::time_point now) {
    const Stage stage = c->advance(now);
    if (stage == Stage::Lingering && stopping_) c->refuse({});
    if (stage == Stage::Answering && !pool_.offer(c)) c->refuse(busy_response());
  }

  void accept_some(Clock::time_point now) {
    for (int i = 0; i < 64; ++i) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        const int err = errno;
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        if (would_block(err)) return;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // until connections end
          return;
        }
        throw system_error("accept", err);
      }
      auto c = std::make_unique<ClientConnection>(fd, limits_, now);
      if (open_.size() + pool_.held() >= limits_.connections && !evict_oldest()) {
        c->refuse(busy_response());
        continue;
      }
      advance(c, now);
      if (c && c->stage() != Stage::Done) open_.push_back(std::move(c));
    }
  }

  // Makes room for a new connection: the one here that has been open the longest (in
  // a flood, one still sending its request or lingering) is closed, so that connections
  // that say nothing cannot keep a scraper out. False when none is here.
  bool evict_oldest() {
    const auto oldest = std::min_element(open_.begin(), open_.end(),
                                         [](const auto& a, const auto& b) { return a->accepted() < b->accepted(); });
    if (oldest == open_.end()) return false;
    (*oldest)->refuse((*oldest)->stage() == Stage::Reading ? std::string_view(busy_response()) : std::string_view());
    open_.erase(oldest);
    return true;
  }

  int listener_;
  ServeLimits limits_;
  WorkerPool& pool_;
  int wake_fd_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<ClientConnection>> open_;  // being read, sent or lingering
  std::vector<pollfd> fds_;
};

}  // namespace

void serve(Exporter& exporter, const ListenAddress& listen, const std::function<void(const std::string&)>& on_listening,
           const ServeLimits& limits) {
  // A scraper that hangs up mid-response must not end the exporter (sends say
  // MSG_NOSIGNAL; this covers anything else).
  std::signal(SIGPIPE, SIG_IGN);
  LimitedServer server;
  server.set_payload_max_length(limits.max_body_bytes);  // a second line: no route reads a body
  // A request its headers already refuse is answered before its body is read, then closed.
  const auto refused = [&limits](const httplib::Request& req, httplib::Response& res) {
    const auto length = req.headers.find("Content-Length");
    const int status = request_refusal(req.method, length == req.headers.end() ? nullptr : &length->second,
                                       req.has_header("Transfer-Encoding"), limits);
    if (status == 0) return false;
    res.status = status;
    if (status == 405) res.set_header("Allow", "GET, HEAD");
    const std::string why = status == 413   ? fmt::format("a request body is at most {} bytes", limits.max_body_bytes)
                            : status == 411 ? "a request body needs a Content-Length"
                            : status == 405 ? "only GET and HEAD"
                                            : "bad Content-Length";
    res.set_content("rtop serve: " + why + "\n", "text/plain; charset=utf-8");
    return true;
  };
  server.set_pre_routing_handler([refused](const httplib::Request& req, httplib::Response& res) {
    return refused(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  // Expect: 100-continue would invite the body that the routing then refuses.
  server.set_expect_100_continue_handler(
      [refused](const httplib::Request& req, httplib::Response& res) { return refused(req, res) ? res.status : 100; });
  server.Get("/metrics", [&exporter](const httplib::Request& req, httplib::Response& res) {
    std::optional<double> timeout_s;
    try {
      const std::string h = req.get_header_value("X-Prometheus-Scrape-Timeout-Seconds");
      if (!h.empty() && std::stod(h) > 0) timeout_s = std::stod(h);
    } catch (const std::exception&) {
      // not a number: as if absent
    }
    res.set_content(exporter.scrape(timeout_s), kExpositionContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("rtop serve: Prometheus metrics are at /metrics\n", "text/plain; charset=utf-8");
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string why = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content("rtop serve: internal error: " + why + "\n", "text/plain; charset=utf-8");
  });

  int wake[2];  // workers to the frontend: an answer is ready to send
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) throw system_error("pipe", errno);
  struct PipeCloser {
    int* fds;
    ~PipeCloser() { ::close(fds[0]), ::close(fds[1]); }
  } pipe_closer{wake};
  int port = 0;
  WorkerPool pool(server, limits, wake[1]);
  Frontend frontend(open_listener(listen, port), limits, pool, wake[0]);  // which closes the listener
  on_listening("http://" + listen.text(port) + "/metrics");
  try {
    frontend.run();
  } catch (const Error& e) {
    throw Error(Exit::Unavailable, fmt::format("--listen {}: {}", listen.text(port), e.what()));
  }
}

}  // namespace rkit::rtop
