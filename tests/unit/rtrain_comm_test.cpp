// rtrain's communication layer: DistEnv parsing, the TCP store, and the collectives
// between 2 and 3 ranks run as threads of this process (a killed peer: a forked child).
#include "comm.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "device.hpp"
#include "device_comm.hpp"
#include "test_support.hpp"

namespace rkit::rtrain {
namespace {

using namespace std::chrono_literals;
using rkit::testing::error_of;
using Clock = std::chrono::steady_clock;

using rkit::testing::seconds_since;

using rkit::testing::free_port;

DistEnv env_for(int rank, int world, int port) {
  DistEnv e;
  e.rank = rank;
  e.world = world;
  e.local_rank = rank;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

// Runs body(comm) on `world` threads, one rank each; fails the test for any exception.
void run_ranks(int world, const std::function<void(Communicator&)>& body, std::chrono::milliseconds timeout = 5000ms) {
  const int port = free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = Communicator::connect(env_for(r, world, port), timeout);
        body(*comm);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// --- DistEnv --------------------------------------------------------------------------

const std::vector<std::string> kDistVars = {"RANK",        "WORLD_SIZE",      "LOCAL_RANK",          "MASTER_ADDR",
                                            "MASTER_PORT", "RKIT_RUN_SECRET", "RKIT_RUN_SECRET_FILE"};

TEST(RtrainCommEnv, NoRankMeansOneRank) {
  rkit::testing::EnvGuard env(kDistVars);
  for (const auto& v : kDistVars) env.unset(v);
  const DistEnv d = DistEnv::from_env();
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world, 1);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 29500);
}

TEST(RtrainCommEnv, ReadsTorchrunVariables) {
  rkit::testing::EnvGuard env(kDistVars);
  env.set("RKIT_RUN_SECRET", "a-secret-of-the-run-0123456789");
  env.set("RANK", "3");
  env.set("WORLD_SIZE", "4");
  env.set("LOCAL_RANK", "1");
  env.set("MASTER_ADDR", "node7");
  env.set("MASTER_PORT", "1234");
  const DistEnv d = DistEnv::from_env();
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world, 4);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.master_addr, "node7");
  EXPECT_EQ(d.master_port, 1234);
  ASSERT_TRUE(d.secret.has_value());
  EXPECT_EQ(d.secret->text(), "a-secret-of-the-run-0123456789");
}

// Without a secret the store is open to this user's processes on loopback only: a
// MASTER_ADDR other ranks would reach over the network needs the run's secret.
TEST(RtrainCommEnv, NoSecretOnlyOnLoopback) {
  rkit::testing::EnvGuard env(kDistVars);
  for (const auto& v : kDistVars) env.unset(v);
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "127.0.0.1");
  EXPECT_FALSE(DistEnv::from_env().secret.has_value());
  env.set("MASTER_ADDR", "192.0.2.7");
  const Error e = error_of([] { DistEnv::from_env(); });
  EXPECT_EQ(e.code(), Exit::Usage);
  EXPECT_EQ(std::string(e.what()), "MASTER_ADDR=192.0.2.7 is not a loopback address, and there is no run secret");
  env.set("RKIT_RUN_SECRET", "short");
  EXPECT_EQ(error_of([] { DistEnv::from_env(); }).code(), Exit::Usage);
  env.set("RKIT_RUN_SECRET", "long-enough-secret-for-a-run");
  EXPECT_TRUE(DistEnv::from_env().secret.has_value());
  // One rank talks to nobody: no secret needed.
  env.unset("RKIT_RUN_SECRET");
  env.set("WORLD_SIZE", "1");
  EXPECT_NO_THROW(DistEnv::from_env());
}

