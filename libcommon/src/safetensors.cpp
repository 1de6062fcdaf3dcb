#include "rkit/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "rkit/atomic_file.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::safetensors {
namespace {

using Json = nlohmann::json;

struct DtypeEntry {
  Dtype dtype;
  std::string_view name;
  std::size_t size;
};

// In enum order, so that kDtypes[static_cast<int>(d)] describes d.
constexpr std::array<DtypeEntry, 15> kDtypes{{
    {Dtype::Bool, "BOOL", 1},
    {Dtype::U8, "U8", 1},
    {Dtype::I8, "I8", 1},
    {Dtype::F8_E5M2, "F8_E5M2", 1},
    {Dtype::F8_E4M3, "F8_E4M3", 1},
    {Dtype::I16, "I16", 2},
    {Dtype::U16, "U16", 2},
    {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2},
    {Dtype::I32, "I32", 4},
    {Dtype::U32, "U32", 4},
    {Dtype::F32, "F32", 4},
    {Dtype::F64, "F64", 8},
    {Dtype::I64, "I64", 8},
    {Dtype::U64, "U64", 8},
}};

const DtypeEntry& entry_of(Dtype d) {
  auto i = static_cast<std::size_t>(d);
  if (i >= kDtypes.size()) throw Error(Exit::Software, "safetensors: invalid Dtype value");
  return kDtypes[i];
}

constexpr std::string_view kMetadataKey = "__metadata__";

// product(shape) * dtype_size, or nullopt when it does not fit in 64 bits. A zero
// dimension makes the tensor empty whatever the other dimensions are.
std::optional<std::uint64_t> tensor_bytes(const std::vector<std::uint64_t>& shape, Dtype dtype) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::uint64_t n = dtype_size(dtype);
  for (std::uint64_t dim : shape) {
    if (n > std::numeric_limits<std::uint64_t>::max() / dim) return std::nullopt;
    n *= dim;
  }
  return n;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// nlohmann's message is "[json.exception.parse_error.101] parse error at ..."; keep the
// part after the bracketed id.
std::string_view json_error_text(const Json::exception& e) {
  std::string_view msg = e.what();
  if (auto pos = msg.find("] "); pos != std::string_view::npos) msg.remove_prefix(pos + 2);
  return msg;
}

// A JSON number that is a non-negative integer (nlohmann parses "-0" as a signed 0).
std::optional<std::uint64_t> as_count(const Json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() == 0) return 0;
  return std::nullopt;
}

// Parses JSON, refusing duplicate keys in any object: nlohmann keeps the last one
// silently, and two entries for one tensor name would make the file ambiguous.
Json parse_unique(std::string_view text, const std::string& source) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto callback = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: keys.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (keys.empty()) break;
        const auto& key = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(key).second)
          throw Error(Exit::DataErr, fmt::format("{}: header has the key '{}' twice", source, key));
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    throw Error(Exit::DataErr, fmt::format("{}: header is not valid JSON: {}", source, json_error_text(e)));
  }
}

