// Suite gpu.nccl: NCCL collectives across every visible GPU, from this one process, as
// nccl-tests measures them (its size convention, bus bandwidth and #wrong). What each
// collective is (name, counts, bus factor, inputs, exact answers, the sweep) comes from
// rkit/collectives.hpp, shared with comm.gloo; this file only runs them on NCCL.
//
// One communicator per GPU (ncclCommInitAll; a single GPU works too), float32 data.
// Collectives: allreduce (sum), allgather, reduce_scatter (sum), broadcast (root 0),
// alltoall (ncclAlltoAll where NCCL has it, 2.28 on; else a group of ncclSend/ncclRecv
// to and from every rank, as nccl-tests does; params.nccl_call says which). For each
// size (256 KiB, 4 MiB, 64 MiB, 512 MiB; 1 MiB and 64 MiB with --quick) each sample
// launches the collective on all GPUs (one ncclGroupStart/End) until it has moved
// kMinSampleBytes (at most kMaxCallsPerSample times), synchronises every stream, and
// counts host wall-clock time, as nccl-tests does. "bytes" is nccl-tests' size: the
// buffer of one rank for allreduce and broadcast, the whole gathered (or scattered)
// buffer for allgather and reduce_scatter, one rank's send buffer for alltoall (a
// rank's block rounded down to 16 bytes, as nccl-tests); algbw = bytes / time, busbw =
// algbw x the bus factor: 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter
// and alltoall, 1 for broadcast (so one GPU has a busbw of 0 but for broadcast). The
// metric is busbw in GB/s.
// Check: rank r's input is collective_input(r, i, kCheckSeed), small integers whose sums
// are exact in float; after the timed runs every output element of every rank is
// compared with the exact answer (expected_result) and the wrong ones are counted (the
// output is first filled with NaNs). Peak: behind NVSwitches the fewer NVLinks of any
// GPU x the per-link rate, two GPUs joined directly: their NVLinks, no NVLink at all:
// the slowest PCIe link; none for allreduce and reduce_scatter behind NVSwitches, which
// can reduce in the switch (NVLink SHARP) and then exceed it. Params name the GPUs by PCI bus id and name, in
// rank order (rank r is CUDA device r).
//
// Communicators end as NCCL asks of one thread holding several: ncclCommFinalize of
// each inside one group, then ncclCommDestroy of each; on an error or Ctrl-C they are
// aborted instead (ncclCommAbort), which waits for nothing.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu_runtime.hpp"
#include "gpu_specs.hpp"
#include "rkit/collectives.hpp"
#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/units.hpp"
#include "suite.hpp"

#if RKIT_HAVE_NCCL
#include <nccl.h>
// ncclAlltoAll is NCCL 2.28's. Declared weak, the plug-in still loads where the
// libnccl.so.2 found at run time is older (a CUDA 13 system may have 2.27): the symbol
// is then null, and alltoall falls back on ncclSend/ncclRecv.
#define RKIT_NCCL_HAS_ALLTOALL (NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0))
#if RKIT_NCCL_HAS_ALLTOALL
#pragma weak ncclAlltoAll
#endif
#endif

namespace rkit::rbench {
namespace {

#if RKIT_HAVE_NCCL

constexpr double kMinSampleBytes = 1.0 * (1ull << 30);
constexpr int kMaxCallsPerSample = 1000;

void nccl_check(ncclResult_t rc, std::string_view what) {
  if (rc == ncclSuccess) return;
  const bool unavailable = rc == ncclUnhandledCudaError || rc == ncclSystemError || rc == ncclRemoteError;
  const char* last = ncclGetLastError(nullptr);
  throw Error(unavailable ? Exit::Unavailable : Exit::Software,
              fmt::format("{}: {}{}{}", what, ncclGetErrorString(rc), last && *last ? ": " : "", last ? last : ""));
}

// ncclGroupStart now, ncclGroupEnd in end() or, should an exception leave the group
// open, in the destructor: NCCL's group state is per thread, and a group left open
// would take in this thread's later NCCL calls. A group one of whose calls failed is
// reported by ncclGroupEnd, which drops its calls rather than launch them.
class NcclGroup {
 public:
  NcclGroup() { nccl_check(ncclGroupStart(), "ncclGroupStart"); }
  ~NcclGroup() {
    if (open_) (void)ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  bool open_ = true;
};

// One GPU's part: communicator, stream and buffers.
struct Rank {
  int device = 0;
  ncclComm_t comm = nullptr;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<DeviceMemory> send, recv;
};

// The ranks of one ncclCommInitAll. close() ends the communicators cleanly; destroyed
// without it (an exception, Ctrl-C: collectives may be in flight or have failed) it
// aborts them. Either way the communicators end before the streams and buffers their
// collectives use, which are freed after the destructor's body.
class Communicators {
 public:
  std::vector<Rank> ranks;

