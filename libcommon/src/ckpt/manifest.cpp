#include "rkit/ckpt/manifest.hpp"

#include <fmt/format.h>
#include <zstd.h>

#include <algorithm>
#include <map>
#include <set>

#include "rkit/digest.hpp"
#include "rkit/error.hpp"

namespace rkit::rckpt {
namespace {

// Reads fields of one JSON object, naming "<source>: <where>.<key>" in errors.
class Fields {
 public:
  Fields(const Json& obj, const std::string& source, std::string where)
      : obj_(obj), source_(source), where_(std::move(where)) {
    if (!obj_.is_object()) fail("", "must be an object");
  }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    std::string at = key.empty() ? where_ : where_.empty() ? key : where_ + "." + key;
    throw Error(Exit::DataErr, fmt::format("{}: {}: {}", source_, at.empty() ? "manifest" : at, why));
  }
  const Json* find(const std::string& key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  const Json& need(const std::string& key) const {
    const Json* v = find(key);
    if (!v) fail(key, "missing");
    return *v;
  }
  std::uint64_t u64(const std::string& key) const {
    const Json& v = need(key);
    if (!v.is_number_unsigned()) fail(key, "must be a non-negative integer");
    return v.get<std::uint64_t>();
  }
  std::uint64_t u64_or(const std::string& key, std::uint64_t fallback) const { return find(key) ? u64(key) : fallback; }
  std::string str(const std::string& key) const {
    const Json& v = need(key);
    if (!v.is_string()) fail(key, "must be a string");
    return v.get<std::string>();
  }
  std::uint64_t hash(const std::string& key) const {
    return parse_hash_hex(str(key), source_ + ": " + (where_.empty() ? key : where_ + "." + key));
  }
  const Json& array(const std::string& key) const {
    const Json& v = need(key);
    if (!v.is_array()) fail(key, "must be an array");
    return v;
  }

 private:
  const Json& obj_;
  const std::string& source_;
  std::string where_;
};

}  // namespace

namespace {

TensorRecord parse_tensor(const Json& j, const std::string& source, const std::string& where,
                          std::uint64_t file_bytes) {
  Fields f(j, source, where);
  TensorRecord t;
  t.name = f.str("name");
  t.dtype = f.str("dtype");
  auto dtype = safetensors::parse_dtype(t.dtype);
  if (!dtype) f.fail("dtype", "unknown dtype '" + t.dtype + "'");
  std::uint64_t elements = 1;
  for (const auto& dim : f.array("shape")) {
    if (!dim.is_number_unsigned()) f.fail("shape", "must hold non-negative integers");
    auto d = dim.get<std::uint64_t>();
    if (d != 0 && elements > UINT64_MAX / d) f.fail("shape", "too large");
    elements *= d;
    t.shape.push_back(d);
  }
  t.offset = f.u64("offset");
  t.bytes = f.u64("bytes");
  std::uint64_t size = safetensors::dtype_size(*dtype);
  if (elements > UINT64_MAX / size || elements * size != t.bytes) f.fail("bytes", "does not match dtype and shape");
  if (t.offset > file_bytes || t.bytes > file_bytes - t.offset) f.fail("offset", "beyond the end of the file");
  return t;
}

}  // namespace

const char* entry_type_name(EntryType t) {
  switch (t) {
    case EntryType::File: return "file";
    case EntryType::Dir: return "dir";
    case EntryType::Symlink: return "symlink";
  }
  return "file";
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    auto slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

std::string unsafe_symlink(const std::string& link, const std::string& target,
                           const std::map<std::string, EntryType>& entries) {
  if (target.empty() || target.find('\0') != std::string::npos) return "an empty target";
  if (target.front() == '/') return "an absolute target";
  std::vector<std::string> stack = split_path(link);
  stack.pop_back();  // the link's own name
  std::vector<std::string> parts = split_path(target);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (stack.empty()) return "a target that leaves the root";
      stack.pop_back();
      continue;
    }
    stack.push_back(part);
    if (i + 1 == parts.size()) break;  // the last part may be a (checked) link itself
    std::string so_far;
    for (const auto& p : stack) so_far += (so_far.empty() ? "" : "/") + p;
    auto it = entries.find(so_far);
    if (it != entries.end() && it->second == EntryType::Symlink)
      return "a target through another symlink (" + so_far + ")";
  }
  return "";
}

