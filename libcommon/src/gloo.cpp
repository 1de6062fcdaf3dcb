// Gloo set-up shared by rbench and rtrain (rkit/gloo.hpp): device, rendezvous, the common
// collectives, and Gloo's exceptions as rkit::Error.
#include "rkit/gloo.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "rkit/host.hpp"

namespace rkit {

namespace {

using ReduceFunc = void (*)(void*, const void*, const void*, std::size_t);

template <typename T>
void allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, T* data, std::size_t n, std::uint32_t tag) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(data, n);
  opts.setReduceFunction(static_cast<ReduceFunc>(&gloo::sum<T>));
  opts.setTag(tag);
  gloo::allreduce(opts);
}

template <typename T>
void allgather(const std::shared_ptr<gloo::Context>& ctx, T* data, std::size_t block, std::uint32_t tag) {
  gloo::AllgatherOptions opts(ctx);  // no input: in place, this rank's block already at its place
  opts.setOutput(data, block * static_cast<std::size_t>(ctx->size));
  opts.setTag(tag);
  gloo::allgather(opts);
}

}  // namespace

std::shared_ptr<gloo::transport::Device> gloo_tcp_device(const GlooTcpOptions& options) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); options.honour_ifname && iface && *iface) {
    attr.iface = iface;
  } else if (options.local) {
    attr.hostname = "127.0.0.1";  // the loopback device
  } else {
    attr.hostname = host_name();
    if (attr.hostname.empty()) throw system_error("gethostname", errno);
  }
  return gloo::transport::tcp::CreateDevice(attr);
}

std::shared_ptr<gloo::Context> gloo_connect(gloo::rendezvous::Store& store,
                                            std::shared_ptr<gloo::transport::Device> device, int rank, int ranks,
                                            std::chrono::milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
  context->setTimeout(timeout);
  context->connectFullMesh(store, device);
  return context;
}

void gloo_allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, float* data, std::size_t n, std::uint32_t tag) {
  allreduce_sum(ctx, data, n, tag);
}

void gloo_allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, double* data, std::size_t n, std::uint32_t tag) {
  allreduce_sum(ctx, data, n, tag);
}

void gloo_broadcast(const std::shared_ptr<gloo::Context>& ctx, void* data, std::size_t bytes, int root,
                    std::uint32_t tag) {
  gloo::BroadcastOptions opts(ctx);
  opts.setOutput(static_cast<std::uint8_t*>(data), bytes);
  opts.setRoot(root);
  opts.setTag(tag);
  gloo::broadcast(opts);
}

void gloo_barrier(const std::shared_ptr<gloo::Context>& ctx, std::uint32_t tag) {
  gloo::BarrierOptions opts(ctx);
  opts.setTag(tag);
  gloo::barrier(opts);
}

void gloo_allgather(const std::shared_ptr<gloo::Context>& ctx, float* data, std::size_t block, std::uint32_t tag) {
  allgather(ctx, data, block, tag);
}

void gloo_allgather(const std::shared_ptr<gloo::Context>& ctx, double* data, std::size_t block, std::uint32_t tag) {
  allgather(ctx, data, block, tag);
}

// In n-1 steps, rank r sends block (r-s-1) mod n to r+1 and adds block (r-s-2) mod n from
// r-1 into its own, in segments of up to 1 MiB (Gloo's) with two in flight; at least two
// segments per block, so that a block is summed before it is sent on.
void gloo_reduce_scatter_sum(const std::shared_ptr<gloo::Context>& ctx, float* data, std::size_t block,
                             std::uint32_t tag, std::vector<float>& scratch) {
  const std::size_t n = static_cast<std::size_t>(ctx->size), r = static_cast<std::size_t>(ctx->rank);
  if (n < 2 || block == 0) return;
  constexpr std::size_t kSegmentElements = (1u << 20) / sizeof(float);
  constexpr std::uint8_t kSlotPrefix = 0x20;  // Gloo's own collectives use 0x01 to 0x08
  const std::size_t segments = std::max<std::size_t>(2, (block + kSegmentElements - 1) / kSegmentElements);
  const std::size_t segment = (block + segments - 1) / segments;
  if (scratch.size() < 2 * segment) scratch.resize(2 * segment);
  auto buf = ctx->createUnboundBuffer(data, n * block * sizeof(float));
  auto tmp = ctx->createUnboundBuffer(scratch.data(), 2 * segment * sizeof(float));
  const std::uint64_t slot = gloo::Slot::build(kSlotPrefix, tag);
  const int right = static_cast<int>((r + 1) % n), left = static_cast<int>((r + n - 1) % n);
  const auto timeout = ctx->getTimeout();
  struct Piece {
    std::size_t send, recv, len;  // element offsets in data, and length
  };
  auto piece = [&](std::size_t i) {
    const std::size_t step = i / segments, k = i % segments;
    const std::size_t first = std::min(k * segment, block);
    const std::size_t len = std::min(segment, block - first);
    return Piece{((r + 2 * n - step - 1) % n) * block + first, ((r + 2 * n - step - 2) % n) * block + first, len};
  };
  const std::size_t total = (n - 1) * segments;
  for (std::size_t i = 0; i < total + 2; ++i) {
    if (i >= 2) {  // the piece of two iterations ago: add what came, and let its send finish
      const Piece p = piece(i - 2);
      if (p.len > 0) {
        tmp->waitRecv(timeout);
        const float* got = scratch.data() + ((i - 2) & 1) * segment;
        gloo::sum<float>(data + p.recv, data + p.recv, got, p.len);
        buf->waitSend(timeout);
      }
    }
    if (i < total) {
      const Piece p = piece(i);
      if (p.len > 0) {
        buf->send(right, slot, p.send * sizeof(float), p.len * sizeof(float));
        tmp->recv(left, slot, (i & 1) * segment * sizeof(float), p.len * sizeof(float));
      }
    }
  }
}

std::string gloo_reason(std::string_view what) {
  std::string s(what);
  if (!s.empty() && s[0] == '[') {
    const auto close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

bool gloo_timed_out(std::string_view what) {
  std::string lower(what);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos;
}

Error gloo_error(const std::exception& e, const GlooErrorCodes& codes, std::string_view context, std::string hint) {
  if (const auto* err = dynamic_cast<const Error*>(&e))
    return Error(err->code(), fmt::format("{}: {}", context, err->what()), err->hint().empty() ? hint : err->hint(),
                 err->detail());
  const std::string reason = gloo_reason(e.what());
  // Gloo has no exception type of its own for a timeout: its message says so.
  const bool from_gloo = dynamic_cast<const gloo::Exception*>(&e) != nullptr;
  const Exit code = !from_gloo ? codes.other : gloo_timed_out(reason) ? codes.timeout : codes.gloo;
  return Error(code, fmt::format("{}: {}", context, reason), std::move(hint));
}

}  // namespace rkit
