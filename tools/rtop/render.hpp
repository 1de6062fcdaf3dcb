// File: tools/rtop/render.hpp
//
// rtop's human renderings and the column tables its records print through.
#pragma once

#include <ostream>
#include <vector>

#include "rkit/printer.hpp"
#include "rkit/topology.hpp"

namespace rkit::rtop {

// The readable summary `rtop` prints without --json.
void print_summary(const Topology& t, std::ostream& out);

// The GPU/NIC link matrix as an rkit.link_matrix.v1 record: devices (GPUs, then
// NICs, labelled GPU0.. NIC0..) and their links, in `nvidia-smi topo -m` terms.
Json matrix_json(const Topology& t);

// The matrix record rendered: as a table with nvidia-smi's layout and legends, as
// CSV (a row and a column per device, then CPU and NUMA affinity), or as JSON.
void print_matrix(const Json& matrix, Format format, std::ostream& out);

std::vector<Column> placement_columns();
std::vector<Column> sample_columns();

}  // namespace rkit::rtop
