// rckpt's library: frame planning, the frame codec, the manifest's validation, and
// pack → archive → extract round trips in process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <numeric>
#include <random>
#include <thread>

#include "pack.hpp"
#include "rkit/ckpt/archive.hpp"
#include "rkit/ckpt/extract.hpp"
#include "rkit/ckpt/frame_codec.hpp"
#include "rkit/ckpt/manifest.hpp"
#include "rkit/safetensors.hpp"
#include "test_support.hpp"

namespace rkit::rckpt {
namespace {

using rkit::testing::TempDir;
constexpr std::uint64_t kMiB = 1 << 20;

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

// ---- frame planning ----

TEST(PlanFrames, PlainFileIsCutIntoFullFrames) {
  auto plan = plan_frames(20 * kMiB + 5, {}, 8 * kMiB, true);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].raw_offset, 0u);
  EXPECT_EQ(plan[1].raw_offset, 8 * kMiB);
  EXPECT_EQ(plan[2].raw_bytes, 4 * kMiB + 5);
  for (const auto& p : plan) EXPECT_EQ(p.shuffle, 1u);
}

TEST(PlanFrames, EmptyFileHasNoFrames) { EXPECT_TRUE(plan_frames(0, {}, 8 * kMiB, true).empty()); }

TEST(PlanFrames, TensorsGetTheirOwnFramesSmallOnesShare) {
  // header [0, 64), two small F32 tensors, one big F32 tensor, a small BF16 tensor.
  std::vector<TensorRecord> t = {
      {"a", "F32", {16}, 64, 64},
      {"b", "F32", {16}, 128, 64},
      {"big", "F32", {5 * kMiB / 4}, 192, 5 * kMiB},
      {"c", "BF16", {8}, 192 + 5 * kMiB, 16},
  };
  auto plan = plan_frames(192 + 5 * kMiB + 16, t, 2 * kMiB, true);
  ASSERT_EQ(plan.size(), 1u + 1u + 3u + 1u);
  EXPECT_EQ(plan[0].raw_offset, 0u);  // the header, stored as is
  EXPECT_EQ(plan[0].raw_bytes, 64u);
  EXPECT_EQ(plan[0].shuffle, 1u);
  EXPECT_EQ(plan[1].raw_offset, 64u);  // a and b together
  EXPECT_EQ(plan[1].raw_bytes, 128u);
  EXPECT_EQ(plan[1].shuffle, 4u);
  EXPECT_EQ(plan[2].raw_offset, 192u);  // big starts its own frames
  EXPECT_EQ(plan[2].raw_bytes, 2 * kMiB);
  EXPECT_EQ(plan[4].raw_bytes, kMiB);
  EXPECT_EQ(plan[5].shuffle, 2u);  // c: other element size, other frame
  // Frames tile the file exactly.
  std::uint64_t at = 0;
  for (const auto& p : plan) {
    EXPECT_EQ(p.raw_offset, at);
    EXPECT_EQ(p.raw_bytes % p.shuffle, 0u);
    at += p.raw_bytes;
  }
  EXPECT_EQ(at, 192 + 5 * kMiB + 16);
}

TEST(PlanFrames, NoShuffleStoresEverythingAsIs) {
  std::vector<TensorRecord> t = {{"big", "F64", {kMiB / 8}, 8, kMiB}};
  for (const auto& p : plan_frames(8 + kMiB, t, 256 * 1024, false)) EXPECT_EQ(p.shuffle, 1u);
}

TEST(PlanFrames, UnchangedTensorsKeepTheirFramesWhenOthersChange) {
  // The plan depends on the layout only, so an incremental pack finds the same frames.
  std::vector<TensorRecord> t;
  for (int i = 0; i < 10; ++i) t.push_back({"t" + std::to_string(i), "F32", {kMiB / 4}, 8 + i * kMiB, kMiB});
  auto a = plan_frames(8 + 10 * kMiB, t, 8 * kMiB, true);
  EXPECT_EQ(a.size(), 11u);  // header + one frame per 1 MiB tensor (not grouped: not small)
}

