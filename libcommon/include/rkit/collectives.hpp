// File: rkit/collectives.hpp
//
// The one table of collectives that rbench's comm.gloo and gpu.nccl measure, in the
// shape nccl-tests gives them: each collective's name, its bus-bandwidth factor, the
// element counts for a size and a rank count, the inputs every rank starts from, the
// exact answer each rank must end with, and the size sweep. A backend (Gloo, NCCL)
// supplies only how to run one collective on the buffers this table sizes and fills.
//
//   const CollectiveCounts k = collective_counts(Collective::Allgather, 64 << 20, 4);
//   fill_collective_input(rank, kCheckSeed, send, k.send);     // k.send == 4 Mi floats
//   ...run the allgather: send -> recv (k.recv == 16 Mi floats)...
//   std::uint64_t wrong = count_wrong(Collective::Allgather, rank, 4, k, recv, kCheckSeed);
//   double busbw = k.bytes / time_s / 1e9 * busbw_factor(Collective::Allgather, 4);
//
// Sizes follow nccl-tests: `bytes` is max(send, recv) of one rank (what every rank ends
// up holding for allreduce, allgather and broadcast; what is reduced for
// reduce_scatter; one rank's whole send buffer for alltoall), algbw = bytes / time and
// busbw = algbw * busbw_factor. Elements are float32; broadcast's root is rank 0.
// Everything here is plain arithmetic: no allocation but count_wrong's small scratch,
// thread-safe, no errors but size_sweep's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace rkit {

enum class Collective { Allreduce, Allgather, ReduceScatter, Broadcast, Alltoall };
inline constexpr Collective kAllCollectives[] = {Collective::Allreduce, Collective::Allgather,
                                                 Collective::ReduceScatter, Collective::Broadcast,
                                                 Collective::Alltoall};

// "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall": the metric names
// the suites print.
const char* collective_name(Collective c);
// The collective of that name; none for any other text.
std::optional<Collective> collective_named(std::string_view name);

// nccl-tests' doc/PERFORMANCE.md: busbw = algbw * factor, so that one number can be held
// against a link's speed whatever the rank count: allreduce 2(n-1)/n; allgather,
// reduce_scatter and alltoall (n-1)/n; broadcast 1. One rank: 0 but for broadcast.
double busbw_factor(Collective c, unsigned ranks);

// The bytes one rank sends in the ring algorithm busbw stands for, on nccl-tests' size
// `bytes`: bytes * busbw_factor in whole bytes (rounded down) — allreduce 2(n-1)/n of it,
// allgather and reduce_scatter (n-1)/n (so (n-1) blocks), broadcast the whole (a
// pipelined chain's; Gloo's one-to-all broadcast has its root send the whole to each
// other rank instead). The textbook volumes rtrain's counters report and its tests hold
// against the kernel's.
std::uint64_t ring_bytes_sent(Collective c, std::uint64_t bytes, unsigned ranks);

// One rank's element counts (float32) for nccl-tests' size `bytes` and `ranks` ranks,
// as nccl-tests' *GetCollByteCounts compute them (out of place):
//   allreduce, broadcast   send = recv = param = bytes/4
//   allgather              param = block; send = block, recv = block * ranks
//   reduce_scatter         param = block; send = block * ranks, recv = block
//   alltoall               param = block; send = recv = block * ranks
// where block = (bytes/4/ranks) rounded down to a multiple of 4 elements (16 bytes),
// nccl-tests' `(count/nranks) & -(16/eltSize)`. `bytes` is then max(send, recv) * 4,
// and 0 (with every count 0) when the size is too small for one element (one block).
struct CollectiveCounts {
  std::uint64_t bytes = 0;  // the size reported; 0: too small to run
  std::size_t send = 0;     // elements of one rank's input
  std::size_t recv = 0;     // elements of one rank's result
  std::size_t param = 0;    // the count NCCL's call takes: per rank (the block) where there are blocks
};
CollectiveCounts collective_counts(Collective c, std::uint64_t bytes, unsigned ranks);

// nccl-tests' sweep `-b min -e max -f factor` (min, min*factor, ... up to max), except
// that it always ends at max: nccl-tests stops at the last size below it. E.g.
// size_sweep(16, 64 << 20, 4) is 16 B, 64 B, ... 64 MiB; size_sweep(256 << 10, 512 << 20,
// 16) is 256 KiB, 4 MiB, 64 MiB, 512 MiB. Error(Software) for min 0, min > max or a
// factor below 2.
std::vector<std::uint64_t> size_sweep(std::uint64_t min_bytes, std::uint64_t max_bytes, unsigned factor);

// Inputs: small integers (-125..125) hashed from rank, element index and seed, so that
// every sum over up to 64 ranks is exact in float32 whatever the order of the adds, a
// block in the wrong place shows, and a stale result of another seed is wrong nearly
// everywhere. Element i of a rank's input is the same for every collective and size (a
// buffer filled once for the largest size serves the smaller ones as a prefix).
inline constexpr unsigned kTimingSeed = 0, kCheckSeed = 1;
float collective_input(unsigned rank, std::uint64_t index, unsigned seed);
// in[i] = collective_input(rank, i, seed) for i < n: ~1 ns an element.
void fill_collective_input(unsigned rank, unsigned seed, float* in, std::size_t n);

// The exact result of `rank` (its recv buffer, counts.recv elements), elements
// [first, first + n), into want[0, n), when every rank r's input was
// fill_collective_input(r, seed, ...):
//   allreduce       recv[i] = sum over r of input_r[i]
//   broadcast       recv[i] = input_0[i]
//   allgather       recv[j * block + i] = input_j[i]
//   reduce_scatter  recv[i] = sum over r of input_r[rank * block + i]
//   alltoall        recv[j * block + i] = input_j[rank * block + i]
// Cost: ranks hashes an element for the sums, one for the others.
void expected_result(Collective c, unsigned rank, unsigned ranks, const CollectiveCounts& counts, unsigned seed,
                     std::size_t first, std::size_t n, float* want);

// Whether every rank's exact result is the same (allreduce, allgather, broadcast), so
// that a backend checking many ranks in one process can compute it once.
bool same_result_on_every_rank(Collective c);

// The elements of `result` (rank's counts.recv elements, wherever the backend left them)
// that differ from expected_result (a NaN always differs: poison a buffer with NaN so that
// an element never written is wrong). Works in chunks: no allocation of the result's size.
std::uint64_t count_wrong(Collective c, unsigned rank, unsigned ranks, const CollectiveCounts& counts,
                          const float* result, unsigned seed);

}  // namespace rkit
