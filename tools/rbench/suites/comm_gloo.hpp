// File: suites/comm_gloo.hpp
//
// The parts of the comm.gloo suite that are plain arithmetic or run inside one rank,
// named here so that tests can reach them: nccl-tests' size convention and bus-bandwidth
// factors, the exact inputs and expected outputs of each collective with its wrong-value
// count, and one rank's whole sweep (which a test can run as threads of one process).
//
//   Shape s = collective_shape(Collective::Allgather, 64 << 20, 4);  // 16 MiB in, 64 MiB out
//   double busbw = s.bytes / time_s / 1e9 * busbw_factor(Collective::Allgather, 4);
//   std::uint64_t wrong = count_wrong(Collective::Allgather, rank, 4, s, out, kCheckSeed);
//
// Sizes follow nccl-tests: `bytes` is the whole array (what every rank ends up holding
// for allreduce, allgather and broadcast; what is reduced for reduce_scatter), so
// algbw = bytes / time and busbw = algbw * busbw_factor. Elements are float32.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rbench::comm {

enum class Collective { Allreduce, Allgather, ReduceScatter, Broadcast };
inline constexpr Collective kCollectives[] = {Collective::Allreduce, Collective::Allgather, Collective::ReduceScatter,
                                              Collective::Broadcast};

// "allreduce", "allgather", "reduce_scatter", "broadcast": the metric names.
const char* collective_name(Collective c);

// nccl-tests' doc/PERFORMANCE.md: busbw = algbw * factor, so that one number can be held
// against a link's speed whatever the rank count: allreduce 2(n-1)/n, reduce_scatter
// and allgather (n-1)/n, broadcast 1.
double busbw_factor(Collective c, unsigned ranks);

// Buffer sizes of one rank, in float32 elements. allreduce, broadcast and reduce_scatter
// work in place (reduce_scatter as NCCL's in-place one: rank r's block of the sum is
// left at r * block of its buffer); allgather gathers into a separate buffer.
struct Shape {
  std::uint64_t bytes = 0;  // the whole array, as nccl-tests reports it; 0: too small to run
  std::size_t in = 0;       // the input buffer (the one buffer when in place)
  std::size_t out = 0;      // the output buffer; 0 when the collective works in place
  std::size_t block = 0;    // allgather, reduce_scatter: elements per rank
};

// nccl-tests' convention for `bytes` asked: allreduce and broadcast move bytes/4 elements
// in place; allgather and reduce_scatter give each rank a block of (bytes/4/n) elements
// rounded down to a multiple of 4 (16 bytes), and `bytes` becomes block*n*4.
Shape collective_shape(Collective c, std::uint64_t bytes, unsigned ranks);

// Collectives timed back to back in one sample: enough that a sample of a small size is
// not all clock and barrier (at most 20, nccl-tests' default), 1 from 64 MiB up.
int iterations_per_sample(std::uint64_t bytes);

// The sizes swept: 16 B to 64 MiB by factors of 4 (nccl-tests' -b 16 -e 64M -f 4);
// --quick: 1 KiB, 64 KiB, 4 MiB and 64 MiB.
std::vector<std::uint64_t> size_sweep(bool quick);

// Inputs: small integers (-125..125) hashed from rank, element and seed, so that every
// sum over up to 64 ranks is exact in float32 and a block in the wrong place shows.
inline constexpr unsigned kTimingSeed = 0, kCheckSeed = 1;
float input_value(unsigned rank, std::uint64_t index, unsigned seed);

// Writes rank's inputs (in, `shape.in` elements) and, when the collective has a separate
// output or a broadcast receiver's buffer, poisons what the collective must overwrite
// (NaN) so that an element it misses is wrong. `out` may be null when shape.out is 0.
void fill_buffers(Collective c, unsigned rank, const Shape& shape, unsigned seed, float* in, float* out);

// The elements of rank's result that differ from the exact answer (NaN always differs):
// out for allgather, in for the others (for reduce_scatter, its block at rank * block).
std::uint64_t count_wrong(Collective c, unsigned rank, unsigned ranks, const Shape& shape, const float* in,
                          const float* out, unsigned seed);
// How many elements count_wrong compares on one rank.
std::size_t checked_elements(Collective c, const Shape& shape);

// One rank's part of a run. Every rank gets the same plan but its own rank.
struct RankPlan {
  unsigned rank = 0, ranks = 2;
  std::string store_dir;                  // gloo FileStore rendezvous directory (exists)
  std::vector<Collective> collectives;    // in this order, each over every size
  std::vector<std::uint64_t> sizes;       // bytes asked, before collective_shape
  int warmup = 1, reps = 5;
  std::chrono::milliseconds timeout{60000};  // for each gloo operation and the rendezvous
};

// Connects to the other ranks (TCP on 127.0.0.1) and runs the plan. On rank 0 `emit`
// receives, in order, for each collective and size that runs:
//   {"event": "start", "collective", "bytes"}           before its samples
//   {"event": "sample"}                                  after each warm-up or timed sample
//   {"event": "row", "collective", "bytes", "times_s": [...], "wrong", "checked"}
// times_s: per timed sample, the mean over ranks of each rank's time per collective
// (barrier first, then iterations_per_sample(bytes) back to back), nccl-tests' default
// (-a 1); wrong and checked: elements over all ranks, from one more collective after
// the timed ones.
// Other ranks emit nothing. Throws std::exception (gloo's or rkit::Error) on failure.
void run_rank(const RankPlan& plan, const std::function<void(const Json&)>& emit);

// The plan as the arguments of `rbench _worker comm.gloo ...`, and back.
std::vector<std::string> plan_to_args(const RankPlan& plan);
RankPlan plan_from_args(const std::vector<std::string>& args);

}  // namespace rkit::rbench::comm
