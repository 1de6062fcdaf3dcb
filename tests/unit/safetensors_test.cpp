#include "rkit/safetensors.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace st = rkit::safetensors;
using rkit::Exit;
using rkit::testing::error_of;
using rkit::testing::slurp;
using rkit::testing::TempDir;
using st::Dtype;

namespace {

const std::string kSmall = std::string(RKIT_FIXTURES) + "/safetensors/small.safetensors";
const std::string kEmpty = std::string(RKIT_FIXTURES) + "/safetensors/empty.safetensors";

// The 8-byte little-endian length of `json`, then `json`, then `data`.
std::string file_bytes(const std::string& json, const std::string& data = {}) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((std::uint64_t(json.size()) >> (8 * i)) & 0xff);
  return out + json + data;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

// The value of element `i` of tensor `t` of the file whose bytes are `file`.
double value(const std::string& file, const st::TensorInfo& t, std::size_t i) {
  return st::element_as_double(t.dtype, reinterpret_cast<const std::byte*>(file.data()) + t.offset, i);
}

const st::TensorInfo& find(const st::Header& h, const std::string& name) {
  for (const auto& t : h.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

double decode(Dtype d, std::vector<std::uint8_t> le_bytes) {
  return st::element_as_double(d, reinterpret_cast<const std::byte*>(le_bytes.data()), 0);
}

// A python3 that can import numpy: the one on PATH, else Debian's.
std::string python_with_numpy() {
  for (std::string py : {"python3", "/usr/bin/python3"})
    if (std::system((py + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return py;
  return {};
}

}  // namespace

TEST(Safetensors, DtypeTable) {
  const std::vector<std::pair<Dtype, std::size_t>> sizes = {
      {Dtype::Bool, 1}, {Dtype::U8, 1},  {Dtype::I8, 1},  {Dtype::F8_E5M2, 1}, {Dtype::F8_E4M3, 1},
      {Dtype::I16, 2},  {Dtype::U16, 2}, {Dtype::F16, 2}, {Dtype::BF16, 2},    {Dtype::I32, 4},
      {Dtype::U32, 4},  {Dtype::F32, 4}, {Dtype::F64, 8}, {Dtype::I64, 8},     {Dtype::U64, 8}};
  for (const auto& [d, size] : sizes) {
    EXPECT_EQ(st::dtype_size(d), size) << st::dtype_name(d);
    EXPECT_EQ(st::parse_dtype(st::dtype_name(d)), d);
  }
  EXPECT_EQ(st::dtype_name(Dtype::Bool), "BOOL");
  EXPECT_EQ(st::dtype_name(Dtype::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(st::parse_dtype("f32"), std::nullopt);
  EXPECT_EQ(st::parse_dtype("F31"), std::nullopt);
  EXPECT_EQ(st::parse_dtype(""), std::nullopt);
}

TEST(Safetensors, IsSafetensorsName) {
  EXPECT_TRUE(st::is_safetensors_name("model.safetensors"));
  EXPECT_TRUE(st::is_safetensors_name("ckpt/model-00001-of-00002.safetensors"));
  EXPECT_FALSE(st::is_safetensors_name("model.safetensors.tmp"));
  EXPECT_FALSE(st::is_safetensors_name("model.bin"));
  EXPECT_FALSE(st::is_safetensors_name("safetensors"));
}

TEST(Safetensors, WriterRoundTrip) {
  TempDir dir;
  std::vector<float> w = {1.0f, -2.0f, 3.5f, 0.25f, -0.0f, 1e30f};
  std::vector<std::int64_t> ids = {-3, 0, std::numeric_limits<std::int64_t>::max()};
  std::vector<std::uint16_t> bf = {0x3f80, 0xc0a0};  // 1, -5
  std::vector<std::uint8_t> mask = {1, 0, 1, 1};
  std::vector<double> scalar = {6.5};
  std::vector<std::uint8_t> none;

  st::Writer writer;
  writer.add("layers.0.weight", Dtype::F32, {2, 3}, bytes_of(w));
  writer.add("ids", Dtype::I64, {3}, bytes_of(ids));
  writer.add("bf", Dtype::BF16, {2, 1}, bytes_of(bf));
  writer.add("mask", Dtype::Bool, {2, 2}, bytes_of(mask));
  writer.add("scalar", Dtype::F64, {}, bytes_of(scalar));
  writer.add("nothing", Dtype::F32, {0, 7}, bytes_of(none));
  writer.set_metadata("format", "pt");
  writer.set_metadata("step", "1");
  writer.set_metadata("step", "100");  // replaces
  EXPECT_EQ(writer.size(), 6u);
  const std::string path = dir.file("out.safetensors");
  writer.write(path);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.safetensors"});  // no temporary left

  const std::string file = slurp(path);
  EXPECT_EQ(file.size(), writer.file_bytes());
  st::Header h = st::read_header(path);
  EXPECT_EQ(h.data_offset % 8, 0u);
  EXPECT_EQ(h.data_offset, writer.header_bytes().size());
  EXPECT_EQ(h.file_bytes, file.size());
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "100"}}));
  ASSERT_EQ(h.tensors.size(), 6u);
  // Laid out in the order added; "nothing" is empty and sits at the end, after "scalar".
  std::vector<std::string> names;
  for (const auto& t : h.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.weight", "ids", "bf", "mask", "scalar", "nothing"}));

  const auto& tw = find(h, "layers.0.weight");
  EXPECT_EQ(tw.dtype, Dtype::F32);
  EXPECT_EQ(tw.shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(tw.offset, h.data_offset);
  EXPECT_EQ(tw.bytes, 24u);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(value(file, tw, i), double(w[i]));
  EXPECT_TRUE(std::signbit(value(file, tw, 4)));
  const auto& ti = find(h, "ids");
  EXPECT_EQ(ti.offset, h.data_offset + 24);
  EXPECT_EQ(value(file, ti, 0), -3.0);
  EXPECT_EQ(value(file, ti, 2), double(std::numeric_limits<std::int64_t>::max()));
  const auto& tb = find(h, "bf");
  EXPECT_EQ(tb.shape, (std::vector<std::uint64_t>{2, 1}));
  EXPECT_EQ(value(file, tb, 0), 1.0);
  EXPECT_EQ(value(file, tb, 1), -5.0);
  const auto& tm = find(h, "mask");
  EXPECT_EQ(tm.dtype, Dtype::Bool);
  EXPECT_EQ(value(file, tm, 1), 0.0);
  EXPECT_EQ(value(file, tm, 3), 1.0);
  const auto& ts = find(h, "scalar");
  EXPECT_TRUE(ts.shape.empty());
  EXPECT_EQ(value(file, ts, 0), 6.5);
  const auto& tn = find(h, "nothing");
  EXPECT_EQ(tn.bytes, 0u);
  EXPECT_EQ(tn.offset, file.size());
  // Raw data comes back byte for byte.
  EXPECT_EQ(file.substr(tw.offset, tw.bytes), std::string(reinterpret_cast<const char*>(w.data()), 24));
}

TEST(Safetensors, WriterWithNothing) {
  TempDir dir;
  st::Writer writer;
  EXPECT_EQ(writer.header_bytes(), file_bytes("{}" + std::string(6, ' ')));
  writer.write(dir.file("e.safetensors"));
  st::Header h = st::read_header(dir.file("e.safetensors"));
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_TRUE(h.metadata.empty());
  EXPECT_EQ(h.file_bytes, 16u);
}

TEST(Safetensors, HeaderIsPaddedWithSpacesToEightBytes) {
  std::vector<std::uint8_t> one = {7};
  for (std::size_t len = 1; len <= 17; ++len) {
    st::Writer writer;
    writer.add(std::string(len, 'x'), Dtype::U8, {1}, bytes_of(one));
    const std::string header = writer.header_bytes();
    EXPECT_EQ(header.size() % 8, 0u) << len;
    const std::string json = header.substr(8);
    EXPECT_EQ(file_bytes(json), header);  // the length prefix covers the padding
    EXPECT_LT(json.size() - json.find_last_not_of(' ') - 1, 8u);
    st::Header h = st::parse_header_bytes(header, "mem");
    EXPECT_EQ(h.data_offset, header.size());
    EXPECT_EQ(h.tensors.at(0).name, std::string(len, 'x'));
  }
}

TEST(Safetensors, WriterRefusesBadTensors) {
  std::vector<float> three(3);
  st::Writer writer;
  auto e = error_of([&] { writer.add("a", Dtype::F32, {2, 2}, bytes_of(three)); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("needs 16 bytes, got 12"), std::string::npos) << e.what();
  writer.add("a", Dtype::F32, {3}, bytes_of(three));
  e = error_of([&] { writer.add("a", Dtype::F32, {3}, bytes_of(three)); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("'a' added twice"), std::string::npos) << e.what();
  e = error_of([&] { writer.add("__metadata__", Dtype::F32, {3}, bytes_of(three)); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  e = error_of([&] { writer.add("big", Dtype::F32, {std::uint64_t{1} << 62, 4}, bytes_of(three)); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  // Names must be UTF-8 to go into JSON.
  writer.add("bad\xff", Dtype::F32, {3}, bytes_of(three));
  e = error_of([&] { (void)writer.header_bytes(); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(writer.size(), 2u);
}

TEST(Safetensors, WriteToMissingDirectoryFails) {
  TempDir dir;
  st::Writer writer;
  auto e = error_of([&] { writer.write(dir.file("no/such/dir/x.safetensors")); });
  EXPECT_EQ(e.code(), Exit::NoInput);
}

// small.safetensors was written by tests/fixtures/write_safetensors.py (numpy, not our
// code): header keys sorted by name, data laid out weight, bf16, ids, step, mask, half, empty.
TEST(Safetensors, ReadsPythonWrittenFixture) {
  st::Header h = st::read_header(kSmall);
  const std::string file = slurp(kSmall);
  EXPECT_EQ(h.file_bytes, file.size());
  EXPECT_EQ(h.data_offset % 8, 0u);
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"producer", "write_safetensors.py"}}));
  std::vector<std::string> names;
  for (const auto& t : h.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bf16", "ids", "step", "mask", "half", "empty"}));

  struct Want {
    std::string name;
    Dtype dtype;
    std::vector<std::uint64_t> shape;
    std::uint64_t begin, end;  // data_offsets as the script wrote them
  };
  const std::vector<Want> wants = {{"weight", Dtype::F32, {2, 3}, 0, 24}, {"bf16", Dtype::BF16, {4}, 24, 32},
                                   {"ids", Dtype::I64, {5}, 32, 72},      {"step", Dtype::I64, {}, 72, 80},
                                   {"mask", Dtype::Bool, {3}, 80, 83},    {"half", Dtype::F16, {2, 2}, 83, 91},
                                   {"empty", Dtype::F32, {0, 3}, 91, 91}};
  for (const auto& w : wants) {
    const auto& t = find(h, w.name);
    EXPECT_EQ(t.dtype, w.dtype) << w.name;
    EXPECT_EQ(t.shape, w.shape) << w.name;
    EXPECT_EQ(t.offset, h.data_offset + w.begin) << w.name;
    EXPECT_EQ(t.bytes, w.end - w.begin) << w.name;
  }
  EXPECT_EQ(h.file_bytes, h.data_offset + 91);

  const auto& weight = find(h, "weight");  // np.arange(6) * 0.5 - 1
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(value(file, weight, i), double(i) * 0.5 - 1.0);
  const auto& bf16 = find(h, "bf16");  // float32 [1, -2.5, 0.1, 3e38] with the low 16 bits dropped
  EXPECT_EQ(value(file, bf16, 0), 1.0);
  EXPECT_EQ(value(file, bf16, 1), -2.5);
  EXPECT_EQ(value(file, bf16, 2), 0.099609375);             // 0x3dcc
  EXPECT_EQ(value(file, bf16, 3), std::ldexp(225.0, 120));  // 0x7f61
  const auto& ids = find(h, "ids");                         // np.arange(5) - 2
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(value(file, ids, i), double(i) - 2.0);
  EXPECT_EQ(value(file, find(h, "step"), 0), 123456789012.0);
  const auto& mask = find(h, "mask");
  EXPECT_EQ(value(file, mask, 0), 1.0);
  EXPECT_EQ(value(file, mask, 1), 0.0);
  EXPECT_EQ(value(file, mask, 2), 1.0);
  const auto& half = find(h, "half");
  EXPECT_EQ(value(file, half, 0), 0.5);
  EXPECT_EQ(value(file, half, 1), -1.0);
  EXPECT_EQ(value(file, half, 2), 65504.0);
  EXPECT_EQ(value(file, half, 3), std::ldexp(1.0, -24));
}

TEST(Safetensors, ReadsPythonWrittenFileWithoutTensors) {
  st::Header h = st::read_header(kEmpty);
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"note", "no tensors"}}));
  EXPECT_EQ(h.file_bytes, slurp(kEmpty).size());
  EXPECT_EQ(h.file_bytes, h.data_offset);
}

// The script is deterministic: run now, it writes the committed fixtures byte for byte.
TEST(Safetensors, PythonWriterReproducesFixtures) {
  const std::string py = python_with_numpy();
  if (py.empty()) GTEST_SKIP() << "python3 with numpy is not installed";
  TempDir dir;
  for (const auto& [kind, fixture] : {std::pair{"small", kSmall}, std::pair{"empty", kEmpty}}) {
    const std::string out = dir.file(std::string(kind) + ".safetensors");
    const std::string cmd = py + " " + RKIT_FIXTURES + "/write_safetensors.py " + out + " --kind " + kind;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    EXPECT_EQ(slurp(out), slurp(fixture)) << kind;
    EXPECT_NO_THROW(st::read_header(out));
  }
}

TEST(Safetensors, KeyOrderAndGapsDoNotMatter) {
  const std::string a = R"({"b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
                            "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                            "z": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]},
                            "__metadata__": {"k": "v"}})";
  const std::string b = R"({"__metadata__": {"k": "v"},
                            "z": {"shape": [0], "data_offsets": [4, 4], "dtype": "U8"},
                            "a": {"data_offsets": [0, 2], "shape": [2], "dtype": "U8"},
                            "b": {"shape": [2], "dtype": "U8", "data_offsets": [4, 6], "extra": 1}})";
  st::Header ha = st::parse_header(a, a.size(), "a");
  st::Header hb = st::parse_header(b, a.size(), "b");
  ASSERT_EQ(ha.tensors.size(), 3u);
  ASSERT_EQ(hb.tensors.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ha.tensors[i].name, hb.tensors[i].name);
    EXPECT_EQ(ha.tensors[i].offset, hb.tensors[i].offset);
  }
  // Sorted by offset, ties by name: the empty "z" at 4 comes before "b" at 4.
  EXPECT_EQ(ha.tensors[0].name, "a");
  EXPECT_EQ(ha.tensors[1].name, "b");
  EXPECT_EQ(ha.tensors[2].name, "z");
  EXPECT_EQ(ha.metadata, hb.metadata);
  EXPECT_EQ(ha.file_bytes, 8 + a.size() + 6);
  // An empty tensor inside another's bytes overlaps nothing; a null __metadata__ is none.
  const std::string c = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                            "__metadata__": null})";
  st::Header hc = st::parse_header(c, c.size(), "c");
  EXPECT_EQ(hc.tensors.size(), 2u);
  EXPECT_TRUE(hc.metadata.empty());
}