Json TensorRecord::to_json() const {
  return Json{{"name", name}, {"dtype", dtype}, {"shape", shape}, {"offset", offset}, {"bytes", bytes}};
}

std::string hash_hex(std::uint64_t h) { return digest_hex(h); }

std::uint64_t parse_hash_hex(const std::string& text, const std::string& where) {
  if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error(Exit::DataErr, where + ": not a 16-digit hex hash: '" + text.substr(0, 40) + "'");
  return std::stoull(text, nullptr, 16);
}

bool is_safe_relative_path(const std::string& path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/' || path.find('\0') != std::string::npos) return false;
  for (const auto& part : split_path(path))
    if (part.empty() || part == "." || part == ".." || part.size() > 255) return false;
  return true;
}

std::string index_text(std::uint64_t offset, std::uint64_t bytes, std::uint64_t xxh3) {
  std::string text = fmt::format("rkpt-index v1 {:020} {:020} {}\n", offset, bytes, hash_hex(xxh3));
  text.resize(kIndexBytes, ' ');
  text.back() = '\n';
  return text;
}

std::optional<IndexRecord> parse_index(std::string_view text) {
  constexpr std::string_view kMagic = "rkpt-index v1 ";
  if (text.size() < kIndexBytes || text.substr(0, kMagic.size()) != kMagic) return std::nullopt;
  std::string body(text.substr(kMagic.size(), 20 + 1 + 20 + 1 + 16));
  IndexRecord r;
  try {
    if (body[20] != ' ' || body[41] != ' ') return std::nullopt;
    for (std::size_t i : {std::size_t{0}, std::size_t{21}})
      if (body.substr(i, 20).find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    r.manifest_offset = std::stoull(body.substr(0, 20));
    r.manifest_bytes = std::stoull(body.substr(21, 20));
    r.manifest_xxh3 = parse_hash_hex(body.substr(42, 16), "index");
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return r;
}

Json Manifest::to_json() const {
  Json j;
  j["schema"] = kSchema;
  j["created_unix_s"] = created_unix_s;
  j["rkit_version"] = rkit_version;
  j["frame_bytes"] = frame_bytes;
  j["level"] = level;
  j["shuffle"] = shuffle;
  j["archive_bytes"] = archive_bytes;
  j["archive_xxh3"] = hash_hex(archive_xxh3);
  if (!provenance.is_null()) j["provenance"] = provenance;
  j["bases"] = Json::array();
  for (const auto& b : bases) j["bases"].push_back({{"name", b.name}, {"archive_xxh3", hash_hex(b.archive_xxh3)}});
  j["files"] = Json::array();
  for (const auto& f : files) {
    Json e;
    e["path"] = f.path;
    e["type"] = entry_type_name(f.type);
    e["mode"] = f.mode;
    e["mtime_ns"] = f.mtime_ns;
    if (f.type == EntryType::File) {
      e["bytes"] = f.bytes;
      e["first_frame"] = f.first_frame;
      e["frame_count"] = f.frame_count;
      if (f.safetensors) {
        e["tensors"] = Json::array();
        for (const auto& t : f.tensors) e["tensors"].push_back(t.to_json());
      }
    }
    if (f.type == EntryType::Symlink) e["target"] = f.target;
    j["files"].push_back(std::move(e));
  }
  j["frames"] = Json::array();
  for (const auto& fr : frames) {
    Json e = {{"file", fr.file},       {"raw_offset", fr.raw_offset}, {"raw_bytes", fr.raw_bytes},
              {"shuffle", fr.shuffle}, {"xxh3", hash_hex(fr.xxh3)},   {"offset", fr.offset},
              {"bytes", fr.bytes}};
    if (fr.base) e["base"] = *fr.base;
    j["frames"].push_back(std::move(e));
  }
  return j;
}

std::uint64_t Manifest::raw_bytes() const {
  std::uint64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  return total;
}

std::uint64_t Manifest::stored_bytes() const {
  std::uint64_t total = 0;
  for (const auto& fr : frames)
    if (!fr.base) total += fr.bytes;
  return total;
}

std::optional<std::size_t> Manifest::find(const std::string& path) const {
  for (std::size_t i = 0; i < files.size(); ++i)
    if (files[i].path == path) return i;
  return std::nullopt;
}

std::vector<std::string> Manifest::tensors_in_frame(std::uint64_t index) const {
  const FrameRecord& fr = frames.at(index);
  std::vector<std::string> names;
  for (const auto& t : files.at(fr.file).tensors)
    if (t.offset < fr.raw_offset + fr.raw_bytes && t.offset + t.bytes > fr.raw_offset) names.push_back(t.name);
  return names;
}

std::string Manifest::describe_frame(std::uint64_t index) const {
  const FrameRecord& fr = frames.at(index);
  const FileRecord& file = files.at(fr.file);
  std::string text =
      fmt::format("frame {} ({} bytes {}..{}", index, file.path, fr.raw_offset, fr.raw_offset + fr.raw_bytes);
  std::vector<std::string> names = tensors_in_frame(index);
  if (!names.empty()) {
    constexpr std::size_t kShown = 4;
    text += names.size() == 1 ? ", tensor " : ", tensors ";
    for (std::size_t i = 0; i < names.size() && i < kShown; ++i) text += (i ? ", " : "") + names[i];
    if (names.size() > kShown) text += fmt::format(" and {} more", names.size() - kShown);
  }
  return text + ")";
}

Manifest parse_manifest(std::string_view text, const std::string& source) {
  Json j = parse_json(text, source);
  check_schema(j, "rkit.ckpt", 1, source);
  Fields top(j, source, "");
  Manifest m;
  if (const Json* c = top.find("created_unix_s"); c && c->is_number()) m.created_unix_s = c->get<double>();
  if (const Json* v = top.find("rkit_version"); v && v->is_string()) m.rkit_version = v->get<std::string>();
  m.frame_bytes = top.u64_or("frame_bytes", kDefaultFrameBytes);
  m.level = static_cast<int>(top.u64_or("level", 1));
  if (const Json* s = top.find("shuffle"); s && s->is_boolean()) m.shuffle = s->get<bool>();
  m.archive_bytes = top.u64("archive_bytes");
  m.archive_xxh3 = top.hash("archive_xxh3");
  if (const Json* p = top.find("provenance"); p && !p->is_null()) {
    if (!p->is_object()) throw Error(Exit::DataErr, source + ": provenance must be an object");
    m.provenance = *p;
  }

  const Json& bases = top.array("bases");
  for (std::size_t i = 0; i < bases.size(); ++i) {
    Fields b(bases[i], source, fmt::format("bases[{}]", i));
    BaseRecord r{b.str("name"), b.hash("archive_xxh3")};
    if (r.name.empty() || r.name.front() == '/' || r.name.find('\0') != std::string::npos)
      b.fail("name", "must be a path relative to the archive's directory");
    m.bases.push_back(std::move(r));
  }

  const Json& files = top.array("files");
  std::map<std::string, EntryType> seen;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::string where = fmt::format("files[{}]", i);
    Fields f(files[i], source, where);
    FileRecord r;
    r.path = f.str("path");
    if (!is_safe_relative_path(r.path)) f.fail("path", "unsafe path '" + r.path + "' (absolute, '..' or empty parts)");
    std::string type = f.str("type");
    if (type == "file")
      r.type = EntryType::File;
    else if (type == "dir")
      r.type = EntryType::Dir;
    else if (type == "symlink")
      r.type = EntryType::Symlink;
    else
      f.fail("type", "unknown type '" + type + "'");
    std::uint64_t mode = f.u64_or("mode", r.type == EntryType::Dir ? 0755 : 0644);
    if (mode > 07777) f.fail("mode", "out of range");
    r.mode = static_cast<std::uint32_t>(mode);
    if (const Json* t = f.find("mtime_ns"); t && t->is_number_integer()) r.mtime_ns = t->get<std::int64_t>();
    if (r.type == EntryType::File) {
      r.bytes = f.u64("bytes");
      r.first_frame = f.u64("first_frame");
      r.frame_count = f.u64("frame_count");
      if (const Json* tensors = f.find("tensors")) {
        if (!tensors->is_array()) f.fail("tensors", "must be an array");
        r.safetensors = true;
        for (std::size_t k = 0; k < tensors->size(); ++k)
          r.tensors.push_back(parse_tensor((*tensors)[k], source, fmt::format("{}.tensors[{}]", where, k), r.bytes));
      }
    }
    if (r.type == EntryType::Symlink) r.target = f.str("target");
    if (!seen.emplace(r.path, r.type).second) f.fail("path", "'" + r.path + "' appears twice");
    m.files.push_back(std::move(r));
  }
  // Nothing may sit below a file or a symlink: extraction would write through it.
  for (const auto& f : m.files) {
    if (f.type == EntryType::Symlink) {
      std::string why = unsafe_symlink(f.path, f.target, seen);
      if (!why.empty())
        throw Error(Exit::DataErr, fmt::format("{}: symlink '{}' -> '{}' has {}", source, f.path, f.target, why));
    }
    for (auto slash = f.path.find('/'); slash != std::string::npos; slash = f.path.find('/', slash + 1)) {
      auto it = seen.find(f.path.substr(0, slash));
      if (it != seen.end() && it->second != EntryType::Dir)
        throw Error(Exit::DataErr, fmt::format("{}: '{}' lies below the {} '{}'", source, f.path,
                                               entry_type_name(it->second), it->first));
    }
  }

  const Json& frames = top.array("frames");
  for (std::size_t i = 0; i < frames.size(); ++i) {
    Fields f(frames[i], source, fmt::format("frames[{}]", i));
    FrameRecord r;
    r.file = f.u64("file");
    r.raw_offset = f.u64("raw_offset");
    r.raw_bytes = f.u64("raw_bytes");
    std::uint64_t shuffle = f.u64_or("shuffle", 1);
    r.xxh3 = f.hash("xxh3");
    r.offset = f.u64("offset");
    r.bytes = f.u64("bytes");
    if (const Json* b = f.find("base")) {
      if (!b->is_number_unsigned() || b->get<std::uint64_t>() >= m.bases.size()) f.fail("base", "no such base archive");
      r.base = b->get<std::uint32_t>();
    }
    if (r.file >= m.files.size() || m.files[r.file].type != EntryType::File) f.fail("file", "no such file");
    if (r.raw_bytes == 0 || r.raw_bytes > kMaxFrameBytes)
      f.fail("raw_bytes", fmt::format("must be 1..{}", kMaxFrameBytes));
    if (shuffle != 1 && shuffle != 2 && shuffle != 4 && shuffle != 8) f.fail("shuffle", "must be 1, 2, 4 or 8");
    r.shuffle = static_cast<std::uint32_t>(shuffle);
    if (r.raw_bytes % r.shuffle != 0) f.fail("shuffle", "does not divide raw_bytes");
    if (r.bytes == 0 || r.bytes > ZSTD_compressBound(r.raw_bytes)) f.fail("bytes", "impossible compressed size");
    if (!r.base && (r.offset > m.archive_bytes || r.bytes > m.archive_bytes - r.offset))
      f.fail("offset", "beyond the archive's data");
    m.frames.push_back(r);
  }
  // Each file's frames cover it exactly, in order; every frame belongs to its file.
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const FileRecord& f = m.files[i];
    if (f.type != EntryType::File) continue;
    if (f.first_frame > m.frames.size() || f.frame_count > m.frames.size() - f.first_frame)
      throw Error(Exit::DataErr, fmt::format("{}: files[{}]: frames out of range", source, i));
    std::uint64_t at = 0;
    for (std::uint64_t k = f.first_frame; k < f.first_frame + f.frame_count; ++k) {
      const FrameRecord& fr = m.frames[k];
      if (fr.file != i || fr.raw_offset != at)
        throw Error(Exit::DataErr,
                    fmt::format("{}: frames[{}]: does not continue '{}' at byte {}", source, k, f.path, at));
      at += fr.raw_bytes;
    }
    if (at != f.bytes)
      throw Error(Exit::DataErr,
                  fmt::format("{}: files[{}]: frames hold {} bytes, the file {}", source, i, at, f.bytes));
  }
  for (std::size_t k = 0; k < m.frames.size(); ++k) {
    const FileRecord& f = m.files[m.frames[k].file];
    if (k < f.first_frame || k >= f.first_frame + f.frame_count)
      throw Error(Exit::DataErr, fmt::format("{}: frames[{}]: not among the frames of '{}'", source, k, f.path));
  }
  // Each stored frame has bytes of its own: one small frame may not stand for many.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> local;
  for (const auto& fr : m.frames)
    if (!fr.base) local.emplace_back(fr.offset, fr.bytes);
  std::sort(local.begin(), local.end());
  for (std::size_t k = 1; k < local.size(); ++k)
    if (local[k].first < local[k - 1].first + local[k - 1].second)
      throw Error(Exit::DataErr,
                  fmt::format("{}: two frames share archive bytes at offset {}", source, local[k].first));
  return m;
}

}  // namespace rkit::rckpt
