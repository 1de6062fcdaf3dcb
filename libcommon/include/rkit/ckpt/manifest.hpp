// File: rkit/ckpt/manifest.hpp
//
// The rckpt archive format and its manifest (rkit.ckpt.v1).
//
// An .rkpt file is a plain ustar archive (any tar lists it):
//   .rkpt/format              "rkit.ckpt.v1\n", so that a truncated archive is told from a foreign file
//   frames/00000000.zst ...   one entry per stored frame: an independent zstd frame
//   .rkpt/manifest.json       the Manifest below, as JSON
//   .rkpt/index               kIndexBytes of text locating the manifest; the last entry,
//                             so that its data sits at a fixed distance from the end
// A frame is a slice of one input file (raw_offset, raw_bytes). Tensor data of a
// safetensors file is byte-shuffled by element size before compression (`shuffle` is
// the element size; 1 = stored as is). `xxh3` is XXH3-64 of the raw (unshuffled) bytes.
// Frames of an incremental archive may live in a base archive (`base` indexes `bases`;
// their offset/bytes are in that archive). `archive_xxh3` covers every byte before the
// manifest's tar header. `parse_manifest` refuses anything unsafe to extract.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"
#include "rkit/safetensors.hpp"

namespace rkit::rckpt {

inline constexpr const char* kSchema = "rkit.ckpt.v1";
inline constexpr const char* kFormatEntry = ".rkpt/format";
inline constexpr const char* kManifestEntry = ".rkpt/manifest.json";
inline constexpr const char* kIndexEntry = ".rkpt/index";
inline constexpr std::uint64_t kIndexBytes = 96;
inline constexpr std::uint64_t kTarBlock = 512;
inline constexpr std::uint64_t kDefaultFrameBytes = std::uint64_t{8} << 20;
inline constexpr std::uint64_t kMinFrameBytes = std::uint64_t{64} << 10;
inline constexpr std::uint64_t kMaxFrameBytes = std::uint64_t{64} << 20;
// About 700k frames (5 TiB in 8 MiB frames); parsing takes ~15x this in memory.
inline constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{128} << 20;

enum class EntryType { File, Dir, Symlink };
const char* entry_type_name(EntryType t);  // "file", "dir", "symlink"

struct TensorRecord {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0;  // absolute offset in the file
  std::uint64_t bytes = 0;
  Json to_json() const;  // name, dtype, shape, offset, bytes
};

struct FileRecord {
  std::string path;  // relative, '/'-separated, no "." or ".." parts
  EntryType type = EntryType::File;
  std::uint32_t mode = 0644;
  std::int64_t mtime_ns = 0;
  std::uint64_t bytes = 0;        // files only
  std::uint64_t first_frame = 0;  // files only: frames [first_frame, first_frame + frame_count)
  std::uint64_t frame_count = 0;
  std::string target;  // symlinks only
  bool safetensors = false;
  std::vector<TensorRecord> tensors;
};

struct FrameRecord {
  std::uint64_t file = 0;        // index into files
  std::uint64_t raw_offset = 0;  // offset in the file
  std::uint64_t raw_bytes = 0;
  std::uint32_t shuffle = 1;          // element size the bytes were shuffled by
  std::uint64_t xxh3 = 0;             // of the raw bytes
  std::uint64_t offset = 0;           // of the zstd frame, in the archive that holds it
  std::uint64_t bytes = 0;            // compressed size
  std::optional<std::uint32_t> base;  // index into bases when another archive holds it
};

struct BaseRecord {
  std::string name;  // path relative to this archive's directory
  std::uint64_t archive_xxh3 = 0;
};

struct Manifest {
  double created_unix_s = 0;
  std::string rkit_version;
  std::uint64_t frame_bytes = kDefaultFrameBytes;
  int level = 1;
  bool shuffle = true;
  std::uint64_t archive_bytes = 0;  // bytes covered by archive_xxh3
  std::uint64_t archive_xxh3 = 0;
  // Where the checkpoint came from, as its maker said (rckpt pack --provenance): an
  // object, null when not given. rtrain writes {"run_id", "step", "config_xxh3",
  // "inputs": [{"name", "path", "bytes", "xxh3"}], "parent": {"kind", "archive",
  // "archive_xxh3", "run_id"} or null} (rkit(7), rkit.ckpt.v1); rckpt log follows parent.
  Json provenance;
  std::vector<BaseRecord> bases;
  std::vector<FileRecord> files;
  std::vector<FrameRecord> frames;

  Json to_json() const;
  std::uint64_t raw_bytes() const;     // sum of file sizes
  std::uint64_t stored_bytes() const;  // compressed bytes held in this archive
  // The index of the file with this path, if any.
  std::optional<std::size_t> find(const std::string& path) const;
  // Names of the tensors whose bytes frame `index` holds (some of).
  std::vector<std::string> tensors_in_frame(std::uint64_t index) const;
  // "frame 3 (model.safetensors bytes 0..8388608, tensors a, b)" for error messages.
  std::string describe_frame(std::uint64_t index) const;
};

// Parses and validates a manifest: schema (unknown major → DataErr), types, paths
// (relative, no "..", no duplicates, no file below a file or symlink), symlink
// targets (see unsafe_symlink), bases (relative names), frames (contiguous cover of
// each file, sizes within kMaxFrameBytes, bases in range, local frames inside
// `archive_bytes` and not overlapping). Throws Error(DataErr) naming `source`.
Manifest parse_manifest(std::string_view text, const std::string& source);

// "0123456789abcdef" and back (DataErr on anything else).
std::string hash_hex(std::uint64_t h);
std::uint64_t parse_hash_hex(const std::string& text, const std::string& where);

// The .rkpt/index text for a manifest at `offset` of `bytes` with hash `xxh3`.
std::string index_text(std::uint64_t offset, std::uint64_t bytes, std::uint64_t xxh3);
struct IndexRecord {
  std::uint64_t manifest_offset = 0;
  std::uint64_t manifest_bytes = 0;
  std::uint64_t manifest_xxh3 = 0;
};
// Parses index text; nullopt when it is not one.
std::optional<IndexRecord> parse_index(std::string_view text);

// Whether a relative path is safe to create under a root: not empty, not absolute,
// no empty, "." or ".." components, no NUL.
bool is_safe_relative_path(const std::string& path);

// Why a symlink at `link` (a safe relative path) pointing at `target` is unsafe to
// create under a root, or "" when it is safe: the target must be relative, its ".."
// parts must never climb above the root, and it must not pass through another
// symlink among `entries` (whose own target could move the walk anywhere).
std::string unsafe_symlink(const std::string& link, const std::string& target,
                           const std::map<std::string, EntryType>& entries);

// "a/b/c" → {"a", "b", "c"} (empty parts kept).
std::vector<std::string> split_path(const std::string& path);

}  // namespace rkit::rckpt
