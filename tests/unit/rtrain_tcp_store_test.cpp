// rtrain's store (tcp_store.hpp): its requests, and what it does with peers that do not hold
// the run's secret, send garbage, claim huge lengths, say nothing, flood it, forge or
// replay frames, or belong to another user. Hostile peers are raw sockets driven here,
// speaking the protocol from its description (the handshake is recomputed with libsodium).
#include "tcp_store.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace rkit::rtrain {
namespace {

using namespace std::chrono_literals;
using rkit::testing::error_of;
using Clock = std::chrono::steady_clock;

using rkit::testing::seconds_since;

const Key kKey = RunSecret::from_text("unit-test-secret-of-this-run", "test").key("workers");
const Key kOther = RunSecret::from_text("the-secret-of-another-run!", "test").key("workers");

using rkit::testing::free_port;

StoreLimits quick() {
  StoreLimits l;
  l.handshake_timeout = 200ms;
  return l;
}

// This process's resident memory, in bytes (VmRSS).
long rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) * 1024;
  return -1;
}

void put_u32(std::vector<char>& out, std::size_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A raw TCP connection to addr:port, playing a peer by hand.
class Raw {
 public:
  explicit Raw(int port, const char* addr = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, addr, &a.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    connect_errno_ = connected_ ? 0 : errno;
  }
  ~Raw() { ::close(fd_); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  bool connected() const { return connected_; }
  int connect_errno() const { return connect_errno_; }

  // Sends everything; the bytes the kernel took when the peer closed first.
  std::size_t send_all(const void* data, std::size_t n) {
    std::size_t sent = 0;
    while (sent < n) {
      const ssize_t r = ::send(fd_, static_cast<const char*>(data) + sent, n - sent, MSG_NOSIGNAL);
      if (r <= 0) break;
      sent += static_cast<std::size_t>(r);
    }
    return sent;
  }
  // Up to n bytes, as they come within the timeout ("" at the end of the stream).
  std::string recv_exact(std::size_t n, std::chrono::milliseconds timeout = 2000ms) {
    std::string out;
    const auto deadline = Clock::now() + timeout;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[4096];
      const ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (r <= 0) break;
      out.append(buf, static_cast<std::size_t>(r));
    }
    return out;
  }
  // True once the other end has closed the connection, within the timeout; what it sent
  // before is read and dropped.
  bool closed_within(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      const ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r <= 0) return true;
    }
  }

  // The client's side of the handshake (tcp_store.hpp) with `key`; true when the host answers RKOK.
  bool handshake(const Key& key) {
    const std::string hello = recv_exact(36);
    if (hello.size() != 36 || hello.compare(0, 4, "RKS1") != 0) return false;
    std::memcpy(ns_, hello.data() + 4, 32);
    randombytes_buf(nc_, sizeof nc_);
    std::vector<unsigned char> msg;
    const std::string label = "rtrain.store.client.1";
    msg.insert(msg.end(), label.begin(), label.end());
    msg.insert(msg.end(), ns_, ns_ + 32);
    msg.insert(msg.end(), nc_, nc_ + 32);
    unsigned char tag[32];
    crypto_auth_hmacsha512256(tag, msg.data(), msg.size(), key.data());
    std::string auth = "RKC1";
    auth.append(reinterpret_cast<char*>(nc_), 32);
    auth.append(reinterpret_cast<char*>(tag), 32);
    send_all(auth.data(), auth.size());
    const std::string answer = recv_exact(36);
    if (answer.size() != 36 || answer.compare(0, 4, "RKOK") != 0) return false;
    crypto_generichash_state st;
    const std::string dir = "rtrain.store.to-host.1";
    crypto_generichash_init(&st, key.data(), key.size(), 32);
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(dir.data()), dir.size());
    crypto_generichash_update(&st, ns_, 32);
    crypto_generichash_update(&st, nc_, 32);
    crypto_generichash_final(&st, k_out_.data(), 32);
    return true;
  }
  // A request frame as the protocol seals it (sequence numbers from 0).
  std::vector<char> frame(const std::vector<char>& payload) {
    std::vector<char> f(4 + payload.size() + 32);
    for (int i = 0; i < 4; ++i) f[static_cast<std::size_t>(i)] = static_cast<char>((payload.size() >> (8 * i)) & 0xff);
    std::memcpy(f.data() + 4, payload.data(), payload.size());
    unsigned char head[12];
    for (int i = 0; i < 8; ++i) head[i] = static_cast<unsigned char>((seq_ >> (8 * i)) & 0xff);
    for (int i = 0; i < 4; ++i) head[8 + i] = static_cast<unsigned char>((payload.size() >> (8 * i)) & 0xff);
    crypto_auth_hmacsha512256_state st;
    crypto_auth_hmacsha512256_init(&st, k_out_.data(), 32);
    crypto_auth_hmacsha512256_update(&st, head, sizeof head);
    crypto_auth_hmacsha512256_update(&st, reinterpret_cast<const unsigned char*>(payload.data()), payload.size());
    unsigned char tag[32];
    crypto_auth_hmacsha512256_final(&st, tag);
    std::memcpy(f.data() + 4 + payload.size(), tag, 32);
    ++seq_;
    return f;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  int connect_errno_ = 0;
  unsigned char ns_[32], nc_[32];
  Key k_out_{};
  std::uint64_t seq_ = 0;
};

