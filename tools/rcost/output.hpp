// File: tools/rcost/output.hpp
//
// A report written as a table, JSON Lines (rkit.cost.v1 rows, then one
// rkit.cost.summary.v1), CSV (the rows and a TOTAL row), FinOps FOCUS CSV, or one
// self-contained HTML page. Schemas: rkit(7).
#pragma once

#include <ostream>
#include <string>

#include "records.hpp"
#include "report.hpp"
#include "rkit/jsonl.hpp"

namespace rkit::rcost {

enum class OutputFormat { Table, Json, Csv, Focus, Html };

struct ReadStats {
  std::uint64_t lines = 0, bad = 0, ignored = 0;
};

Json row_json(const Report& r, const Row& row);
Json summary_json(const Report& r, const ReadStats& stats, ShareIdle share);

void write_report(std::ostream& out, OutputFormat format, const Report& r, const ReadStats& stats, ShareIdle share);

// FOCUS 1.0 columns, one row per job, resource (GPU, CPU, memory) and day, plus one
// row per day and resource for unallocated capacity (focus.cpp).
void write_focus(std::ostream& out, const Dataset& data, const ReportOptions& opt);

// One HTML page with SVG charts: cost by tenant over time, utilisation of the
// sampled capacity, waste by tenant (html.cpp).
void write_html(std::ostream& out, const Dataset& data, const ReportOptions& opt, const ReadStats& stats);

// Money with two decimals and thousands separators: 12,345.68; under 0.1, two
// significant digits (0.0034).
std::string money(double v);
// A figure with `decimals` decimals, or more under 1 so that two significant digits
// show (hours: 0.034, not 0.0).
std::string figure(double v, int decimals);

}  // namespace rkit::rcost