TEST(PackThreads, StaysWithinTheMemoryBudget) {
  EXPECT_EQ(pack_threads(4, 8 * kMiB, 1), 4u);
  EXPECT_LE(pack_threads(64, 8 * kMiB, 1), 16u);
  EXPECT_EQ(pack_threads(64, 64 * kMiB, 1), 1u);
  EXPECT_LT(pack_threads(64, 8 * kMiB, 19), pack_threads(64, 8 * kMiB, 1));
  EXPECT_GE(pack_threads(0, 8 * kMiB, 1), 1u);
}

// ---- frame codec ----

TEST(FrameCodec, ShuffleRoundTripsForEveryElementSize) {
  auto raw = random_bytes(4096, 1);
  for (std::size_t size : {1, 2, 4, 8}) {
    std::vector<std::byte> shuffled(raw.size()), back(raw.size());
    shuffle_bytes(raw, size, shuffled.data());
    unshuffle_bytes(shuffled, size, back.data());
    EXPECT_EQ(back, raw) << size;
    if (size == 4) {
      EXPECT_EQ(shuffled[1], raw[4]);  // the second element's first byte
    }
  }
}

TEST(FrameCodec, ShuffleMatchesTheDefinitionAtEveryLength) {
  // The specification: plane j holds byte j of every element, in element order.
  for (std::size_t size : {2, 4, 8}) {
    for (std::size_t n : {0, 1, 15, 16, 17, 31, 33, 64, 1000, 1037}) {
      auto raw = random_bytes(n * size, static_cast<unsigned>(n + size));
      std::vector<std::byte> want(raw.size()), got(raw.size()), back(raw.size());
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < size; ++j) want[j * n + i] = raw[i * size + j];
      shuffle_bytes(raw, size, got.data());
      EXPECT_EQ(got, want) << size << " x " << n;
      unshuffle_bytes(got, size, back.data());
      EXPECT_EQ(back, raw) << size << " x " << n;
      // The same, a slice at a time, as pack does while reading.
      std::vector<std::byte> pieces(raw.size());
      for (std::size_t first = 0; first < n; first += 23) {
        std::size_t count = std::min<std::size_t>(23, n - first);
        shuffle_bytes_into(std::span(raw).subspan(first * size, count * size), size, pieces.data(), n, first);
      }
      EXPECT_EQ(pieces, want) << size << " x " << n;
    }
  }
}

TEST(FrameCodec, EncodeDecodeRoundTrip) {
  auto raw = random_bytes(100000, 2);
  FrameEncoder enc(3);
  FrameDecoder dec;
  std::vector<std::byte> packed, out(raw.size());
  std::size_t n = enc.encode(raw, 4, packed);
  dec.decode({packed.data(), n}, raw.size(), 4, out.data());
  EXPECT_EQ(out, raw);
  EXPECT_EQ(xxh3(out), xxh3(raw));
}

TEST(FrameCodec, DecodeRefusesWrongSizesAndGarbage) {
  auto raw = random_bytes(5000, 3);
  FrameEncoder enc(1);
  FrameDecoder dec;
  std::vector<std::byte> packed, out(raw.size() + 10);
  std::size_t n = enc.encode(raw, 1, packed);
  EXPECT_THROW(dec.decode({packed.data(), n}, raw.size() - 1, 1, out.data()), FrameError);
  EXPECT_THROW(dec.decode({packed.data(), n}, raw.size() + 10, 1, out.data()), FrameError);
  EXPECT_THROW(dec.decode({packed.data(), n - 3}, raw.size(), 1, out.data()), FrameError);
  EXPECT_THROW(dec.decode(raw, raw.size(), 1, out.data()), FrameError);
  std::vector<std::byte> twice(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(n));
  twice.insert(twice.end(), packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(n));
  EXPECT_THROW(dec.decode(twice, raw.size(), 1, out.data()), FrameError);  // two frames
}

