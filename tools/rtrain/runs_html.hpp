// File: rtrain/runs_html.hpp
//
// rtrain runs compare --html: one self-contained page (rkit/html.hpp's frame; nothing
// fetched, nothing run) with the runs compared, the parameters that differ, the final
// and best metrics, and a chart per metric with one curve per run (rkit/svg.hpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"
#include "rkit/runs.hpp"

namespace rkit::rtrain {

// `compare`: the rkit.run.compare.v1 record; `curves`: per metric, per run (in the order
// of `runs`), its values by step.
std::string compare_html(const std::vector<runs::Run>& runs, const Json& compare,
                         const std::map<std::string, std::vector<std::vector<runs::Metric>>>& curves);

}  // namespace rkit::rtrain