// 'S' key value.
std::vector<char> set_request(const std::string& key, const std::string& value) {
  std::vector<char> p{'S'};
  put_u32(p, key.size());
  p.insert(p.end(), key.begin(), key.end());
  put_u32(p, value.size());
  p.insert(p.end(), value.begin(), value.end());
  return p;
}

// --- requests -------------------------------------------------------------------------

TEST(RtrainStore, SetGetWaitAcrossClients) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey);
  ASSERT_GT(host.port(), 0);
  TcpStore client("127.0.0.1", host.port(), false, 2000ms, kKey);
  host.set("a", {'x', 'y'});
  EXPECT_EQ(client.get("a"), (std::vector<char>{'x', 'y'}));
  client.set("empty", {});
  EXPECT_EQ(host.get("empty"), std::vector<char>{});
  client.set("a", {'z'});  // overwrites
  EXPECT_EQ(host.get("a"), std::vector<char>{'z'});
  std::vector<char> big(1 << 20);
  std::iota(big.begin(), big.end(), 0);
  host.set("big", big);
  EXPECT_EQ(client.get("big"), big);

  // get and wait block until another client sets the key.
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    TcpStore other("127.0.0.1", host.port(), false, 2000ms, kKey);
    other.set("late", {'1'});
  });
  client.wait({"a", "late"});
  EXPECT_EQ(client.get("late"), std::vector<char>{'1'});
  later.get();
}

TEST(RtrainStore, TryGetCreateWatchErase) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey);
  host.set("a", {'1'});
  auto got = host.try_get({"a", "b"});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::vector<char>{'1'});
  EXPECT_FALSE(got[1].has_value());
  {
    TcpStore agent("127.0.0.1", host.port(), false, 2000ms, kKey);
    EXPECT_TRUE(agent.create("node/1", {'2'}, /*watch=*/true));
    EXPECT_FALSE(host.create("node/1", {'9'}));  // taken: the first one stays
    EXPECT_EQ(host.get("node/1"), std::vector<char>{'2'});
    EXPECT_FALSE(host.try_get({"node/1#closed"})[0].has_value());
  }  // the agent's connection closes: the host marks it
  const auto deadline = Clock::now() + 2s;
  while (!host.try_get({"node/1#closed"})[0] && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(host.try_get({"node/1#closed"})[0].has_value());
  host.erase({"a", "never-was"});
  EXPECT_FALSE(host.try_get({"a"})[0].has_value());
}

TEST(RtrainStore, AwaitAnyReturnsOnTheFirstKeyOrAtItsTime) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey);
  TcpStore client("127.0.0.1", host.port(), false, 2000ms, kKey);
  auto start = Clock::now();
  auto got = client.await_any({"x", "y"}, 100ms);  // nothing comes: answered at its time
  EXPECT_GE(seconds_since(start), 0.09);
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_FALSE(got[0] || got[1]);
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    host.set("y", {'2'});
  });
  start = Clock::now();
  got = client.await_any({"x", "y"}, 5000ms);  // answered when y comes, not at 5 s
  later.get();
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_FALSE(got[0].has_value());
  EXPECT_EQ(got[1], std::vector<char>{'2'});
  // The connection is in step afterwards, and a parked get is not confused with it.
  auto get = std::async(std::launch::async, [&] { return client.get("z"); });
  std::this_thread::sleep_for(20ms);
  host.set("z", {'3'});
  EXPECT_EQ(get.get(), std::vector<char>{'3'});
}

