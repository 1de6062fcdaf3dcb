// The table of collectives (rkit/collectives.hpp): nccl-tests' sizes and bus factors,
// the hashed integer inputs and the exact answers.
#include "rkit/collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "rkit/error.hpp"
#include "rkit/rng.hpp"

namespace rkit {

namespace {

struct Entry {
  Collective kind;
  const char* name;
};
constexpr Entry kTable[] = {{Collective::Allreduce, "allreduce"},
                            {Collective::Allgather, "allgather"},
                            {Collective::ReduceScatter, "reduce_scatter"},
                            {Collective::Broadcast, "broadcast"},
                            {Collective::Alltoall, "alltoall"}};

std::uint32_t rank_key(unsigned rank, unsigned seed) {
  return static_cast<std::uint32_t>(mix64((std::uint64_t{seed} << 32) | rank));
}

// murmur3's 32-bit finaliser over the index and the rank's key: cheap enough to fill
// 64 MiB in tens of milliseconds (and to vectorise), unrelated between ranks and nearby
// elements.
inline float value_at(std::uint32_t key, std::uint64_t index) {
  std::uint32_t h =
      (static_cast<std::uint32_t>(index) ^ static_cast<std::uint32_t>(index >> 32) * 0x27d4eb2dU) * 0x9e3779b1U;
  h ^= key;
  h ^= h >> 16;
  h *= 0x85ebca6bU;
  h ^= h >> 13;
  h *= 0xc2b2ae35U;
  h ^= h >> 16;
  return static_cast<float>(static_cast<int>(h % 251) - 125);
}

// want[k] = input of rank `from` at element offset + k, for k < n.
void copy_input(std::uint32_t key, std::uint64_t offset, std::size_t n, float* want) {
  for (std::size_t k = 0; k < n; ++k) want[k] = value_at(key, offset + k);
}

// want[k] = the sum over ranks of element offset + k: integers, exact in any order.
// Rank-outer, element-inner, so that the inner loop vectorises.
void sum_inputs(unsigned ranks, unsigned seed, std::uint64_t offset, std::size_t n, float* want) {
  std::fill(want, want + n, 0.0f);
  for (unsigned r = 0; r < ranks; ++r) {
    const std::uint32_t key = rank_key(r, seed);
    for (std::size_t k = 0; k < n; ++k) want[k] += value_at(key, offset + k);
  }
}

}  // namespace

const char* collective_name(Collective c) {
  for (const Entry& e : kTable)
    if (e.kind == c) return e.name;
  return "?";
}

std::optional<Collective> collective_named(std::string_view name) {
  for (const Entry& e : kTable)
    if (name == e.name) return e.kind;
  return std::nullopt;
}

double busbw_factor(Collective c, unsigned ranks) {
  const double n = ranks;
  switch (c) {
    case Collective::Allreduce: return 2 * (n - 1) / n;
    case Collective::Allgather:
    case Collective::ReduceScatter:
    case Collective::Alltoall: return (n - 1) / n;
    case Collective::Broadcast: return 1;
  }
  return 1;
}

std::uint64_t ring_bytes_sent(Collective c, std::uint64_t bytes, unsigned ranks) {
  if (ranks < 2) return 0;
  const std::uint64_t n = ranks;
  switch (c) {
    case Collective::Allreduce: return 2 * (n - 1) * bytes / n;
    case Collective::Allgather:
    case Collective::ReduceScatter:
    case Collective::Alltoall: return (n - 1) * bytes / n;
    case Collective::Broadcast: return bytes;
  }
  return 0;
}

CollectiveCounts collective_counts(Collective c, std::uint64_t bytes, unsigned ranks) {
  const std::size_t count = bytes / sizeof(float);
  const std::size_t n = std::max(ranks, 1u);
  // nccl-tests: (count / nranks) & -(16 / eltSize), a block of whole 16-byte units.
  const std::size_t block = (count / n) & ~(16 / sizeof(float) - 1);
  CollectiveCounts k;
  switch (c) {
    case Collective::Allreduce:
    case Collective::Broadcast: k.send = k.recv = k.param = count; break;
    case Collective::Allgather: k = {0, block, block * n, block}; break;
    case Collective::ReduceScatter: k = {0, block * n, block, block}; break;
    case Collective::Alltoall: k = {0, block * n, block * n, block}; break;
  }
  if (k.param == 0) return {};
  k.bytes = std::uint64_t{std::max(k.send, k.recv)} * sizeof(float);
  return k;
}

std::vector<std::uint64_t> size_sweep(std::uint64_t min_bytes, std::uint64_t max_bytes, unsigned factor) {
  if (min_bytes == 0 || min_bytes > max_bytes || factor < 2)
    throw Error(Exit::Software,
                fmt::format("size sweep from {} to {} bytes by {}: not a sweep", min_bytes, max_bytes, factor));
  std::vector<std::uint64_t> out;
  for (std::uint64_t b = min_bytes; b <= max_bytes; b *= factor) {
    out.push_back(b);
    if (b > max_bytes / factor) break;  // the next one would pass max (or overflow)
  }
  if (out.back() != max_bytes) out.push_back(max_bytes);
  return out;
}

float collective_input(unsigned rank, std::uint64_t index, unsigned seed) {
  return value_at(rank_key(rank, seed), index);
}

void fill_collective_input(unsigned rank, unsigned seed, float* in, std::size_t n) {
  copy_input(rank_key(rank, seed), 0, n, in);
}

void expected_result(Collective c, unsigned rank, unsigned ranks, const CollectiveCounts& counts, unsigned seed,
                     std::size_t first, std::size_t n, float* want) {
  const std::size_t block = counts.param;
  // Allgather and alltoall gather blocks of other ranks: walk the range a block at a time.
  auto per_block = [&](auto&& source_offset) {
    for (std::size_t done = 0; done < n;) {
      const std::size_t at = first + done, from = at / block, within = at % block;
      const std::size_t len = std::min(n - done, block - within);
      copy_input(rank_key(static_cast<unsigned>(from), seed), source_offset(within), len, want + done);
      done += len;
    }
  };
  switch (c) {
    case Collective::Allreduce: sum_inputs(ranks, seed, first, n, want); break;
    case Collective::Broadcast: copy_input(rank_key(0, seed), first, n, want); break;
    case Collective::ReduceScatter: sum_inputs(ranks, seed, std::uint64_t{rank} * block + first, n, want); break;
    case Collective::Allgather: per_block([](std::size_t within) { return std::uint64_t{within}; }); break;
    case Collective::Alltoall:
      per_block([&](std::size_t within) { return std::uint64_t{rank} * block + within; });
      break;
  }
}

bool same_result_on_every_rank(Collective c) {
  return c == Collective::Allreduce || c == Collective::Allgather || c == Collective::Broadcast;
}

std::uint64_t count_wrong(Collective c, unsigned rank, unsigned ranks, const CollectiveCounts& counts,
                          const float* result, unsigned seed) {
  constexpr std::size_t kChunk = 4096;
  std::array<float, kChunk> want;
  std::uint64_t wrong = 0;
  for (std::size_t first = 0; first < counts.recv; first += kChunk) {
    const std::size_t n = std::min(kChunk, counts.recv - first);
    expected_result(c, rank, ranks, counts, seed, first, n, want.data());
    for (std::size_t k = 0; k < n; ++k) wrong += !(result[first + k] == want[k]);  // NaN differs from everything
  }
  return wrong;
}

}  // namespace rkit