TEST(RtrainCommEnv, RejectsMalformedValues) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> vars;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x' is not a non-negative integer"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK='-1' is not a non-negative integer"},
      {{{"RANK", "1 "}, {"WORLD_SIZE", "2"}}, "RANK='1 ' is not a non-negative integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0' is not a positive integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}, "WORLD_SIZE='99999999999' is not a positive integer"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2 is not below WORLD_SIZE=2"},
      {{{"RANK", "0"}}, "RANK is set but WORLD_SIZE is not"},
      {{{"WORLD_SIZE", "2"}}, "WORLD_SIZE is set but RANK is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}, "LOCAL_RANK=2 is not below WORLD_SIZE=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}, "MASTER_PORT='0' is not a port number (1 to 65535)"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65536"}},
       "MASTER_PORT='65536' is not a port number (1 to 65535)"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}}, "MASTER_ADDR is empty"},
  };
  for (const auto& c : cases) {
    rkit::testing::EnvGuard env(kDistVars);
    for (const auto& v : kDistVars) env.unset(v);
    for (const auto& [k, v] : c.vars) env.set(k, v);
    const Error e = error_of([] { DistEnv::from_env(); });
    EXPECT_EQ(e.code(), Exit::Usage) << c.message;
    EXPECT_EQ(std::string(e.what()), c.message);
  }
}

// --- Communicator ---------------------------------------------------------------------

TEST(RtrainComm, HiddenFraction) {
  EXPECT_EQ((CommTimes{0, 0}.hidden_fraction()), 1);
  EXPECT_EQ((CommTimes{0, 0.5}.hidden_fraction()), 1);
  EXPECT_EQ((CommTimes{2, 0.5}.hidden_fraction()), 0.75);
  EXPECT_EQ((CommTimes{1, 3}.hidden_fraction()), 0);
}

TEST(RtrainComm, WorldOfOneIsANoOp) {
  auto comm = Communicator::connect(DistEnv{}, 100ms);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world(), 1);
  std::vector<float> f = {1.5f, -2};
  std::vector<double> d = {3.25};
  comm->allreduce_sum(f.data(), f.size());
  comm->allreduce_sum(d.data(), d.size());
  comm->broadcast(f.data(), sizeof(float) * f.size(), 0);
  comm->barrier();
  EXPECT_EQ(f, (std::vector<float>{1.5f, -2}));
  EXPECT_EQ(d, std::vector<double>{3.25});
  EXPECT_EQ(error_of([&] { comm->broadcast(f.data(), 4, 1); }).code(), Exit::Usage);

  std::vector<float> g = {1, 2, 3, 4};
  comm->set_buckets(g.data(), {{0, 2}, {2, 2}}, 1.0f);
  comm->begin_step();
  comm->ready(1);
  comm->ready(0);
  const CommTimes t = comm->wait();
  EXPECT_EQ(t.comm_s, 0);
  EXPECT_EQ(t.exposed_s, 0);
  EXPECT_EQ(t.hidden_fraction(), 1);
  EXPECT_EQ(g, (std::vector<float>{1, 2, 3, 4}));
}

TEST(RtrainComm, BucketMisuseIsASoftwareError) {
  auto comm = Communicator::connect(DistEnv{}, 100ms);
  std::vector<float> g(8);
  comm->set_buckets(g.data(), {{0, 4}, {4, 4}}, 1.0f);
  EXPECT_EQ(error_of([&] { comm->ready(0); }).code(), Exit::Software);  // no step open
  EXPECT_EQ(error_of([&] { comm->wait(); }).code(), Exit::Software);
  comm->begin_step();
  EXPECT_EQ(error_of([&] { comm->begin_step(); }).code(), Exit::Software);
  EXPECT_EQ(error_of([&] { comm->ready(2); }).code(), Exit::Software);
  comm->ready(0);
  EXPECT_EQ(error_of([&] { comm->ready(0); }).code(), Exit::Software);
  const Error e = error_of([&] { comm->wait(); });
  EXPECT_EQ(e.code(), Exit::Software);
  EXPECT_EQ(std::string(e.what()), "wait: bucket 1 was never readied this step");
}

