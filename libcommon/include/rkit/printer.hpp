// File: rkit/printer.hpp
//
// One record, three renderings. A tool declares its columns once; the Printer
// writes each record as an aligned table row (humans), a JSON line (machines) or a
// CSV row (spreadsheets). JSON Lines carry the whole record; table and CSV show the
// declared columns.
//
//   rkit::Printer out(std::cout, opts.format(), {
//       {"RANK", "rank"},
//       {"CPUS", "cpuset"},
//       {"MEM", "memory_bytes", [](const rkit::Json& v) { return rkit::format_bytes(v); }},
//   });
//   for (const auto& rec : records) out.print(rec);
//   out.finish();   // the table is aligned and written here (unless streaming)
//
// Table cells use the column's `human` formatter when given; CSV cells always hold
// the raw value (numbers stay numbers). Arrays render as comma-separated values,
// null as "-" in tables and empty in CSV.
#pragma once

#include <deque>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"

namespace rkit {

enum class Format { Table, Json, Csv };

struct Column {
  std::string header;  // "RANK"
  std::string key;     // a top-level key, or a JSON pointer ("/gpus/0/name")
  std::function<std::string(const Json&)> human = nullptr;
  std::size_t min_width = 0;  // for streaming tables, whose widths the first row fixes
};

class Printer {
 public:
  // `streaming`: write table rows as they come, with widths fixed by the first row
  // (for live samples); otherwise rows are buffered until finish() to align them.
  Printer(std::ostream& out, Format format, std::vector<Column> columns, bool streaming = false);
  ~Printer();
  void print(const Json& record);
  // A table row given as its cells, one per column in order, already rendered (the
  // columns' `human` is not applied): for a tool printing very many rows, which need
  // not build a record for each (rtrain runs ls). Table format only; Error(Software)
  // for another format or the wrong number of cells.
  void print_cells(std::vector<std::string> cells);
  void finish();

  // A value rendered as a cell: strings as-is, numbers in shortest form, arrays
  // comma-joined, null as `null_text`.
  static std::string cell(const Json& value, const std::string& null_text);
  // CSV quoting (RFC 4180).
  static std::string csv_quote(const std::string& field);

 private:
  const Json& lookup(const Json& record, const Column& col) const;
  void add_table_row(std::vector<std::string>& row);
  // Appends the aligned row of cells [first, first + columns) to `line`.
  template <typename It>
  void append_table_row(std::string& line, It first) const;
  // Streaming output is flushed per record; a lost write throws Error(IoErr) so
  // that an endless stream stops when its reader goes away.
  void flush_checked();
  std::ostream& out_;
  Format format_;
  std::vector<Column> columns_;
  bool streaming_;
  bool header_done_ = false;
  bool finished_ = false;
  std::vector<std::size_t> widths_;
  std::deque<std::string> cells_;  // buffered table rows, columns_.size() cells each (never moved)
};

}  // namespace rkit
