#include "diff.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "rkit/ckpt/archive.hpp"
#include "rkit/error.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rckpt {
namespace {

constexpr std::uint64_t kWindowBytes = std::uint64_t{8} << 20;

// Reads byte ranges of one archive's files, keeping the last decoded frame.
class RangeReader {
 public:
  explicit RangeReader(const Archive& a) : a_(a) {}
  void read(std::size_t file, std::uint64_t offset, std::uint64_t len, std::byte* out) {
    const FileRecord& f = a_.manifest().files[file];
    while (len > 0) {
      std::size_t k = frame_at(f, offset);
      const FrameRecord& fr = a_.manifest().frames[k];
      if (cached_ != k) {
        try {
          a_.decode_frame(k, buffers_);
        } catch (const FrameError& e) {
          throw a_.corrupt_frame(k, e);
        }
        cached_ = k;
      }
      std::uint64_t from = offset - fr.raw_offset;
      std::uint64_t n = std::min(len, fr.raw_bytes - from);
      std::copy_n(buffers_.raw.data() + from, n, out);
      out += n;
      offset += n;
      len -= n;
    }
  }
  // Frames covering [offset, offset + len) of `file`.
  std::vector<std::size_t> frames(std::size_t file, std::uint64_t offset, std::uint64_t len) const {
    const FileRecord& f = a_.manifest().files[file];
    std::vector<std::size_t> out;
    for (std::uint64_t k = f.first_frame; k < f.first_frame + f.frame_count; ++k) {
      const FrameRecord& fr = a_.manifest().frames[k];
      if (fr.raw_offset < offset + len && fr.raw_offset + fr.raw_bytes > offset) out.push_back(k);
    }
    return out;
  }
  const Archive& archive() const { return a_; }

 private:
  std::size_t frame_at(const FileRecord& f, std::uint64_t offset) const {
    const auto& frames = a_.manifest().frames;
    auto first = frames.begin() + static_cast<std::ptrdiff_t>(f.first_frame);
    auto last = first + static_cast<std::ptrdiff_t>(f.frame_count);
    auto it =
        std::upper_bound(first, last, offset, [](std::uint64_t o, const FrameRecord& fr) { return o < fr.raw_offset; });
    return static_cast<std::size_t>(it - frames.begin()) - 1;
  }
  const Archive& a_;
  Archive::FrameBuffers buffers_;
  std::size_t cached_ = SIZE_MAX;
};

// A range to compare: a tensor, or a whole file (dtype U8).
struct Range {
  std::size_t file;
  std::uint64_t offset, bytes;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  bool numeric = true;  // false: a whole file, compared byte for byte
};

bool same_frames(const RangeReader& ra, const Range& a, const RangeReader& rb, const Range& b) {
  if (a.offset != b.offset || a.bytes != b.bytes) return false;
  auto fa = ra.frames(a.file, a.offset, a.bytes), fb = rb.frames(b.file, b.offset, b.bytes);
  if (fa.size() != fb.size()) return false;
  for (std::size_t i = 0; i < fa.size(); ++i) {
    const FrameRecord& x = ra.archive().manifest().frames[fa[i]];
    const FrameRecord& y = rb.archive().manifest().frames[fb[i]];
    if (x.raw_offset != y.raw_offset || x.raw_bytes != y.raw_bytes || x.xxh3 != y.xxh3) return false;
  }
  return true;
}

void compare(RangeReader& ra, const Range& a, RangeReader& rb, const Range& b, TensorDiff& row) {
  if (a.dtype != b.dtype || a.shape != b.shape || a.bytes != b.bytes) {
    row.status = "changed";
    if (a.dtype != b.dtype)
      row.note = fmt::format("dtype {} -> {}", a.dtype, b.dtype);
    else
      row.note = fmt::format("shape [{}] -> [{}]", fmt::join(a.shape, ","), fmt::join(b.shape, ","));
    return;
  }
  if (same_frames(ra, a, rb, b)) {
    row.status = "same";
    return;
  }
  if (!a.numeric) {
    std::vector<std::byte> xa(kWindowBytes), xb(kWindowBytes);
    row.status = "same";
    for (std::uint64_t at = 0; at < a.bytes && row.status == "same"; at += kWindowBytes) {
      check_interrupted();
      std::uint64_t n = std::min(kWindowBytes, a.bytes - at);
      ra.read(a.file, at, n, xa.data());
      rb.read(b.file, at, n, xb.data());
      if (!std::equal(xa.begin(), xa.begin() + static_cast<std::ptrdiff_t>(n), xb.begin())) row.status = "changed";
    }
    return;
  }
  auto dtype = safetensors::parse_dtype(a.dtype).value_or(safetensors::Dtype::U8);
  std::uint64_t elem = safetensors::dtype_size(dtype);
  std::uint64_t window = kWindowBytes - kWindowBytes % elem;
  std::vector<std::byte> xa(window), xb(window);
  bool equal = true;
  double max_abs = 0, diff2 = 0, norm2 = 0;
  for (std::uint64_t at = 0; at < a.bytes; at += window) {
    check_interrupted();
    std::uint64_t n = std::min(window, a.bytes - at);
    ra.read(a.file, a.offset + at, n, xa.data());
    rb.read(b.file, b.offset + at, n, xb.data());
    if (std::equal(xa.begin(), xa.begin() + static_cast<std::ptrdiff_t>(n), xb.begin())) {
      for (std::uint64_t i = 0; i < n / elem; ++i) {
        double v = safetensors::element_as_double(dtype, xa.data(), i);
        norm2 += v * v;
      }
      continue;
    }
    equal = false;
    for (std::uint64_t i = 0; i < n / elem; ++i) {
      double va = safetensors::element_as_double(dtype, xa.data(), i);
      double vb = safetensors::element_as_double(dtype, xb.data(), i);
      double d = va - vb;
      max_abs = std::max(max_abs, std::fabs(d));
      diff2 += d * d;
      norm2 += va * va;
    }
  }
  row.status = equal ? "same" : "changed";
  if (equal) return;
  row.max_abs = max_abs;
  if (norm2 > 0) row.rel_l2 = std::sqrt(diff2) / std::sqrt(norm2);
}

std::vector<Range> ranges_of(const FileRecord& f, std::size_t index, std::vector<std::string>& names) {
  std::vector<Range> out;
  if (!f.safetensors) {
    out.push_back({index, 0, f.bytes, "U8", {f.bytes}, false});
    names.emplace_back();
    return out;
  }
  for (const auto& t : f.tensors) {
    out.push_back({index, t.offset, t.bytes, t.dtype, t.shape});
    names.push_back(t.name);
  }
  return out;
}

}  // namespace