// ---- manifest ----

std::string manifest_text(const std::string& files, const std::string& frames, const std::string& extra = "") {
  return R"({"schema":"rkit.ckpt.v1","archive_bytes":100000,"archive_xxh3":"0000000000000001","bases":[)" + extra +
         R"(],"files":)" + files + R"(,"frames":)" + frames + "}";
}

const std::string kOneFile = R"([{"path":"a","type":"file","bytes":10,"first_frame":0,"frame_count":1}])";
const std::string kOneFrame =
    R"([{"file":0,"raw_offset":0,"raw_bytes":10,"shuffle":1,"xxh3":"00000000000000ff","offset":1024,"bytes":20}])";

TEST(Manifest, ParsesAndRoundTrips) {
  Manifest m = parse_manifest(manifest_text(kOneFile, kOneFrame), "m");
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.frames[0].xxh3, 0xffu);
  Manifest again = parse_manifest(m.to_json().dump(), "m2");
  EXPECT_EQ(again.to_json(), m.to_json());
}

void expect_refused(const std::string& text, const std::string& needle) {
  try {
    parse_manifest(text, "m");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Manifest, RefusesUnsafePaths) {
  for (const char* path : {"../x", "/etc/passwd", "a/../../x", "a//b", "./a", "", "a/."}) {
    std::string files = R"([{"path":")" + std::string(path) + R"(","type":"dir"}])";
    expect_refused(manifest_text(files, "[]"), "unsafe path");
  }
}

TEST(Manifest, RefusesEscapingSymlinksAndEntriesBelowThem) {
  expect_refused(manifest_text(R"([{"path":"l","type":"symlink","target":"../x"}])", "[]"), "leaves");
  expect_refused(manifest_text(R"([{"path":"d/l","type":"symlink","target":"../../x"}])", "[]"), "leaves");
  expect_refused(manifest_text(R"([{"path":"l","type":"symlink","target":"/etc"}])", "[]"), "absolute");
  EXPECT_NO_THROW(parse_manifest(manifest_text(R"([{"path":"d/l","type":"symlink","target":"../x"}])", "[]"), "m"));
  expect_refused(manifest_text(R"([{"path":"l","type":"symlink","target":"."},{"path":"l/x","type":"dir"}])", "[]"),
                 "below the symlink");
  expect_refused(manifest_text(R"([{"path":"a","type":"dir"},{"path":"a","type":"dir"}])", "[]"), "twice");
}

TEST(Manifest, UnsafeSymlinkNamesWhyAndFollowsNoOtherLink) {
  std::map<std::string, EntryType> entries = {{"y", EntryType::Symlink}, {"d", EntryType::Dir}};
  EXPECT_EQ(unsafe_symlink("d/l", "../x", entries), "");
  EXPECT_EQ(unsafe_symlink("l", "y", entries), "");  // a link to a (checked) link
  EXPECT_NE(unsafe_symlink("x", "y/..", entries).find("through another symlink"), std::string::npos);
  EXPECT_NE(unsafe_symlink("x", "d/../../z", entries).find("leaves the root"), std::string::npos);
  EXPECT_NE(unsafe_symlink("x", "/etc", entries).find("absolute"), std::string::npos);
  expect_refused(
      manifest_text(R"([{"path":"y","type":"symlink","target":"."},{"path":"x","type":"symlink","target":"y/.."}])",
                    "[]"),
      "through another symlink");
}

TEST(Manifest, RefusesSharedFrameBytesAndAbsoluteBases) {
  std::string two_files = R"([{"path":"a","type":"file","bytes":10,"first_frame":0,"frame_count":1},)"
                          R"({"path":"b","type":"file","bytes":10,"first_frame":1,"frame_count":1}])";
  std::string shared =
      R"([{"file":0,"raw_offset":0,"raw_bytes":10,"xxh3":"00000000000000ff","offset":1024,"bytes":20},)"
      R"({"file":1,"raw_offset":0,"raw_bytes":10,"xxh3":"00000000000000ff","offset":1030,"bytes":20}])";
  expect_refused(manifest_text(two_files, shared), "share archive bytes");
  expect_refused(manifest_text(kOneFile, kOneFrame, R"({"name":"/etc/x.rkpt","archive_xxh3":"0000000000000001"})"),
                 "relative");
}

TEST(Manifest, RefusesFramesThatDoNotCoverTheirFile) {
  std::string gap =
      R"([{"file":0,"raw_offset":1,"raw_bytes":9,"shuffle":1,"xxh3":"00000000000000ff","offset":0,"bytes":9}])";
  expect_refused(manifest_text(kOneFile, gap), "does not continue");
  std::string short_frame =
      R"([{"file":0,"raw_offset":0,"raw_bytes":9,"shuffle":1,"xxh3":"00000000000000ff","offset":0,"bytes":9}])";
  expect_refused(manifest_text(kOneFile, short_frame), "frames hold 9 bytes");
  std::string outside =
      R"([{"file":0,"raw_offset":0,"raw_bytes":10,"shuffle":1,"xxh3":"00000000000000ff","offset":99999,"bytes":20}])";
  expect_refused(manifest_text(kOneFile, outside), "beyond the archive");
  std::string huge =
      R"([{"file":0,"raw_offset":0,"raw_bytes":999999999999,"shuffle":1,"xxh3":"00000000000000ff","offset":0,"bytes":20}])";
  expect_refused(manifest_text(kOneFile, huge), "raw_bytes");
  std::string odd_shuffle =
      R"([{"file":0,"raw_offset":0,"raw_bytes":10,"shuffle":4,"xxh3":"00000000000000ff","offset":0,"bytes":20}])";
  expect_refused(manifest_text(kOneFile, odd_shuffle), "shuffle");
  std::string bad_hash = R"([{"file":0,"raw_offset":0,"raw_bytes":10,"shuffle":1,"xxh3":"xyz","offset":0,"bytes":20}])";
  expect_refused(manifest_text(kOneFile, bad_hash), "hex hash");
  std::string no_base =
      R"([{"file":0,"raw_offset":0,"raw_bytes":10,"shuffle":1,"xxh3":"00000000000000ff","offset":0,"bytes":20,"base":0}])";
  expect_refused(manifest_text(kOneFile, no_base), "no such base");
}

TEST(Manifest, RefusesUnknownMajorVersionAndBadTensors) {
  std::string v2 = manifest_text(kOneFile, kOneFrame);
  v2.replace(v2.find("v1"), 2, "v2");
  expect_refused(v2, "rkit.ckpt.v2");
  std::string tensor =
      R"([{"path":"a","type":"file","bytes":10,"first_frame":0,"frame_count":1,"tensors":[{"name":"t","dtype":"F32","shape":[3],"offset":0,"bytes":16}]}])";
  expect_refused(manifest_text(tensor, kOneFrame), "does not match dtype and shape");
}

TEST(Manifest, IndexTextRoundTrips) {
  std::string text = index_text(123456, 789, 0xdeadbeef);
  ASSERT_EQ(text.size(), kIndexBytes);
  auto ix = parse_index(text);
  ASSERT_TRUE(ix);
  EXPECT_EQ(ix->manifest_offset, 123456u);
  EXPECT_EQ(ix->manifest_bytes, 789u);
  EXPECT_EQ(ix->manifest_xxh3, 0xdeadbeefu);
  EXPECT_FALSE(parse_index(std::string(kIndexBytes, 'x')));
  text[20] = 'z';
  EXPECT_FALSE(parse_index(text));
}

// ---- round trips in process ----

class RckptRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir.file("ck/sub"));
    weights = random_bytes(3 * kMiB, 4);
    safetensors::Writer w;
    w.add("w", safetensors::Dtype::F32, {3 * kMiB / 4}, weights);
    w.add("tiny", safetensors::Dtype::BF16, {2}, std::span(weights).first(4));
    w.write(dir.file("ck/model.safetensors"));
    rkit::testing::write(dir.file("ck/sub/notes.txt"), "hello\n");
  }
  PackResult pack(const std::string& out, std::optional<std::string> base = std::nullopt) {
    PackOptions opt;
    opt.dir = dir.file("ck");
    opt.output = dir.file(out);
    opt.frame_bytes = kMiB;
    opt.base = std::move(base);
    return pack_checkpoint(opt);
  }
  TempDir dir;
  std::vector<std::byte> weights;
};

