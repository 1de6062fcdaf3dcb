// File: record.hpp
//
// rkit.bench.v1: one record per measured metric, with its statistics, the check of
// its result, the fraction of the hardware's peak it reached, and the host it ran on.
//
//   Json host = host_fingerprint();
//   Json rec = bench_record(*suite, m, opt, host);   // m: a suite's Measurement
//   std::vector<Json> runs = read_bench_records("results.jsonl");
#pragma once

#include <string>
#include <vector>

#include "rkit/jsonl.hpp"
#include "suite.hpp"

namespace rkit::rbench {

inline constexpr const char* kRecordSchema = "rkit.bench.v1";

// CPU model, physical cores and hardware threads usable here, memory, kernel, the GPUs
// and driver NVML reports (none where there is no driver), rkit version.
Json host_fingerprint();

// Whether larger values of `unit` are better (rates) or worse (times: "s", "ms", "us").
bool higher_is_better(const std::string& unit);

Json bench_record(const Suite& suite, const Measurement& m, const RunOptions& opt, const Json& host);

// Every rkit.bench.v1 record of a JSON Lines file ("-": stdin). A malformed line or
// record is Error(DataErr) naming file:line; a missing file Error(NoInput).
std::vector<Json> read_bench_records(const std::string& path);

// Throws Error(DataErr) "PATH, PATH: no rkit.bench.v1 records" when `records`, the count
// read from `paths`, is 0: files with nothing to report or draw.
void require_bench_records(const std::vector<std::string>& paths, std::size_t records);

// The identity of a measurement across runs: suite, metric and parameters.
std::string measurement_key(const Json& record);

}  // namespace rkit::rbench
