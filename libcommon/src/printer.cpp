#include "rkit/printer.hpp"

#include <algorithm>
#include <cerrno>
#include <iostream>

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

void Printer::write_table_row(const std::vector<std::string>& row) {
  std::string line;
  for (std::size_t i = 0; i < row.size(); ++i) {
    line += row[i];
    if (i + 1 < row.size()) line.append(widths_[i] - std::min(widths_[i], row[i].size()) + 2, ' ');
  }
  out_ << line << '\n';
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
      for (std::size_t i = 0; i < columns_.size(); ++i) {
        const Json& v = lookup(record, columns_[i]);
        row.push_back(columns_[i].human && !v.is_null() ? columns_[i].human(v) : cell(v, "-"));
        // Streaming rows are written at once: widths are fixed by the first row.
        if (!streaming_ || !header_done_) widths_[i] = std::max(widths_[i], row.back().size());
      }
      if (!streaming_) {
        rows_.push_back(std::move(row));
        return;
      }
      if (!header_done_) {
        std::vector<std::string> head;
        for (const auto& c : columns_) head.push_back(c.header);
        write_table_row(head);
        header_done_ = true;
      }
      write_table_row(row);
      flush_checked();
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
  if (format_ != Format::Table || streaming_ || rows_.empty()) {
    out_.flush();
    return;
  }
  std::vector<std::string> head;
  for (const auto& c : columns_) head.push_back(c.header);
  write_table_row(head);
  for (const auto& r : rows_) write_table_row(r);
  rows_.clear();
  out_.flush();
}

}  // namespace rkit