TEST(RtrainComm, BlockingCollectivesOnTwoAndThreeRanks) {
  for (int world : {2, 3}) {
    std::vector<std::vector<float>> floats(static_cast<std::size_t>(world));
    run_ranks(world, [&](Communicator& comm) {
      const int r = comm.rank();
      EXPECT_EQ(comm.world(), world);
      // Integers: the sum is exact in any order.
      std::vector<float> f(1000);
      for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(static_cast<int>(i) * (r + 1) - 300);
      comm.allreduce_sum(f.data(), f.size());
      const int ranks_sum = world * (world + 1) / 2;  // sum of (r + 1)
      for (std::size_t i = 0; i < f.size(); ++i)
        ASSERT_EQ(f[i], static_cast<float>(static_cast<int>(i) * ranks_sum - 300 * world)) << i;

      std::vector<double> d(3, static_cast<double>(r) + 0.5);
      comm.allreduce_sum(d.data(), d.size());
      EXPECT_EQ(d, std::vector<double>(3, world * (world - 1) / 2.0 + 0.5 * world));

      // Fractions: not exact, but the same bits on every rank.
      std::vector<float> x(5000);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i + 1) * (r + 1.37f)) / 3.0f;
      comm.allreduce_sum(x.data(), x.size());
      floats[static_cast<std::size_t>(r)] = x;

      const int root = world - 1;
      std::vector<char> bytes(777, static_cast<char>(r == root ? 42 : r));
      comm.broadcast(bytes.data(), bytes.size(), root);
      EXPECT_EQ(bytes, std::vector<char>(777, 42));
      comm.barrier();
      EXPECT_EQ(error_of([&] { comm.broadcast(bytes.data(), 1, world); }).code(), Exit::Usage);
    });
    for (int r = 1; r < world; ++r)
      EXPECT_EQ(std::memcmp(floats[0].data(), floats[static_cast<std::size_t>(r)].data(), floats[0].size() * 4), 0)
          << "rank " << r << " of " << world;
  }
}

TEST(RtrainComm, BucketsInReverseOrderAreSummedAndScaled) {
  constexpr int kWorld = 3;
  const std::vector<std::pair<std::size_t, std::size_t>> buckets = {{0, 1000}, {1000, 0}, {1000, 4000}, {5000, 7}};
  constexpr std::size_t kN = 5007;
  std::vector<std::vector<float>> exact(kWorld), frac(kWorld), frac_again(kWorld);
  run_ranks(kWorld, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    std::vector<float> g(kN);
    comm.set_buckets(g.data(), buckets, 0.25f);
    const auto step = [&](const std::function<float(std::size_t)>& value) {
      for (std::size_t i = 0; i < kN; ++i) g[i] = value(i);
      comm.begin_step();
      for (std::size_t b = buckets.size(); b-- > 0;) comm.ready(b);
      const CommTimes t = comm.wait();
      EXPECT_GT(t.comm_s, 0);
      EXPECT_GE(t.exposed_s, 0);
      EXPECT_GE(t.hidden_fraction(), 0);
      EXPECT_LE(t.hidden_fraction(), 1);
      return g;
    };
    exact[r] = step([&](std::size_t i) { return static_cast<float>(static_cast<int>(i % 100) + static_cast<int>(r)); });
    const auto frac_value = [&](std::size_t i) {
      return std::cos(static_cast<float>(i) * 0.37f + static_cast<float>(r));
    };
    frac[r] = step(frac_value);
    frac_again[r] = step(frac_value);
  });
  for (std::size_t i = 0; i < kN; ++i)  // sum over ranks of (i % 100 + r), times 0.25
    ASSERT_EQ(exact[0][i], static_cast<float>(3 * static_cast<int>(i % 100) + 3) * 0.25f) << i;
  for (std::size_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(std::memcmp(exact[0].data(), exact[r].data(), kN * 4), 0) << r;
    EXPECT_EQ(std::memcmp(frac[0].data(), frac[r].data(), kN * 4), 0) << "ranks differ: " << r;
    EXPECT_EQ(std::memcmp(frac[r].data(), frac_again[r].data(), kN * 4), 0) << "steps differ: " << r;
  }
}

