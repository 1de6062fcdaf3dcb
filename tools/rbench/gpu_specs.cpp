#include "gpu_specs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <iterator>
#include <vector>

namespace rkit::rbench {
namespace {

// A table row matches a device whose name has all of `words` (upper case); rows are
// tried in order, so the more specific ones ("H100 NVL") come before the general ("H100").
struct Row {
  std::initializer_list<const char*> words;
  GpuSpec spec;
};

// NVIDIA's datasheets and architecture whitepapers; TFLOP/s dense, at boost clock.
// Tensor-core columns: TF32, FP16, BF16, FP8, with FP32 accumulation.
const Row kRows[] = {
    // Hopper
    {{"H200", "NVL"}, {"H200 NVL", 60, 417.5, 835.5, 835.5, 1670.5, 4800}},
    {{"H200"}, {"H200 SXM", 67, 494.5, 989.5, 989.5, 1979, 4800}},
    {{"H100", "NVL"}, {"H100 NVL", 60, 417.5, 835.5, 835.5, 1670.5, 3900}},
    {{"H100", "PCIE"}, {"H100 PCIe", 51, 378, 756.5, 756.5, 1513, 2000}},
    {{"H100"}, {"H100 SXM", 67, 494.5, 989.5, 989.5, 1979, 3350}},
    // Ampere datacenter: the same math, memory by model
    {{"A100", "SXM4", "80GB"}, {"A100 SXM4 80GB", 19.5, 156, 312, 312, 0, 2039}},
    {{"A100", "SXM4"}, {"A100 SXM4 40GB", 19.5, 156, 312, 312, 0, 1555}},
    {{"A100", "PCIE", "80GB"}, {"A100 PCIe 80GB", 19.5, 156, 312, 312, 0, 1935}},
    {{"A100", "PCIE"}, {"A100 PCIe 40GB", 19.5, 156, 312, 312, 0, 1555}},
    {{"A10"}, {"A10", 31.2, 62.5, 125, 125, 0, 600}},
    // Ada
    {{"L40S"}, {"L40S", 91.6, 183, 362, 362, 733, 864}},
    {{"L40"}, {"L40", 90.5, 90.5, 181, 181, 362, 864}},
    {{"L4"}, {"L4", 30.3, 60, 121, 121, 242.5, 300}},
    {{"RTX", "4090"}, {"GeForce RTX 4090 (FP32 accumulation at half rate)", 82.6, 82.6, 165.2, 165.2, 330.3, 1008}},
    {{"RTX", "3090"}, {"GeForce RTX 3090 (FP32 accumulation at half rate)", 35.6, 35.6, 71, 71, 0, 936}},
    // Turing, Volta
    {{"T4"}, {"T4", 8.1, 0, 65, 0, 0, 320}},
    {{"V100", "SXM2"}, {"V100 SXM2", 15.7, 0, 125, 0, 0, 900}},
    {{"V100", "PCIE"}, {"V100 PCIe", 14, 0, 112, 0, 0, 900}},
};

// Words that make a card another variant of the one without them.
const char* const kVariantWords[] = {"TI", "SUPER", "D"};

// Upper-case words of a device name: '-', '_' and spaces separate them.
std::vector<std::string> name_words(std::string_view name) {
  std::vector<std::string> words;
  std::string word;
  for (char ch : name) {
    if (ch == ' ' || ch == '-' || ch == '_' || ch == '\t') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

const char* math_description(GpuMath math) {
  switch (math) {
    case GpuMath::Fp32: return "FP32 (CUDA cores)";
    case GpuMath::Tf32: return "dense TF32 tensor-core math";
    case GpuMath::Fp16: return "dense FP16 tensor-core math, FP32 accumulation";
    case GpuMath::Bf16: return "dense BF16 tensor-core math, FP32 accumulation";
    case GpuMath::Fp8: return "dense FP8 tensor-core math, FP32 accumulation";
  }
  return "";
}

}  // namespace

double GpuSpec::tflops(GpuMath math) const {
  switch (math) {
    case GpuMath::Fp32: return fp32_tflops;
    case GpuMath::Tf32: return tf32_tflops;
    case GpuMath::Fp16: return fp16_tflops;
    case GpuMath::Bf16: return bf16_tflops;
    case GpuMath::Fp8: return fp8_tflops;
  }
  return 0;
}

const GpuSpec* find_gpu_spec(std::string_view name) {
  const std::vector<std::string> words = name_words(name);
  auto has = [&](const char* w) { return std::find(words.begin(), words.end(), w) != words.end(); };
  // A variant ("RTX 3090 Ti", "RTX 4090 D") is another card: it matches only a row that names it.
  for (const Row& row : kRows) {
    auto names = [&](const char* w) {
      return std::find_if(row.words.begin(), row.words.end(),
                          [&](const char* r) { return std::string_view(r) == w; }) != row.words.end();
    };
    const bool other_variant = std::any_of(std::begin(kVariantWords), std::end(kVariantWords),
                                           [&](const char* w) { return has(w) && !names(w); });
    if (!other_variant && std::all_of(row.words.begin(), row.words.end(), has)) return &row.spec;
  }
  return nullptr;
}

int fp32_lanes_per_sm(int cc_major, int cc_minor) {
  switch (cc_major) {
    case 7: return 64;                        // Volta, Turing
    case 8: return cc_minor == 0 ? 64 : 128;  // A100 64; GA10x, Orin and Ada 128
    case 9: return 128;                       // Hopper
    case 10:
    case 12: return 128;  // Blackwell
    default: return 0;
  }
}

Peak gemm_peak(std::string_view name, const GpuClocks& clocks, GpuMath math) {
  if (const GpuSpec* spec = find_gpu_spec(name)) {
    if (double t = spec->tflops(math); t > 0)
      return {t, fmt::format("datasheet: {}, {}", spec->model, math_description(math))};
    return {std::nullopt, fmt::format("unknown: the {} datasheet lists no {}", spec->model, math_description(math))};
  }
  if (math == GpuMath::Fp32) {
    const int lanes = fp32_lanes_per_sm(clocks.cc_major, clocks.cc_minor);
    if (lanes > 0 && clocks.sm_count > 0 && clocks.clock_khz > 0) {
      const double tflops = clocks.sm_count * lanes * 2.0 * clocks.clock_khz * 1e3 / 1e12;
      return {tflops, fmt::format("computed: {} SMs x {} FP32 lanes (compute capability {}.{}) x 2 x {:.0f} MHz",
                                  clocks.sm_count, lanes, clocks.cc_major, clocks.cc_minor, clocks.clock_khz / 1e3)};
    }
  }
  return {std::nullopt, fmt::format("unknown: '{}' is not in rbench's table of GPUs", name)};
}

Peak memory_peak(std::string_view name, const GpuClocks& clocks) {
  if (const GpuSpec* spec = find_gpu_spec(name))
    return {spec->memory_gbs, fmt::format("datasheet: {}, memory bandwidth", spec->model)};
  if (clocks.memory_clock_khz > 0 && clocks.memory_bus_bits > 0) {
    const double gbs = 2.0 * clocks.memory_clock_khz * 1e3 * clocks.memory_bus_bits / 8 / 1e9;
    return {gbs, fmt::format("computed: 2 x {:.0f} MHz memory clock x {}-bit bus / 8", clocks.memory_clock_khz / 1e3,
                             clocks.memory_bus_bits)};
  }
  return {std::nullopt,
          fmt::format("unknown: '{}' is not in rbench's table of GPUs and CUDA reports no memory clock", name)};
}

double nvlink_gbs_per_link(int cc_major, int cc_minor) {
  if (cc_major == 7 && cc_minor == 0) return 25;  // V100: NVLink 2
  if (cc_major == 8 && cc_minor == 0) return 25;  // A100: NVLink 3
  if (cc_major == 9) return 25;                   // H100, H200: NVLink 4
  if (cc_major == 10) return 50;                  // B200, GB200: NVLink 5
  return 0;
}

double pcie_gbs(double gts, int lanes) {
  if (!(gts > 0) || lanes <= 0) return 0;
  const double efficiency = gts < 8 ? 8.0 / 10 : gts < 64 ? 128.0 / 130 : 1.0;
  return gts * lanes * efficiency / 8;
}

}  // namespace rkit::rbench