// Every malformed header is a data error (65) whose message names the source and the fault.
TEST(Safetensors, ValidationErrors) {
  auto tensor = [](const std::string& body) { return "{\"t\": " + body + "}"; };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not valid JSON"},
      {"", "not valid JSON"},
      {"{\"t\": \"\xff\"}", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {"{\"t\": 5}", "tensor 't': entry is not an object"},
      {tensor(R"({"shape": [1], "data_offsets": [0, 4]})"), "no \"dtype\""},
      {tensor(R"({"dtype": 7, "shape": [1], "data_offsets": [0, 4]})"), "\"dtype\" is not a string"},
      {tensor(R"({"dtype": "F31", "shape": [1], "data_offsets": [0, 4]})"), "unknown dtype 'F31'"},
      {tensor(R"({"dtype": "f32", "shape": [1], "data_offsets": [0, 4]})"), "unknown dtype 'f32'"},
      {tensor(R"({"dtype": "F32", "data_offsets": [0, 4]})"), "no \"shape\""},
      {tensor(R"({"dtype": "F32", "shape": 1, "data_offsets": [0, 4]})"), "\"shape\" is not an array"},
      {tensor(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"), "shape entry -1 is not a non-negative"},
      {tensor(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"), "shape entry 1.5 is not"},
      {tensor(R"({"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]})"), "shape entry 1.0 is not"},
      {tensor(R"({"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]})"), "shape entry \"1\" is not"},
      {tensor(R"({"dtype": "F32", "shape": [1e30], "data_offsets": [0, 4]})"), "is not a non-negative integer"},
      {tensor(R"({"dtype": "F32", "shape": [99999999999999999999], "data_offsets": [0, 4]})"),
       "is not a non-negative integer"},
      {tensor(R"({"dtype": "F32", "shape": [1]})"), "no \"data_offsets\""},
      {tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": [4]})"), "\"data_offsets\" [4] is not [begin, end]"},
      {tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]})"), "is not [begin, end]"},
      {tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})"), "is not [begin, end]"},
      {tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": {"0": 4}})"), "is not [begin, end]"},
      {tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})"), "data_offsets [8, 4] end before"},
      {tensor(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]})"),
       "shape [2] of F32 needs 8 bytes, but data_offsets [0, 4] hold 4"},
      {tensor(R"({"dtype": "BF16", "shape": [], "data_offsets": [0, 4]})"), "shape [] of BF16 needs 2 bytes"},
      {tensor(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]})"), "overflows 64 bits"},
      {tensor(R"({"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 4]})"), "overflows 64 bits"},
      {tensor(R"({"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 18446744073709551615]})"),
       "lie beyond any file"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       "tensors 'a' and 'b' overlap (data bytes [0, 8) and [4, 12))"},
      {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       "tensors 'a' and 'b' overlap"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
       "tensors 'a' and 'b' overlap"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       "the key 'a' twice"},
      {R"({"__metadata__": {"k": 1}})", "__metadata__ 'k': value 1 is not a string"},
      {R"({"__metadata__": {"k": {"x": "y"}}})", "__metadata__ 'k'"},
      {R"({"__metadata__": ["a"]})", "__metadata__ is not an object of strings"},
      {R"({"__metadata__": "a"})", "__metadata__ is not an object of strings"},
      {R"({"__metadata__": {"k": "a", "k": "b"}})", "the key 'k' twice"},
  };
  for (const auto& [json, want] : cases) {
    auto e = error_of([&] { st::parse_header(json, json.size(), "bad.safetensors"); });
    EXPECT_EQ(e.code(), Exit::DataErr) << json;
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwanted: " << want;
    // The same through the length prefix.
    EXPECT_EQ(error_of([&] { st::parse_header_bytes(file_bytes(json), "x"); }).code(), Exit::DataErr);
  }
}

