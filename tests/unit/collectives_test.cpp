// rkit/collectives.hpp, the table comm.gloo and gpu.nccl share: names, nccl-tests' bus
// factors and element counts (its 16-byte rounding of a rank's block), the sweep, the
// inputs, and the exact answers and wrong-value count, each checked against the
// collective's definition built here from collective_input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "rkit/collectives.hpp"
#include "rkit/error.hpp"

namespace rkit {
namespace {

TEST(Collectives, NamesAreTheMetricNames) {
  const char* names[] = {"allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"};
  ASSERT_EQ(std::size(kAllCollectives), std::size(names));
  for (std::size_t i = 0; i < std::size(names); ++i) {
    EXPECT_STREQ(collective_name(kAllCollectives[i]), names[i]);
    EXPECT_EQ(collective_named(names[i]), kAllCollectives[i]);
  }
  EXPECT_FALSE(collective_named("all_reduce").has_value());
  EXPECT_FALSE(collective_named("").has_value());
}

TEST(Collectives, BusFactorsAreNcclTestsForOneTwoAndEightRanks) {
  struct Case {
    Collective c;
    double n1, n2, n8;
  };
  const Case cases[] = {{Collective::Allreduce, 0.0, 1.0, 1.75},
                        {Collective::Allgather, 0.0, 0.5, 0.875},
                        {Collective::ReduceScatter, 0.0, 0.5, 0.875},
                        {Collective::Alltoall, 0.0, 0.5, 0.875},
                        {Collective::Broadcast, 1.0, 1.0, 1.0}};
  for (const Case& k : cases) {
    SCOPED_TRACE(collective_name(k.c));
    EXPECT_DOUBLE_EQ(busbw_factor(k.c, 1), k.n1);
    EXPECT_DOUBLE_EQ(busbw_factor(k.c, 2), k.n2);
    EXPECT_DOUBLE_EQ(busbw_factor(k.c, 8), k.n8);
  }
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::Allreduce, 4), 1.5);
}

void expect_counts(Collective c, std::uint64_t bytes, unsigned ranks, std::size_t send, std::size_t recv,
                   std::size_t param, std::uint64_t reported) {
  SCOPED_TRACE(::testing::Message() << collective_name(c) << " " << bytes << " B x " << ranks);
  const CollectiveCounts k = collective_counts(c, bytes, ranks);
  EXPECT_EQ(k.send, send);
  EXPECT_EQ(k.recv, recv);
  EXPECT_EQ(k.param, param);
  EXPECT_EQ(k.bytes, reported);
}

TEST(Collectives, CountsFollowNcclTests) {
  // allreduce, broadcast: bytes/4 elements, whatever the rank count.
  expect_counts(Collective::Allreduce, 64 << 20, 2, 16 << 20, 16 << 20, 16 << 20, 64 << 20);
  expect_counts(Collective::Broadcast, 100, 3, 25, 25, 25, 100);
  expect_counts(Collective::Allreduce, 102, 3, 25, 25, 25, 100);  // whole floats only
  // allgather: each rank's block, the gathered whole reported.
  expect_counts(Collective::Allgather, 64 << 20, 4, 4 << 20, 16 << 20, 4 << 20, 64 << 20);
  // reduce_scatter: the whole reduced array in, one block out.
  expect_counts(Collective::ReduceScatter, 1 << 20, 2, 1 << 18, 1 << 17, 1 << 17, 1 << 20);
  // alltoall: one block to each rank, the whole send buffer reported.
  expect_counts(Collective::Alltoall, 1 << 20, 8, 1 << 18, 1 << 18, 1 << 15, 1 << 20);
  // A block is rounded down to whole 16 bytes, nccl-tests' (count/nranks) & -(16/eltSize):
  // 1024/3 = 341 -> 340 elements; 250/8 = 31 -> 28.
  expect_counts(Collective::Allgather, 4096, 3, 340, 1020, 340, 4080);
  expect_counts(Collective::ReduceScatter, 4096, 3, 1020, 340, 340, 4080);
  expect_counts(Collective::Alltoall, 4096, 3, 1020, 1020, 340, 4080);
  expect_counts(Collective::Allgather, 1000, 8, 28, 224, 28, 896);
  expect_counts(Collective::Alltoall, 1000, 8, 224, 224, 28, 896);
  // Too small for one element or one 16-byte block a rank: nothing to run.
  expect_counts(Collective::Allreduce, 3, 2, 0, 0, 0, 0);
  expect_counts(Collective::Allgather, 16, 2, 0, 0, 0, 0);
  expect_counts(Collective::ReduceScatter, 16, 2, 0, 0, 0, 0);
  expect_counts(Collective::Alltoall, 127, 8, 0, 0, 0, 0);
  expect_counts(Collective::Allgather, 32, 2, 4, 8, 4, 32);
  expect_counts(Collective::Alltoall, 128, 8, 32, 32, 4, 128);
}

