// rbench report: arithmetic intensity, and which charts a set of records gets (escaping:
// html_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "record.hpp"
#include "report.hpp"
#include "rkit/error.hpp"

namespace rkit::rbench {
namespace {

Json record(const std::string& suite, const std::string& metric, const std::string& unit, double median,
            Json params = Json::object()) {
  return Json{{"schema", "rkit.bench.v1"}, {"suite", suite},   {"metric", metric},           {"unit", unit},
              {"params", params},          {"median", median}, {"min", median * 0.9},        {"max", median * 1.1},
              {"samples", {median}},       {"correct", true},  {"host", {{"hostname", "h"}}}};
}

std::vector<ResultsFile> one_file(std::vector<Json> records) { return {{"results.jsonl", std::move(records)}}; }

bool any_note(const Report& r, const std::string& part) {
  return std::any_of(r.notes.begin(), r.notes.end(),
                     [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

TEST(RbenchReport, GemmIntensityIsFlopsOverTheBytesOfThreeMatrices) {
  // Square n: 2n^3 / (3 n^2 size) = n/6 for 4-byte, n/12 for 8-byte elements.
  EXPECT_DOUBLE_EQ(*gemm_intensity(record("cpu.gemm", "sgemm", "GFLOP/s", 1, {{"m", 1024}, {"n", 1024}, {"k", 1024}})),
                   1024.0 / 6);
  EXPECT_DOUBLE_EQ(*gemm_intensity(record("cpu.gemm", "dgemm", "GFLOP/s", 1, {{"n", 1200}})), 100.0);
  EXPECT_DOUBLE_EQ(*gemm_intensity(record("gpu.gemm", "tensor", "TFLOP/s", 1, {{"n", 300}, {"dtype", "bf16"}})), 100.0);
  EXPECT_DOUBLE_EQ(*gemm_intensity(record("gpu.gemm", "float16", "TFLOP/s", 1, {{"n", 300}})), 100.0);  // not "float"
  // m=2, n=3, k=4: 48 FLOP over (8 + 12 + 6) elements of elem_bytes 4.
  EXPECT_DOUBLE_EQ(
      *gemm_intensity(record("x.gemm", "mm", "GFLOP/s", 1, {{"m", 2}, {"n", 3}, {"k", 4}, {"elem_bytes", 4}})),
      48.0 / (26 * 4));
  EXPECT_FALSE(gemm_intensity(record("x.gemm", "mm", "GFLOP/s", 1, {{"n", 64}})));       // element size unknown
  EXPECT_FALSE(gemm_intensity(record("cpu.gemm", "sgemm", "GFLOP/s", 1, {{"m", 64}})));  // no n
  EXPECT_FALSE(gemm_intensity(record("cpu.gemm", "sgemm", "GFLOP/s", 1, {{"n", -5}})));
}

TEST(RbenchReport, GemmIntensityCountsCAtItsOwnElementSize) {
  auto gemm = [](const char* metric, int n, Json sizes) {
    Json params = {{"device", 0}, {"m", n}, {"n", n}, {"k", n}};
    params.update(sizes);
    return record("gpu.gemm", metric, "TFLOP/s", 1, params);
  };
  // Square n: 2n^3 / (2n^2 ab + n^2 c) = 2n / (2ab + c).
  EXPECT_DOUBLE_EQ(*gemm_intensity(gemm("fp16", 1024, {{"ab_bytes", 2}, {"c_bytes", 4}})), 256.0);  // fp32 C: n/4
  EXPECT_DOUBLE_EQ(*gemm_intensity(gemm("bf16", 1024, {{"ab_bytes", 2}, {"c_bytes", 4}})), 256.0);
  EXPECT_DOUBLE_EQ(*gemm_intensity(gemm("fp8", 1024, {{"ab_bytes", 1}, {"c_bytes", 2}})), 512.0);   // bf16 C: n/2
  EXPECT_DOUBLE_EQ(*gemm_intensity(gemm("fp32", 1200, {{"ab_bytes", 4}, {"c_bytes", 4}})), 200.0);  // n/6
  // m=2, n=3, k=4: 48 FLOP over (8 + 12) A and B elements of 2 bytes and 6 C elements of 4.
  EXPECT_DOUBLE_EQ(*gemm_intensity(record("gpu.gemm", "fp16", "TFLOP/s", 1,
                                          {{"m", 2}, {"n", 3}, {"k", 4}, {"ab_bytes", 2}, {"c_bytes", 4}})),
                   48.0 / 64);
  // The params win over the metric's name; one missing: C as A and B, or A and B from the name.
  EXPECT_DOUBLE_EQ(*gemm_intensity(gemm("fp16", 1200, {{"ab_bytes", 4}, {"c_bytes", 4}})), 200.0);
  EXPECT_DOUBLE_EQ(*gemm_intensity(gemm("mm", 1200, {{"ab_bytes", 2}})), 400.0);
  EXPECT_DOUBLE_EQ(*gemm_intensity(gemm("fp16", 1024, {{"c_bytes", 4}})), 256.0);
  EXPECT_FALSE(gemm_intensity(gemm("mm", 1024, {{"c_bytes", 4}})));  // A and B's size unknown
}

TEST(RbenchReport, GpuRooflinePointsAreTheFlopRatesNotThePercentOfCublas) {
  std::vector<Json> records{record("gpu.stream", "triad", "GB/s", 3000, {{"device", 0}, {"array_bytes", 1 << 28}})};
  for (int n : {1024, 4096}) {
    auto params = [&](int ab, int c) {
      return Json{{"device", 0}, {"m", n}, {"n", n}, {"k", n}, {"ab_bytes", ab}, {"c_bytes", c}};
    };
    records.push_back(record("gpu.gemm", "fp32", "TFLOP/s", 50, params(4, 4)));
    records.push_back(record("gpu.gemm", "own_sgemm", "TFLOP/s", 30, params(4, 4)));
    records.push_back(record("gpu.gemm", "own_sgemm_of_cublas", "%", 60, params(4, 4)));
    records.push_back(record("gpu.gemm", "fp16", "TFLOP/s", 600, params(2, 4)));
    records.push_back(record("gpu.gemm", "fp8", "TFLOP/s", 1100, params(1, 2)));
  }
  Report r = html_report(one_file(records));
  EXPECT_FALSE(any_note(r, "roofline")) << r.notes.front();  // drawn, every FLOP rate placed
  const auto begin = r.html.find("data-kind=\"roofline\"");
  ASSERT_NE(begin, std::string::npos);
  const std::string roofline = r.html.substr(begin, r.html.find("</svg>", begin) - begin);
  EXPECT_EQ(count(roofline, " FLOP/byte</title>"), 8);  // the TFLOP/s rows, each once
  EXPECT_EQ(roofline.find("own_sgemm_of_cublas"), std::string::npos);
  EXPECT_EQ(count(roofline, "\nintensity 256 FLOP/byte"), 1);  // fp16 at 1024: its fp32 C counted at 4 bytes
  EXPECT_EQ(count(roofline, "\nintensity 512 FLOP/byte"), 1);  // fp8 at 1024: its bf16 C at 2
  EXPECT_EQ(count(r.html, "data-kind=\"bars\""), 3);           // gpu.stream; gpu.gemm in TFLOP/s and in %
}

// comm.gloo's records as it writes them: one per collective and size.
std::vector<Json> gloo_run(double scale, const std::string& host) {
  std::vector<Json> out;
  for (const char* metric : {"allreduce", "broadcast"})
    for (std::uint64_t bytes : {1u << 10, 1u << 20, 1u << 26}) {  // unsigned, as the suite writes them
      Json r = record("comm.gloo", metric, "GB/s", scale * static_cast<double>(bytes) / 1e7,
                      {{"bytes", bytes}, {"ranks", 2}, {"dtype", "float32"}, {"busbw_factor", 1.0}});
      r["host"]["hostname"] = host;
      out.push_back(r);
    }
  return out;
}

// The <svg> of the bar chart titled `title`.
std::string bar_chart_of(const std::string& html, const std::string& title) {
  const auto begin = html.find("data-kind=\"bars\" role=\"img\" aria-label=\"" + title + "\"");
  return begin == std::string::npos ? std::string() : html.substr(begin, html.find("</svg>", begin) - begin);
}

TEST(RbenchReport, CollectiveBarsKeepEveryFileAndHost) {
  // Two runs of one host in two files: each collective's largest message, once per file.
  Report r = html_report({{"base.jsonl", gloo_run(1, "h")}, {"new.jsonl", gloo_run(0.8, "h")}});
  std::string bars = bar_chart_of(r.html, "comm.gloo \u2014 GB/s");
  ASSERT_FALSE(bars.empty()) << r.html;
  for (const char* label : {">allreduce [base.jsonl]</text>", ">allreduce [new.jsonl]</text>",
                            ">broadcast [base.jsonl]</text>", ">broadcast [new.jsonl]</text>"})
    EXPECT_EQ(count(bars, label), 1) << label;
  EXPECT_EQ(count(bars, "<rect "), 1 + 4);         // the background and four bars
  EXPECT_EQ(count(bars, "bytes=64\u00a0MiB"), 4);  // each at the largest size, in its tooltip

  // Two hosts in one file: a bar for each.
  auto both = gloo_run(1, "node-a");
  for (auto& rec : gloo_run(0.5, "node-b")) both.push_back(rec);
  r = html_report(one_file(both));
  bars = bar_chart_of(r.html, "comm.gloo \u2014 GB/s");
  for (const char* label : {">allreduce @node-a</text>", ">allreduce @node-b</text>", ">broadcast @node-a</text>",
                            ">broadcast @node-b</text>"})
    EXPECT_EQ(count(bars, label), 1) << label;
}

TEST(RbenchReport, LabelsLeaveOutParamsThatRestateAnotherAndListsStayShort) {
  // gpu.copy's shape: each GPU side by label, PCI bus id and name.
  auto side = [](Json& p, const std::string& role, int gpu) {
    p[role] = "gpu" + std::to_string(gpu);
    p[role + "_bus_id"] = gpu == 0 ? "0000:18:00.0" : "0000:2a:00.0";
    p[role + "_name"] = "NVIDIA H100 80GB HBM3";
  };
  std::vector<Json> records;
  for (int from : {0, 1})
    for (int to : {0, 1}) {
      Json p = Json::object();
      side(p, "from", from);
      side(p, "to", to);
      p["bytes"] = std::uint64_t{64} << 20;
      if (from != to) p["peer_access"] = true;
      records.push_back(record("gpu.copy", "d2d", "GB/s", from == to ? 1300 : 370, p));
    }
  // gpu.nccl's lists of every rank's bus id and name.
  Json lists = {{"bytes", std::uint64_t{1} << 20},
                {"device_bus_ids", {"0000:18:00.0", "0000:2a:00.0"}},
                {"device_names", {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"}}};
  records.push_back(record("gpu.nccl", "allreduce", "GB/s", 100, lists));
  records.back()["host"]["gpus"] = {{{"name", "NVIDIA H100 80GB HBM3"}}, {{"name", "NVIDIA H100 80GB HBM3"}}};
  Report r = html_report(one_file(records));
  const std::string bars = bar_chart_of(r.html, "gpu.copy \u2014 GB/s");
  EXPECT_EQ(count(bars, ">d2d from=gpu0 to=gpu0</text>"), 1) << bars;
  EXPECT_EQ(count(bars, ">d2d from=gpu0 to=gpu1 peer_access=true</text>"), 1);
  for (auto end = bars.find("</text>"); end != std::string::npos; end = bars.find("</text>", end + 1)) {
    const std::string text = bars.substr(bars.rfind('>', end) + 1, end - bars.rfind('>', end) - 1);
    EXPECT_EQ(text.find("_bus_id"), std::string::npos) << text;  // in the tooltips only
    EXPECT_EQ(text.find("_name"), std::string::npos) << text;
  }
  EXPECT_NE(bars.find("from_bus_id=0000:18:00.0"), std::string::npos);
  EXPECT_NE(r.html.find("device_bus_ids=0000:18:00.0, 0000:2a:00.0"), std::string::npos);
  EXPECT_NE(r.html.find("device_names=2 \u00d7 NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(r.html.find("<td>2 \u00d7 NVIDIA H100 80GB HBM3</td>"), std::string::npos);  // the hosts' GPUs
  EXPECT_EQ(r.html.find("[&quot;"), std::string::npos);                                  // no JSON arrays
}

TEST(RbenchReport, NoRecordsIsADataError) {
  try {
    html_report(one_file({}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::DataErr);
  }
}

TEST(RbenchReport, ChartsOnlyForWhatTheRecordsHave) {
  std::vector<Json> stream;
  for (const char* m : {"copy", "triad"}) stream.push_back(record("cpu.stream", m, "GB/s", 20));
  Report r = html_report(one_file(stream));
  EXPECT_EQ(r.charts, 1);
  EXPECT_EQ(count(r.html, "<svg"), 1);
  EXPECT_TRUE(any_note(r, "No CPU roofline")) << r.html;
  EXPECT_TRUE(any_note(r, "No collective results"));

  auto both = stream;
  both.push_back(record("cpu.gemm", "sgemm", "GFLOP/s", 100, {{"m", 512}, {"n", 512}, {"k", 512}}));
  both.push_back(record("comm.gloo", "allreduce", "GB/s", 1, {{"bytes", 1024}, {"iters", 20}}));
  both.push_back(record("comm.gloo", "allreduce", "GB/s", 3, {{"bytes", 1 << 20}, {"iters", 1}}));
  r = html_report(one_file(both));
  EXPECT_EQ(r.charts, 5);  // bars: stream, gemm, gloo; the roofline; gloo's bandwidth against size
  EXPECT_EQ(count(r.html, "data-kind=\"roofline\""), 1);
  EXPECT_EQ(count(r.html, "data-kind=\"collective\""), 1);
  EXPECT_TRUE(r.notes.empty()) << r.notes.front();
  // iters changes with the size: one line for allreduce, not one per size.
  EXPECT_EQ(r.html.find("iters=20</text>"), std::string::npos);
  EXPECT_NE(r.html.find(">allreduce</text>"), std::string::npos);
  EXPECT_NE(r.html.find("best measured: sgemm 100 GFLOP/s"), std::string::npos);  // no peak in the records
  EXPECT_EQ(html_report(one_file(both)).html, r.html);                            // the same page every time
}

TEST(RbenchReport, OddFieldsNeverThrowAndTextIsEscaped) {
  Json odd = record("<suite>", "m&m", "GB/s", 5, Json::array({1, 2}));
  odd["min"] = "low";
  odd["correct"] = nullptr;
  odd["host"] = "not an object";
  odd["peak"] = -1;
  Report r = html_report(one_file({odd}));
  EXPECT_EQ(r.charts, 1);
  EXPECT_EQ(r.html.find("<suite>"), std::string::npos);
  EXPECT_NE(r.html.find("&lt;suite&gt;"), std::string::npos);
  EXPECT_NE(r.html.find("m&amp;m"), std::string::npos);
}

}  // namespace
}  // namespace rkit::rbench
