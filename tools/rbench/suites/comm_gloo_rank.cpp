// comm.gloo, one rank (comm_gloo.hpp): Gloo's buffers for each collective, the Gloo
// calls, the timed samples and nccl-tests' check. The calls are the ones PyTorch's
// ProcessGroupGloo (1.13) makes for CPU float tensors, so that the two can be compared:
// gloo::allreduce with AllreduceOptions (default algorithm: ring) in place with
// gloo::sum<float>, gloo::allgather into one flat buffer, gloo::broadcast in place from
// rank 0. PyTorch has no Gloo reduce_scatter, and Gloo's own is wrong at times (see
// RingReduceScatterOp): reduce_scatter is a ring on Gloo's transport, as NCCL's.
#include <fmt/format.h>

#include <gloo/allgather.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

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

// reduce_scatter as a ring on Gloo's transport: the reduce-scatter half of gloo::allreduce's
// ring, the algorithm nccl-tests' (n-1)/n factor describes. Gloo's own reduce-scatter
// (ReduceScatterHalvingDoubling) is not used: a rank other than 0 copies its result to
// the start of its buffer while its first send from there may still be in flight, and
// rank 0 then gets a corrupt block (this suite's check sees it at 64 MiB on a busy
// machine; jax-ml/jax#40830). In place, as NCCL's in-place reduce-scatter: rank r's block
// of the sum is left where it was, at r * block.
//
// In n-1 steps, rank r sends block (r-s-1) mod n to r+1 and adds block (r-s-2) mod n from
// r-1 into its own, in segments of up to 1 MiB (Gloo's) with two in flight; at least two
// segments per block, so that a block is summed before it is sent on.
class RingReduceScatterOp {
 public:
  RingReduceScatterOp(std::shared_ptr<gloo::Context> ctx, float* buf, std::size_t block)
      : ctx_(std::move(ctx)), buf_(buf), block_(block) {
    constexpr std::size_t kSegmentElements = (1u << 20) / sizeof(float);
    segments_ = std::max<std::size_t>(2, (block_ + kSegmentElements - 1) / kSegmentElements);
    segment_ = (block_ + segments_ - 1) / segments_;
    tmp_.reset(new float[2 * segment_]);
  }

  void run(std::uint32_t tag) {
    const std::size_t n = static_cast<std::size_t>(ctx_->size), r = static_cast<std::size_t>(ctx_->rank);
    if (n < 2) return;
    auto data = ctx_->createUnboundBuffer(buf_, n * block_ * sizeof(float));
    auto tmp = ctx_->createUnboundBuffer(tmp_.get(), 2 * segment_ * sizeof(float));
    const std::uint64_t slot = gloo::Slot::build(kSlotPrefix, tag);
    const int right = static_cast<int>((r + 1) % n), left = static_cast<int>((r + n - 1) % n);
    const auto timeout = ctx_->getTimeout();
    struct Piece {
      std::size_t send, recv, len;  // element offsets in buf_, and length
    };
    auto piece = [&](std::size_t i) {
      const std::size_t step = i / segments_, k = i % segments_;
      const std::size_t first = std::min(k * segment_, block_);
      const std::size_t len = std::min(segment_, block_ - first);
      return Piece{((r + 2 * n - step - 1) % n) * block_ + first, ((r + 2 * n - step - 2) % n) * block_ + first, len};
    };
    const std::size_t total = (n - 1) * segments_;
    for (std::size_t i = 0; i < total + 2; ++i) {
      if (i >= 2) {  // the piece of two iterations ago: add what came, and let its send finish
        const Piece p = piece(i - 2);
        if (p.len > 0) {
          tmp->waitRecv(timeout);
          const float* got = tmp_.get() + ((i - 2) & 1) * segment_;
          gloo::sum<float>(buf_ + p.recv, buf_ + p.recv, got, p.len);
          data->waitSend(timeout);
        }
      }
      if (i < total) {
        const Piece p = piece(i);
        if (p.len > 0) {
          data->send(right, slot, p.send * sizeof(float), p.len * sizeof(float));
          tmp->recv(left, slot, (i & 1) * segment_ * sizeof(float), p.len * sizeof(float));
        }
      }
    }
  }

 private:
  static constexpr std::uint8_t kSlotPrefix = 0x20;  // Gloo's own collectives use 0x01 to 0x08
  std::shared_ptr<gloo::Context> ctx_;
  float* buf_;
  std::size_t block_, segments_ = 2, segment_ = 0;
  std::unique_ptr<float[]> tmp_;
};

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
      return [ring = std::make_shared<RingReduceScatterOp>(ctx, in, k.param)](std::uint32_t tag) { ring->run(tag); };
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
