// File: suites/comm_gloo.hpp
//
// The comm.gloo suite's own parts, named here so that tests can reach them: how Gloo
// holds one collective's buffers (in place but for allgather), the worker's plan and its
// command line, and one rank's whole sweep (which a test can run as threads of one
// process). What a collective is (names, bus factors, counts, inputs, exact answers,
// sweeps) is rkit/collectives.hpp's, shared with gpu.nccl.
//
//   const CollectiveCounts k = collective_counts(Collective::Allgather, 64 << 20, 4);
//   fill_buffers(Collective::Allgather, rank, k, kCheckSeed, in, out);   // in: k.send, out: output_elements
//   ...gloo::allgather...
//   count_wrong(Collective::Allgather, rank, 4, k, gloo_result(Collective::Allgather, rank, k, in, out), kCheckSeed);
//
// The suite is three files: comm_gloo_rank.cpp runs one rank (buffers, the Gloo calls,
// timing and the check), comm_gloo_plan.cpp turns a plan into worker arguments and
// back, comm_gloo.cpp is the suite (it starts, watches and reaps the ranks and turns
// rank 0's rows into results).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rkit/collectives.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rbench::comm {

// The collectives comm.gloo runs, in this order (PyTorch has no Gloo alltoall for CPU
// tensors to compare with).
inline constexpr Collective kGlooCollectives[] = {Collective::Allreduce, Collective::Allgather,
                                                  Collective::ReduceScatter, Collective::Broadcast};
// The collective of that name that comm.gloo runs; Error(Usage) for any other.
Collective gloo_collective_named(const std::string& name);

// Gloo's buffers for one collective. The input buffer holds counts.send elements; allreduce,
// broadcast and reduce_scatter work in place in it (reduce_scatter as NCCL's in-place one:
// rank r's block of the sum is left at r * block), allgather gathers into a separate
// output buffer of output_elements (counts.recv; 0 for the others).
std::size_t output_elements(Collective c, const CollectiveCounts& counts);
// Where rank's result (counts.recv elements) lies in those buffers.
const float* gloo_result(Collective c, unsigned rank, const CollectiveCounts& counts, const float* in,
                         const float* out);

// Writes rank's inputs (in, counts.send elements) and, when the collective has a separate
// output or a broadcast receiver's buffer, poisons what the collective must overwrite
// (NaN) so that an element it misses is wrong. `out` may be null when there is no output.
void fill_buffers(Collective c, unsigned rank, const CollectiveCounts& counts, unsigned seed, float* in, float* out);

// Collectives timed back to back in one sample: enough that a sample of a small size is
// not all clock and barrier (at most 20, nccl-tests' default), 1 from 64 MiB up.
int iterations_per_sample(std::uint64_t bytes);

// The sizes swept: 16 B to 64 MiB by factors of 4 (nccl-tests' -b 16 -e 64M -f 4);
// --quick: 1 KiB, 64 KiB, 4 MiB and 64 MiB.
std::vector<std::uint64_t> sweep_sizes(bool quick);

// One rank's part of a run. Every rank gets the same plan but its own rank.
struct RankPlan {
  unsigned rank = 0, ranks = 2;
  std::string store_dir;                // gloo FileStore rendezvous directory (exists)
  std::vector<Collective> collectives;  // in this order, each over every size
  std::vector<std::uint64_t> sizes;     // bytes asked, before collective_counts
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

// The plan as the arguments of `rbench _worker comm.gloo ...`, and back (Error(Usage)
// for an argument that is not KEY=VALUE, an unknown key, a bad number or collective, or
// a plan without store, ranks or reps).
std::vector<std::string> plan_to_args(const RankPlan& plan);
RankPlan plan_from_args(const std::vector<std::string>& args);

// The files' shared parsing: the non-empty items of a `sep`-separated list; a worker
// argument's decimal number (Error(Usage) naming key=text otherwise).
std::vector<std::string> split_list(const std::string& text, char sep);
std::uint64_t worker_number(const std::string& key, const std::string& text);

}  // namespace rkit::rbench::comm