TEST(Collectives, SweepIsNcclTestsEndingAtMax) {
  const std::vector<std::uint64_t> full = size_sweep(16, 64 << 20, 4);
  ASSERT_EQ(full.size(), 12u);  // 16 B ... 64 MiB
  EXPECT_EQ(full.front(), 16u);
  for (std::size_t i = 1; i < full.size(); ++i) EXPECT_EQ(full[i], 4 * full[i - 1]);
  EXPECT_EQ(full.back(), 64u << 20);
  EXPECT_EQ(size_sweep(256 << 10, 512 << 20, 16),
            (std::vector<std::uint64_t>{256 << 10, 4 << 20, 64 << 20, 512 << 20}));  // 1 GiB would pass max
  EXPECT_EQ(size_sweep(1 << 10, 64 << 20, 64), (std::vector<std::uint64_t>{1 << 10, 64 << 10, 4 << 20, 64 << 20}));
  EXPECT_EQ(size_sweep(1 << 20, 64 << 20, 64), (std::vector<std::uint64_t>{1 << 20, 64 << 20}));
  EXPECT_EQ(size_sweep(100, 100, 2), (std::vector<std::uint64_t>{100}));
  const std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(size_sweep(top / 2, top, 4).size(), 2u);  // no overflow
  EXPECT_THROW(size_sweep(0, 16, 4), Error);
  EXPECT_THROW(size_sweep(32, 16, 4), Error);
  EXPECT_THROW(size_sweep(16, 64, 1), Error);
}

TEST(Collectives, InputsAreSmallIntegersThatDifferByRankAndSeed) {
  int same_rank = 0, same_seed = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    const float v = collective_input(3, i, kTimingSeed);
    EXPECT_EQ(v, std::floor(v));
    EXPECT_LE(std::fabs(v), 125.0f);
    same_rank += v == collective_input(4, i, kTimingSeed);
    same_seed += v == collective_input(3, i, kCheckSeed);
  }
  // 251 values: about 1 in 251 agree by chance, far from all of them.
  EXPECT_LT(same_rank, 200);
  EXPECT_LT(same_seed, 200);
  std::vector<float> buf(1000);
  fill_collective_input(2, kCheckSeed, buf.data(), buf.size());
  for (std::size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], collective_input(2, i, kCheckSeed)) << i;
  // Pinned: comm.gloo's inputs as they were before the table, and the same for every backend.
  EXPECT_EQ(collective_input(0, 0, kCheckSeed), 79.0f);
  EXPECT_EQ(collective_input(1, 5, kCheckSeed), -95.0f);
  EXPECT_EQ(collective_input(3, 1000, kTimingSeed), -47.0f);
  EXPECT_EQ(collective_input(63, 123456789, kCheckSeed), -92.0f);
}

