// File: report.hpp
//
// rbench's HTML report: one self-contained page (inline CSS and SVG, no script, nothing
// fetched: a Content-Security-Policy forbids it) that draws rkit.bench.v1 records:
//   - one bar chart per suite and unit: the median of each result, its min–max
//     whisker, the hardware's peak where known, results that failed their check in red;
//   - a roofline for each pair of a memory suite and a matrix-multiply suite
//     (cpu.stream + cpu.gemm, gpu.stream + gpu.gemm) per host;
//   - bandwidth against message size for the collective suites (comm.*, gpu.nccl);
//   - a table of every result and one of the hosts they ran on.
// Charts appear only for what the records hold; what could not be drawn is said on the
// page (and in Report::notes). Every text taken from a record is escaped (rkit/html.hpp).
//
//   std::vector<ResultsFile> files{{"results.jsonl", read_bench_records("results.jsonl")}};
//   Report r = html_report(files);     // r.html: the page; r.charts: how many <svg> charts
//   atomic_write_file("report.html", r.html);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rbench {

struct ResultsFile {
  std::string name;           // as given on the command line ("-": standard input)
  std::vector<Json> records;  // rkit.bench.v1 records, as read_bench_records returns them
};

struct Report {
  std::string html;                // the whole page, UTF-8
  int charts = 0;                  // <svg class="chart"> elements in it
  std::vector<std::string> notes;  // charts that could not be drawn, and why (plain text)
};

// The page for the records of `files`, in their order. Pure: reads nothing, writes
// nothing, and gives the same page for the same records. Throws Error(DataErr) when the
// files hold no record at all.
Report html_report(const std::vector<ResultsFile>& files);

// Arithmetic intensity of a matrix-multiply record in FLOP per byte: 2·m·n·k over the
// bytes of A and B read and C written, (m·k + k·n)·ab_bytes + m·n·c_bytes.
// Sizes come from params m, n, k (n alone: square). Element sizes: params ab_bytes and
// c_bytes, as gpu.gemm records them (fp16 and bf16 inputs write an fp32 C, fp8 a bf16
// one); without ab_bytes, params elem_bytes, else the metric or params.dtype (sgemm,
// fp32, tf32: 4; dgemm, fp64: 8; hgemm, fp16, bf16, float16: 2; fp8, int8: 1); without
// c_bytes, C's is A's: 2n/(3·size) for square n. Empty when m, n, k or the size is
// unknown. Blind to the unit: the caller keeps FLOP rates only (not gpu.gemm's %).
std::optional<double> gemm_intensity(const Json& record);

}  // namespace rkit::rbench