TEST(RtrainComm, ConnectGivesUpWhenARankNeverComes) {
  const int port = free_port();
  for (int rank : {0, 1}) {  // rank 0 waits for rank 1's address; rank 1 for the store itself
    const auto start = Clock::now();
    const Error e = error_of([&] { Communicator::connect(env_for(rank, 2, port), 300ms); });
    EXPECT_EQ(e.code(), Exit::Unavailable) << rank;
    EXPECT_NE(std::string(e.what()).find("rendezvous: store 127.0.0.1:"), std::string::npos) << e.what();
    EXPECT_LT(seconds_since(start), 1.5) << rank;
  }
}

TEST(RtrainComm, APeerThatLeavesFailsTheNextCollective) {
  const int port = free_port();
  std::promise<void> left;
  auto peer = std::async(std::launch::async, [&] {
    auto comm = Communicator::connect(env_for(1, 2, port), 3000ms);
    comm->barrier();
    comm.reset();  // closes its connections, as a process that exits
    left.set_value();
  });
  auto comm = Communicator::connect(env_for(0, 2, port), 3000ms);
  comm->barrier();
  left.get_future().wait();
  peer.get();
  std::vector<float> x(1024, 1.0f);
  const auto start = Clock::now();
  const Error e = error_of([&] { comm->allreduce_sum(x.data(), x.size()); });
  EXPECT_EQ(e.code(), Exit::Unavailable);
  EXPECT_NE(std::string(e.what()).find("rank 0 of 2: allreduce #1 (1024 floats) with rank 1: "), std::string::npos)
      << e.what();
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  EXPECT_LT(seconds_since(start), 3.0);
  // Broken: every later call fails at once with the same error.
  const auto again = Clock::now();
  EXPECT_EQ(std::string(error_of([&] { comm->barrier(); }).what()), e.what());
  EXPECT_LT(seconds_since(again), 0.5);
}

TEST(RtrainComm, AStalledPeerTimesOutOnTheCaller) {
  const int port = free_port();
  std::promise<void> done;
  auto peer = std::async(std::launch::async, [&] {
    auto comm = Communicator::connect(env_for(1, 2, port), 600ms);
    done.get_future().wait();  // alive, but never joins the collective
  });
  auto comm = Communicator::connect(env_for(0, 2, port), 600ms);
  std::vector<float> g(64, 1.0f);
  comm->set_buckets(g.data(), {{0, 32}, {32, 32}}, 1.0f);
  comm->begin_step();
  comm->ready(0);
  comm->ready(1);
  const auto start = Clock::now();
  const Error e = error_of([&] { comm->wait(); });
  const double took = seconds_since(start);
  done.set_value();
  peer.get();
  EXPECT_EQ(e.code(), Exit::Unavailable);
  EXPECT_NE(std::string(e.what()).find("bucket 0"), std::string::npos) << e.what();
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 2.0);
}

// A real kill -9: the peer is a forked child that connects, joins a barrier, then waits
// to be killed; the parent's next collective must fail within the timeout.
TEST(RtrainComm, AKilledPeerProcessFailsTheNextCollective) {
  const int port = free_port();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(10);  // never outlive a failed parent for long
    try {
      auto comm = Communicator::connect(env_for(1, 2, port), 3000ms);
      comm->barrier();
      for (;;) ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  auto comm = Communicator::connect(env_for(0, 2, port), 3000ms);
  comm->barrier();
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));
  std::vector<double> x(1 << 16, 1.0);
  const auto start = Clock::now();
  const Error e = error_of([&] { comm->allreduce_sum(x.data(), x.size()); });
  EXPECT_EQ(e.code(), Exit::Unavailable);
  EXPECT_LT(seconds_since(start), 3.0);
}

