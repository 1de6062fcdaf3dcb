// File: rtrain/data_npy.cpp — the NumPy .npy reader of rtrain's data layer (data.hpp: FileSpec).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>

#include "data_impl.hpp"
#include "rkit/error.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rtrain::detail {
namespace {

// ---------------------------------------------------------------------------------------
// NumPy .npy: "\x93NUMPY", major, minor, the header length (2 bytes LE in 1.0, 4 in
// 2.0/3.0), a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (n, c)}
// padded with spaces and a newline, then the raw array.

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
  bool has_descr = false, has_order = false, has_shape = false;
};

// A parser of the dict literal NumPy writes (strings, True/False, tuples of integers).
class NpyDictParser {
 public:
  NpyDictParser(std::string_view s, const std::string& name) : s_(s), name_(name) {}

  NpyHeader parse() {
    NpyHeader h;
    expect('{');
    while (skip_space() != '}') {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        if (skip_space() == '[') fail("structured dtypes are not supported (expected a 2-D array of '<f4' or '<f8')");
        h.descr = string_literal();
        h.has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        h.has_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        h.has_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}' in the header", key));
      }
      if (skip_space() == ',')
        ++i_;
      else if (peek() != '}')
        fail("malformed header: expected ',' or '}'");
    }
    ++i_;
    if (skip_space() != '\0') fail("malformed header: text after the dictionary");
    if (!h.has_descr || !h.has_order || !h.has_shape)
      fail("malformed header: it needs 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw Error(Exit::DataErr, name_ + ": " + why); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  char skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
    return peek();
  }
  void expect(char c) {
    if (skip_space() != c) fail(fmt::format("malformed header: expected '{}'", c));
    ++i_;
  }
  std::string string_literal() {
    const char q = skip_space();
    if (q != '\'' && q != '"') fail("malformed header: expected a quoted string");
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) fail("malformed header: unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    if (s_.substr(i_, 4) == "True") return i_ += 4, true;
    if (s_.substr(i_, 5) == "False") return i_ += 5, false;
    fail("malformed header: 'fortran_order' must be True or False");
  }
  std::vector<std::uint64_t> tuple() {
    std::vector<std::uint64_t> out;
    expect('(');
    while (skip_space() != ')') {
      std::uint64_t v = 0;
      const char* begin = s_.data() + i_;
      auto [ptr, ec] = std::from_chars(begin, s_.data() + s_.size(), v);
      if (ec != std::errc() || ptr == begin) fail("malformed header: 'shape' must be a tuple of integers");
      i_ += static_cast<std::size_t>(ptr - begin);
      if (skip_space() == 'L') ++i_;  // Python 2's long suffix
      out.push_back(v);
      if (skip_space() == ',')
        ++i_;
      else if (peek() != ')')
        fail("malformed header: 'shape' must be a tuple of integers");
    }
    ++i_;
    return out;
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t i_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> load_npy(const FileSpec& spec) {
  const std::string& name = spec.path;
  const InputFile file(spec.path);
  constexpr std::string_view kMagic = "\x93NUMPY";
  char prefix[12] = {};
  if (file.size() < 10) throw Error(Exit::DataErr, name + ": not a .npy file (too short)");
  file.read(prefix, std::min<std::uint64_t>(12, file.size()), 0);
  if (std::string_view(prefix, 6) != kMagic)
    throw Error(Exit::DataErr, name + ": not a .npy file (no \\x93NUMPY magic)");
  const auto major = static_cast<unsigned char>(prefix[6]), minor = static_cast<unsigned char>(prefix[7]);
  if (major < 1 || major > 3)
    throw Error(Exit::DataErr,
                fmt::format("{}: .npy format version {}.{} is not supported (1.0 to 3.0 are)", name, major, minor));
  const auto byte = [&](int i) { return std::uint64_t{static_cast<unsigned char>(prefix[i])}; };
  std::uint64_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = byte(8) | byte(9) << 8;
    header_at = 10;
  } else {
    if (file.size() < 12) throw Error(Exit::DataErr, name + ": truncated header");
    header_len = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    header_at = 12;
  }
  if (header_len > (1 << 20))
    throw Error(Exit::DataErr, fmt::format("{}: header of {} bytes is too long", name, header_len));
  if (header_at + header_len > file.size()) throw Error(Exit::DataErr, name + ": truncated header");
  std::string header(header_len, '\0');
  file.read(header.data(), header.size(), header_at);
  const NpyHeader h = NpyDictParser(header, name).parse();

  st::Dtype dtype;
  if (h.descr == "<f4")
    dtype = st::Dtype::F32;
  else if (h.descr == "<f8")
    dtype = st::Dtype::F64;
  else
    throw Error(Exit::DataErr, fmt::format("{}: dtype '{}' is not supported (expected little-endian float32 '<f4' "
                                           "or float64 '<f8')",
                                           name, h.descr));
  if (h.fortran_order)
    throw Error(Exit::DataErr, name + ": Fortran-order arrays are not supported (save np.ascontiguousarray(a))");
  if (h.shape.size() != 2)
    throw Error(Exit::DataErr,
                fmt::format("{}: shape {} is not 2-D (expected (rows, columns))", name, shape_text(h.shape)));
  const std::uint64_t rows = h.shape[0], columns = h.shape[1];
  const std::uint64_t data_at = header_at + header_len;
  const std::uint64_t want = checked_bytes(name, rows, columns, st::dtype_size(dtype));
  if (file.size() - data_at < want)
    throw Error(Exit::DataErr, fmt::format("{}: truncated: shape {} of '{}' needs {} data bytes, found {}", name,
                                           shape_text(h.shape), h.descr, want, file.size() - data_at));
  if (file.size() - data_at > want)
    throw Error(Exit::DataErr,
                fmt::format("{}: has {} trailing bytes after the array", name, file.size() - data_at - want));
  if (rows == 0) throw Error(Exit::DataErr, name + ": no rows");

  Table t;
  shape_table(t, spec, name, rows, columns);
  t.x.reserve(rows * t.features);
  (spec.task == Task::Regression ? t.y.reserve(rows * t.targets) : t.labels.reserve(rows));
  TableFiller fill(t, columns, spec.task);
  file.read_elements(data_at, rows * columns, dtype, [&](double v) { fill.push(v); });

  const std::size_t features = t.features;
  Locator where;
  where.value = [&name, features](std::uint64_t row, std::size_t col, bool in_x) {
    return fmt::format("{}: [{}, {}]", name, row, in_x ? col : features + col);
  };
  where.label = [&name, features](std::uint64_t row) { return fmt::format("{}: [{}, {}]", name, row, features); };
  return finish(std::move(t), spec, name, where);
}

}  // namespace rkit::rtrain::detail
