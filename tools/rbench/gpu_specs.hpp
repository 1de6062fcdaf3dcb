// File: gpu_specs.hpp
//
// What an NVIDIA GPU can do at most, for the gpu.* suites' peak fractions: a small table
// of datasheet figures keyed by the device's name, and the figures that can be computed
// from what CUDA reports when the table has no entry. Builds without CUDA (plain data).
//
//   Peak p = gemm_peak("NVIDIA H100 80GB HBM3", {9, 0, 132, 1980000}, GpuMath::Bf16);
//   // p.tflops == 989.5, p.source == "datasheet: H100 SXM, dense BF16 tensor-core math"
//   Peak bw = memory_peak("NVIDIA RTX A6000", {8, 6, 84, 1800000, 8001000, 384});
//   // computed: 2 x 8001 MHz x 384-bit bus / 8 = 768.1 GB/s
//
// Datasheet tensor-core figures are dense (the "with sparsity" ones halved) and with
// FP32 accumulation, as the suites measure them: GeForce cards accumulate FP16/BF16/FP8
// at half rate in FP32, and their entries say so.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace rkit::rbench {

enum class GpuMath { Fp32, Tf32, Fp16, Bf16, Fp8 };  // Fp32: CUDA cores; the others: tensor cores

struct GpuSpec {
  const char* model;                                                      // "H100 SXM"
  double fp32_tflops, tf32_tflops, fp16_tflops, bf16_tflops, fp8_tflops;  // 0: the card has no such math
  double memory_gbs;                                                      // 1e9 B/s
  double tflops(GpuMath math) const;
};

// The table's entry for the device called `name` (as CUDA or NVML spell it: "NVIDIA
// A100-SXM4-80GB", "NVIDIA H100 PCIe", "Tesla V100-SXM2-32GB"), or nullptr. Names are
// compared by words (case, '-' and '_' ignored), so "L4" is not "L40S", and a variant
// ("RTX 3090 Ti", "RTX 4090 D") is not its base card.
const GpuSpec* find_gpu_spec(std::string_view name);

// What CUDA says of a device, for the computed peaks (0: not known).
struct GpuClocks {
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  double clock_khz = 0;         // cudaDevAttrClockRate: the SMs' peak clock
  double memory_clock_khz = 0;  // cudaDevAttrMemoryClockRate
  int memory_bus_bits = 0;      // cudaDevAttrGlobalMemoryBusWidth
};

struct Peak {
  std::optional<double> value;  // in the unit asked for; none when unknown
  std::string source;           // how it was found, or why it is unknown ("unknown: ...")
};

// FP32 lanes (FMA units) per SM by compute capability; 0 for one this table lacks.
int fp32_lanes_per_sm(int cc_major, int cc_minor);

// Dense GEMM peak in TFLOP/s: the table's, else for Fp32 SMs x lanes x 2 x clock.
Peak gemm_peak(std::string_view name, const GpuClocks& clocks, GpuMath math);

// Memory bandwidth in GB/s: the table's, else 2 (double data rate, also right for HBM)
// x memory clock x bus width / 8.
Peak memory_peak(std::string_view name, const GpuClocks& clocks);

// One NVLink's bandwidth per direction in GB/s by the GPU's compute capability: 25 for
// NVLink 2-4 (Volta 7.0, Ampere 8.0, Hopper 9.0), 50 for NVLink 5 (Blackwell 10.x);
// 0 when unknown (GPUs of other capabilities have no NVLink, or an unknown one).
double nvlink_gbs_per_link(int cc_major, int cc_minor);

// A PCIe link's bandwidth per direction in GB/s: GT/s x lanes x line-code efficiency
// (8b/10b up to 5 GT/s, 128b/130b from 8 GT/s on) / 8; PCIe 6's FLIT mode (64 GT/s)
// counted as 1. 0 for a speed or width of 0.
double pcie_gbs(double gts, int lanes);

}  // namespace rkit::rbench
