// comm.gloo: CPU collectives the way nccl-tests measures NCCL's, on Gloo over TCP
// between real processes on this machine. rbench starts --ranks copies of itself
// (`rbench _worker comm.gloo ...`, one per rank); they meet through a gloo FileStore in
// a private temporary directory, connect over 127.0.0.1 and run allreduce, allgather,
// reduce_scatter and broadcast over a sweep of sizes. Rank 0 streams its results back
// on a pipe; the parent watches every rank, and on an error, Ctrl-C or a stall kills
// and reaps them all (a rank also dies with the parent: PR_SET_PDEATHSIG).
//
// The calls are the ones PyTorch's ProcessGroupGloo (1.13) makes for CPU float tensors,
// so that the two can be compared: gloo::allreduce with AllreduceOptions (default
// algorithm: ring) in place with gloo::sum<float>, gloo::allgather into one flat
// buffer, gloo::broadcast in place from rank 0. PyTorch has no Gloo reduce_scatter, and
// Gloo's own is wrong at times (see RingReduceScatterOp): reduce_scatter is a ring on
// Gloo's transport, as NCCL's.
#include "comm_gloo.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/types.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/process.hpp"
#include "rkit/units.hpp"
#include "suite.hpp"

namespace rkit::rbench::comm {

// --- sizes and factors (nccl-tests) ---------------------------------------------------

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::Allreduce: return "allreduce";
    case Collective::Allgather: return "allgather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::Broadcast: return "broadcast";
  }
  return "?";
}

double busbw_factor(Collective c, unsigned ranks) {
  const double n = ranks;
  switch (c) {
    case Collective::Allreduce: return 2 * (n - 1) / n;
    case Collective::Allgather:
    case Collective::ReduceScatter: return (n - 1) / n;
    case Collective::Broadcast: return 1;
  }
  return 1;
}

Shape collective_shape(Collective c, std::uint64_t bytes, unsigned ranks) {
  const std::size_t count = bytes / sizeof(float);
  Shape s;
  switch (c) {
    case Collective::Allreduce:
    case Collective::Broadcast:
      s.in = count;
      break;
    case Collective::Allgather:
    case Collective::ReduceScatter:
      s.block = (count / ranks) & ~std::size_t{3};  // 16-byte blocks, as nccl-tests
      if (c == Collective::Allgather) {
        s.in = s.block;
        s.out = s.block * ranks;
      } else {
        s.in = s.block * ranks;
      }
      if (s.block == 0) s.in = s.out = 0;
      break;
  }
  s.bytes = std::uint64_t{std::max(s.in, s.out)} * sizeof(float);
  return s;
}

int iterations_per_sample(std::uint64_t bytes) {
  constexpr std::uint64_t kSampleBytes = 64ull << 20;
  if (bytes == 0) return 20;
  return static_cast<int>(std::clamp<std::uint64_t>(kSampleBytes / bytes, 1, 20));
}

std::vector<std::uint64_t> size_sweep(bool quick) {
  if (quick) return {1ull << 10, 64ull << 10, 4ull << 20, 64ull << 20};
  std::vector<std::uint64_t> out;
  for (std::uint64_t b = 16; b <= (64ull << 20); b *= 4) out.push_back(b);
  return out;
}

// --- inputs and checks ----------------------------------------------------------------

namespace {

std::uint32_t rank_key(unsigned rank, unsigned seed) {
  return static_cast<std::uint32_t>(mix64((std::uint64_t{seed} << 32) | rank));
}

// murmur3's 32-bit finaliser over the index and the rank's key: cheap enough to fill
// 64 MiB in tens of milliseconds, and unrelated between ranks and nearby elements.
inline float value_at(std::uint32_t key, std::uint64_t index) {
  std::uint32_t h = (static_cast<std::uint32_t>(index) ^ static_cast<std::uint32_t>(index >> 32) * 0x27d4eb2dU) *
                    0x9e3779b1U;
  h ^= key;
  h ^= h >> 16;
  h *= 0x85ebca6bU;
  h ^= h >> 13;
  h *= 0xc2b2ae35U;
  h ^= h >> 16;
  return static_cast<float>(static_cast<int>(h % 251) - 125);
}

// The sum over ranks of element `index`: integers, so exact in float32 and in any order.
inline float sum_at(const std::vector<std::uint32_t>& keys, std::uint64_t index) {
  float s = 0;
  for (std::uint32_t k : keys) s += value_at(k, index);
  return s;
}

std::vector<std::uint32_t> all_keys(unsigned ranks, unsigned seed) {
  std::vector<std::uint32_t> keys(ranks);
  for (unsigned r = 0; r < ranks; ++r) keys[r] = rank_key(r, seed);
  return keys;
}

}  // namespace