// The peer is killed while a large all-reduce is under way: writes to its dead socket
// fail (EPIPE) without SIGPIPE killing this process, and the call throws.
TEST(RtrainComm, APeerKilledMidCollectiveFailsIt) {
  const int port = free_port();
  constexpr std::size_t kN = std::size_t{16} << 20;  // 64 MiB of floats: tens of ms at least
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(10);
    try {
      auto comm = Communicator::connect(env_for(1, 2, port), 3000ms);
      std::vector<float> x(kN, 1.0f);
      comm->barrier();
      comm->allreduce_sum(x.data(), x.size());
    } catch (...) {
    }
    ::_exit(1);
  }
  auto comm = Communicator::connect(env_for(0, 2, port), 3000ms);
  std::vector<float> x(kN, 1.0f);
  comm->barrier();
  std::thread killer([child] {
    std::this_thread::sleep_for(20ms);
    ::kill(child, SIGKILL);
  });
  const auto start = Clock::now();
  const Error e = error_of([&] { comm->allreduce_sum(x.data(), x.size()); });
  killer.join();
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(e.code(), Exit::Unavailable);
  EXPECT_LT(seconds_since(start), 3.0);
}

// The time of a 4 MiB float all-reduce between two ranks (threads), printed for the record.
TEST(RtrainComm, Allreduce4MiBBetweenTwoRanks) {
  std::vector<double> times;
  run_ranks(2, [&](Communicator& comm) {
    std::vector<float> x((4 << 20) / sizeof(float), 1.0f);
    std::vector<double> mine;
    for (int i = 0; i < 6; ++i) {
      comm.barrier();
      const auto start = Clock::now();
      comm.allreduce_sum(x.data(), x.size());
      mine.push_back(seconds_since(start));
    }
    EXPECT_EQ(x[12345], 64.0f);  // 1 doubled six times
    if (comm.rank() == 0) times = mine;
  });
  ASSERT_EQ(times.size(), 6u);
  std::sort(times.begin() + 1, times.end());  // the first one warms up
  const double median = times[3];
  RecordProperty("allreduce_4mib_ms", std::to_string(median * 1e3));
  std::printf("4 MiB float allreduce, 2 ranks: median %.2f ms (%.2f GB/s algbw)\n", median * 1e3, 4.194304e-3 / median);
}

// --- queued collectives of the sharded strategies ----------------------------------------

// The reduce-scatter and all-gather in place, queued and waited for out of order, on 2
// and 3 ranks: exact sums (small integers), the then() hook after the scale, and the
// bytes counted as the ring sends them.
TEST(RtrainComm, QueuedReduceScatterAllgatherAndAllreduce) {
  for (int world : {2, 3}) {
    run_ranks(world, [&](Communicator& comm) {
      const std::size_t block = 1000, n = block * static_cast<std::size_t>(world);
      const auto r = static_cast<std::size_t>(comm.rank());
      std::vector<float> rs(n), ag(n, -1.0f), ar(n);
      for (std::size_t i = 0; i < n; ++i) {
        rs[i] = static_cast<float>((i % 7) + r);
        ar[i] = static_cast<float>(i % 5);
      }
      for (std::size_t i = 0; i < block; ++i) ag[r * block + i] = static_cast<float>(r * 10000 + i);
      std::vector<float> kept(block);
      const CommCounters before = comm.counters();
      const auto t_rs = comm.start_reduce_scatter(
          rs.data(), block, 0.5f,
          [&] { std::copy_n(rs.begin() + static_cast<std::ptrdiff_t>(r * block), block, kept.begin()); }, "test");
      const auto t_ag = comm.start_allgather(ag.data(), block, "test");
      const auto t_ar = comm.start_allreduce(ar.data(), n, 2.0f, "test");
      comm.wait_for(t_ag);  // and so every one queued before it
      comm.wait_for(t_ar);
      comm.wait_for(t_rs);  // already done: returns at once
      const double ranks_sum = world * (world - 1) / 2.0;
      for (std::size_t i = 0; i < block; ++i) {
        const std::size_t j = r * block + i;
        ASSERT_EQ(kept[i], static_cast<float>(0.5 * (world * static_cast<double>(j % 7) + ranks_sum))) << i;
        ASSERT_EQ(rs[j], kept[i]);
      }
      for (std::size_t q = 0; q < static_cast<std::size_t>(world); ++q)
        for (std::size_t i = 0; i < block; i += 97) ASSERT_EQ(ag[q * block + i], static_cast<float>(q * 10000 + i));
      for (std::size_t i = 0; i < n; i += 13) ASSERT_EQ(ar[i], static_cast<float>(2 * world * (i % 5)));
      const CommCounters d = comm.counters() - before;
      const std::uint64_t bytes = n * sizeof(float), w = static_cast<std::uint64_t>(world);
      EXPECT_EQ(d[Collective::ReduceScatter], (w - 1) * block * sizeof(float));
      EXPECT_EQ(d[Collective::Allgather], (w - 1) * block * sizeof(float));
      EXPECT_EQ(d[Collective::Allreduce], 2 * (w - 1) * bytes / w);
      EXPECT_GT(d.busy_s, 0.0);
    });
  }
}