Json TensorDiff::to_json() const {
  Json j;
  j["schema"] = "rkit.ckpt.diff.v1";
  j["file"] = file;
  j["tensor"] = tensor.empty() ? Json(nullptr) : Json(tensor);
  j["status"] = status;
  j["max_abs"] = max_abs ? Json(*max_abs) : Json(nullptr);
  j["rel_l2"] = rel_l2 ? Json(*rel_l2) : Json(nullptr);
  j["note"] = note.empty() ? Json(nullptr) : Json(note);
  return j;
}

bool DiffReport::identical() const {
  return std::all_of(rows.begin(), rows.end(), [](const TensorDiff& r) { return r.status == "same"; });
}

DiffReport diff_checkpoints(const std::string& a_path, const std::string& b_path) {
  Archive a = Archive::open(a_path), b = Archive::open(b_path);
  a.open_bases();
  b.open_bases();
  RangeReader ra(a), rb(b);
  const Manifest &ma = a.manifest(), &mb = b.manifest();
  DiffReport report;

  // Regular files of each archive by path; paths in A's order, then those only in B.
  constexpr std::size_t kNone = SIZE_MAX;
  std::map<std::string, std::size_t> files_a, files_b;
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < ma.files.size(); ++i)
    if (ma.files[i].type == EntryType::File) {
      files_a.emplace(ma.files[i].path, i);
      paths.push_back(ma.files[i].path);
    }
  for (std::size_t i = 0; i < mb.files.size(); ++i)
    if (mb.files[i].type == EntryType::File) {
      files_b.emplace(mb.files[i].path, i);
      if (!files_a.count(mb.files[i].path)) paths.push_back(mb.files[i].path);
    }
  auto index_in = [&](const std::map<std::string, std::size_t>& files, const std::string& path) {
    auto it = files.find(path);
    return it == files.end() ? kNone : it->second;
  };

  for (const auto& path : paths) {
    std::size_t ia = index_in(files_a, path), ib = index_in(files_b, path);
    std::vector<std::string> names_a, names_b;
    std::vector<Range> ra_list, rb_list;
    // A file that is safetensors on one side only compares as a whole.
    bool whole = ia != kNone && ib != kNone && ma.files[ia].safetensors != mb.files[ib].safetensors;
    if (ia != kNone) {
      FileRecord f = ma.files[ia];
      f.safetensors &= !whole;
      ra_list = ranges_of(f, ia, names_a);
    }
    if (ib != kNone) {
      FileRecord f = mb.files[ib];
      f.safetensors &= !whole;
      rb_list = ranges_of(f, ib, names_b);
    }
    std::map<std::string, std::size_t> in_b;
    for (std::size_t k = 0; k < names_b.size(); ++k) in_b.emplace(names_b[k], k);
    for (std::size_t k = 0; k < names_a.size(); ++k) {
      TensorDiff row{path, names_a[k], "removed", {}, {}, {}};
      auto it = in_b.find(names_a[k]);
      if (it != in_b.end()) {
        compare(ra, ra_list[k], rb, rb_list[it->second], row);
        in_b.erase(it);
      }
      report.rows.push_back(std::move(row));
    }
    for (std::size_t k = 0; k < names_b.size(); ++k)
      if (in_b.count(names_b[k])) report.rows.push_back({path, names_b[k], "added", {}, {}, {}});
  }
  return report;
}

}  // namespace rkit::rckpt
