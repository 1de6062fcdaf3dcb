// File: gpu_plugin.hpp
//
// rbench's GPU suites live in a plug-in, rbench_gpu.so (suites/gpu/*.cpp, built only
// with CUDA), that rbench loads with dlopen at run time: rbench itself needs no CUDA
// library and starts on any machine. The plug-in links no copy of rkit: rbench exports
// its symbols, and the plug-in's suites register themselves (RKIT_BENCH_SUITE) in
// rbench's own registry as it loads. suites() loads it, once:
//
//   for (auto& stand_in : load_gpu_plugin([](std::string_view name) { return find(name); }))
//     register(std::move(stand_in));
//
// Where the plug-in is absent or does not load, every suite of kGpuSuites is still
// listed, unavailable for that reason. Where it is looked for:
//   1. $RKIT_BENCH_GPU_PLUGIN, when set (and only there);
//   2. beside the rbench executable (the build tree);
//   3. ../lib/rkit/ from the executable's directory (installed: /usr/lib/rkit/rbench_gpu.so).
// A build without CUDA looks only at 1.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "suite.hpp"

namespace rkit::rbench {

// The suites the GPU plug-in provides: rbench lists these names whether or not it loads.
// A new suites/gpu/ file adds its name here.
struct GpuSuiteName {
  std::string_view name;
  std::string_view description;  // for the stand-in; the plug-in's suite has its own
};
inline constexpr GpuSuiteName kGpuSuites[] = {
    {"gpu.copy", "copy bandwidth host<->GPU (pinned) and GPU<->GPU, every pair, with the copy engines"},
    {"gpu.gemm",
     "GEMM on each GPU: cuBLAS fp32, tf32, fp16, bf16, fp8 (cublasLt), and rkit's own SGEMM as % of cuBLAS"},
    {"gpu.nccl", "NCCL collectives across all GPUs of this process: busbw and #wrong, as nccl-tests"},
    {"gpu.stream", "GPU memory bandwidth: STREAM copy, scale, add and triad on each GPU"},
};

// The environment variable that names the plug-in to load instead of searching.
inline constexpr const char* kGpuPluginEnv = "RKIT_BENCH_GPU_PLUGIN";

// Loads the GPU plug-in (its suites register themselves) and returns a stand-in for each
// suite of kGpuSuites that `registered` does not find afterwards: a suite whose
// unavailable() says why ("built without CUDA ...", "GPU plug-in not found: ...",
// "CUDA libraries not found: libcudart.so.13: cannot open shared object file ...") and
// whose run() throws Error(Unavailable). Call it once per process: the library stays
// loaded for the process's life. Not thread-safe.
std::vector<std::unique_ptr<Suite>> load_gpu_plugin(const std::function<bool(std::string_view)>& registered);

}  // namespace rkit::rbench