// Rank `rank`'s correct result, from the collective's definition (the table's doc).
std::vector<float> definition(Collective c, unsigned rank, unsigned ranks, const CollectiveCounts& k, unsigned seed) {
  std::vector<float> out(k.recv, 0.0f);
  const std::size_t b = k.param;
  for (std::size_t i = 0; i < k.recv; ++i) {
    switch (c) {
      case Collective::Allreduce:
        for (unsigned r = 0; r < ranks; ++r) out[i] += collective_input(r, i, seed);
        break;
      case Collective::Broadcast: out[i] = collective_input(0, i, seed); break;
      case Collective::Allgather: out[i] = collective_input(static_cast<unsigned>(i / b), i % b, seed); break;
      case Collective::ReduceScatter:
        for (unsigned r = 0; r < ranks; ++r) out[i] += collective_input(r, rank * b + i, seed);
        break;
      case Collective::Alltoall: out[i] = collective_input(static_cast<unsigned>(i / b), rank * b + i % b, seed); break;
    }
  }
  return out;
}

TEST(Collectives, ExpectedResultIsTheDefinition) {
  for (unsigned ranks : {1u, 3u, 8u}) {
    for (Collective c : kAllCollectives) {
      const CollectiveCounts k = collective_counts(c, 40000, ranks);  // blocks not a multiple of the 4096 chunk
      for (unsigned rank : {0u, ranks - 1}) {
        SCOPED_TRACE(::testing::Message() << collective_name(c) << " rank " << rank << " of " << ranks);
        const std::vector<float> want = definition(c, rank, ranks, k, kCheckSeed);
        std::vector<float> got(k.recv);
        expected_result(c, rank, ranks, k, kCheckSeed, 0, k.recv, got.data());
        EXPECT_EQ(got, want);
        // A window that starts and ends inside blocks.
        const std::size_t first = k.param / 2 + 1, n = k.recv - first - 1;
        expected_result(c, rank, ranks, k, kCheckSeed, first, n, got.data());
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[first + i]) << first + i;
        EXPECT_EQ(count_wrong(c, rank, ranks, k, want.data(), kCheckSeed), 0u);
      }
    }
  }
}

TEST(Collectives, WrongCountFindsEveryBrokenElement) {
  const unsigned ranks = 3, rank = 1;
  for (Collective c : kAllCollectives) {
    SCOPED_TRACE(collective_name(c));
    const CollectiveCounts k = collective_counts(c, 40000, ranks);
    std::vector<float> result = definition(c, rank, ranks, k, kCheckSeed);
    result[0] += 1;                                       // off by one
    result[7] = std::numeric_limits<float>::quiet_NaN();  // never written
    result[k.recv - 1] = -result[k.recv - 1] - 1;         // the last element
    EXPECT_EQ(count_wrong(c, rank, ranks, k, result.data(), kCheckSeed), 3u);
    // The right answer of another seed (a stale result) is wrong nearly everywhere.
    const std::vector<float> stale = definition(c, rank, ranks, k, kTimingSeed);
    EXPECT_GT(count_wrong(c, rank, ranks, k, stale.data(), kCheckSeed), k.recv * 9 / 10);
    // Another rank's answer is wrong where the answer depends on the rank.
    const std::vector<float> other = definition(c, 2, ranks, k, kCheckSeed);
    const bool per_rank = !same_result_on_every_rank(c);
    EXPECT_EQ(per_rank, c == Collective::ReduceScatter || c == Collective::Alltoall);
    const std::uint64_t wrong = count_wrong(c, rank, ranks, k, other.data(), kCheckSeed);
    if (per_rank)
      EXPECT_GT(wrong, k.recv * 9 / 10);
    else
      EXPECT_EQ(wrong, 0u);
  }
  // allgather: two ranks' blocks swapped.
  const CollectiveCounts k = collective_counts(Collective::Allgather, 4096, ranks);
  std::vector<float> out = definition(Collective::Allgather, rank, ranks, k, kCheckSeed);
  std::swap_ranges(out.begin(), out.begin() + static_cast<long>(k.param), out.begin() + static_cast<long>(k.param));
  EXPECT_GT(count_wrong(Collective::Allgather, rank, ranks, k, out.data(), kCheckSeed), k.param);
}

}  // namespace
}  // namespace rkit
