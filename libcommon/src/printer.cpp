#include "rkit/printer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <iostream>
#include <iterator>

#include "rkit/error.hpp"

namespace rkit {

Printer::Printer(std::ostream& out, Format format, std::vector<Column> columns, bool streaming)
    : out_(out), format_(format), columns_(std::move(columns)), streaming_(streaming) {
  for (const auto& c : columns_) widths_.push_back(std::max(c.header.size(), c.min_width));
}

Printer::~Printer() {
  // A destructor must not throw: a write that fails here leaves the stream bad, and
  // Tool::run reports it. Call finish() to get the error where it happens.
  try {
    if (!finished_) finish();
  } catch (...) {
  }
}

const Json& Printer::lookup(const Json& record, const Column& col) const {
  static const Json kNull;
  if (!col.key.empty() && col.key.front() == '/') {
    Json::json_pointer ptr(col.key);
    return record.contains(ptr) ? record.at(ptr) : kNull;
  }
  auto it = record.find(col.key);
  return it == record.end() ? kNull : *it;
}

std::string Printer::cell(const Json& v, const std::string& null_text) {
  if (v.is_null()) return null_text;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    if (v.empty()) return null_text;
    std::string out;
    for (const auto& e : v) {
      if (!out.empty()) out += ',';
      out += cell(e, null_text);
    }
    return out;
  }
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Printer::csv_quote(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

template <typename It>
void Printer::append_table_row(std::string& line, It first) const {
  for (std::size_t i = 0; i < columns_.size(); ++i, ++first) {
    line += *first;
    if (i + 1 < columns_.size()) line.append(widths_[i] - std::min(widths_[i], first->size()) + 2, ' ');
  }
  line += '\n';
}

void Printer::add_table_row(std::vector<std::string>& row) {
  // Streaming rows are written at once: widths are fixed by the first row.
  if (!streaming_ || !header_done_)
    for (std::size_t i = 0; i < row.size(); ++i) widths_[i] = std::max(widths_[i], row[i].size());
  if (!streaming_) {
    std::move(row.begin(), row.end(), std::back_inserter(cells_));
    return;
  }
  std::string text;
  if (!header_done_) {
    std::vector<std::string> head;
    for (const auto& c : columns_) head.push_back(c.header);
    append_table_row(text, head.begin());
    header_done_ = true;
  }
  append_table_row(text, row.begin());
  out_ << text;
  flush_checked();
}

void Printer::print_cells(std::vector<std::string> cells) {
  if (format_ != Format::Table || cells.size() != columns_.size())
    throw Error(Exit::Software, fmt::format("Printer::print_cells: {} cells for a {} of {} columns", cells.size(),
                                            format_ == Format::Table ? "table" : "non-table", columns_.size()));
  add_table_row(cells);
}

void Printer::print(const Json& record) {
  switch (format_) {
    case Format::Json:
      out_ << to_json_line(record) << '\n';
      if (streaming_) flush_checked();
      return;
    case Format::Csv: {
      if (!header_done_) {
        std::string head;
        for (const auto& c : columns_) head += (head.empty() ? "" : ",") + csv_quote(c.header);
        out_ << head << '\n';
        header_done_ = true;
      }
      std::string line;
      for (std::size_t i = 0; i < columns_.size(); ++i) {
        if (i) line += ',';
        line += csv_quote(cell(lookup(record, columns_[i]), ""));
      }
      out_ << line << '\n';
      if (streaming_) flush_checked();
      return;
    }
    case Format::Table: {
      std::vector<std::string> row;
      row.reserve(columns_.size());
      for (const auto& col : columns_) {
        const Json& v = lookup(record, col);
        row.push_back(col.human && !v.is_null() ? col.human(v) : cell(v, "-"));
      }
      add_table_row(row);
      return;
    }
  }
}

void Printer::flush_checked() {
  errno = 0;
  out_.flush();
  if (!out_) throw system_error(&out_ == &std::cout ? "write stdout" : "write output", errno ? errno : EIO);
}

void Printer::finish() {
  finished_ = true;
  if (format_ != Format::Table || streaming_ || cells_.empty()) {
    out_.flush();
    return;
  }
  // Written in pieces of about 1 MiB: a table may have hundreds of thousands of rows.
  std::string text;
  std::vector<std::string> head;
  for (const auto& c : columns_) head.push_back(c.header);
  append_table_row(text, head.begin());
  for (auto at = cells_.begin(); at != cells_.end(); at += static_cast<std::ptrdiff_t>(columns_.size())) {
    append_table_row(text, at);
    if (text.size() >= (1u << 20)) {
      out_ << text;
      text.clear();
    }
  }
  out_ << text;
  cells_.clear();
  out_.flush();
}

}  // namespace rkit
