// File: tools/rcost/perf.hpp
//
// Price/performance for procurement: each benchmark result (rkit.bench.v1) priced at
// the hourly cost of what it measured, and each training run's summary
// (rkit.train.event.v1) priced to its target. A GPU result is priced at its GPUs'
// rate; a CPU result at the whole machine (its cores and memory). Throughputs become
// cost per unit-hour ($ per TFLOP/s-hour = hourly price / TFLOP/s; $ per GB/s-hour),
// samples/s becomes cost per million samples, times become cost per run.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"
#include "rkit/prices.hpp"
#include "rkit/printer.hpp"

namespace rkit::rcost {

// One rkit.cost.perf.v1 record for a bench or train summary record; a null Json for
// records of other schemas or train events other than the summary. Throws
// Error(DataErr) naming `where` when a field it needs is missing.
Json perf_record(const Json& rec, const ResourcePrices& prices, const std::string& backend, const std::string& currency,
                 const std::string& where);

// Reads the inputs and prints one record per result. Returns the exit code.
int run_perf(const std::vector<std::string>& inputs, const PriceSheet& sheet, const std::string& backend, Format format,
             std::ostream& out);

}  // namespace rkit::rcost