TEST(RtrainStore, GetOfAMissingKeyTimesOutQuickly) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey);
  TcpStore client("127.0.0.1", host.port(), false, 150ms, kKey);
  const auto start = Clock::now();
  const Error e = error_of([&] { client.get("never"); });
  EXPECT_EQ(e.code(), Exit::Unavailable);
  EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_EQ(error_of([&] { client.wait({"never"}, 50ms); }).code(), Exit::Unavailable);
  // The connection was reset; the next request reconnects and gets its own answer.
  host.set("k", {'v'});
  EXPECT_EQ(client.get("k"), std::vector<char>{'v'});
}

TEST(RtrainStore, ClientGivesUpWhenNoHostListens) {
  const int port = free_port();
  const auto start = Clock::now();
  const Error e = error_of([&] { TcpStore client("127.0.0.1", port, false, 200ms, kKey); });
  EXPECT_EQ(e.code(), Exit::Unavailable);
  EXPECT_NE(std::string(e.what()).find(std::to_string(port)), std::string::npos) << e.what();
  EXPECT_GE(seconds_since(start), 0.15);
  EXPECT_LT(seconds_since(start), 1.5);
}

TEST(RtrainStore, ClientWaitsForALateHost) {
  const int port = free_port();
  auto host = std::async(std::launch::async, [port] {
    std::this_thread::sleep_for(100ms);
    auto h = std::make_unique<TcpStore>("127.0.0.1", port, true, 2000ms, kKey);
    h->set("up", {'1'});
    return h;
  });
  TcpStore client("127.0.0.1", port, false, 3000ms, kKey);
  EXPECT_EQ(client.get("up"), std::vector<char>{'1'});
  auto h = host.get();
  h.reset();  // the host goes: the client's next request fails instead of hanging
  EXPECT_EQ(error_of([&] { client.get("up"); }).code(), Exit::Unavailable);
}

TEST(RtrainStore, PortInUseIsUnavailable) {
  TcpStore host("127.0.0.1", 0, true, 1000ms, kKey);
  const Error e = error_of([&] { TcpStore second("127.0.0.1", host.port(), true, 1000ms, kKey); });
  EXPECT_EQ(e.code(), Exit::Unavailable);
}

// --- where it listens -----------------------------------------------------------------

TEST(RtrainStore, ListensOnTheMasterAddressOnly) {
  TcpStore host("127.0.0.1", 0, true, 1000ms, kKey);
  Raw other_address(host.port(), "127.0.0.2");  // loopback too, but not the one named
  EXPECT_FALSE(other_address.connected());
  EXPECT_EQ(other_address.connect_errno(), ECONNREFUSED);
  Raw named(host.port(), "127.0.0.1");
  EXPECT_TRUE(named.connected());
}

TEST(RtrainStore, NoSecretIsForLoopbackOnly) {
  const Error e = error_of([] { TcpStore host("192.0.2.1", 0, true, 100ms, kNoSecret); });
  EXPECT_EQ(e.code(), Exit::Usage);
  TcpStore host("127.0.0.1", 0, true, 1000ms, kNoSecret);  // this user's processes only
  TcpStore client("127.0.0.1", host.port(), false, 1000ms, kNoSecret);
  client.set("k", {'v'});
  EXPECT_EQ(host.get("k"), std::vector<char>{'v'});
}

// --- peers without the secret ---------------------------------------------------------

TEST(RtrainStore, AWrongSecretIsRefusedAndTheRunGoesOn) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey);
  host.set("k", {'v'});
  const auto start = Clock::now();
  const Error e = error_of([&] { TcpStore stranger("127.0.0.1", host.port(), false, 2000ms, kOther); });
  EXPECT_EQ(e.code(), Exit::NoPerm);
  EXPECT_NE(std::string(e.what()).find("refused this client's run secret"), std::string::npos) << e.what();
  EXPECT_LT(seconds_since(start), 1.0);  // at once, not after the timeout
  TcpStore rank("127.0.0.1", host.port(), false, 2000ms, kKey);
  EXPECT_EQ(rank.get("k"), std::vector<char>{'v'});
}