float input_value(unsigned rank, std::uint64_t index, unsigned seed) { return value_at(rank_key(rank, seed), index); }

void fill_buffers(Collective c, unsigned rank, const Shape& shape, unsigned seed, float* in, float* out) {
  const std::uint32_t key = rank_key(rank, seed);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (c == Collective::Broadcast && rank != 0) {
    std::fill(in, in + shape.in, nan);  // a receiver's buffer: all of it must be overwritten
    return;
  }
  for (std::size_t i = 0; i < shape.in; ++i) in[i] = value_at(key, i);
  if (out) std::fill(out, out + shape.out, nan);
}

std::size_t checked_elements(Collective c, const Shape& shape) {
  switch (c) {
    case Collective::Allreduce:
    case Collective::Broadcast: return shape.in;
    case Collective::Allgather: return shape.out;
    case Collective::ReduceScatter: return shape.block;
  }
  return 0;
}

std::uint64_t count_wrong(Collective c, unsigned rank, unsigned ranks, const Shape& shape, const float* in,
                          const float* out, unsigned seed) {
  const std::vector<std::uint32_t> keys = all_keys(ranks, seed);
  std::uint64_t wrong = 0;
  auto differs = [](float got, float want) { return !(got == want); };  // NaN differs from everything
  switch (c) {
    case Collective::Allreduce:
      for (std::size_t i = 0; i < shape.in; ++i) wrong += differs(in[i], sum_at(keys, i));
      break;
    case Collective::Broadcast:
      for (std::size_t i = 0; i < shape.in; ++i) wrong += differs(in[i], value_at(keys[0], i));
      break;
    case Collective::Allgather:
      for (unsigned r = 0; r < ranks; ++r)
        for (std::size_t j = 0; j < shape.block; ++j) wrong += differs(out[r * shape.block + j], value_at(keys[r], j));
      break;
    case Collective::ReduceScatter: {
      const std::uint64_t first = std::uint64_t{rank} * shape.block;  // this rank's block, in place
      for (std::size_t j = 0; j < shape.block; ++j) wrong += differs(in[first + j], sum_at(keys, first + j));
      break;
    }
  }
  return wrong;
}

// --- one rank --------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
using ReduceFunc = void (*)(void*, const void*, const void*, std::size_t);

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