TensorInfo parse_tensor(const std::string& name, const Json& v, std::uint64_t data_offset, const std::string& source) {
  auto fail = [&](const std::string& what) {
    return Error(Exit::DataErr, fmt::format("{}: tensor '{}': {}", source, name, what));
  };
  if (!v.is_object()) throw fail("entry is not an object");
  TensorInfo t;
  t.name = name;

  auto dtype_it = v.find("dtype");
  if (dtype_it == v.end()) throw fail("no \"dtype\"");
  if (!dtype_it->is_string()) throw fail("\"dtype\" is not a string");
  const auto& dtype_str = dtype_it->get_ref<const std::string&>();
  auto dtype = parse_dtype(dtype_str);
  if (!dtype) throw fail(fmt::format("unknown dtype '{}'", dtype_str));
  t.dtype = *dtype;

  auto shape_it = v.find("shape");
  if (shape_it == v.end()) throw fail("no \"shape\"");
  if (!shape_it->is_array()) throw fail("\"shape\" is not an array");
  for (const Json& dim : *shape_it) {
    auto n = as_count(dim);
    if (!n) throw fail(fmt::format("shape entry {} is not a non-negative integer", dim.dump()));
    t.shape.push_back(*n);
  }

  auto off_it = v.find("data_offsets");
  if (off_it == v.end()) throw fail("no \"data_offsets\"");
  std::optional<std::uint64_t> begin, end;
  if (off_it->is_array() && off_it->size() == 2) {
    begin = as_count((*off_it)[0]);
    end = as_count((*off_it)[1]);
  }
  if (!begin || !end)
    throw fail(fmt::format("\"data_offsets\" {} is not [begin, end] of non-negative integers", off_it->dump()));
  if (*begin > *end) throw fail(fmt::format("data_offsets [{}, {}] end before they begin", *begin, *end));
  if (*end > std::numeric_limits<std::uint64_t>::max() - data_offset)
    throw fail(fmt::format("data_offsets [{}, {}] lie beyond any file", *begin, *end));

  auto want = tensor_bytes(t.shape, t.dtype);
  if (!want)
    throw fail(fmt::format("shape {} of {} is too large (its byte size overflows 64 bits)", shape_text(t.shape),
                           dtype_name(t.dtype)));
  t.bytes = *end - *begin;
  if (*want != t.bytes)
    throw fail(fmt::format("shape {} of {} needs {} bytes, but data_offsets [{}, {}] hold {}", shape_text(t.shape),
                           dtype_name(t.dtype), *want, *begin, *end, t.bytes));
  t.offset = data_offset + *begin;
  return t;
}

std::uint64_t load_le(const std::byte* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

template <typename T>
T load_as(const std::byte* p) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(load_le(p, sizeof(T))));
}

// A minifloat with `exp_bits` exponent and `man_bits` mantissa bits (IEEE-style bias).
// `ieee_specials`: an all-ones exponent means infinity/NaN; otherwise (the "fn" types)
// only the all-ones pattern is NaN and the rest of that exponent are normal numbers.
double decode_minifloat(std::uint32_t bits, int exp_bits, int man_bits, bool ieee_specials) {
  const std::uint32_t man_mask = (1u << man_bits) - 1;
  const std::uint32_t exp_max = (1u << exp_bits) - 1;
  const bool negative = (bits >> (exp_bits + man_bits)) & 1;
  const std::uint32_t exp = (bits >> man_bits) & exp_max;
  const std::uint32_t man = bits & man_mask;
  const int bias = (1 << (exp_bits - 1)) - 1;
  double value;
  if (exp == exp_max && ieee_specials) {
    value = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == exp_max && man == man_mask) {
    value = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    value = std::ldexp(double(man), 1 - bias - man_bits);
  } else {
    value = std::ldexp(double(man | (1u << man_bits)), int(exp) - bias - man_bits);
  }
  return negative ? -value : value;
}

// Reads up to `n` bytes at `offset`; fewer only at end of file.
std::string read_at(int fd, std::uint64_t offset, std::uint64_t n, const std::string& path) {
  std::string out(n, '\0');
  out.resize(pread_full(fd, out.data(), out.size(), offset, path));
  return out;
}

}  // namespace

std::size_t dtype_size(Dtype d) { return entry_of(d).size; }

std::string_view dtype_name(Dtype d) { return entry_of(d).name; }

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& e : kDtypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

