// File: rtrain/data_impl.hpp — private to rtrain's data layer (data*.cpp): what the data
// sources and the sampler share.
//
// Counter-based random bits (the synthetic model and the sampler's permutations), and
// what the file formats share: a file's contents before checks (Table, filled column by
// column by a TableFiller), how a format names a place in its file (Locator), the
// checks that make the dataset (finish), and chunked reads of binary elements (InputFile).
//
//   Table t;
//   shape_table(t, spec, name, rows, columns);      // features, then the target columns
//   TableFiller fill(t, columns, spec.task);
//   file.read_elements(at, rows * columns, dtype, [&](double v) { fill.push(v); });
//   return finish(std::move(t), spec, name, where);  // DataErr naming the place of a bad value
//
// Pure functions and immutable objects: thread-compatible.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/rng.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rtrain::detail {

static_assert(std::endian::native == std::endian::little, "the file readers assume a little-endian host");

namespace st = rkit::safetensors;

// ---------------------------------------------------------------------------------------
// Counter-based random bits: splitmix64's finaliser (rkit/rng.hpp) over (key + counter).
// Any value of any stream can be computed alone, which is what makes rows and epochs
// restartable.

// The k-th 64 random bits of the stream `key`.
constexpr std::uint64_t bits_at(std::uint64_t key, std::uint64_t k) { return mix64(key + (k + 1) * kGolden64); }

// Throws Error(Software) naming `row` and the dataset's `rows`.
[[noreturn]] void row_out_of_range(std::uint64_t row, std::uint64_t rows);

// ---------------------------------------------------------------------------------------
// Loaded files (data.cpp): everything in memory, features and targets row-major.

// A file's contents before checks: features, regression targets or raw label values.
struct Table {
  std::uint64_t rows = 0;
  std::size_t features = 0, targets = 0;  // targets: regression outputs; 0 for classification
  std::vector<float> x, y;
  std::vector<double> labels;
};

// How a format names a place in its file, for errors.
struct Locator {
  // The value at `row`, column `col` of the features (in_x) or the targets.
  std::function<std::string(std::uint64_t row, std::size_t col, bool in_x)> value;
  // The label of `row`.
  std::function<std::string(std::uint64_t row)> label;
};

// Checks `t` (finite values, labels) and makes the dataset.
std::unique_ptr<Dataset> finish(Table t, const FileSpec& spec, const std::string& name, const Locator& where);
// The number of target columns at the end of a .csv or .npy row (1 for a label).
std::size_t target_columns(const FileSpec& spec);

// Splits rows of `columns` values, fed in order, into a Table's features and targets.
class TableFiller {
 public:
  TableFiller(Table& t, std::size_t columns, Task task) : t_(t), columns_(columns), task_(task) {}
  void push(double v) {
    if (col_ < t_.features)
      t_.x.push_back(static_cast<float>(v));
    else if (task_ == Task::Regression)
      t_.y.push_back(static_cast<float>(v));
    else
      t_.labels.push_back(v);
    if (++col_ == columns_) col_ = 0;
  }

 private:
  Table& t_;
  std::size_t columns_, col_ = 0;
  Task task_;
};

// Prepares `t` for `rows` rows of `columns` columns of which the last are targets.
void shape_table(Table& t, const FileSpec& spec, const std::string& name, std::uint64_t rows, std::size_t columns);

// ---------------------------------------------------------------------------------------
// Binary files: reading elements of any safetensors dtype in chunks.

class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (!fd_) throw system_error(path, errno);
    struct stat s {};
    if (::fstat(fd_.get(), &s) != 0) throw system_error("stat " + path, errno);
    if (S_ISDIR(s.st_mode)) throw Error(Exit::NoInput, path + ": is a directory");
    size_ = static_cast<std::uint64_t>(s.st_size);
  }
  std::uint64_t size() const { return size_; }
  // Exactly `n` bytes at `offset`; a short read is "truncated" (DataErr).
  void read(void* buf, std::size_t n, std::uint64_t offset) const {
    if (pread_full(fd_.get(), buf, n, offset, path_) != n) throw Error(Exit::DataErr, path_ + ": truncated");
  }
  // Calls sink(value) for each of `count` elements of `dtype` starting at `offset`.
  template <typename Sink>
  void read_elements(std::uint64_t offset, std::uint64_t count, st::Dtype dtype, Sink&& sink) const {
    const std::size_t size = st::dtype_size(dtype);
    constexpr std::size_t kChunkBytes = 1 << 20;
    const std::size_t per_chunk = kChunkBytes / size;
    std::vector<std::byte> buf(per_chunk * size);
    for (std::uint64_t done = 0; done < count;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(per_chunk, count - done));
      read(buf.data(), n * size, offset + done * size);
      if (dtype == st::Dtype::F32) {
        for (std::size_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, buf.data() + i * 4, 4);
          sink(double(v));
        }
      } else if (dtype == st::Dtype::F64) {
        for (std::size_t i = 0; i < n; ++i) {
          double v;
          std::memcpy(&v, buf.data() + i * 8, 8);
          sink(v);
        }
      } else {
        for (std::size_t i = 0; i < n; ++i) sink(st::element_as_double(dtype, buf.data(), i));
      }
      done += n;
    }
  }

 private:
  std::string path_;
  UniqueFd fd_;
  std::uint64_t size_ = 0;
};

// rows * columns * size, or DataErr when that overflows.
std::uint64_t checked_bytes(const std::string& name, std::uint64_t rows, std::uint64_t columns, std::size_t size);
// A shape as NumPy writes it: "(3, 4)", "(3,)".
std::string shape_text(const std::vector<std::uint64_t>& shape);

// The formats' readers (data_csv.cpp, data_npy.cpp, data_safetensors.cpp), as load_dataset
// calls them once it has checked `spec`.
std::unique_ptr<Dataset> load_csv(const FileSpec& spec);
std::unique_ptr<Dataset> load_npy(const FileSpec& spec);
std::unique_ptr<Dataset> load_safetensors(const FileSpec& spec);

}  // namespace rkit::rtrain::detail