TEST_F(RckptRoundTrip, PackVerifyUnpack) {
  PackResult r = pack("a.rkpt");
  EXPECT_EQ(r.files, 3u);
  Archive a = Archive::open(dir.file("a.rkpt"));
  EXPECT_EQ(a.manifest().frames.size(), r.frames);
  EXPECT_TRUE(verify_checkpoint(dir.file("a.rkpt"), 2, false).ok());
  UnpackOptions u;
  u.archive = dir.file("a.rkpt");
  u.dir = dir.file("out");
  unpack_checkpoint(u);
  EXPECT_EQ(rkit::testing::slurp(dir.file("out/model.safetensors")),
            rkit::testing::slurp(dir.file("ck/model.safetensors")));
  EXPECT_EQ(rkit::testing::slurp(dir.file("out/sub/notes.txt")), "hello\n");
}

TEST_F(RckptRoundTrip, ArchiveHashCoversEveryByteBeforeTheManifest) {
  pack("a.rkpt");
  Archive a = Archive::open(dir.file("a.rkpt"));
  std::string bytes = rkit::testing::slurp(dir.file("a.rkpt"));
  EXPECT_EQ(a.manifest().archive_bytes, a.manifest_header_offset());
  EXPECT_EQ(xxh3(std::as_bytes(std::span(bytes).first(a.manifest().archive_bytes))), a.manifest().archive_xxh3);
  // Every frame sits where the manifest says.
  std::vector<std::byte> packed;
  FrameDecoder dec;
  for (std::size_t i = 0; i < a.manifest().frames.size(); ++i) {
    const FrameRecord& fr = a.manifest().frames[i];
    a.read_frame(i, packed);
    std::vector<std::byte> raw(fr.raw_bytes);
    dec.decode(packed, fr.raw_bytes, fr.shuffle, raw.data());
    EXPECT_EQ(xxh3(raw), fr.xxh3) << i;
  }
}

