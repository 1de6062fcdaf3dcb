// File: compare.hpp
//
// Comparing two benchmark runs metric by metric: the ratio of medians, oriented so
// that below 1 is worse; with at least kMinTestSamples repetitions on both sides, a
// Mann-Whitney U test decides whether a difference is real (p < 0.05).
//
//   auto rows = compare_runs(read_bench_records("base.jsonl"), read_bench_records("new.jsonl"), 0.95);
//   bool regressed = std::any_of(..., [](const Comparison& c) { return c.verdict == "regression"; });
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit::rbench {

struct Comparison {
  std::string suite, metric, unit;
  Json params;
  std::optional<double> base_median, new_median;
  std::optional<double> ratio;    // new vs base, > 1 better, whatever the unit's direction
  std::optional<double> p_value;  // when both sides have enough samples
  // "regression" (worse than fail_below, and real), "wrong" (the new result failed its
  // check), "worse" (below 1, real, not beyond fail_below), "same", "better",
  // "other unit", "only in base", "only in new".
  std::string verdict;
  Json to_json() const;  // rkit.bench.compare.v1
};

std::vector<Comparison> compare_runs(const std::vector<Json>& base, const std::vector<Json>& fresh, double fail_below);

}  // namespace rkit::rbench
