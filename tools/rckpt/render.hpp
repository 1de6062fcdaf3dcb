// File: render.hpp
//
// What rckpt prints: the columns of each record for tables and CSV, and the one-line
// human summaries of pack, unpack and verify. JSON Lines carry the whole records.
#pragma once

#include <string>
#include <vector>

#include "pack.hpp"
#include "rkit/ckpt/extract.hpp"
#include "rkit/ckpt/manifest.hpp"
#include "rkit/printer.hpp"

namespace rkit::rckpt {

std::vector<Column> pack_columns();
std::vector<Column> unpack_columns();
std::vector<Column> verify_columns();
std::vector<Column> ls_columns();
std::vector<Column> tensor_columns();
std::vector<Column> diff_columns();
std::vector<Column> gc_columns();
std::vector<Column> log_columns();  // rckpt log

std::string pack_line(const PackResult& r);
std::string unpack_line(const UnpackResult& r);
std::string verify_line(const VerifyReport& r);

// rkit.ckpt.file.v1: one file of an archive, with its tensors.
Json file_json(const std::string& archive, const Manifest& m, const FileRecord& f);
// rkit.ckpt.tensor.v1: one tensor, for ls --tensors.
Json tensor_json(const std::string& archive, const FileRecord& f, const TensorRecord& t);

}  // namespace rkit::rckpt