TEST(RtrainStore, AMissingSecretIsRefused) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey);
  const Error e = error_of([&] { TcpStore stranger("127.0.0.1", host.port(), false, 2000ms, kNoSecret); });
  EXPECT_EQ(e.code(), Exit::NoPerm);
  // By hand: a proof made without the key gets RKNO and the door.
  Raw raw(host.port());
  EXPECT_FALSE(raw.handshake(kOther));
  EXPECT_TRUE(raw.closed_within(1000ms));
}

TEST(RtrainStore, AListenerWithoutTheSecretIsDetected) {
  TcpStore rogue("127.0.0.1", 0, true, 2000ms, kOther);  // another run's store, or a stranger's
  const Error e = error_of([&] { TcpStore rank("127.0.0.1", rogue.port(), false, 2000ms, kKey); });
  EXPECT_EQ(e.code(), Exit::NoPerm);
  // (the rogue itself refuses the rank first: it cannot check the rank's proof)
  EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();

  // A listener that answers RKOK to anything, without proving the key: detected.
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  auto liar = std::async(std::launch::async, [lfd] {
    const int c = ::accept(lfd, nullptr, nullptr);
    std::string hello = "RKS1" + std::string(32, 'n');
    ::send(c, hello.data(), hello.size(), MSG_NOSIGNAL);
    char proof[68];
    std::size_t got = 0;
    while (got < sizeof proof) {
      const ssize_t r = ::recv(c, proof + got, sizeof proof - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    std::string ok = "RKOK" + std::string(32, 'x');
    ::send(c, ok.data(), ok.size(), MSG_NOSIGNAL);
    ::close(c);
    return got;
  });
  const Error e2 = error_of([&] { TcpStore rank("127.0.0.1", ntohs(a.sin_port), false, 2000ms, kKey); });
  EXPECT_EQ(e2.code(), Exit::NoPerm);
  EXPECT_NE(std::string(e2.what()).find("does not prove the run's secret"), std::string::npos) << e2.what();
  EXPECT_EQ(liar.get(), 68u);  // all it learnt: a nonce and a proof bound to its own nonce
  ::close(lfd);
}

// --- hostile bytes --------------------------------------------------------------------

TEST(RtrainStore, GarbageIsDroppedAtOnce) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey, quick());
  Raw raw(host.port());
  std::vector<char> junk(4096);
  randombytes_buf(junk.data(), junk.size());
  junk[0] = 'x';  // never "RKC1"
  raw.send_all(junk.data(), junk.size());
  const auto start = Clock::now();
  EXPECT_TRUE(raw.closed_within(1000ms));
  EXPECT_LT(seconds_since(start), 0.15);  // not at the handshake deadline: at once
  TcpStore rank("127.0.0.1", host.port(), false, 2000ms, kKey);
  rank.set("k", {'v'});
}

TEST(RtrainStore, SilentPeersStallNobodyAndAreDropped) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey, quick());
  std::vector<std::unique_ptr<Raw>> silent;
  for (int i = 0; i < 10; ++i) silent.push_back(std::make_unique<Raw>(host.port()));
  const auto start = Clock::now();
  TcpStore rank("127.0.0.1", host.port(), false, 2000ms, kKey);
  rank.set("k", {'v'});
  EXPECT_EQ(host.get("k"), std::vector<char>{'v'});
  EXPECT_LT(seconds_since(start), 0.1);
  for (auto& s : silent) EXPECT_TRUE(s->closed_within(1000ms));  // the 200 ms handshake deadline
}

TEST(RtrainStore, AHandshakeFloodCannotLockPeersOut) {
  StoreLimits l = quick();
  l.max_pending = 4;
  l.handshake_timeout = 5000ms;  // the flood outlasts every request below
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey, l);
  std::vector<std::unique_ptr<Raw>> flood;
  for (int i = 0; i < 40; ++i) flood.push_back(std::make_unique<Raw>(host.port()));
  const auto start = Clock::now();
  TcpStore rank("127.0.0.1", host.port(), false, 2000ms, kKey);
  rank.set("k", {'v'});
  EXPECT_LT(seconds_since(start), 1.0);
  int dropped = 0;
  for (auto& f : flood) dropped += f->closed_within(200ms);
  EXPECT_GE(dropped, 30);  // the oldest handshakes went
}