// One collective on prepared buffers, run as often as asked. Options are built per call,
// and every call has a tag of its own, as in ProcessGroupGloo: a tag used again by the
// next call makes back-to-back broadcasts and allgathers wait on each other (tens of
// times slower at small sizes). All ranks run the same calls, so their tags agree.
// One collective on this rank's buffers; the argument is the call's tag.
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
  RingReduceScatterOp(std::shared_ptr<gloo::Context> ctx, float* buf, const Shape& s)
      : ctx_(std::move(ctx)), buf_(buf), block_(s.block) {
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

Op make_op(Collective c, const std::shared_ptr<gloo::Context>& ctx, const Shape& s, float* in, float* out) {
  switch (c) {
    case Collective::Allreduce:
      return [ctx, in, n = s.in](std::uint32_t tag) {
        gloo::AllreduceOptions opts(ctx);
        opts.setReduceFunction(static_cast<ReduceFunc>(&gloo::sum<float>));
        opts.setTag(tag);
        opts.setOutput(in, n);
        gloo::allreduce(opts);
      };
    case Collective::Allgather:
      return [ctx, in, out, s](std::uint32_t tag) {
        gloo::AllgatherOptions opts(ctx);
        opts.setInput(in, s.in);
        opts.setOutput(out, s.out);
        opts.setTag(tag);
        gloo::allgather(opts);
      };
    case Collective::ReduceScatter:
      return [ring = std::make_shared<RingReduceScatterOp>(ctx, in, s)](std::uint32_t tag) { ring->run(tag); };
    case Collective::Broadcast:
      return [ctx, in, n = s.in](std::uint32_t tag) {
        gloo::BroadcastOptions opts(ctx);
        opts.setRoot(0);
        opts.setTag(tag);
        opts.setOutput(in, n);
        gloo::broadcast(opts);
      };
  }
  throw Error(Exit::Software, "comm.gloo: unknown collective");
}

void barrier(const std::shared_ptr<gloo::Context>& ctx, std::uint32_t tag) {
  gloo::BarrierOptions opts(ctx);
  opts.setTag(tag);
  gloo::barrier(opts);
}

void allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, std::vector<double>& v, std::uint32_t tag) {
  gloo::AllreduceOptions opts(ctx);
  opts.setReduceFunction(static_cast<ReduceFunc>(&gloo::sum<double>));
  opts.setTag(tag);
  opts.setOutput(v.data(), v.size());
  gloo::allreduce(opts);
}

Collective collective_named(const std::string& name) {
  for (Collective c : kCollectives)
    if (name == collective_name(c)) return c;
  throw Error(Exit::Usage, "comm.gloo: unknown collective '" + name + "'");
}

}  // namespace

void run_rank(const RankPlan& plan, const std::function<void(const Json&)>& emit) {
  if (plan.ranks == 0 || plan.rank >= plan.ranks) throw Error(Exit::Usage, "comm.gloo: bad rank or rank count");
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";  // local processes only: the loopback device
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(plan.store_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(plan.rank), static_cast<int>(plan.ranks));
  context->setTimeout(plan.timeout);
  context->connectFullMesh(store, device);
  std::shared_ptr<gloo::Context> ctx = context;
  const bool lead = plan.rank == 0;
  std::uint32_t tag = 0;  // the next call's

  for (Collective c : plan.collectives) {
    for (std::uint64_t asked : plan.sizes) {
      const Shape shape = collective_shape(c, asked, plan.ranks);
      if (shape.bytes == 0) continue;
      const int iters = iterations_per_sample(shape.bytes);
      if (lead) emit(Json{{"event", "start"}, {"collective", collective_name(c)}, {"bytes", shape.bytes}});
      Buffer in = aligned_floats(shape.in);
      Buffer out = shape.out ? aligned_floats(shape.out) : Buffer();
      const Op op = make_op(c, ctx, shape, in.get(), out.get());

      std::vector<double> sums;  // this rank's seconds per collective, per timed sample
      for (int k = 0; k < plan.warmup + plan.reps; ++k) {
        fill_buffers(c, plan.rank, shape, kTimingSeed, in.get(), out.get());
        barrier(ctx, tag++);
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) op(tag++);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
        if (k >= plan.warmup) sums.push_back(s);
        if (lead) emit(Json{{"event", "sample"}});
      }
      // nccl-tests' check: fresh inputs, one more collective, every element compared.
      fill_buffers(c, plan.rank, shape, kCheckSeed, in.get(), out.get());
      barrier(ctx, tag++);
      op(tag++);
      sums.push_back(static_cast<double>(count_wrong(c, plan.rank, plan.ranks, shape, in.get(), out.get(), kCheckSeed)));
      sums.push_back(static_cast<double>(checked_elements(c, shape)));
      allreduce_sum(ctx, sums, tag++);  // times summed over ranks (then / ranks), counts totalled: exact below 2^53
      if (lead) {
        Json times = Json::array();
        for (int k = 0; k < plan.reps; ++k) times.push_back(sums[k] / plan.ranks);
        emit(Json{{"event", "row"},
                  {"collective", collective_name(c)},
                  {"bytes", shape.bytes},
                  {"times_s", times},
                  {"wrong", static_cast<std::uint64_t>(sums[plan.reps])},
                  {"checked", static_cast<std::uint64_t>(sums[plan.reps + 1])}});
      }
    }
  }
}