// The CPU device's collectives (device_comm.hpp) over the communicator: a reduce-scatter
// kept elsewhere or in place, tickets of point-to-point transfers (one wait each), a
// subgroup, the counters the communicator's; and the device's copy, zeros and y = b y + x.
TEST(RtrainComm, CpuDeviceCollectivesAndOperators) {
  run_ranks(2, [&](Communicator& comm) {
    auto dev = make_device("cpu", 1, comm.rank());
    std::unique_ptr<DeviceComm> c = dev->collectives(comm);
    ASSERT_EQ(c->world(), 2);
    const std::size_t block = 64;
    const auto r = static_cast<std::size_t>(comm.rank());
    std::vector<float> a(2 * block), b(2 * block), keep(block, -1.0f);
    for (std::size_t i = 0; i < 2 * block; ++i) a[i] = b[i] = static_cast<float>(i + r);
    const CommCounters before = c->counters();
    const auto t1 = c->start_reduce_scatter(a.data(), block, 0.5f, keep.data(), "elsewhere");
    const auto t2 = c->start_reduce_scatter(b.data(), block, 1.0f, b.data() + r * block, "in place");
    c->wait_for(t2);
    c->wait_for(t1);
    for (std::size_t i = 0; i < block; ++i) {
      const float sum = static_cast<float>(2 * (r * block + i) + 1);
      ASSERT_EQ(keep[i], 0.5f * sum) << i;
      ASSERT_EQ(b[r * block + i], sum) << i;
    }
    std::vector<float> out(block, static_cast<float>(r + 1)), in(block, 0.0f);
    const int peer = 1 - comm.rank();
    const auto ts = c->send(peer, out.data(), block);
    const auto tr = c->recv(peer, in.data(), block);
    c->wait_for(tr);
    c->wait_for(ts);
    EXPECT_EQ(in, std::vector<float>(block, static_cast<float>(peer + 1)));
    EXPECT_EQ(error_of([&] { c->wait_for(ts); }).code(), Exit::Software);  // waited for already
    const CommCounters d = c->counters() - before;
    EXPECT_EQ(d[Collective::ReduceScatter], 2 * block * sizeof(float));
    EXPECT_EQ(d.send_recv, block * sizeof(float));
    const CommCounters host = comm.counters() - before;
    EXPECT_EQ(host[Collective::ReduceScatter], d[Collective::ReduceScatter]);
    std::unique_ptr<DeviceComm> one = c->subgroup({comm.rank()}, fmt::format("alone-{}", comm.rank()));
    EXPECT_EQ(one->world(), 1);
    std::vector<float> x{1, 2, 3}, y{4, 5, 6};
    one->wait_for(one->start_allreduce(x.data(), 3, 2.0f, "one rank"));
    EXPECT_EQ(x, (std::vector<float>{2, 4, 6}));
    dev->scale_add(3, 0.5f, y.data(), x.data());
    EXPECT_EQ(y, (std::vector<float>{4, 6.5f, 9}));
    dev->copy(y.data(), x.data() + 1, 2 * sizeof(float));
    EXPECT_EQ(y, (std::vector<float>{4, 6, 9}));
    dev->fill_zero(x.data() + 1, 2);
    EXPECT_EQ(x, (std::vector<float>{2, 0, 0}));
  });
}

