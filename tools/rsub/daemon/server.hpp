// File: rsub/daemon/server.hpp
//
// The daemon's side of the client protocol (protocol.hpp): a thread that accepts
// connections on the daemon's socket and serves each in a thread of its own, with the
// caller's identity taken from the kernel. Bounded: at most kMaxConnections at once and
// kMaxConnectionsPerUser of one uid (more are told to retry, exit 75); a request must
// arrive whole within kRequestDeadline and be at most kMaxRequestBytes.
//
//   SettingsSource settings(load_settings(config));
//   RequestServer server(listen_fd, settings, wake, explain, passes, personal);
//   server.start();
//   ...
//   server.stop();   // refuses new connections, ends the open ones, waits a little for them
#pragma once

#include <sys/types.h>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/store.hpp"
#include "daemon/daemon.hpp"

namespace rkit::rsub {

inline constexpr int kMaxConnections = 256;
inline constexpr int kMaxConnectionsPerUser = 32;

// The daemon's settings, read again when their file changes (its size, time or inode),
// so that an edited configuration applies without a restart. Thread-safe.
class SettingsSource {
 public:
  explicit SettingsSource(Settings initial);
  // The settings now (reloading them first when the file changed; a file that no longer
  // parses keeps the last good settings, said once on stderr).
  std::shared_ptr<const Settings> current();
  // The settings of another file from now on (a personal daemon's user ran a command
  // with another --config); Error(Config) when it does not load.
  std::shared_ptr<const Settings> use(const std::string& path);

 private:
  std::string stamp() const;
  void reload_if_changed();  // with mu_ held
  std::mutex mu_;
  std::shared_ptr<const Settings> settings_;
  std::string stamp_;
};

// How deeply a JSON text nests ([ and { outside strings): checked before parsing.
std::size_t json_depth(std::string_view text);

class RequestServer {
 public:
  // `listen_fd`: a listening Unix stream socket, owned by the server from now on.
  // `personal`: only the daemon's own uid (and root) may connect.
  // `wake`, `explain` and `passes` become each request's Context::wake, Context::explain
  // and Context::passes.
  RequestServer(int listen_fd, SettingsSource& settings, std::function<void()> wake,
                std::function<Explanation(std::int64_t)> explain, std::function<std::uint64_t()> passes, bool personal);
  ~RequestServer();
  RequestServer(const RequestServer&) = delete;
  RequestServer& operator=(const RequestServer&) = delete;

  void start();
  // Refuses new connections, ends the open ones and waits up to 5 s for their threads.
  // True when none is left (the server may then be destroyed).
  bool stop();

 private:
  void accept_loop();
  void serve(int fd, uid_t uid, const std::vector<gid_t>& groups);

  int listen_fd_;
  int stop_fd_;  // an eventfd: the accept loop's poll wakes on it
  SettingsSource& settings_;
  std::function<void()> wake_;
  std::function<Explanation(std::int64_t)> explain_;
  std::function<std::uint64_t()> passes_;
  bool personal_;
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::set<int> open_;  // connections being served
  std::map<uid_t, int> per_user_;
  bool stopping_ = false;
  // Open connections to the store, lent to one request at a time: opening SQLite and
  // preparing its statements is most of a small request's work.
  std::vector<std::unique_ptr<Store>> stores_;
};

}  // namespace rkit::rsub
