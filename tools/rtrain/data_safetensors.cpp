// File: rtrain/data_safetensors.cpp — the .safetensors reader of rtrain's data layer
// (data.hpp: FileSpec): tensor "X" [rows, features] and "y" [rows] or [rows, k].
#include <fmt/format.h>

#include "data_impl.hpp"
#include "rkit/error.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rtrain::detail {

std::unique_ptr<Dataset> load_safetensors(const FileSpec& spec) {
  const std::string& name = spec.path;
  const st::Header h = st::read_header(spec.path);
  auto find = [&](const char* tensor) -> const st::TensorInfo& {
    for (const auto& t : h.tensors)
      if (t.name == tensor) return t;
    throw Error(Exit::DataErr,
                fmt::format("{}: no tensor \"{}\" (expected X [rows, features] and y [rows] or [rows, outputs])", name,
                            tensor));
  };
  const st::TensorInfo& tx = find("X");
  const st::TensorInfo& ty = find("y");
  if (tx.shape.size() != 2)
    throw Error(Exit::DataErr,
                fmt::format("{}: X has shape {}; expected [rows, features]", name, shape_text(tx.shape)));
  if (ty.shape.empty() || ty.shape.size() > 2)
    throw Error(Exit::DataErr,
                fmt::format("{}: y has shape {}; expected [rows] or [rows, outputs]", name, shape_text(ty.shape)));
  const std::uint64_t rows = tx.shape[0], features = tx.shape[1];
  if (ty.shape[0] != rows)
    throw Error(Exit::DataErr, fmt::format("{}: y has {} rows but X has {}", name, ty.shape[0], rows));
  if (rows == 0) throw Error(Exit::DataErr, name + ": no rows");
  if (features == 0) throw Error(Exit::DataErr, name + ": X has no feature columns");
  const std::uint64_t y_cols = ty.shape.size() == 2 ? ty.shape[1] : 1;
  if (spec.task == Task::Regression) {
    if (y_cols == 0) throw Error(Exit::DataErr, name + ": y has no target columns");
    if (spec.outputs != 0 && spec.outputs != y_cols)
      throw Error(Exit::DataErr,
                  fmt::format("{}: y has {} target column(s) but outputs is {}", name, y_cols, spec.outputs));
  } else if (y_cols != 1) {
    throw Error(Exit::DataErr, fmt::format("{}: y has shape {}; class labels must be [rows] or [rows, 1]", name,
                                           shape_text(ty.shape)));
  }

  Table t;
  t.rows = rows;
  t.features = features;
  t.targets = spec.task == Task::Regression ? y_cols : 0;
  const InputFile file(spec.path);
  t.x.reserve(rows * features);
  file.read_elements(tx.offset, rows * features, tx.dtype, [&](double v) { t.x.push_back(static_cast<float>(v)); });
  if (spec.task == Task::Regression) {
    t.y.reserve(rows * y_cols);
    file.read_elements(ty.offset, rows * y_cols, ty.dtype, [&](double v) { t.y.push_back(static_cast<float>(v)); });
  } else {
    t.labels.reserve(rows);
    file.read_elements(ty.offset, rows, ty.dtype, [&](double v) { t.labels.push_back(v); });
  }

  const bool y_2d = ty.shape.size() == 2;
  Locator where;
  where.value = [&name, y_2d](std::uint64_t row, std::size_t col, bool in_x) {
    if (in_x) return fmt::format("{}: X[{}, {}]", name, row, col);
    return y_2d ? fmt::format("{}: y[{}, {}]", name, row, col) : fmt::format("{}: y[{}]", name, row);
  };
  where.label = [&name, y_2d](std::uint64_t row) {
    return y_2d ? fmt::format("{}: y[{}, 0]", name, row) : fmt::format("{}: y[{}]", name, row);
  };
  return finish(std::move(t), spec, name, where);
}

}  // namespace rkit::rtrain::detail