  Communicators() = default;
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;
  ~Communicators() {
    for (Rank& r : ranks)
      if (r.comm) (void)ncclCommAbort(std::exchange(r.comm, nullptr));
  }

  // As NCCL's documentation asks of one thread holding several communicators: finalize
  // every one inside one group (each waits for the others), then destroy each. Throws
  // for an NCCL error; the communicators not yet destroyed are then aborted.
  void close() {
    NcclGroup group;
    for (Rank& r : ranks) nccl_check(ncclCommFinalize(r.comm), "ncclCommFinalize");
    group.end();
    for (Rank& r : ranks)  // a communicator whose destroy fails is not touched again
      nccl_check(ncclCommDestroy(std::exchange(r.comm, nullptr)), "ncclCommDestroy");
  }
};

// Whether the NCCL library loaded has ncclAlltoAll (see the top).
bool have_alltoall() {
#if RKIT_NCCL_HAS_ALLTOALL
  return &ncclAlltoAll != nullptr;
#else
  return false;
#endif
}

// Rank r's part of an alltoall, inside the caller's group: its chunk j (`count` elements
// from send + j * count) to rank j, and rank j's chunk for it into recv + j * count.
void alltoall(const Rank& rank, int n, std::size_t count, cudaStream_t s) {
#if RKIT_NCCL_HAS_ALLTOALL
  if (have_alltoall()) {
    nccl_check(ncclAlltoAll(rank.send->get(), rank.recv->get(), count, ncclFloat, rank.comm, s), "ncclAlltoAll");
    return;
  }
#endif
  // nccl-tests' alltoall: a send to and a receive from every rank, itself included.
  const auto* in = rank.send->as<const float>();
  auto* out = rank.recv->as<float>();
  for (int peer = 0; peer < n; ++peer) {
    const std::size_t offset = static_cast<std::size_t>(peer) * count;
    nccl_check(ncclSend(in + offset, count, ncclFloat, peer, rank.comm, s), "ncclSend");
    nccl_check(ncclRecv(out + offset, count, ncclFloat, peer, rank.comm, s), "ncclRecv");
  }
}

// The links' bound on the bus bandwidth, and whether the GPUs sit behind NVSwitches.
struct LinkPeak {
  Peak peak;
  bool nvswitch = false;
};

LinkPeak link_peak(const std::vector<CudaDevice>& devs) {
  const int n = static_cast<int>(devs.size());
  if (n == 1) return {{std::nullopt, "unknown: one GPU, nothing crosses a link"}};
  const auto nvml = nvml_devices_by_bus_id();
  const double per_link = nvlink_gbs_per_link(devs[0].clocks.cc_major, devs[0].clocks.cc_minor);
  std::vector<const NvmlDevice*> known;
  for (const CudaDevice& d : devs)
    if (auto it = nvml.find(d.pci_bus_id); it != nvml.end()) known.push_back(&it->second);
  if (static_cast<int>(known.size()) == n) {
    const bool all_switched = std::all_of(known.begin(), known.end(), [](auto* d) { return d->nvswitch_links > 0; });
    if (all_switched && per_link > 0) {
      int links = known[0]->nvswitch_links;
      for (auto* d : known) links = std::min(links, d->nvswitch_links);
      return {{links * per_link,
               fmt::format("NVSwitch: the fewest NVLinks of any GPU (NVML), {}, x {:g} GB/s per direction", links,
                           per_link)},
              true};
    }
    if (n == 2 && per_link > 0) {
      auto direct = known[0]->nvlinks.find(devs[1].pci_bus_id);
      if (direct != known[0]->nvlinks.end() && direct->second > 0)
        return {
            {direct->second * per_link, fmt::format("{} NVLinks between the two GPUs (NVML) x {:g} GB/s per direction",
                                                    direct->second, per_link)}};
    }
    const bool no_nvlink =
        std::all_of(known.begin(), known.end(), [](auto* d) { return d->nvswitch_links == 0 && d->nvlinks.empty(); });
    if (!no_nvlink) return {{std::nullopt, "unknown: GPUs partly joined by NVLink"}};
  }
  double slowest = 0;
  std::string slowest_link;
  for (const CudaDevice& d : devs) {
    std::string link;
    const double gbs = pcie_link_gbs(d.pci_bus_id, &link);
    if (!(gbs > 0)) return {{std::nullopt, "unknown: no NVLink (NVML) and no PCIe link speed in sysfs"}};
    if (slowest == 0 || gbs < slowest) slowest = gbs, slowest_link = link;
  }
  return {{slowest, "the slowest PCIe link: " + slowest_link}};
}

// The peak of collective `kind`: the links' bound, but for a reduction behind NVSwitches,
// which NCCL may do in the switch (NVLink SHARP, NVLS): a GPU then sends its data once
// and receives the reduced result once, and the bus bandwidth (counted as if the ranks
// exchanged partial sums) exceeds the links' rate (~480 GB/s for allreduce on an H100
// HGX, whose links carry 450).
Peak collective_peak(Collective kind, const LinkPeak& links) {
  if (links.nvswitch && (kind == Collective::Allreduce || kind == Collective::ReduceScatter))
    return {std::nullopt,
            "unknown: behind NVSwitches NCCL may reduce in the switch (NVLink SHARP), and the bus bandwidth "
            "then exceeds the links' (" +
                links.peak.source + ")"};
  return links.peak;
}

std::vector<Measurement> run_collectives(const RunOptions& opt, const Progress& progress) {
  const int n = cuda_device_count();
  const std::vector<std::uint64_t> sizes =
      opt.quick ? size_sweep(1ull << 20, 64ull << 20, 64) : size_sweep(256ull << 10, 512ull << 20, 16);
  const std::size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  const std::size_t max_elems = max_bytes / sizeof(float);

  std::vector<CudaDevice> devs;
  Communicators comms;
  comms.ranks.resize(static_cast<std::size_t>(n));
  std::vector<ncclComm_t> handles(static_cast<std::size_t>(n), nullptr);
  std::vector<int> device_list(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) device_list[static_cast<std::size_t>(r)] = r;
  if (progress) progress(fmt::format("gpu.nccl {} GPU{}: ncclCommInitAll", n, n == 1 ? "" : "s"));
  nccl_check(ncclCommInitAll(handles.data(), n, device_list.data()), "ncclCommInitAll");
  for (int r = 0; r < n; ++r) {  // owned (destroyed) from here on
    comms.ranks[static_cast<std::size_t>(r)].device = r;
    comms.ranks[static_cast<std::size_t>(r)].comm = handles[static_cast<std::size_t>(r)];
  }
  std::vector<float> host(max_elems), want(max_elems);  // a rank's result, and the exact one
  for (int r = 0; r < n; ++r) {
    Rank& rank = comms.ranks[static_cast<std::size_t>(r)];
    DeviceSelection on(r);
    devs.push_back(cuda_device(r));
    rank.stream = std::make_unique<Stream>();
    rank.send = std::make_unique<DeviceMemory>(max_bytes);
    rank.recv = std::make_unique<DeviceMemory>(max_bytes);
    // Every collective and size reads a prefix of the same input.
    fill_collective_input(static_cast<unsigned>(r), kCheckSeed, host.data(), max_elems);
    copy_and_wait(rank.send->get(), host.data(), max_bytes, cudaMemcpyHostToDevice, rank.stream->get());
  }
  const LinkPeak links = link_peak(devs);
  Json bus_ids = Json::array(), names = Json::array();  // rank order
  for (const CudaDevice& d : devs) {
    const Json identity = device_identity(d, "device");
    bus_ids.push_back(identity["device_bus_id"]);
    names.push_back(identity["device_name"]);
  }

  auto synchronize_all = [&] {
    for (Rank& rank : comms.ranks) rank.stream->synchronize();
  };
  std::vector<Measurement> out;
  const auto ranks = static_cast<unsigned>(n);
  for (Collective coll : kAllCollectives) {
    const char* name = collective_name(coll);
    for (std::uint64_t size : sizes) {
      const CollectiveCounts c = collective_counts(coll, size, ranks);
      if (c.bytes == 0) continue;
      if (progress) progress(fmt::format("gpu.nccl {} {} x {} GPUs", name, format_bytes(c.bytes), n));
      for (Rank& rank : comms.ranks) {  // NaN everywhere, so that an output never written is wrong
        DeviceSelection on(rank.device);
        cuda_check(cudaMemsetAsync(rank.recv->get(), 0xff, c.recv * sizeof(float), rank.stream->get()),
                   "cudaMemsetAsync");
      }
      synchronize_all();
      auto launch = [&] {
        NcclGroup group;
        for (Rank& rank : comms.ranks) {
          const void* in = rank.send->get();
          void* result = rank.recv->get();
          cudaStream_t s = rank.stream->get();
          switch (coll) {
            case Collective::Allreduce:
              nccl_check(ncclAllReduce(in, result, c.param, ncclFloat, ncclSum, rank.comm, s), "ncclAllReduce");
              break;
            case Collective::Allgather:
              nccl_check(ncclAllGather(in, result, c.param, ncclFloat, rank.comm, s), "ncclAllGather");
              break;
            case Collective::ReduceScatter:
              nccl_check(ncclReduceScatter(in, result, c.param, ncclFloat, ncclSum, rank.comm, s), "ncclReduceScatter");
              break;
            case Collective::Broadcast:
              nccl_check(ncclBroadcast(in, result, c.param, ncclFloat, 0, rank.comm, s), "ncclBroadcast");
              break;
            case Collective::Alltoall: alltoall(rank, n, c.param, s); break;
          }
        }
        group.end();
      };
      const int calls = std::clamp(static_cast<int>(std::ceil(kMinSampleBytes / static_cast<double>(c.bytes))), 1,
                                   kMaxCallsPerSample);
      const double factor = busbw_factor(coll, ranks);
      Measurement m;
      m.metric = name;
      m.unit = "GB/s";
      m.params = {{"bytes", c.bytes},          {"ranks", n},           {"dtype", "float32"}, {"busbw_factor", factor},
                  {"device_bus_ids", bus_ids}, {"device_names", names}};
      if (coll == Collective::Alltoall) m.params["nccl_call"] = have_alltoall() ? "ncclAlltoAll" : "ncclSend/ncclRecv";
      for (int rep = 0; rep < opt.warmup + opt.reps; ++rep) {
        check_interrupted();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) launch();
        synchronize_all();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
        if (rep >= opt.warmup) m.samples.push_back(static_cast<double>(c.bytes) / seconds * factor / 1e9);
      }

      // The exact answer once for all ranks where it is the same on each: a sum over
      // 8 ranks of 512 MiB is ~2 s of hashing on one core.
      const bool shared = same_result_on_every_rank(coll);
      if (shared) expected_result(coll, 0, ranks, c, kCheckSeed, 0, c.recv, want.data());
      std::uint64_t wrong = 0;
      for (Rank& rank : comms.ranks) {
        DeviceSelection on(rank.device);
        copy_and_wait(host.data(), rank.recv->get(), c.recv * sizeof(float), cudaMemcpyDeviceToHost,
                      rank.stream->get());
        if (!shared)
          expected_result(coll, static_cast<unsigned>(rank.device), ranks, c, kCheckSeed, 0, c.recv, want.data());
        for (std::size_t i = 0; i < c.recv; ++i) wrong += !(host[i] == want[i]);  // NaN differs from everything
      }
      m.correct = wrong == 0;
      m.check = fmt::format("every output element of every rank equals the exact answer: #wrong {} of {}", wrong,
                            c.recv * static_cast<std::size_t>(n));
      const Peak peak = collective_peak(coll, links);
      m.peak = n > 1 ? peak.value : std::nullopt;
      m.peak_source = peak.source;
      out.push_back(std::move(m));
    }
  }
  comms.close();
  return out;
}

#endif  // RKIT_HAVE_NCCL

class GpuNccl : public Suite {
 public:
  std::string name() const override { return "gpu.nccl"; }
  std::string description() const override {
    return "NCCL collectives across all GPUs of this process: busbw and #wrong, as nccl-tests";
  }
  std::string unavailable() const override {
    if (std::string why = cuda_unavailable(); !why.empty()) return why;
#if RKIT_HAVE_NCCL
    return {};
#else
    return "built without NCCL (libnccl was not found beside the CUDA toolkit)";
#endif
  }

  std::vector<Measurement> run([[maybe_unused]] const RunOptions& opt,
                               [[maybe_unused]] const Progress& progress) override {
#if RKIT_HAVE_NCCL
    return run_collectives(opt, progress);
#else
    throw Error(Exit::Unavailable, "gpu.nccl: " + unavailable());
#endif
  }
};

}  // namespace
RKIT_BENCH_SUITE(GpuNccl);
}  // namespace rkit::rbench