TEST(Safetensors, LengthPrefixErrors) {
  auto check = [](const std::string& bytes, const std::string& want) {
    auto e = error_of([&] { st::parse_header_bytes(bytes, "f.safetensors"); });
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("f.safetensors: ", 0), 0u) << e.what();
  };
  check("", "0 bytes cannot hold the 8-byte header length");
  check(std::string("\x02\x00\x00", 3), "3 bytes cannot hold the 8-byte header length");
  check(file_bytes("{}").substr(0, 9), "the header needs 2 bytes after the length, 1 are there");
  // One byte over the limit, and a length that would wrap 8 + N.
  std::string over(8, '\0');
  std::uint64_t n = st::kMaxHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) over[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  check(over + "{}", "header length 104857601 exceeds the limit of 104857600 bytes");
  check(std::string(8, '\xff') + "{}", "exceeds the limit");
  // parse_header itself refuses an impossible header length.
  EXPECT_EQ(error_of([] { st::parse_header("{}", ~std::uint64_t{0}, "x"); }).code(), Exit::DataErr);
  // A longer prefix is fine: only the header is read.
  st::Header h = st::parse_header_bytes(file_bytes("{}  ", "trailing data"), "f");
  EXPECT_EQ(h.data_offset, 12u);
  EXPECT_EQ(h.file_bytes, 12u);
}

