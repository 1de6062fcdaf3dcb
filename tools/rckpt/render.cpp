#include "render.hpp"

#include <fmt/format.h>

#include <fmt/ranges.h>
#include <algorithm>

#include "rkit/units.hpp"

namespace rkit::rckpt {
namespace {

std::string bytes_cell(const Json& v) { return v.is_number_unsigned() ? format_bytes(v.get<std::uint64_t>()) : "-"; }

std::string rate(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? format_bytes(static_cast<std::uint64_t>(static_cast<double>(bytes) / seconds)) + "/s" : "-";
}

std::string number_cell(const Json& v) { return v.is_number() ? fmt::format("{:.3g}", v.get<double>()) : "-"; }

}  // namespace

std::vector<Column> pack_columns() {
  return {{"ARCHIVE", "archive"},
          {"FILES", "files"},
          {"FRAMES", "frames"},
          {"BASE_FRAMES", "base_frames"},
          {"RAW", "raw_bytes", bytes_cell},
          {"ARCHIVE_BYTES", "archive_bytes", bytes_cell},
          {"TIME_S", "time_s"}};
}

std::vector<Column> unpack_columns() {
  return {
      {"ARCHIVE", "archive"}, {"DIR", "dir"}, {"FILES", "files"}, {"BYTES", "bytes", bytes_cell}, {"TIME_S", "time_s"}};
}

std::vector<Column> verify_columns() {
  return {{"ARCHIVE", "archive"},
          {"OK", "ok"},
          {"FRAMES", "frames"},
          {"BYTES", "bytes", bytes_cell},
          {"PROBLEMS", "problems", [](const Json& v) { return std::to_string(v.size()); }}};
}

std::vector<Column> ls_columns() {
  return {{"PATH", "path"},
          {"TYPE", "type"},
          {"BYTES", "bytes", bytes_cell},
          {"STORED", "stored_bytes", bytes_cell},
          {"FRAMES", "frames"},
          {"BASE_FRAMES", "base_frames"},
          {"TENSORS", "tensors", [](const Json& v) { return v.is_array() ? std::to_string(v.size()) : "-"; }}};
}

std::vector<Column> tensor_columns() {
  return {{"FILE", "file"},
          {"TENSOR", "tensor"},
          {"DTYPE", "dtype"},
          {"SHAPE", "shape", [](const Json& v) { return "[" + Printer::cell(v, "") + "]"; }},
          {"BYTES", "bytes", bytes_cell}};
}

std::vector<Column> diff_columns() {
  return {{"FILE", "file"},
          {"TENSOR", "tensor"},
          {"STATUS", "status"},
          {"MAX_ABS", "max_abs", number_cell},
          {"REL_L2", "rel_l2", number_cell},
          {"NOTE", "note"}};
}

std::vector<Column> gc_columns() { return {{"ACTION", "action"}, {"ARCHIVE", "archive"}, {"REASON", "reason"}}; }

std::vector<Column> log_columns() {
  auto short_hash = [](const Json& v) { return v.is_string() ? v.get<std::string>().substr(0, 8) : "-"; };
  auto inputs = [](const Json& v) {
    std::vector<std::string> parts;
    for (const Json& i : v)
      parts.push_back(fmt::format("{}={} ({})", json_text(i, "name", "?"), json_text(i, "path", "?"),
                                  json_text(i, "xxh3", "-").substr(0, 8)));
    return parts.empty() ? std::string("-") : fmt::format("{}", fmt::join(parts, ", "));
  };
  return {{"DEPTH", "depth"},     {"STATUS", "status"},        {"RUN", "run_id"},
          {"STEP", "step"},       {"VIA", "parent_kind"},      {"XXH3", "archive_xxh3", short_hash},
          {"ARCHIVE", "archive"}, {"INPUTS", "inputs", inputs}};
}

std::string pack_line(const PackResult& r) {
  double ratio = r.written_bytes ? static_cast<double>(r.raw_bytes) / static_cast<double>(r.written_bytes) : 0;
  std::string base = r.base_frames ? fmt::format(" ({} in the base)", r.base_frames) : "";
  return fmt::format("packed {} entries, {} frames{}: {} -> {} ({:.2f}x) in {:.2f} s, {}, {} thread{}: {}", r.files,
                     r.frames, base, format_bytes(r.raw_bytes), format_bytes(r.written_bytes), ratio, r.seconds,
                     rate(r.raw_bytes, r.seconds), r.threads, r.threads == 1 ? "" : "s",
                     r.output == "-" ? "<stdout>" : r.output);
}

std::string unpack_line(const UnpackResult& r) {
  return fmt::format("unpacked {} entries, {} in {:.2f} s, {}: {}", r.files, format_bytes(r.bytes), r.seconds,
                     rate(r.bytes, r.seconds), r.dir);
}

std::string verify_line(const VerifyReport& r) {
  if (r.ok())
    return fmt::format("ok: {} frames, {} checked in {:.2f} s: {}", r.frames, format_bytes(r.bytes), r.seconds,
                       r.archive);
  auto damaged =
      std::count_if(r.problems.begin(), r.problems.end(), [](const VerifyProblem& p) { return p.frame.has_value(); });
  if (damaged == 0) return "CORRUPT: the frames are intact, the bytes around them are not: " + r.archive;
  return fmt::format("CORRUPT: {} of {} frames damaged: {}", damaged, r.frames, r.archive);
}

Json file_json(const std::string& archive, const Manifest& m, const FileRecord& f) {
  bool file = f.type == EntryType::File;
  std::uint64_t stored = 0, base = 0;
  for (std::uint64_t k = f.first_frame; file && k < f.first_frame + f.frame_count; ++k) {
    if (m.frames[k].base)
      ++base;
    else
      stored += m.frames[k].bytes;
  }
  auto if_file = [&](std::uint64_t v) { return file ? Json(v) : Json(nullptr); };
  Json j;
  j["schema"] = "rkit.ckpt.file.v1";
  j["archive"] = archive;
  j["path"] = f.path;
  j["type"] = entry_type_name(f.type);
  j["mode"] = f.mode;
  j["bytes"] = if_file(f.bytes);
  j["stored_bytes"] = if_file(stored);
  j["frames"] = if_file(f.frame_count);
  j["base_frames"] = if_file(base);
  j["target"] = f.type == EntryType::Symlink ? Json(f.target) : Json(nullptr);
  j["tensors"] = nullptr;
  if (f.safetensors) {
    j["tensors"] = Json::array();
    for (const auto& t : f.tensors) j["tensors"].push_back(t.to_json());
  }
  return j;
}

Json tensor_json(const std::string& archive, const FileRecord& f, const TensorRecord& t) {
  Json j = {{"schema", "rkit.ckpt.tensor.v1"}, {"archive", archive}, {"file", f.path}, {"tensor", t.name}};
  Json fields = t.to_json();
  for (auto& [key, value] : fields.items())
    if (key != "name") j[key] = value;
  return j;
}

}  // namespace rkit::rckpt
