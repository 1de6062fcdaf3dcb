// File: rkit/safetensors.hpp
//
// Reading and writing safetensors files, the checkpoint format of Hugging Face and
// most of the PyTorch world: an 8-byte little-endian header length N, N bytes of
// JSON naming each tensor's dtype, shape and byte range, then the raw little-endian
// tensor data. rckpt packs such files and diffs them element by element.
//
//   rkit::safetensors::Header h = rkit::safetensors::read_header("model.safetensors");
//   for (const auto& t : h.tensors)          // sorted by offset in the file
//     fmt::print("{} {} {} bytes at {}\n", t.name, dtype_name(t.dtype), t.bytes, t.offset);
//
//   rkit::safetensors::Writer w;
//   w.add("weight", rkit::safetensors::Dtype::F32, {2, 3}, std::as_bytes(std::span(values)));
//   w.set_metadata("format", "pt");
//   w.write("out.safetensors");              // atomically
//
// Every violation of the format throws rkit::Error(DataErr) whose message starts
// with the file's name; nothing here reads tensor data except element_as_double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rkit::safetensors {

// The element types of the format, in the reference implementation's order.
// F8_E4M3 is the "fn" variant (no infinities; S.1111.111 is NaN).
enum class Dtype { Bool, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

// Bytes per element: 1 for Bool, U8, I8 and the F8 types; 2, 4 or 8 for the others.
std::size_t dtype_size(Dtype d);
// The name the format spells ("F32", "BOOL", "F8_E4M3").
std::string_view dtype_name(Dtype d);
// The dtype named `name` (exact, case-sensitive, as dtype_name spells it); nullopt if none.
std::optional<Dtype> parse_dtype(std::string_view name);

// Headers longer than this are refused (the reference implementation's limit, 100 MiB),
// so that a corrupt length never makes a reader allocate gigabytes.
inline constexpr std::uint64_t kMaxHeaderBytes = 100 << 20;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::uint64_t> shape;  // empty: a scalar (one element)
  std::uint64_t offset = 0;          // absolute offset in the file (8 + N + data_offsets[0])
  std::uint64_t bytes = 0;           // data_offsets[1] - data_offsets[0]
};

struct Header {
  std::uint64_t data_offset = 0;                // 8 + N: where tensor data starts
  std::uint64_t file_bytes = 0;                 // the size the file must have: data_offset + largest end offset
  std::vector<TensorInfo> tensors;              // sorted by offset (ties by name)
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty when absent or null
};

// Parses the header JSON (the N bytes after the length prefix; `header_len` is N and
// sets data_offset, trailing padding spaces are allowed). `source` names the file in errors.
// Checks: a JSON object, each key unique; every entry other than "__metadata__" is an
// object with a known "dtype", a "shape" of non-negative integers and "data_offsets"
// [b, e] of non-negative integers with b <= e (other keys are ignored);
// e - b == product(shape) * dtype_size (overflow-checked; an empty shape is a scalar);
// no two tensors' byte ranges overlap (gaps are allowed); "__metadata__" is an object
// of strings (or null). Throws Error(DataErr, "<source>: <what is wrong>") otherwise.
Header parse_header(std::string_view json, std::uint64_t header_len, const std::string& source);

// Parses the length prefix and header from the start of a file's bytes (`prefix` may be
// longer than needed). Throws Error(DataErr) when `prefix` is too short to hold the
// length or the header, when N > kMaxHeaderBytes, or as parse_header does.
Header parse_header_bytes(std::string_view prefix, const std::string& source);

// Opens `path`, reads and parses its header, and checks that the file's size is exactly
// file_bytes: a shorter file is "truncated", a longer one "has N trailing bytes" (both
// DataErr). A missing file or a directory throws Error(NoInput), an unreadable one
// Error(NoPerm), a failed read Error(IoErr). Reads only the first 8 + N bytes.
Header read_header(const std::string& path);

// True when `path`'s name ends in ".safetensors".
bool is_safetensors_name(std::string_view path);

// Builds a safetensors file. Tensors are laid out one after the other in the order
// added, and the header lists "__metadata__" first, then the tensors in that order.
// Data is not copied: the spans must stay valid until write(). Not thread-safe.
class Writer {
 public:
  // Adds a tensor. Throws Error(DataErr) when data.size() != product(shape) *
  // dtype_size(dtype) (or that product overflows), when the name was added before, or
  // when it is "__metadata__".
  void add(std::string name, Dtype dtype, std::vector<std::uint64_t> shape, std::span<const std::byte> data);
  // Sets (or replaces) one "__metadata__" entry.
  void set_metadata(std::string key, std::string value);
  // The 8-byte length plus the JSON header, padded with spaces so that its size is a
  // multiple of 8. Throws Error(DataErr) when a name or metadata string is not UTF-8.
  std::string header_bytes() const;
  // Writes the whole file through rkit::AtomicFile: it appears whole or not at all.
  // Errors as AtomicFile's (IoErr, NoPerm, NoInput for a missing directory).
  void write(const std::string& path) const;
  // Number of tensors added, and the size write() will produce.
  std::size_t size() const { return tensors_.size(); }
  std::uint64_t file_bytes() const;

 private:
  struct Entry {
    std::string name;
    Dtype dtype;
    std::vector<std::uint64_t> shape;
    std::span<const std::byte> data;
  };
  std::vector<Entry> tensors_;
  std::set<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// The value of element `index` of a tensor's raw little-endian bytes (`data` points at
// the tensor's first byte; the caller keeps index < element count), as a double. Every
// dtype: Bool 0/1 (any non-zero byte is 1), F16, BF16, F8_E5M2 and F8_E4M3 (fn) decoded
// exactly with NaN and infinities kept, integers converted (I64/U64 beyond 2^53 round).
double element_as_double(Dtype dtype, const std::byte* data, std::size_t index);

}  // namespace rkit::safetensors