TEST_F(RckptRoundTrip, IncrementalPackReusesUnchangedFrames) {
  PackResult full = pack("a.rkpt");
  rkit::testing::write(dir.file("ck/sub/notes.txt"), "changed\n");
  PackResult inc = pack("b.rkpt", dir.file("a.rkpt"));
  EXPECT_EQ(inc.base_frames, full.frames - 1);
  EXPECT_LT(inc.written_bytes, full.written_bytes / 10);
  Archive b = Archive::open(dir.file("b.rkpt"));
  ASSERT_EQ(b.manifest().bases.size(), 1u);
  EXPECT_EQ(b.manifest().bases[0].name, "a.rkpt");
  EXPECT_TRUE(verify_checkpoint(dir.file("b.rkpt"), 2, false).ok());
  // A second generation still points at the archive that holds each frame.
  rkit::testing::write(dir.file("ck/sub/notes.txt"), "changed again\n");
  pack("c.rkpt", dir.file("b.rkpt"));
  Archive c = Archive::open(dir.file("c.rkpt"));
  ASSERT_EQ(c.manifest().bases.size(), 1u);
  EXPECT_EQ(c.manifest().bases[0].name, "a.rkpt");
  EXPECT_TRUE(verify_checkpoint(dir.file("c.rkpt"), 2, false).ok());
}

}  // namespace
}  // namespace rkit::rckpt
