// File: report_records.hpp — private to rbench's report (report*.cpp).
//
// The records as the report's page and charts read them: rkit.bench.v1 records read
// defensively (read_bench_records checks only suite, metric, unit, median and samples),
// their params as text for labels, captions, tooltips and table cells, and the numbers
// as the page writes them.
//
//   Result r = make_result(record, 0);            // record: in files[0].records, outliving r
//   auto keys = label_keys(rows, {}, false);     // the params that tell rows apart
//   std::string label = r.metric + " " + params_text(r.params(), keys);   // "sgemm m=n=k=1024"
//
// Pure functions of their arguments: thread-compatible.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "report.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rbench::detail {

// ---------------------------------------------------------------- numbers as text

// A figure as the page writes it: 4 significant digits ("197.3", "1.5e+04").
std::string num(double v);
// A fraction as a percentage with `decimals` decimals: 0.25 → "25%".
std::string percent(double fraction, int decimals);
// ASCII lower case.
std::string lower(std::string s);

// ---------------------------------------------------------------- fields of a record

// j[key] when it is a finite number, else empty.
std::optional<double> number(const Json& j, const char* key);
// j[key] when it is a string, else `fallback`.
std::string text(const Json& j, const char* key, const std::string& fallback = {});
// j[key] when it is an object, else an empty object.
const Json& object(const Json& j, const char* key);
// A value as a cell: sizes in bytes as "64 MiB", a list of plain values as "a, b, c" or,
// all equal, "8 × a" (gpu.nccl's device_names), the rest as the tables print them.
std::string param_text(const std::string& key, const Json& v);
bool finite_positive(double v);

// One record with what the charts need. `rec` points into the caller's records.
struct Result {
  const Json* rec = nullptr;
  std::size_t file = 0;  // index in the files the report is made of
  std::string suite, metric, unit, host;
  double median = 0, min = 0, max = 0;            // min <= median <= max
  std::optional<double> cv, peak, peak_fraction;  // peak > 0 when there
  bool correct = true;                            // false only when the record says "correct": false
  const Json& params() const { return object(*rec, "params"); }
};

Result make_result(const Json& rec, std::size_t file);

// A rate in giga-units per second (GB/s, GFLOP/s) from `unit`, or empty when `unit` is
// not a rate of `kind` ("B" or "FLOP").
std::optional<double> to_giga(double value, const std::string& unit, const std::string& kind);
// comm.* and gpu.nccl: bandwidth against message size.
bool is_collective_suite(const std::string& suite);
// params.bytes when it is positive.
std::optional<double> bytes_param(const Result& r);

// ---------------------------------------------------------------- params as text

// The parameters that tell results of one metric apart, for labels: a key counts when
// two results of the same metric (and, with `per_size`, the same params.bytes) differ in
// it, or one lacks it: gemm's m, n, k; io.seq's block_bytes. Keys that change only from
// metric to metric (the collectives' busbw_factor) or along with the size (comm.gloo's iters)
// label nothing, nor does one that restates another: named KEY_... beside a label KEY and
// the same wherever KEY is (the GPU suites' device_bus_id beside device, to_name beside
// to); the table has them.
std::vector<std::string> label_keys(const std::vector<const Result*>& rows, const std::set<std::string>& skip,
                                    bool per_size);
// "k=v" for `keys` present in `params`; a square matrix multiply's m, n and k as one
// "m=n=k=1024".
std::string params_text(const Json& params, const std::vector<std::string>& keys);
// Parameters for a table cell, as markup (every text escaped): each "k=v" kept on one
// line unless its value has spaces (a GPU's name, a list), which would make the table
// wider than the page.
std::string params_html(const Json& params);
// The parameters every result of `rows` (not empty) has, with one value: said once, in a caption.
std::string common_params_text(const std::vector<const Result*>& rows);
// The tooltip of a result: everything about it on a few lines (plain text).
std::string describe(const Result& r, const std::vector<ResultsFile>& files);

}  // namespace rkit::rbench::detail