TEST(RtrainComm, QueuedCollectivesOnOneRankAreDoneAtOnce) {
  auto comm = Communicator::connect(DistEnv{}, 1000ms);
  std::vector<float> x = {1, 2, 3, 4};
  bool then_ran = false;
  EXPECT_EQ(comm->start_reduce_scatter(
                x.data(), 4, 0.5f, [&] { then_ran = true; }, "t"),
            0u);
  EXPECT_TRUE(then_ran);
  EXPECT_EQ(x, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  EXPECT_EQ(comm->start_allgather(x.data(), 4, "t"), 0u);
  EXPECT_EQ(comm->wait_for(comm->start_allreduce(x.data(), 4, 2.0f, "t")), 0.0);
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(comm->counters()[Collective::Allreduce], 0u);
}

// What the kernel says this process's TCP sockets have sent and the peer has acknowledged
// (tcp_info's bytes_acked: bytes_sent counts a retransmitted segment again, which even
// loopback does on a busy machine).
std::uint64_t tcp_bytes_sent_by_this_process() {
  std::uint64_t sum = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    const std::string name = entry.path().filename();
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    struct tcp_info info {};
    socklen_t len = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
        len >= offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked)
      sum += info.tcpi_bytes_acked;
  }
  return sum;
}

// The counters are no formula the test repeats: what both ranks counted for each kind of
// collective is what the kernel saw their sockets send, within Gloo's headers.
TEST(RtrainComm, CountedBytesAreWhatTheSocketsSent) {
  for (Collective kind : {Collective::Allreduce, Collective::ReduceScatter, Collective::Allgather}) {
    std::barrier sync(2);
    std::uint64_t kernel_before = 0, kernel_after = 0, counted[2] = {0, 0};
    run_ranks(2, [&](Communicator& comm) {
      const std::size_t block = (4u << 20) / sizeof(float);
      std::vector<float> x(2 * block, 1.0f);
      comm.barrier();
      sync.arrive_and_wait();
      if (comm.rank() == 0) kernel_before = tcp_bytes_sent_by_this_process();
      sync.arrive_and_wait();
      const CommCounters before = comm.counters();
      for (int i = 0; i < 3; ++i) {
        Communicator::Ticket t = 0;
        if (kind == Collective::Allreduce) t = comm.start_allreduce(x.data(), x.size(), 1.0f, "t");
        if (kind == Collective::ReduceScatter) t = comm.start_reduce_scatter(x.data(), block, 1.0f, nullptr, "t");
        if (kind == Collective::Allgather) t = comm.start_allgather(x.data(), block, "t");
        comm.wait_for(t);
      }
      counted[comm.rank()] = (comm.counters() - before)[kind];
      comm.barrier();  // the peer's last bytes are in
      sync.arrive_and_wait();
      if (comm.rank() == 0) kernel_after = tcp_bytes_sent_by_this_process();
      sync.arrive_and_wait();
    });
    const double want = static_cast<double>(counted[0] + counted[1]);
    const double got = static_cast<double>(kernel_after - kernel_before);
    EXPECT_GT(want, 0) << collective_name(kind);
    std::printf("%s: counted %.0f, kernel %.0f\n", collective_name(kind), want, got);
    EXPECT_NEAR(got, want, 0.002 * want + 65536) << collective_name(kind);
  }
}

}  // namespace
}  // namespace rkit::rtrain