TEST(RtrainStore, AFloodOfBytesStaysBounded) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey, quick());
  const long before = rss_bytes();
  Raw raw(host.port());
  std::vector<char> chunk(std::size_t{1} << 20, 'x');
  std::memcpy(chunk.data(), "RKC1", 4);  // looks like a client, then never ends
  std::size_t sent = 0;
  for (int i = 0; i < 256; ++i) {  // up to 256 MiB
    const std::size_t n = raw.send_all(chunk.data(), chunk.size());
    sent += n;
    if (n < chunk.size()) break;  // the host closed: it read 68 bytes, checked them, and left
  }
  EXPECT_LT(sent, std::size_t{64} << 20);
  EXPECT_LT(rss_bytes() - before, 32L << 20) << "VmRSS grew by " << (rss_bytes() - before);
  TcpStore rank("127.0.0.1", host.port(), false, 2000ms, kKey);
  rank.set("k", {'v'});
}

TEST(RtrainStore, AHugeClaimedLengthIsRefusedUnread) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey, quick());
  const long before = rss_bytes();
  Raw raw(host.port());
  ASSERT_TRUE(raw.handshake(kKey));                       // even a peer with the secret
  const char huge[4] = {'\xf0', '\xff', '\xff', '\xff'};  // 4 GiB claimed
  raw.send_all(huge, 4);
  EXPECT_TRUE(raw.closed_within(1000ms));
  EXPECT_LT(rss_bytes() - before, 16L << 20);
  TcpStore rank("127.0.0.1", host.port(), false, 2000ms, kKey);
  rank.set("k", {'v'});
}

TEST(RtrainStore, AForgedOrReplayedFrameIsRefused) {
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey);
  {
    Raw raw(host.port());
    ASSERT_TRUE(raw.handshake(kKey));
    const auto f = raw.frame(set_request("good", "1"));
    raw.send_all(f.data(), f.size());
    EXPECT_EQ(raw.recv_exact(4 + 1 + 32).size(), 37u);  // the reply: status 0 and its tag
    raw.send_all(f.data(), f.size());                   // the same frame again: a replay
    EXPECT_TRUE(raw.closed_within(1000ms));
  }
  {
    Raw raw(host.port());
    ASSERT_TRUE(raw.handshake(kKey));
    auto f = raw.frame(set_request("forged", "1"));
    f[6] ^= 1;  // one bit of the payload changed on the way
    raw.send_all(f.data(), f.size());
    EXPECT_TRUE(raw.closed_within(1000ms));
  }
  EXPECT_EQ(host.get("good"), std::vector<char>{'1'});
  EXPECT_FALSE(host.try_get({"forged"})[0].has_value());
}

// --- limits ---------------------------------------------------------------------------

TEST(RtrainStore, KeyValueAndStoreLimits) {
  StoreLimits l;
  l.max_key = 16;
  l.max_value = 1024;
  l.max_bytes = 4 * (64 + 16 + 1024);
  l.max_keys = 3;
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey, l);
  EXPECT_EQ(error_of([&] { host.set(std::string(17, 'k'), {}); }).code(), Exit::Software);
  EXPECT_EQ(error_of([&] { host.set("k", std::vector<char>(1025)); }).code(), Exit::Software);
  host.set("a", std::vector<char>(1024));
  host.set("b", std::vector<char>(1024));
  host.set("c", std::vector<char>(1024));
  const Error full = error_of([&] { host.set("d", {'1'}); });
  EXPECT_EQ(full.code(), Exit::Software);
  EXPECT_NE(std::string(full.what()).find("the store is full"), std::string::npos) << full.what();
  host.erase({"a"});
  host.set("d", {'1'});  // room again; the connection is still good
  EXPECT_EQ(host.get("d"), std::vector<char>{'1'});

  // A peer past the client's checks: the host checks too, and closes on it.
  Raw raw(host.port());
  ASSERT_TRUE(raw.handshake(kKey));
  const auto f = raw.frame(set_request("e", std::string(2000, 'v')));
  raw.send_all(f.data(), f.size());
  EXPECT_TRUE(raw.closed_within(1000ms));
}