// --- the plan as worker arguments -------------------------------------------------------

std::vector<std::string> plan_to_args(const RankPlan& plan) {
  std::string collectives, sizes;
  for (Collective c : plan.collectives) collectives += (collectives.empty() ? "" : ",") + std::string(collective_name(c));
  for (std::uint64_t b : plan.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  return {"rank=" + std::to_string(plan.rank),
          "ranks=" + std::to_string(plan.ranks),
          "store=" + plan.store_dir,
          "warmup=" + std::to_string(plan.warmup),
          "reps=" + std::to_string(plan.reps),
          "timeout_ms=" + std::to_string(plan.timeout.count()),
          "collectives=" + collectives,
          "sizes=" + sizes};
}

namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::uint64_t number(const std::string& key, const std::string& text) {
  try {
    std::size_t used = 0;
    unsigned long long v = std::stoull(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(Exit::Usage, "comm.gloo worker: " + key + "=" + text + ": not a number");
}

}  // namespace

RankPlan plan_from_args(const std::vector<std::string>& args) {
  RankPlan plan;
  bool have_store = false;
  for (const std::string& arg : args) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos) throw Error(Exit::Usage, "comm.gloo worker: expected KEY=VALUE, got '" + arg + "'");
    const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (key == "rank") plan.rank = static_cast<unsigned>(number(key, value));
    else if (key == "ranks") plan.ranks = static_cast<unsigned>(number(key, value));
    else if (key == "store") { plan.store_dir = value; have_store = true; }
    else if (key == "warmup") plan.warmup = static_cast<int>(number(key, value));
    else if (key == "reps") plan.reps = static_cast<int>(number(key, value));
    else if (key == "timeout_ms") plan.timeout = std::chrono::milliseconds(number(key, value));
    else if (key == "collectives") for (const auto& name : split(value, ',')) plan.collectives.push_back(collective_named(name));
    else if (key == "sizes") for (const auto& s : split(value, ',')) plan.sizes.push_back(number(key, s));
    else throw Error(Exit::Usage, "comm.gloo worker: unknown argument '" + key + "'");
  }
  if (!have_store || plan.ranks == 0 || plan.rank >= plan.ranks || plan.reps < 1)
    throw Error(Exit::Usage, "comm.gloo worker: incomplete plan");
  return plan;
}

// --- the suite: starting, watching and reaping the ranks -------------------------------

namespace {

constexpr unsigned kMaxRanks = 64;
constexpr std::uint64_t kMaxBytes = 1ull << 30;

// A private directory for the rendezvous and the ranks' logs, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/rbench-gloo-XXXXXX";
    if (!::mkdtemp(pattern.data())) throw system_error("cannot create a directory like " + pattern, errno);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::uint64_t> sizes_asked(bool quick) {
  const char* env = std::getenv("RKIT_BENCH_GLOO_SIZES");
  if (!env || !*env) return size_sweep(quick);
  std::vector<std::uint64_t> sizes;
  for (const std::string& text : split(env, ',')) {
    std::uint64_t b = 0;
    try {
      b = parse_size(text);
    } catch (const Error& e) {
      throw Error(Exit::Usage, std::string("RKIT_BENCH_GLOO_SIZES: ") + e.what());
    }
    if (b < sizeof(float) || b > kMaxBytes)
      throw Error(Exit::Usage, "RKIT_BENCH_GLOO_SIZES: " + text + " is not from 4 B to " + format_bytes(kMaxBytes));
    sizes.push_back(b);
  }
  if (sizes.empty()) throw Error(Exit::Usage, "RKIT_BENCH_GLOO_SIZES: no size given");
  return sizes;
}

std::chrono::milliseconds timeout_asked() {
  const char* env = std::getenv("RKIT_BENCH_GLOO_TIMEOUT");
  double s = 60;
  if (env && *env) {
    try {
      s = parse_duration(env);
    } catch (const Error& e) {
      throw Error(Exit::Usage, std::string("RKIT_BENCH_GLOO_TIMEOUT: ") + e.what());
    }
    if (s < 0.1) throw Error(Exit::Usage, "RKIT_BENCH_GLOO_TIMEOUT: at least 0.1s");
  }
  return std::chrono::milliseconds(static_cast<long long>(s * 1000));
}

// Gloo's timeouts: "Timed out waiting ...", "Wait timeout for key(s): ...", "Read timeout
// ...", "Connect timeout ...", "Application timeout caused pair closure", ...
bool gloo_timeout(const std::string& what) {
  std::string lower = what;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos;
}

std::string self_exe() {
  std::string path(PATH_MAX, '\0');
  ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size());
  if (n <= 0) throw system_error("comm.gloo: cannot find rbench's own executable (/proc/self/exe)", errno);
  path.resize(static_cast<std::size_t>(n));
  return path;
}

