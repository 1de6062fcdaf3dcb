// File: rtrain/data_csv.cpp — the .csv reader of rtrain's data layer (data.hpp: FileSpec).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

#include "data_impl.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rtrain::detail {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// One CSV field parsed as a number.
struct Parsed {
  enum Status { Ok, NotANumber, TooLarge } status;
  double value;
};

// Parses one field with std::from_chars as a T (float, or double for labels). Magnitudes
// beyond T's range are TooLarge; ones too small for it become 0 or subnormal. "nan" and
// "inf" parse (and are refused later, with the row and column).
template <typename T>
Parsed parse_number(std::string_view field) {
  T v{};
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, v);
  if (field.empty() || ptr != end) return {Parsed::NotANumber, 0};
  if (ec == std::errc::result_out_of_range) {
    double d = 0;
    const auto [p2, ec2] = std::from_chars(field.data(), end, d);
    if (ec2 == std::errc() && p2 == end && std::fabs(d) < 1) return {Parsed::Ok, double(static_cast<T>(d))};
    return {Parsed::TooLarge, 0};
  }
  if (ec != std::errc()) return {Parsed::NotANumber, 0};
  return {Parsed::Ok, double(v)};
}

std::string quoted(std::string_view field) {
  return field.size() > 40 ? fmt::format("'{}...'", field.substr(0, 40)) : fmt::format("'{}'", field);
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  for (;;) {
    const std::size_t comma = line.find(',');
    out.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return out;
    line.remove_prefix(comma + 1);
  }
}

}  // namespace

std::unique_ptr<Dataset> load_csv(const FileSpec& spec) {
  const std::string& name = spec.path;
  const std::string text = read_file(spec.path, std::uint64_t{1} << 40);
  std::string_view rest = text;
  std::uint64_t line_no = 0;
  auto next_line = [&] {
    const std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };

  const std::string_view first = next_line();
  if (trim(first).empty()) throw Error(Exit::DataErr, name + ": empty file (no header and no rows)");
  const std::vector<std::string_view> head = split_fields(first);
  const bool has_header = std::any_of(head.begin(), head.end(), [](std::string_view f) {
    return parse_number<double>(f).status == Parsed::NotANumber;
  });
  const std::size_t columns = head.size();
  const std::uint64_t first_row_line = has_header ? 2 : 1;

  Table t;
  shape_table(t, spec, name, 0, columns);
  const auto max_rows = static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  t.x.reserve(max_rows * t.features);
  (spec.task == Task::Regression ? t.y.reserve(max_rows * t.targets) : t.labels.reserve(max_rows));
  TableFiller fill(t, columns, spec.task);
  const std::size_t label_col = spec.task == Task::Classification ? columns - 1 : columns;

  // Parses a line known to hold `columns` fields.
  auto parse_line = [&](std::string_view line) {
    for (std::size_t col = 0; col < columns; ++col) {
      const std::size_t comma = line.find(',');
      const std::string_view field = trim(line.substr(0, comma));
      line.remove_prefix(comma == std::string_view::npos ? line.size() : comma + 1);
      // A label is parsed as a double so that a non-integer one is seen as such.
      const Parsed v = col == label_col ? parse_number<double>(field) : parse_number<float>(field);
      if (v.status == Parsed::NotANumber)
        throw Error(Exit::DataErr,
                    fmt::format("{}:{}: {} is not a number (column {})", name, line_no, quoted(field), col + 1));
      if (v.status == Parsed::TooLarge)
        throw Error(Exit::DataErr, fmt::format("{}:{}: {} is too large for a float (column {})", name, line_no,
                                               quoted(field), col + 1));
      fill.push(v.value);
    }
  };

  std::uint64_t rows = 0;
  if (!has_header) {
    parse_line(first);  // already known to hold `columns` numbers
    ++rows;
  }
  while (!rest.empty()) {
    const std::string_view line = next_line();
    if (trim(line).empty()) {
      if (rest.find_first_not_of("\r\n\t ") == std::string_view::npos) break;  // blank lines at the end
      throw Error(Exit::DataErr, fmt::format("{}:{}: empty line", name, line_no));
    }
    const std::size_t found = static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
    if (found != columns)
      throw Error(Exit::DataErr, fmt::format("{}:{}: expected {} columns, found {}", name, line_no, columns, found));
    parse_line(line);
    ++rows;
  }
  t.rows = rows;
  if (rows == 0) throw Error(Exit::DataErr, name + ": no rows (only a header line)");

  const std::size_t features = t.features;  // `t` moves into finish
  Locator where;
  where.label = [&name, first_row_line](std::uint64_t row) { return fmt::format("{}:{}", name, first_row_line + row); };
  where.value = [&name, first_row_line, features](std::uint64_t row, std::size_t col, bool in_x) {
    return fmt::format("{}:{}: column {}", name, first_row_line + row, (in_x ? col : features + col) + 1);
  };
  return finish(std::move(t), spec, name, where);
}

}  // namespace rkit::rtrain::detail
