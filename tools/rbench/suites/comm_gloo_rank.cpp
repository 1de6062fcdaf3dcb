// comm.gloo, one rank (comm_gloo.hpp): Gloo's buffers for each collective, the Gloo
// calls, the timed samples and nccl-tests' check. The calls are the ones PyTorch's
// ProcessGroupGloo (1.13) makes for CPU float tensors, so that the two can be compared:
// gloo::allreduce with AllreduceOptions (default algorithm: ring) in place with
// gloo::sum<float>, gloo::allgather into one flat buffer, gloo::broadcast in place from
// rank 0. PyTorch has no Gloo reduce_scatter, and Gloo's own is wrong at times (see
// gloo_reduce_scatter_sum in rkit/gloo.hpp): reduce_scatter is a ring on Gloo's
// transport, as NCCL's, the same rtrain's sharded strategies use.
#include <fmt/format.h>

#include <gloo/allgather.h>
#include <gloo/context.h>
#include <gloo/rendezvous/file_store.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>

#include "comm_gloo.hpp"
#include "rkit/error.hpp"
#include "rkit/gloo.hpp"
#include "rkit/units.hpp"

namespace rkit::rbench::comm {

// --- buffers ---------------------------------------------------------------------------

std::size_t output_elements(Collective c, const CollectiveCounts& counts) {
  return c == Collective::Allgather ? counts.recv : 0;
}

const float* gloo_result(Collective c, unsigned rank, const CollectiveCounts& counts, const float* in,
                         const float* out) {
  switch (c) {
    case Collective::Allgather: return out;
    case Collective::ReduceScatter: return in + std::size_t{rank} * counts.param;  // in place, where it was
    default: return in;
  }
}

void fill_buffers(Collective c, unsigned rank, const CollectiveCounts& counts, unsigned seed, float* in, float* out) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (c == Collective::Broadcast && rank != 0) {
    std::fill(in, in + counts.send, nan);  // a receiver's buffer: all of it must be overwritten
    return;
  }
  fill_collective_input(rank, seed, in, counts.send);
  if (out) std::fill(out, out + output_elements(c, counts), nan);
}

int iterations_per_sample(std::uint64_t bytes) {
  constexpr std::uint64_t kSampleBytes = 64ull << 20;
  if (bytes == 0) return 20;
  return static_cast<int>(std::clamp<std::uint64_t>(kSampleBytes / bytes, 1, 20));
}

std::vector<std::uint64_t> sweep_sizes(bool quick) {
  return quick ? size_sweep(1ull << 10, 64ull << 20, 64) : size_sweep(16, 64ull << 20, 4);
}

// --- one rank --------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

// Buffers aligned as PyTorch's CPU allocator aligns tensors (64 bytes), so that both
// sides of a comparison copy and reduce the same way.
struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], AlignedFree>;
Buffer aligned_floats(std::size_t n) {
  const std::size_t bytes = (std::max<std::size_t>(n, 1) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw Error(Exit::Software, fmt::format("comm.gloo: cannot allocate {}", format_bytes(bytes)));
  return Buffer(p);
}

// One collective on this rank's buffers, run as often as asked; the argument is the
// call's tag. Options are built per call, and every call has a tag of its own, as in
// ProcessGroupGloo: a tag used again by the next call makes back-to-back broadcasts and
// allgathers wait on each other (tens of times slower at small sizes). All ranks run
// the same calls, so their tags agree.
using Op = std::function<void(std::uint32_t)>;

Op make_op(Collective c, const std::shared_ptr<gloo::Context>& ctx, const CollectiveCounts& k, float* in, float* out) {
  switch (c) {
    case Collective::Allreduce:
      return [ctx, in, n = k.send](std::uint32_t tag) { gloo_allreduce_sum(ctx, in, n, tag); };
    case Collective::Allgather:
      return [ctx, in, out, k](std::uint32_t tag) {
        gloo::AllgatherOptions opts(ctx);
        opts.setInput(in, k.send);
        opts.setOutput(out, k.recv);
        opts.setTag(tag);
        gloo::allgather(opts);
      };
    case Collective::ReduceScatter:
      return [ctx, in, block = k.param, scratch = std::make_shared<std::vector<float>>()](std::uint32_t tag) {
        gloo_reduce_scatter_sum(ctx, in, block, tag, *scratch);
      };
    case Collective::Broadcast:
      return [ctx, in, n = k.send](std::uint32_t tag) { gloo_broadcast(ctx, in, n * sizeof(float), 0, tag); };
    case Collective::Alltoall: break;  // not one of kGlooCollectives
  }
  throw Error(Exit::Software, fmt::format("comm.gloo: cannot run {}", collective_name(c)));
}

}  // namespace

void run_rank(const RankPlan& plan, const std::function<void(const Json&)>& emit) {
  if (plan.ranks == 0 || plan.rank >= plan.ranks) throw Error(Exit::Usage, "comm.gloo: bad rank or rank count");
  gloo::rendezvous::FileStore store(plan.store_dir);
  const std::shared_ptr<gloo::Context> ctx =
      gloo_connect(store, gloo_tcp_device({.honour_ifname = false, .local = true}), static_cast<int>(plan.rank),
                   static_cast<int>(plan.ranks), plan.timeout);
  const bool lead = plan.rank == 0;
  std::uint32_t tag = 0;  // the next call's

  for (Collective c : plan.collectives) {
    for (std::uint64_t asked : plan.sizes) {
      const CollectiveCounts counts = collective_counts(c, asked, plan.ranks);
      if (counts.bytes == 0) continue;
      const int iters = iterations_per_sample(counts.bytes);
      if (lead) emit(Json{{"event", "start"}, {"collective", collective_name(c)}, {"bytes", counts.bytes}});
      Buffer in = aligned_floats(counts.send);
      Buffer out = output_elements(c, counts) ? aligned_floats(output_elements(c, counts)) : Buffer();
      const Op op = make_op(c, ctx, counts, in.get(), out.get());

      std::vector<double> sums;  // this rank's seconds per collective, per timed sample
      for (int k = 0; k < plan.warmup + plan.reps; ++k) {
        fill_buffers(c, plan.rank, counts, kTimingSeed, in.get(), out.get());
        gloo_barrier(ctx, tag++);
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) op(tag++);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
        if (k >= plan.warmup) sums.push_back(s);
        if (lead) emit(Json{{"event", "sample"}});
      }
      // nccl-tests' check: fresh inputs, one more collective, every element compared.
      fill_buffers(c, plan.rank, counts, kCheckSeed, in.get(), out.get());
      gloo_barrier(ctx, tag++);
      op(tag++);
      const float* result = gloo_result(c, plan.rank, counts, in.get(), out.get());
      sums.push_back(static_cast<double>(count_wrong(c, plan.rank, plan.ranks, counts, result, kCheckSeed)));
      sums.push_back(static_cast<double>(counts.recv));
      // Times summed over ranks (then / ranks), counts totalled: exact below 2^53.
      gloo_allreduce_sum(ctx, sums.data(), sums.size(), tag++);
      if (lead) {
        Json times = Json::array();
        for (int k = 0; k < plan.reps; ++k) times.push_back(sums[k] / plan.ranks);
        emit(Json{{"event", "row"},
                  {"collective", collective_name(c)},
                  {"bytes", counts.bytes},
                  {"times_s", times},
                  {"wrong", static_cast<std::uint64_t>(sums[plan.reps])},
                  {"checked", static_cast<std::uint64_t>(sums[plan.reps + 1])}});
      }
    }
  }
}

}  // namespace rkit::rbench::comm