Header parse_header(std::string_view json, std::uint64_t header_len, const std::string& source) {
  Json doc = parse_unique(json, source);
  if (!doc.is_object()) throw Error(Exit::DataErr, fmt::format("{}: header is not a JSON object", source));

  if (header_len > kMaxHeaderBytes)
    throw Error(Exit::DataErr,
                fmt::format("{}: header length {} exceeds the limit of {} bytes", source, header_len, kMaxHeaderBytes));
  Header h;
  h.data_offset = 8 + header_len;
  for (const auto& [key, value] : doc.items()) {
    if (key == kMetadataKey) {
      if (value.is_null()) continue;
      if (!value.is_object())
        throw Error(Exit::DataErr, fmt::format("{}: __metadata__ is not an object of strings", source));
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw Error(Exit::DataErr,
                      fmt::format("{}: __metadata__ '{}': value {} is not a string", source, mk, mv.dump()));
        h.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    h.tensors.push_back(parse_tensor(key, value, h.data_offset, source));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
  });
  // Sorted by offset, a non-empty tensor overlaps an earlier one exactly when it begins
  // before the furthest end seen so far. Empty tensors hold no bytes and overlap nothing.
  std::uint64_t end = h.data_offset;
  const TensorInfo* last = nullptr;  // the tensor that reaches `end`
  for (const auto& t : h.tensors) {
    if (t.bytes == 0) continue;
    if (last && t.offset < end)
      throw Error(Exit::DataErr,
                  fmt::format("{}: tensors '{}' and '{}' overlap (data bytes [{}, {}) and [{}, {}))", source,
                              last->name, t.name, last->offset - h.data_offset, end - h.data_offset,
                              t.offset - h.data_offset, t.offset + t.bytes - h.data_offset));
    if (t.offset + t.bytes > end) {
      end = t.offset + t.bytes;
      last = &t;
    }
  }
  h.file_bytes = h.data_offset;
  for (const auto& t : h.tensors) h.file_bytes = std::max(h.file_bytes, t.offset + t.bytes);
  return h;
}

Header parse_header_bytes(std::string_view prefix, const std::string& source) {
  if (prefix.size() < 8)
    throw Error(Exit::DataErr,
                fmt::format("{}: truncated: {} bytes cannot hold the 8-byte header length", source, prefix.size()));
  const std::uint64_t n = load_le(reinterpret_cast<const std::byte*>(prefix.data()), 8);
  if (n > kMaxHeaderBytes)
    throw Error(Exit::DataErr,
                fmt::format("{}: header length {} exceeds the limit of {} bytes", source, n, kMaxHeaderBytes),
                "is this a safetensors file?");
  if (prefix.size() - 8 < n)
    throw Error(Exit::DataErr, fmt::format("{}: truncated: the header needs {} bytes after the length, {} are there",
                                           source, n, prefix.size() - 8));
  return parse_header(prefix.substr(8, n), n, source);
}

Header read_header(const std::string& path) {
  UniqueFd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!f) throw system_error(path, errno);
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) throw system_error("stat " + path, errno);
  if (S_ISDIR(st.st_mode)) throw Error(Exit::NoInput, path + ": is a directory");
  if (!S_ISREG(st.st_mode)) throw Error(Exit::NoInput, path + ": not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);

  std::string prefix = read_at(f.get(), 0, 8, path);
  if (prefix.size() == 8) {
    // Read no more than the header (capped, so that a bad length allocates nothing big);
    // parse_header_bytes then names whatever is wrong.
    const std::uint64_t n =
        std::min(load_le(reinterpret_cast<const std::byte*>(prefix.data()), 8), kMaxHeaderBytes + 1);
    if (n <= kMaxHeaderBytes) prefix += read_at(f.get(), 8, n, path);
  }
  Header h = parse_header_bytes(prefix, path);
  if (size < h.file_bytes)
    throw Error(Exit::DataErr,
                fmt::format("{}: truncated: {} bytes, but its header and tensors need {}", path, size, h.file_bytes));
  if (size > h.file_bytes)
    throw Error(Exit::DataErr, fmt::format("{}: has {} trailing bytes after its {} bytes of header and tensors", path,
                                           size - h.file_bytes, h.file_bytes));
  return h;
}

