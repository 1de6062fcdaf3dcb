// Gloo set-up shared by rbench and rtrain (rkit/gloo.hpp): device, rendezvous, the common
// collectives, and Gloo's exceptions as rkit::Error.
#include "rkit/gloo.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

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