TEST(Safetensors, ReadHeaderChecksTheFileSize) {
  TempDir dir;
  const std::string json = R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& want) {
    rkit::testing::write(dir.file(name), bytes);
    auto e = error_of([&] { st::read_header(dir.file(name)); });
    EXPECT_EQ(e.code(), Exit::DataErr) << name;
    EXPECT_EQ(std::string(e.what()).rfind(dir.file(name) + ": ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  };
  rkit::testing::write(dir.file("ok.safetensors"), file_bytes(json, std::string(8, 'x')));
  EXPECT_EQ(st::read_header(dir.file("ok.safetensors")).file_bytes, 8 + json.size() + 8);
  check("short.safetensors", file_bytes(json, std::string(5, 'x')),
        "truncated: " + std::to_string(8 + json.size() + 5) + " bytes, but its header and tensors need " +
            std::to_string(8 + json.size() + 8));
  check("nodata.safetensors", file_bytes(json), "truncated");
  check("long.safetensors", file_bytes(json, std::string(11, 'x')), "has 3 trailing bytes");
  const std::string far = R"({"t": {"dtype": "U8", "shape": [10], "data_offsets": [1000000, 1000010]}})";
  check("far.safetensors", file_bytes(far, std::string(10, 'x')), "truncated");
  check("tiny.safetensors", "abc", "3 bytes cannot hold");
  check("empty.safetensors", "", "0 bytes cannot hold");
  check("cut.safetensors", file_bytes(json).substr(0, 20), "the header needs");
  check("huge.safetensors", std::string(8, '\x7f'), "exceeds the limit");
  check("text.safetensors", "this is not a safetensors file at all", "exceeds the limit");
}

TEST(Safetensors, ReadHeaderFileErrors) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { st::read_header(dir.file("missing.safetensors")); }).code(), Exit::NoInput);
  EXPECT_EQ(error_of([&] { st::read_header(dir.path()); }).code(), Exit::NoInput);
}