TEST(RtrainStore, ConnectionLimit) {
  StoreLimits l = quick();
  l.max_connections = 2;  // the host's own client and one more
  TcpStore host("127.0.0.1", 0, true, 2000ms, kKey, l);
  TcpStore one("127.0.0.1", host.port(), false, 2000ms, kKey);
  EXPECT_EQ(error_of([&] { TcpStore two("127.0.0.1", host.port(), false, 300ms, kKey); }).code(), Exit::Unavailable);
  one.set("k", {'v'});
}

// --- another user, without a secret ---------------------------------------------------

// Runs `body` in a child process as user nobody; its exit status (-1: could not).
int as_nobody(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(125);
    int rc = 0;
    try {
      rc = body();
    } catch (const Error& e) {
      rc = static_cast<int>(e.code());
    } catch (...) {
      rc = 126;
    }
    ::_exit(rc);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(RtrainStore, WithoutASecretAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to be another user in a child";
  TcpStore host("127.0.0.1", 0, true, 2000ms, kNoSecret);
  const int port = host.port();
  // Another user's rank: refused by the host (the kernel says whose socket it is).
  EXPECT_EQ(as_nobody([port] {
              TcpStore stranger("127.0.0.1", port, false, 1000ms, kNoSecret);
              return 0;
            }),
            static_cast<int>(Exit::NoPerm));
  // Another user's listener on the port a rank expects: the rank refuses it.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const int rogue_port = free_port();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(125);
    TcpStore rogue("127.0.0.1", rogue_port, true, 2000ms, kNoSecret);
    [[maybe_unused]] auto n = ::write(ready[1], "r", 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const Error e = error_of([&] { TcpStore rank("127.0.0.1", rogue_port, false, 1000ms, kNoSecret); });
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  EXPECT_EQ(e.code(), Exit::NoPerm);
  EXPECT_NE(std::string(e.what()).find("another user's (uid 65534)"), std::string::npos) << e.what();
}

// --- secrets --------------------------------------------------------------------------

TEST(RtrainStore, SecretsFromTextFileAndEnvironment) {
  EXPECT_EQ(error_of([] { RunSecret::from_text("short", "x"); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([] { RunSecret::from_text("has a\nnewline in the middle", "x"); }).code(), Exit::Usage);
  const RunSecret a = RunSecret::generate(), b = RunSecret::generate();
  EXPECT_EQ(a.text().size(), 64u);
  EXPECT_NE(a.text(), b.text());
  EXPECT_NE(a.key("agents"), a.key("workers"));  // one purpose's peers never pass for the other's
  EXPECT_EQ(RunSecret::from_text(a.text(), "x").key("workers"), a.key("workers"));

  rkit::testing::TempDir dir;
  const std::string f = dir.file("secret");
  rkit::testing::write(f, a.text() + "\n");
  ::chmod(f.c_str(), 0644);
  const Error open_file = error_of([&] { RunSecret::from_file(f); });
  EXPECT_EQ(open_file.code(), Exit::NoPerm);
  EXPECT_NE(open_file.hint().find("chmod 600"), std::string::npos);
  ::chmod(f.c_str(), 0600);
  EXPECT_EQ(RunSecret::from_file(f).text(), a.text());
  ::symlink(f.c_str(), dir.file("link").c_str());
  EXPECT_EQ(error_of([&] { RunSecret::from_file(dir.file("link")); }).code(), Exit::NoPerm);
  EXPECT_EQ(error_of([&] { RunSecret::from_file(dir.file("none")); }).code(), Exit::NoInput);

  rkit::testing::EnvGuard env({"RKIT_RUN_SECRET", "RKIT_RUN_SECRET_FILE"});
  env.unset("RKIT_RUN_SECRET");
  env.unset("RKIT_RUN_SECRET_FILE");
  EXPECT_FALSE(RunSecret::from_env().has_value());
  env.set("RKIT_RUN_SECRET_FILE", f);
  EXPECT_EQ(RunSecret::from_env()->text(), a.text());
  env.set("RKIT_RUN_SECRET", b.text());  // the variable first
  EXPECT_EQ(RunSecret::from_env()->text(), b.text());
}

}  // namespace
}  // namespace rkit::rtrain
