// File: rkit/gloo.hpp
//
// Gloo set-up shared by rbench's comm.gloo and rtrain's communicator (library rkit_gloo,
// which links Gloo; rkit_common does not): the TCP device, the rendezvous that connects
// a full mesh of ranks, the few collectives both call the same way, and the translation
// of Gloo's exceptions into rkit::Error.
//
//   auto device = gloo_tcp_device({.honour_ifname = false, .local = true});   // 127.0.0.1
//   gloo::rendezvous::FileStore store(dir);
//   std::shared_ptr<gloo::Context> ctx = gloo_connect(store, device, rank, ranks, 60s);
//   gloo_allreduce_sum(ctx, data, n, tag++);
//   ...
//   catch (const std::exception& e) { throw gloo_error(e, kCodes, "rank 1: gloo"); }
//
// Gloo's calls here throw Gloo's own exceptions (gloo::Exception, gloo::EnforceNotMet):
// each caller catches them where it knows what failed, and turns them into one Error
// with gloo_error. Tags: every collective call takes its own (the caller counts them,
// the same sequence on every rank), as PyTorch's ProcessGroupGloo does; a tag used
// again by the next call makes back-to-back calls wait on each other.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rkit/error.hpp"

namespace gloo {
class Context;
namespace transport {
class Device;
}
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace rkit {

// Where Gloo's TCP device listens.
struct GlooTcpOptions {
  // GLOO_SOCKET_IFNAME, when set, names the interface to use (as in PyTorch).
  bool honour_ifname = true;
  // Every rank is a process of this machine: 127.0.0.1; else the address of this host's
  // name (gethostname(2)).
  bool local = true;
};
// Error(Unavailable) when gethostname fails; Gloo's exception when no such interface or
// address can be bound.
std::shared_ptr<gloo::transport::Device> gloo_tcp_device(const GlooTcpOptions& options);

// The rendezvous: rank `rank` of `ranks` publishes its addresses in `store`, connects to
// every other rank and returns the context, whose every operation (and this connection)
// times out after `timeout`. Throws Gloo's exceptions (a peer that never comes, a store
// that fails) and the store's own.
std::shared_ptr<gloo::Context> gloo_connect(gloo::rendezvous::Store& store,
                                            std::shared_ptr<gloo::transport::Device> device, int rank, int ranks,
                                            std::chrono::milliseconds timeout);

// In place: data[i] becomes the sum over ranks of data[i]; Gloo's ring (its default), so
// a fixed order of additions, the same result on every rank.
void gloo_allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, float* data, std::size_t n, std::uint32_t tag);
void gloo_allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, double* data, std::size_t n, std::uint32_t tag);
// In place: root's `bytes` bytes at data into every rank's data.
void gloo_broadcast(const std::shared_ptr<gloo::Context>& ctx, void* data, std::size_t bytes, int root,
                    std::uint32_t tag);
// Returns once every rank has entered it.
void gloo_barrier(const std::shared_ptr<gloo::Context>& ctx, std::uint32_t tag);

// In place, as NCCL's in-place all-gather: `data` holds ranks * block elements, this
// rank's own at rank * block; afterwards every rank's block is at its place. Gloo's ring
// (gloo::allgather): each rank sends (ranks - 1) * block elements.
void gloo_allgather(const std::shared_ptr<gloo::Context>& ctx, float* data, std::size_t block, std::uint32_t tag);
void gloo_allgather(const std::shared_ptr<gloo::Context>& ctx, double* data, std::size_t block, std::uint32_t tag);

// In place, as NCCL's in-place reduce-scatter: `data` holds ranks * block floats; block r
// of the sum over ranks is left at r * block on rank r (the other blocks hold partial
// sums). A ring on Gloo's transport, the reduce-scatter half of gloo::allreduce's ring,
// which nccl-tests' (n-1)/n factor describes: each rank sends (ranks - 1) * block floats.
// Gloo's own reduce-scatter (ReduceScatterHalvingDoubling) is not used: a rank other
// than 0 copies its result to the start of its buffer while its first send from there
// may still be in flight, and rank 0 then gets a corrupt block (rbench's comm.gloo check
// saw it at 64 MiB on a busy machine; jax-ml/jax#40830).
// `scratch` is reused between calls (up to 2 MiB: two segments of up to 1 MiB).
void gloo_reduce_scatter_sum(const std::shared_ptr<gloo::Context>& ctx, float* data, std::size_t block,
                             std::uint32_t tag, std::vector<float>& scratch);

// Gloo's message without its "[file:line] " prefix, on one line.
std::string gloo_reason(std::string_view what);
// Whether Gloo's message tells a timeout: "Timed out waiting ...", "Wait timeout for
// key(s) ...", "Read timeout ...", "Connect timeout ...", "Application timeout caused
// pair closure" ...
bool gloo_timed_out(std::string_view what);

// The exit codes a caller gives to what Gloo throws.
struct GlooErrorCodes {
  Exit timeout;  // a gloo::Exception whose message tells a timeout (Gloo has no type for one)
  Exit gloo;     // another gloo::Exception (a peer gone, a socket error)
  Exit other;    // any other exception (gloo::EnforceNotMet: a precondition of Gloo's broken)
};
// Error(code, "<context>: <gloo_reason>", hint) for `e`, the code chosen by `codes`; an
// rkit::Error keeps its code and hint, and gets the context in front.
Error gloo_error(const std::exception& e, const GlooErrorCodes& codes, std::string_view context, std::string hint = "");

}  // namespace rkit