// The last line a rank wrote on stderr (its error), without rbench's prefix.
std::string last_log_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  for (const char* prefix : {"rbench: error: "})
    if (last.rfind(prefix, 0) == 0) last.erase(0, std::char_traits<char>::length(prefix));
  return last;
}

struct Rank {
  Child child;
  std::string log;
  std::optional<ExitStatus> status;
  int failed_at = -1;  // the watch loop's round that saw it fail: the earliest failure is the cause
};

// A signal that means the rank crashed (a bug: 70), rather than that something outside
// killed it (the OOM killer, an administrator: 75, a run to retry).
bool crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT || sig == SIGSYS;
}

// The error for the ranks that failed: the cause is a rank killed by a signal (what
// the others then fail of), else the first seen to fail, else the lowest.
[[noreturn]] void fail(const std::vector<Rank>& ranks) {
  const Rank* cause = nullptr;
  std::size_t which = 0;
  auto better = [](const Rank& a, const Rank& b) {
    if (a.status->signaled() != b.status->signaled()) return a.status->signaled();
    return a.failed_at < b.failed_at;
  };
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].failed_at >= 0 && (!cause || better(ranks[r], *cause))) cause = &ranks[r], which = r;
  if (!cause) throw Error(Exit::Software, "comm.gloo: a rank failed");
  const ExitStatus& st = *cause->status;
  if (st.signaled())
    throw Error(crash_signal(st.signal()) ? Exit::Software : Exit::TempFail,
                fmt::format("comm.gloo: rank {} (pid {}) was {}", which, cause->child.pid(), st.describe()),
                st.signal() == SIGKILL ? "out of memory? each rank holds up to 1.5x the largest size" : "");
  std::string why = last_log_line(cause->log);
  const int code = st.code();
  const Exit exit = code >= 64 && code <= 78 ? static_cast<Exit>(code) : Exit::Software;
  throw Error(exit, fmt::format("comm.gloo: rank {} failed ({}){}{}", which, st.describe(), why.empty() ? "" : ": ", why));
}

class CommGloo : public Suite {
 public:
  std::string name() const override { return "comm.gloo"; }
  std::string description() const override {
    return "Gloo collectives over TCP between local processes: allreduce, allgather, reduce_scatter, broadcast";
  }

  void check_options(const RunOptions& opt) const override {
    // One rank moves nothing (nccl-tests would print busbw 0, and broadcast a no-op's speed).
    if (opt.ranks < 2 || opt.ranks > kMaxRanks)
      throw Error(Exit::Usage, fmt::format("comm.gloo: --ranks {}: a collective needs 2 to {} ranks", opt.ranks, kMaxRanks));
    sizes_asked(opt.quick);
    timeout_asked();
  }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    check_options(opt);
    RankPlan plan;
    plan.ranks = opt.ranks;
    plan.warmup = opt.warmup;
    plan.reps = std::max(opt.reps, 1);
    plan.timeout = timeout_asked();
    plan.collectives.assign(std::begin(kCollectives), std::end(kCollectives));
    plan.sizes = sizes_asked(opt.quick);
    std::size_t expected_rows = 0;
    for (Collective c : plan.collectives)
      for (std::uint64_t b : plan.sizes) expected_rows += collective_shape(c, b, plan.ranks).bytes > 0;