TEST(Safetensors, ReadHeaderUnreadableFile) {
  TempDir dir;
  rkit::testing::write(dir.file("locked.safetensors"), file_bytes("{}      "));
  ::chmod(dir.file("locked.safetensors").c_str(), 0);
  if (::geteuid() != 0) {
    EXPECT_EQ(error_of([&] { st::read_header(dir.file("locked.safetensors")); }).code(), Exit::NoPerm);
    return;
  }
  // Root reads anything: check as an unprivileged user, in a child process.
  EXPECT_EXIT(
      {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) std::_Exit(99);
        std::_Exit(static_cast<int>(error_of([&] { st::read_header(dir.file("locked.safetensors")); }).code()));
      },
      ::testing::ExitedWithCode(static_cast<int>(Exit::NoPerm)), "");
}

TEST(Safetensors, HalfPrecisionBitPatterns) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(decode(Dtype::F16, {0x00, 0x3c}), 1.0);
  EXPECT_EQ(decode(Dtype::F16, {0x00, 0xc0}), -2.0);
  EXPECT_EQ(decode(Dtype::F16, {0x55, 0x35}), 0.333251953125);        // nearest to 1/3
  EXPECT_EQ(decode(Dtype::F16, {0xff, 0x7b}), 65504.0);               // largest finite
  EXPECT_EQ(decode(Dtype::F16, {0x00, 0x04}), std::ldexp(1.0, -14));  // smallest normal
  EXPECT_EQ(decode(Dtype::F16, {0x01, 0x00}), std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_EQ(decode(Dtype::F16, {0xff, 0x03}), std::ldexp(1023.0, -24));
  EXPECT_EQ(decode(Dtype::F16, {0x00, 0x7c}), inf);
  EXPECT_EQ(decode(Dtype::F16, {0x00, 0xfc}), -inf);
  EXPECT_TRUE(std::isnan(decode(Dtype::F16, {0x00, 0x7e})));
  EXPECT_TRUE(std::isnan(decode(Dtype::F16, {0x01, 0x7c})));
  EXPECT_EQ(decode(Dtype::F16, {0x00, 0x80}), 0.0);
  EXPECT_TRUE(std::signbit(decode(Dtype::F16, {0x00, 0x80})));

  EXPECT_EQ(decode(Dtype::BF16, {0x80, 0x3f}), 1.0);
  EXPECT_EQ(decode(Dtype::BF16, {0xa0, 0xc0}), -5.0);
  EXPECT_EQ(decode(Dtype::BF16, {0x49, 0x40}), 3.140625);
  EXPECT_EQ(decode(Dtype::BF16, {0x7f, 0x7f}), std::ldexp(255.0, 120));  // largest finite
  EXPECT_EQ(decode(Dtype::BF16, {0x01, 0x00}), std::ldexp(1.0, -133));   // smallest subnormal
  EXPECT_EQ(decode(Dtype::BF16, {0x80, 0x7f}), inf);
  EXPECT_EQ(decode(Dtype::BF16, {0x80, 0xff}), -inf);
  EXPECT_TRUE(std::isnan(decode(Dtype::BF16, {0xc0, 0x7f})));
  // Agrees with float32 for every pattern whose low half is zero.
  for (std::uint32_t b = 0; b < 0x10000; b += 0x101) {
    float f = std::bit_cast<float>(b << 16);
    double d = decode(Dtype::BF16, {std::uint8_t(b & 0xff), std::uint8_t(b >> 8)});
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(d));
    else
      EXPECT_EQ(d, double(f)) << b;
  }
}

