// File: rtrain/tcp_store_server.hpp — private to the store (tcp_store*.cpp): the host's
// server, TcpStore::Server, that TcpStore starts when it is the host.
//
//   auto server = std::make_unique<TcpStore::Server>(host, port, key, limits);  // listens, serves
//   server->port();                                    // the bound port
//   server.reset();                                    // stops its thread, closes every connection
//
// One thread of its own serves every connection with poll(2) and owns the keys and
// values; the object's methods are called from the thread that made it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rkit/file.hpp"
#include "run_secret.hpp"
#include "tcp_store.hpp"
#include "tcp_store_wire.hpp"

namespace rkit::rtrain {

class TcpStore::Server {
 public:
  // Binds `host`:`port` (0: a free one) and starts serving. Error(Unavailable) when it cannot.
  Server(const std::string& host, int port, const Key& key, const StoreLimits& limits);
  ~Server();  // wakes the thread and joins it

  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  using Clock = detail::Clock;

  struct Conn {
    UniqueFd fd;
    bool authed = false, dead = false, eof = false;
    Clock::time_point deadline;  // of the handshake
    unsigned char ns[detail::kNonce];
    Key k_in{}, k_out{};
    std::uint64_t seq_in = 0, seq_out = 0;
    std::vector<char> in, out;
    std::size_t out_off = 0;
    std::vector<char> parked;  // a get or wait whose keys are missing: answered after a later set
    Clock::time_point parked_until = Clock::time_point::max();  // an await's: answered then in any case
    std::vector<std::string> watches;  // keys created with watch: KEY#closed is set when this closes
  };

  std::size_t in_cap(const Conn& c) const;
  void run();
  void accept_all(std::vector<Conn>& conns, Clock::time_point& paused_until);
  void read_some(Conn& c);
  void flush(Conn& c);
  void drop(Conn& c, bool& changed);
  void progress(Conn& c, bool& changed);
  void reply(Conn& c, const std::vector<char>& payload);
  void refuse(Conn& c, const std::string& why);
  bool put(const std::string& key, const std::vector<char>& value);
  std::string full() const;
  void lookup_reply(Conn& c, const std::vector<std::string>& keys);
  bool answer(Conn& c, const std::vector<char>& req, bool& changed, bool fresh);

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

}  // namespace rkit::rtrain