    TempDir dir;  // declared first: removed after the ranks are reaped
    plan.store_dir = dir.path() + "/store";
    std::filesystem::create_directory(plan.store_dir);
    const std::string exe = self_exe();
    std::vector<Rank> ranks;
    ranks.reserve(plan.ranks);
    for (unsigned r = 0; r < plan.ranks; ++r) {
      plan.rank = r;
      SpawnOptions so;
      so.argv = {exe, kWorkerCommand, name(), "parent=" + std::to_string(::getpid())};
      for (auto& a : plan_to_args(plan)) so.argv.push_back(std::move(a));
      so.in = Redirect::null();
      so.out = r == 0 ? Redirect::pipe() : Redirect::null();
      std::string log = fmt::format("{}/rank-{}.log", dir.path(), r);
      so.err = Redirect::file(log);
      ranks.push_back(Rank{Child::spawn(so), log, std::nullopt, -1});
    }

    // Rank 0's lines until it closes its end; every round also looks at every rank.
    const double stall_s = 2.0 * std::chrono::duration<double>(plan.timeout).count() + 10;
    std::vector<Measurement> out;
    std::string pending;
    const int fd = ranks[0].child.stdout_fd();
    auto last_line = Clock::now();
    bool eof = false;
    int round = 0;
    auto look_at_ranks = [&]() {
      bool any_failed = false;
      for (Rank& rk : ranks) {
        if (!rk.status) rk.status = rk.child.try_wait();
        if (rk.status && !rk.status->success() && rk.failed_at < 0) rk.failed_at = round;
        any_failed |= rk.failed_at >= 0;
      }
      if (any_failed) {
        // Let the others end of it for a moment, so that the cause is told apart from its effects.
        for (int i = 0; i < 5; ++i) {
          ++round;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          for (Rank& rk : ranks) {
            if (!rk.status) rk.status = rk.child.try_wait();
            if (rk.status && !rk.status->success() && rk.failed_at < 0) rk.failed_at = round;
          }
        }
        fail(ranks);  // ranks' destructors kill and reap the rest
      }
    };
    while (!eof) {
      check_interrupted();
      pollfd p{fd, POLLIN, 0};
      int n = ::poll(&p, 1, 100);
      if (n < 0 && errno != EINTR) throw system_error("comm.gloo: poll", errno);
      if (n > 0) {
        char buf[8192];
        ssize_t got = ::read(fd, buf, sizeof buf);
        if (got < 0 && errno != EINTR && errno != EAGAIN) throw system_error("comm.gloo: reading rank 0", errno);
        if (got == 0) eof = true;
        if (got > 0) {
          pending.append(buf, static_cast<std::size_t>(got));
          last_line = Clock::now();
          for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1))
            handle_line(pending.substr(0, nl), plan, progress, out);
        }
      }
      ++round;
      look_at_ranks();
      if (std::chrono::duration<double>(Clock::now() - last_line).count() > stall_s)
        throw Error(Exit::TempFail, fmt::format("comm.gloo: no progress from rank 0 for {:.0f} s", stall_s),
                    "raise RKIT_BENCH_GLOO_TIMEOUT for a slow or crowded machine");
    }
    // Rank 0 is done; the others end right after it.
    const auto deadline = Clock::now() + std::chrono::duration<double>(stall_s);
    for (;;) {
      check_interrupted();
      ++round;
      look_at_ranks();
      if (std::all_of(ranks.begin(), ranks.end(), [](const Rank& rk) { return rk.status.has_value(); })) break;
      if (Clock::now() > deadline) throw Error(Exit::TempFail, "comm.gloo: ranks did not exit after rank 0 finished");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (out.size() != expected_rows)
      throw Error(Exit::Software, fmt::format("comm.gloo: rank 0 ended after {} of {} results", out.size(), expected_rows));
    return out;
  }

  int worker(const std::vector<std::string>& args) override {
    // Die with rbench, however it dies; if it is already gone, do not start.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (args.empty() || args[0].rfind("parent=", 0) != 0) throw Error(Exit::Usage, "comm.gloo worker: parent=PID first");
    const std::uint64_t parent = number("parent", args[0].substr(7));
    if (static_cast<std::uint64_t>(::getppid()) != parent)
      throw Error(Exit::Software, fmt::format("comm.gloo worker: not started by rbench (pid {}), or it is gone", parent));
    std::signal(SIGPIPE, SIG_IGN);  // a closed socket is an error to report, not a silent death
    RankPlan plan = plan_from_args(std::vector<std::string>(args.begin() + 1, args.end()));
    try {
      run_rank(plan, [](const Json& event) {
        std::cout << to_json_line(event) << '\n' << std::flush;
        if (!std::cout) throw Error(Exit::IoErr, "cannot write to rbench");
      });
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // Gloo's messages start with "[file:line] ": the reason is what follows.
      std::string what = e.what();
      if (what.rfind('[', 0) == 0)
        if (auto close = what.find("] "); close != std::string::npos) what.erase(0, close + 2);
      // A timeout is a machine too slow or too crowded for RKIT_BENCH_GLOO_TIMEOUT: 75, as
      // the parent's own stall check; any other Gloo failure is one of its sockets: 74.
      throw Error(gloo_timeout(what) ? Exit::TempFail : Exit::IoErr, fmt::format("rank {}: gloo: {}", plan.rank, what));
    }
    return 0;
  }

 private:
  void handle_line(const std::string& line, const RankPlan& plan, const Progress& progress, std::vector<Measurement>& out) {
    Json ev;
    try {
      ev = Json::parse(line);
    } catch (const std::exception&) {
      throw Error(Exit::Software, "comm.gloo: rank 0 wrote something other than a result: " + line.substr(0, 120));
    }
    const std::string kind = ev.value("event", "");
    if (kind == "sample") return;
    const Collective c = collective_named(ev.at("collective").get<std::string>());
    const std::uint64_t bytes = ev.at("bytes").get<std::uint64_t>();
    if (kind == "start") {
      if (progress) progress(fmt::format("comm.gloo {} {} x {} ranks", collective_name(c), format_bytes(bytes), plan.ranks));
      return;
    }
    if (kind != "row") throw Error(Exit::Software, "comm.gloo: rank 0 sent an unknown event: " + line.substr(0, 120));
    const double factor = busbw_factor(c, plan.ranks);
    const std::uint64_t wrong = ev.at("wrong").get<std::uint64_t>(), checked = ev.at("checked").get<std::uint64_t>();
    Measurement m;
    m.metric = collective_name(c);
    m.unit = "GB/s";
    for (const Json& t : ev.at("times_s")) {
      const double s = t.get<double>();
      m.samples.push_back(s > 0 ? static_cast<double>(bytes) / s / 1e9 * factor : 0.0);
    }
    // What identifies the measurement, nothing that varies with it: `iters` follows from
    // bytes (iterations_per_sample), algbw is the median / busbw_factor.
    m.params = {{"bytes", bytes}, {"ranks", plan.ranks}, {"dtype", "float32"}, {"busbw_factor", factor}};
    m.correct = wrong == 0 && checked > 0;
    const char* expected = c == Collective::Allreduce       ? "the exact sum over ranks"
                           : c == Collective::Allgather     ? "every rank's block, in rank order"
                           : c == Collective::ReduceScatter ? "the exact sum over ranks of the rank's block"
                                                            : "rank 0's data";
    m.check = fmt::format("{} wrong of {} elements on all ranks: after the timed runs, one more {} of fresh float32 "
                          "integer inputs, each element compared with {}",
                          wrong, checked, collective_name(c), expected);
    m.peak_source = "none known: loopback TCP between processes is bound by memory copies and the kernel, not a link";
    out.push_back(std::move(m));
  }
};

RKIT_BENCH_SUITE(CommGloo);

}  // namespace
}  // namespace rkit::rbench::comm