TEST(Safetensors, Float8BitPatterns) {
  const double inf = std::numeric_limits<double>::infinity();
  // E4M3 "fn": bias 7, no infinities, only S.1111.111 is NaN.
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x38}), 1.0);
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0xb8}), -1.0);
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x3c}), 1.5);
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x40}), 2.0);
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x78}), 256.0);  // exponent all ones is still a number
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x7e}), 448.0);  // largest finite
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0xfe}), -448.0);
  EXPECT_TRUE(std::isnan(decode(Dtype::F8_E4M3, {0x7f})));
  EXPECT_TRUE(std::isnan(decode(Dtype::F8_E4M3, {0xff})));
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x08}), std::ldexp(1.0, -6));  // smallest normal
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x01}), std::ldexp(1.0, -9));  // smallest subnormal
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x07}), std::ldexp(7.0, -9));
  EXPECT_EQ(decode(Dtype::F8_E4M3, {0x00}), 0.0);
  EXPECT_TRUE(std::signbit(decode(Dtype::F8_E4M3, {0x80})));
  // E5M2: bias 15, IEEE infinities and NaNs.
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0x3c}), 1.0);
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0xc0}), -2.0);
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0x3e}), 1.5);
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0x7b}), 57344.0);  // largest finite
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0x04}), std::ldexp(1.0, -14));
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0x01}), std::ldexp(1.0, -16));
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0x7c}), inf);
  EXPECT_EQ(decode(Dtype::F8_E5M2, {0xfc}), -inf);
  EXPECT_TRUE(std::isnan(decode(Dtype::F8_E5M2, {0x7d})));
  EXPECT_TRUE(std::isnan(decode(Dtype::F8_E5M2, {0xff})));
  // E5M2 is the top byte of an F16: both decoders agree on all 256 patterns.
  for (int b = 0; b < 256; ++b) {
    double f8 = decode(Dtype::F8_E5M2, {std::uint8_t(b)});
    double f16 = decode(Dtype::F16, {0x00, std::uint8_t(b)});
    if (std::isnan(f16))
      EXPECT_TRUE(std::isnan(f8)) << b;
    else
      EXPECT_EQ(f8, f16) << b;
  }
}

