// File: tools/rtop/render.hpp
//
// rtop's human renderings and the column tables its records print through.
#pragma once

#include <ostream>
#include <vector>

#include "rkit/printer.hpp"
#include "topology.hpp"

namespace rkit::rtop {

// The readable summary `rtop` prints without --json.
void print_summary(const Topology& t, std::ostream& out);

// The GPU/NIC link matrix as `nvidia-smi topo -m` lays it out, with legends.
void print_matrix(const Topology& t, std::ostream& out);

// The matrix as CSV: one row per device, a column per device, then CPU and NUMA affinity.
void print_matrix_csv(const Topology& t, std::ostream& out);

// The same matrix as an rkit.link_matrix.v1 record.
Json matrix_json(const Topology& t);

std::vector<Column> placement_columns();
std::vector<Column> sample_columns();

}  // namespace rkit::rtop
