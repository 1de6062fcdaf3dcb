// File: rtrain/data.cpp — loading a data file (data.hpp): its format by extension, and what
// every format's reader shares (data_impl.hpp): the checks and the in-memory dataset.
#include "data.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "data_impl.hpp"
#include "rkit/error.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rtrain {
namespace detail {
namespace {

// ---------------------------------------------------------------------------------------
// Loaded files: everything in memory, features and targets row-major.

class MemoryDataset final : public Dataset {
 public:
  MemoryDataset(Task task, std::uint64_t rows, std::size_t features, std::size_t outputs, std::vector<float> x,
                std::vector<float> y, std::vector<std::int32_t> labels)
      : task_(task),
        rows_(rows),
        features_(features),
        outputs_(outputs),
        x_(std::move(x)),
        y_(std::move(y)),
        labels_(std::move(labels)) {}

  std::uint64_t rows() const override { return rows_; }
  std::size_t features() const override { return features_; }
  std::size_t outputs() const override { return outputs_; }
  Task task() const override { return task_; }
  void gather(std::span<const std::uint64_t> rows, float* x, float* y, std::int32_t* labels) const override {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::uint64_t r = rows[i];
      if (r >= rows_) row_out_of_range(r, rows_);
      if (x) std::memcpy(x + i * features_, x_.data() + r * features_, features_ * sizeof(float));
      if (task_ == Task::Regression) {
        if (y) std::memcpy(y + i * outputs_, y_.data() + r * outputs_, outputs_ * sizeof(float));
      } else if (labels) {
        labels[i] = labels_[r];
      }
    }
  }

 private:
  Task task_;
  std::uint64_t rows_;
  std::size_t features_, outputs_;
  std::vector<float> x_, y_;
  std::vector<std::int32_t> labels_;
};

// Labels beyond this are refused: classes are a softmax's width, and floats hold
// integers exactly up to 2^24.
constexpr double kMaxClasses = double(1 << 24);

std::string show_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

}  // namespace

[[noreturn]] void row_out_of_range(std::uint64_t row, std::uint64_t rows) {
  throw Error(Exit::Software, fmt::format("dataset: row {} out of range (the dataset has {} rows)", row, rows));
}

// Checks `t` (finite values, labels) and makes the dataset.
std::unique_ptr<Dataset> finish(Table t, const FileSpec& spec, const std::string& name, const Locator& where) {
  if (t.rows == 0) throw Error(Exit::DataErr, name + ": no rows");
  auto check_finite = [&](const std::vector<float>& v, std::size_t width, bool in_x) {
    const auto bad = std::find_if(v.begin(), v.end(), [](float e) { return !std::isfinite(e); });
    if (bad == v.end()) return;
    const auto at = static_cast<std::uint64_t>(bad - v.begin());
    throw Error(Exit::DataErr, fmt::format("{} is {}: features and targets must be finite numbers",
                                           where.value(at / width, at % width, in_x), show_number(*bad)));
  };
  check_finite(t.x, t.features, true);
  if (spec.task == Task::Regression) {
    check_finite(t.y, t.targets, false);
    return std::make_unique<MemoryDataset>(spec.task, t.rows, t.features, t.targets, std::move(t.x), std::move(t.y),
                                           std::vector<std::int32_t>{});
  }

  const double limit = spec.outputs ? double(spec.outputs) : kMaxClasses;
  double top = 0;
  std::vector<std::int32_t> labels(t.labels.size());
  for (std::size_t r = 0; r < t.labels.size(); ++r) {
    const double v = t.labels[r];
    if (!std::isfinite(v) || v != std::floor(v))
      throw Error(Exit::DataErr, fmt::format("{}: label {} is not an integer", where.label(r), show_number(v)));
    if (v < 0 || v >= limit)
      throw Error(Exit::DataErr,
                  spec.outputs ? fmt::format("{}: label {} is out of range [0, {})", where.label(r), v, spec.outputs)
                               : fmt::format("{}: label {} is out of range [0, 2^24)", where.label(r), v));
    labels[r] = static_cast<std::int32_t>(v);
    top = std::max(top, v);
  }
  const std::size_t classes = spec.outputs ? spec.outputs : static_cast<std::size_t>(top) + 1;
  if (classes < 2)
    throw Error(Exit::DataErr, fmt::format("{}: every label is 0; classification needs at least 2 classes", name));
  return std::make_unique<MemoryDataset>(spec.task, t.rows, t.features, classes, std::move(t.x), std::vector<float>{},
                                         std::move(labels));
}

// The number of target columns at the end of a .csv or .npy row (1 for a label).
std::size_t target_columns(const FileSpec& spec) { return spec.task == Task::Regression ? spec.outputs : 1; }

// Prepares `t` for `rows` rows of `columns` columns of which the last are targets.
void shape_table(Table& t, const FileSpec& spec, const std::string& name, std::uint64_t rows, std::size_t columns) {
  const std::size_t targets = target_columns(spec);
  if (columns <= targets)
    throw Error(Exit::DataErr,
                fmt::format("{}: needs at least {} columns (features, then {}), found {}", name, targets + 1,
                            spec.task == Task::Classification ? std::string("the label")
                            : targets == 1                    ? std::string("the target")
                                                              : fmt::format("{} targets", targets),
                            columns));
  t.features = columns - targets;
  t.targets = spec.task == Task::Regression ? targets : 0;
  t.rows = rows;
}

// rows * columns * size, or DataErr when that overflows.
std::uint64_t checked_bytes(const std::string& name, std::uint64_t rows, std::uint64_t columns, std::size_t size) {
  if (columns && rows > std::numeric_limits<std::uint64_t>::max() / columns / size)
    throw Error(Exit::DataErr, fmt::format("{}: shape ({}, {}) is too large", name, rows, columns));
  return rows * columns * size;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  return fmt::format("({}{})", fmt::join(shape, ", "), shape.size() == 1 ? "," : "");
}

}  // namespace detail

std::unique_ptr<Dataset> load_dataset(const FileSpec& spec) {
  const bool csv = spec.path.ends_with(".csv"), npy = spec.path.ends_with(".npy");
  if (!csv && !npy && !safetensors::is_safetensors_name(spec.path))
    throw Error(Exit::Usage, fmt::format("{}: unknown data format (expected .csv, .npy or .safetensors)", spec.path));
  if (spec.task == Task::Classification && spec.outputs == 1)
    throw Error(Exit::Usage, fmt::format("{}: classification needs at least 2 classes (outputs = 1); "
                                         "set outputs to 0 to take them from the labels",
                                         spec.path));
  if (spec.task == Task::Regression && spec.outputs == 0 && (csv || npy))
    throw Error(Exit::Usage,
                fmt::format("{}: regression needs outputs >= 1 (the number of target columns)", spec.path));
  if (csv) return detail::load_csv(spec);
  if (npy) return detail::load_npy(spec);
  return detail::load_safetensors(spec);
}

}  // namespace rkit::rtrain
