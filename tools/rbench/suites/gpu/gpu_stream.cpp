// Suite gpu.stream: device memory bandwidth the way STREAM (and BabelStream) measure
// it, on every visible GPU, with the kernels of kernels/stream.
//
// Three arrays of doubles, each the larger of 4x the L2 cache and 1 GiB (256 MiB with
// --quick), at most a third of the free memory. Each round times copy c=a, scale b=q*c,
// add c=a+b and triad a=b+q*c in that order with CUDA events, each repeated within its
// sample until it moves kMinSampleBytes (a repeat changes nothing: each kernel's inputs
// are not its output). Bytes counted as STREAM does: 16 per element for copy and scale,
// 24 for add and triad; GB/s = 1e9 B/s. Starting from a=0.1, b=0.2, c=0 and q=0.4, every
// element of each array must equal the same recurrence run on the host with the CPU
// references (the kernels round exactly as they do). Peak: the memory bandwidth from
// gpu_specs (datasheet, else memory clock x bus width). Params name the device by CUDA
// ordinal, PCI bus id and name.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "gpu_runtime.hpp"
#include "gpu_specs.hpp"
#include "rkit/error.hpp"
#include "rkit/units.hpp"
#include "stream.hpp"
#include "suite.hpp"

namespace rkit::rbench {
namespace {

constexpr double kQ = 0.4;
constexpr double kMinSampleBytes = 2.0 * (1ull << 30);

std::vector<Measurement> measure_device(int device, const RunOptions& opt, const Progress& progress) {
  DeviceSelection on(device);
  const CudaDevice dev = cuda_device(device);
  std::size_t free = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  const std::uint64_t floor = opt.quick ? std::uint64_t{256} << 20 : std::uint64_t{1} << 30;
  const std::uint64_t room = free > (std::uint64_t{256} << 20) ? (free - (std::uint64_t{256} << 20)) / 3 : 0;
  const std::uint64_t array_bytes = std::min(std::max(4 * dev.l2_bytes, floor), room) / 4096 * 4096;
  if (array_bytes < (std::uint64_t{1} << 20))
    throw Error(Exit::Unavailable,
                fmt::format("gpu.stream: gpu{} has {} free, too little for three arrays", device, format_bytes(free)));
  const std::size_t n = array_bytes / sizeof(double);
  if (progress)
    progress(fmt::format("gpu.stream gpu{} {} per array x 3 (L2 {})", device, format_bytes(array_bytes),
                         format_bytes(dev.l2_bytes)));

  Stream stream;
  DeviceMemory a(n * sizeof(double)), b(n * sizeof(double)), c(n * sizeof(double));
  DeviceMemory mismatches(sizeof(unsigned long long));
  double ha = 0.1, hb = 0.2, hc = 0.0;  // every element's value, replayed on the host
  cuda_check(kernels::stream_fill(a.as<double>(), ha, n, stream.get()), "stream_fill");
  cuda_check(kernels::stream_fill(b.as<double>(), hb, n, stream.get()), "stream_fill");
  cuda_check(kernels::stream_fill(c.as<double>(), hc, n, stream.get()), "stream_fill");
  stream.synchronize();

  struct Kernel {
    const char* metric;
    int arrays;  // arrays read or written per element
    std::function<cudaError_t()> launch;
  };
  double* pa = a.as<double>();
  double* pb = b.as<double>();
  double* pc = c.as<double>();
  cudaStream_t s = stream.get();
  const Kernel kernels_in_order[] = {
      {"copy", 2, [=] { return kernels::stream_copy(pc, pa, n, s); }},
      {"scale", 2, [=] { return kernels::stream_scale(pb, pc, kQ, n, s); }},
      {"add", 3, [=] { return kernels::stream_add(pc, pa, pb, n, s); }},
      {"triad", 3, [=] { return kernels::stream_triad(pa, pb, pc, kQ, n, s); }},
  };
  std::vector<Measurement> out;
  for (const Kernel& k : kernels_in_order) {
    Measurement m;
    m.metric = k.metric;
    m.unit = "GB/s";
    m.params = {{"device", device}};
    m.params.update(device_identity(dev, "device"));
    m.params["array_bytes"] = array_bytes;
    out.push_back(std::move(m));
  }
  for (int round = 0; round < opt.warmup + opt.reps; ++round) {
    for (std::size_t i = 0; i < std::size(kernels_in_order); ++i) {
      const Kernel& k = kernels_in_order[i];
      const double bytes = static_cast<double>(k.arrays) * static_cast<double>(n * sizeof(double));
      const int calls = std::max(1, static_cast<int>(std::ceil(kMinSampleBytes / bytes)));
      std::vector<double> seconds = time_on_stream(s, 0, 1, [&] {
        for (int call = 0; call < calls; ++call) cuda_check(k.launch(), fmt::format("stream_{}", k.metric));
      });
      if (round >= opt.warmup) out[i].samples.push_back(calls * bytes / seconds.at(0) / 1e9);
    }
    // The same round on one element, with the references.
    kernels::stream_copy_ref(&hc, &ha, 1);
    kernels::stream_scale_ref(&hb, &hc, kQ, 1);
    kernels::stream_add_ref(&hc, &ha, &hb, 1);
    kernels::stream_triad_ref(&ha, &hb, &hc, kQ, 1);
  }

  unsigned long long wrong[3] = {};
  const double expected[3] = {ha, hb, hc};
  const DeviceMemory* arrays[3] = {&a, &b, &c};
  for (int i = 0; i < 3; ++i) {
    cuda_check(cudaMemsetAsync(mismatches.get(), 0, sizeof(unsigned long long), s), "cudaMemsetAsync");
    cuda_check(kernels::stream_count_mismatches(arrays[i]->as<double>(), expected[i], n,
                                                mismatches.as<unsigned long long>(), s),
               "stream_count_mismatches");
    cuda_check(cudaMemcpyAsync(&wrong[i], mismatches.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync");
    stream.synchronize();
  }
  const bool correct = wrong[0] == 0 && wrong[1] == 0 && wrong[2] == 0;
  const Peak peak = memory_peak(dev.name, dev.clocks);
  for (Measurement& m : out) {
    m.correct = correct;
    m.check = fmt::format(
        "every element of a, b, c equals the host's recurrence ({:.6g}, {:.6g}, {:.6g}) after {} "
        "rounds; elements that differ: {}, {}, {}",
        ha, hb, hc, opt.warmup + opt.reps, wrong[0], wrong[1], wrong[2]);
    m.peak = peak.value;
    m.peak_source = peak.source;
  }
  return out;
}

class GpuStream : public Suite {
 public:
  std::string name() const override { return "gpu.stream"; }
  std::string description() const override {
    return "GPU memory bandwidth: STREAM copy, scale, add and triad on each GPU";
  }
  std::string unavailable() const override { return cuda_unavailable(); }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    return for_each_device([&](int device) { return measure_device(device, opt, progress); });
  }
};

}  // namespace
RKIT_BENCH_SUITE(GpuStream);
}  // namespace rkit::rbench
