// rbench's table of GPU peaks (gpu_specs.hpp): lookup by the names CUDA and NVML give,
// the computed fallbacks, and link rates. Named after the file under test so that
// `ctest -R spec` finds it.
#include "gpu_specs.hpp"

#include <gtest/gtest.h>

#include <string>

namespace rkit::rbench {
namespace {

std::string model_of(const char* name) {
  const GpuSpec* spec = find_gpu_spec(name);
  return spec ? spec->model : "(none)";
}

TEST(gpu_specs, NamesAsCudaAndNvmlSpellThemFindTheirModel) {
  EXPECT_EQ(model_of("NVIDIA H100 80GB HBM3"), "H100 SXM");
  EXPECT_EQ(model_of("NVIDIA H100 PCIe"), "H100 PCIe");
  EXPECT_EQ(model_of("NVIDIA H100 NVL"), "H100 NVL");
  EXPECT_EQ(model_of("NVIDIA H200"), "H200 SXM");
  EXPECT_EQ(model_of("NVIDIA H200 NVL"), "H200 NVL");
  EXPECT_EQ(model_of("NVIDIA A100-SXM4-80GB"), "A100 SXM4 80GB");
  EXPECT_EQ(model_of("NVIDIA A100-SXM4-40GB"), "A100 SXM4 40GB");
  EXPECT_EQ(model_of("NVIDIA A100 80GB PCIe"), "A100 PCIe 80GB");
  EXPECT_EQ(model_of("NVIDIA A100-PCIE-40GB"), "A100 PCIe 40GB");
  EXPECT_EQ(model_of("NVIDIA L40S"), "L40S");
  EXPECT_EQ(model_of("NVIDIA L40"), "L40");
  EXPECT_EQ(model_of("NVIDIA L4"), "L4");
  EXPECT_EQ(model_of("NVIDIA A10"), "A10");
  EXPECT_EQ(model_of("Tesla T4"), "T4");
  EXPECT_EQ(model_of("Tesla V100-SXM2-32GB"), "V100 SXM2");
  EXPECT_EQ(model_of("Tesla V100-PCIE-16GB"), "V100 PCIe");
  EXPECT_NE(model_of("NVIDIA GeForce RTX 4090").find("RTX 4090"), std::string::npos);
  EXPECT_EQ(model_of("nvidia h100_pcie"), "H100 PCIe");  // case, '_' and '-' do not matter
}

TEST(gpu_specs, WordsMatchWholeNotAsPrefixes) {
  EXPECT_EQ(model_of("NVIDIA GH200 480GB"), "(none)");  // not an H200
  EXPECT_EQ(model_of("NVIDIA A10G"), "(none)");         // not an A10
  EXPECT_EQ(model_of("NVIDIA L4S"), "(none)");
  EXPECT_EQ(model_of("NVIDIA RTX A6000"), "(none)");
  EXPECT_EQ(model_of(""), "(none)");
  EXPECT_EQ(model_of("NVIDIA GeForce RTX 3090 Ti"), "(none)");  // variants are other cards
  EXPECT_EQ(model_of("NVIDIA GeForce RTX 4090 D"), "(none)");
}

TEST(gpu_specs, DatasheetFiguresAreDense) {
  const GpuSpec* h100 = find_gpu_spec("NVIDIA H100 80GB HBM3");
  ASSERT_NE(h100, nullptr);
  EXPECT_DOUBLE_EQ(h100->tflops(GpuMath::Fp32), 67);
  EXPECT_DOUBLE_EQ(h100->tflops(GpuMath::Tf32), 494.5);  // 989 with sparsity
  EXPECT_DOUBLE_EQ(h100->tflops(GpuMath::Bf16), 989.5);
  EXPECT_DOUBLE_EQ(h100->tflops(GpuMath::Fp16), 989.5);
  EXPECT_DOUBLE_EQ(h100->tflops(GpuMath::Fp8), 1979);
  EXPECT_DOUBLE_EQ(h100->memory_gbs, 3350);
  const GpuSpec* h200 = find_gpu_spec("NVIDIA H200");
  ASSERT_NE(h200, nullptr);
  EXPECT_DOUBLE_EQ(h200->tflops(GpuMath::Bf16), h100->tflops(GpuMath::Bf16));  // the same chip
  EXPECT_DOUBLE_EQ(h200->memory_gbs, 4800);
  const GpuSpec* a100 = find_gpu_spec("NVIDIA A100-SXM4-80GB");
  ASSERT_NE(a100, nullptr);
  EXPECT_DOUBLE_EQ(a100->tflops(GpuMath::Tf32), 156);
  EXPECT_DOUBLE_EQ(a100->tflops(GpuMath::Fp8), 0);  // Ampere has no FP8
  // Every entry: tensor-core math at least as fast as FP32 where it exists, FP8 twice
  // FP16 (to within the datasheets' rounding: the L40S's are 733 and 362.05).
  for (const char* name : {"NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA L40S", "NVIDIA L40",
                           "NVIDIA L4", "NVIDIA GeForce RTX 4090"}) {
    const GpuSpec* s = find_gpu_spec(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_NEAR(s->tflops(GpuMath::Fp8), 2 * s->tflops(GpuMath::Fp16), 0.02 * s->tflops(GpuMath::Fp8)) << name;
    EXPECT_GE(s->tflops(GpuMath::Tf32), s->tflops(GpuMath::Fp32) * 0.99) << name;
    EXPECT_GT(s->memory_gbs, 0) << name;
  }
}

TEST(gpu_specs, GemmPeakSaysWhereItComesFrom) {
  const GpuClocks h100{9, 0, 132, 1980000, 2619000, 5120};
  Peak p = gemm_peak("NVIDIA H100 80GB HBM3", h100, GpuMath::Bf16);
  ASSERT_TRUE(p.value);
  EXPECT_DOUBLE_EQ(*p.value, 989.5);
  EXPECT_EQ(p.source.rfind("datasheet: H100 SXM", 0), 0u) << p.source;

  // In the table without that math: unknown, and the reason names the model.
  p = gemm_peak("NVIDIA A100-SXM4-80GB", {8, 0, 108, 1410000, 1593000, 5120}, GpuMath::Fp8);
  EXPECT_FALSE(p.value);
  EXPECT_EQ(p.source.rfind("unknown:", 0), 0u) << p.source;

  // Not in the table: FP32 from SMs x lanes x 2 x clock; tensor math unknown.
  const GpuClocks a6000{8, 6, 84, 1800000, 8001000, 384};
  p = gemm_peak("NVIDIA RTX A6000", a6000, GpuMath::Fp32);
  ASSERT_TRUE(p.value);
  EXPECT_NEAR(*p.value, 84 * 128 * 2 * 1.8e9 / 1e12, 1e-9);  // 38.7 TFLOP/s
  EXPECT_EQ(p.source.rfind("computed:", 0), 0u) << p.source;
  EXPECT_FALSE(gemm_peak("NVIDIA RTX A6000", a6000, GpuMath::Bf16).value);
  // An unknown architecture or a missing clock: unknown, not 0.
  EXPECT_FALSE(gemm_peak("Future GPU", {42, 0, 100, 2000000, 0, 0}, GpuMath::Fp32).value);
  EXPECT_FALSE(gemm_peak("Future GPU", {9, 0, 100, 0, 0, 0}, GpuMath::Fp32).value);
}

TEST(gpu_specs, MemoryPeakFromTheTableElseFromClockAndBus) {
  Peak p = memory_peak("NVIDIA H200", {});
  ASSERT_TRUE(p.value);
  EXPECT_DOUBLE_EQ(*p.value, 4800);
  // The H100 SXM's own clocks give its datasheet figure: 2 x 2619 MHz x 5120 bits / 8.
  p = memory_peak("Unlisted HBM3 GPU", {9, 0, 132, 1980000, 2619000, 5120});
  ASSERT_TRUE(p.value);
  EXPECT_NEAR(*p.value, 3352.3, 0.1);
  EXPECT_EQ(p.source.rfind("computed:", 0), 0u) << p.source;
  p = memory_peak("NVIDIA RTX A6000", {8, 6, 84, 1800000, 8001000, 384});
  ASSERT_TRUE(p.value);
  EXPECT_NEAR(*p.value, 768.1, 0.1);
  p = memory_peak("Unlisted", {9, 0, 132, 1980000, 0, 5120});
  EXPECT_FALSE(p.value);
  EXPECT_EQ(p.source.rfind("unknown:", 0), 0u) << p.source;
}

TEST(gpu_specs, Fp32LanesPerSm) {
  EXPECT_EQ(fp32_lanes_per_sm(7, 0), 64);
  EXPECT_EQ(fp32_lanes_per_sm(8, 0), 64);
  EXPECT_EQ(fp32_lanes_per_sm(8, 6), 128);
  EXPECT_EQ(fp32_lanes_per_sm(8, 9), 128);
  EXPECT_EQ(fp32_lanes_per_sm(9, 0), 128);
  EXPECT_EQ(fp32_lanes_per_sm(6, 0), 0);
}

TEST(gpu_specs, LinkRates) {
  EXPECT_DOUBLE_EQ(nvlink_gbs_per_link(9, 0) * 18, 450);  // H100 SXM: 900 GB/s both ways
  EXPECT_DOUBLE_EQ(nvlink_gbs_per_link(8, 0) * 12, 300);  // A100 SXM: 600 GB/s both ways
  EXPECT_DOUBLE_EQ(nvlink_gbs_per_link(8, 9), 0);
  EXPECT_NEAR(pcie_gbs(32, 16), 63.02, 0.01);  // PCIe 5 x16
  EXPECT_NEAR(pcie_gbs(16, 16), 31.51, 0.01);  // PCIe 4 x16
  EXPECT_NEAR(pcie_gbs(8, 16), 15.75, 0.01);   // PCIe 3 x16
  EXPECT_DOUBLE_EQ(pcie_gbs(5, 16), 8);        // PCIe 2: 8b/10b
  EXPECT_DOUBLE_EQ(pcie_gbs(0, 16), 0);
  EXPECT_DOUBLE_EQ(pcie_gbs(16, 0), 0);
}

}  // namespace
}  // namespace rkit::rbench