bool is_safetensors_name(std::string_view path) {
  constexpr std::string_view kSuffix = ".safetensors";
  return path.size() >= kSuffix.size() && path.substr(path.size() - kSuffix.size()) == kSuffix;
}

void Writer::add(std::string name, Dtype dtype, std::vector<std::uint64_t> shape, std::span<const std::byte> data) {
  if (name == kMetadataKey) throw Error(Exit::DataErr, "safetensors: a tensor cannot be named __metadata__");
  if (names_.count(name)) throw Error(Exit::DataErr, fmt::format("safetensors: tensor '{}' added twice", name));
  auto want = tensor_bytes(shape, dtype);
  if (!want)
    throw Error(Exit::DataErr, fmt::format("safetensors: tensor '{}': shape {} of {} is too large", name,
                                           shape_text(shape), dtype_name(dtype)));
  if (*want != data.size())
    throw Error(Exit::DataErr, fmt::format("safetensors: tensor '{}': shape {} of {} needs {} bytes, got {}", name,
                                           shape_text(shape), dtype_name(dtype), *want, data.size()));
  names_.insert(name);
  tensors_.push_back({std::move(name), dtype, std::move(shape), data});
}

void Writer::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

std::string Writer::header_bytes() const {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  if (!metadata_.empty()) doc[std::string(kMetadataKey)] = metadata_;
  std::uint64_t offset = 0;
  for (const auto& t : tensors_) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(dtype_name(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + t.data.size()});
    doc[t.name] = std::move(entry);
    offset += t.data.size();
  }
  std::string json;
  try {
    json = doc.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(Exit::DataErr, fmt::format("safetensors: cannot write the header: {}", json_error_text(e)));
  }
  // Pad so that the data starts 8-byte aligned, as the reference writer does.
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((std::uint64_t(json.size()) >> (8 * i)) & 0xff);
  return out + json;
}

std::uint64_t Writer::file_bytes() const {
  std::uint64_t n = header_bytes().size();
  for (const auto& t : tensors_) n += t.data.size();
  return n;
}

void Writer::write(const std::string& path) const {
  std::string header = header_bytes();
  AtomicFile out(path);
  out.write(header);
  for (const auto& t : tensors_)
    out.write(std::string_view(reinterpret_cast<const char*>(t.data.data()), t.data.size()));
  out.commit();
}

double element_as_double(Dtype dtype, const std::byte* data, std::size_t index) {
  const std::byte* p = data + index * dtype_size(dtype);
  switch (dtype) {
    case Dtype::Bool: return std::to_integer<std::uint8_t>(*p) != 0 ? 1.0 : 0.0;
    case Dtype::U8: return double(load_as<std::uint8_t>(p));
    case Dtype::I8: return double(load_as<std::int8_t>(p));
    case Dtype::F8_E5M2: return decode_minifloat(std::uint32_t(load_le(p, 1)), 5, 2, true);
    case Dtype::F8_E4M3: return decode_minifloat(std::uint32_t(load_le(p, 1)), 4, 3, false);
    case Dtype::I16: return double(load_as<std::int16_t>(p));
    case Dtype::U16: return double(load_as<std::uint16_t>(p));
    case Dtype::F16: return decode_minifloat(std::uint32_t(load_le(p, 2)), 5, 10, true);
    case Dtype::BF16: return double(std::bit_cast<float>(std::uint32_t(load_le(p, 2)) << 16));
    case Dtype::I32: return double(load_as<std::int32_t>(p));
    case Dtype::U32: return double(load_as<std::uint32_t>(p));
    case Dtype::F32: return double(std::bit_cast<float>(std::uint32_t(load_le(p, 4))));
    case Dtype::F64: return std::bit_cast<double>(load_le(p, 8));
    case Dtype::I64: return double(load_as<std::int64_t>(p));
    case Dtype::U64: return double(load_as<std::uint64_t>(p));
  }
  throw Error(Exit::Software, "safetensors: invalid Dtype value");
}

}  // namespace rkit::safetensors