TEST(Safetensors, IntegerAndOtherElements) {
  EXPECT_EQ(decode(Dtype::Bool, {0}), 0.0);
  EXPECT_EQ(decode(Dtype::Bool, {1}), 1.0);
  EXPECT_EQ(decode(Dtype::Bool, {2}), 1.0);
  EXPECT_EQ(decode(Dtype::U8, {0xff}), 255.0);
  EXPECT_EQ(decode(Dtype::I8, {0xff}), -1.0);
  EXPECT_EQ(decode(Dtype::I8, {0x80}), -128.0);
  EXPECT_EQ(decode(Dtype::I16, {0x00, 0x80}), -32768.0);
  EXPECT_EQ(decode(Dtype::U16, {0xff, 0xff}), 65535.0);
  EXPECT_EQ(decode(Dtype::I16, {0x34, 0x12}), 4660.0);  // little-endian
  EXPECT_EQ(decode(Dtype::I32, {0xfe, 0xff, 0xff, 0xff}), -2.0);
  EXPECT_EQ(decode(Dtype::U32, {0xff, 0xff, 0xff, 0xff}), 4294967295.0);
  EXPECT_EQ(decode(Dtype::I64, {0, 0, 0, 0, 0, 0, 0, 0x80}), -9223372036854775808.0);
  EXPECT_EQ(decode(Dtype::U64, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), 18446744073709551616.0);
  EXPECT_EQ(decode(Dtype::F32, {0x00, 0x00, 0xc0, 0x3f}), 1.5);
  EXPECT_EQ(decode(Dtype::F64, {0x18, 0x2d, 0x44, 0x54, 0xfb, 0x21, 0x09, 0x40}), 3.141592653589793);
  // `index` counts elements, not bytes.
  std::vector<std::uint8_t> raw = {0x01, 0x00, 0x02, 0x00, 0x03, 0x00};
  EXPECT_EQ(st::element_as_double(Dtype::U16, reinterpret_cast<const std::byte*>(raw.data()), 2), 3.0);
}
