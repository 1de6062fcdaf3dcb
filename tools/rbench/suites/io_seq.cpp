// File: suites/io_seq.cpp
//
// io.seq: sequential write and read throughput of one file in RunOptions::dir ($TMPDIR,
// else /tmp), block sizes 64 KiB, 1 MiB, 4 MiB with a 1 GiB file (--quick: 1 MiB and
// 4 MiB, 256 MiB). The pattern is fio's `--rw=write --end_fsync=1` then `--rw=read`, at
// queue depth 1 with --direct=1 where the filesystem allows it. Rates are in decimal
// MB/s (1e6 bytes per second), fio's "(MB/s)" figure.
//
// The file is allocated up front (fallocate, as fio does). Each repetition overwrites the
// whole file block by block and fsyncs it, then reads it back whole; each pass is timed
// whole, from the first call to the fsync or the last read, as fio reports its bandwidth.
// The first pass turns the allocated extents into written ones; the warm-up absorbs that.
//
// The page cache: the file is opened with O_DIRECT; where the filesystem refuses it
// (EINVAL on open or on the first aligned write: tmpfs before Linux 6.6, some FUSE and
// overlay filesystems), the suite falls back to buffered I/O (params "direct": false) and
// drops the file's pages with posix_fadvise(DONTNEED) after the fsync, before reading
// (params "cache_dropped": whether the kernel accepted it).
//
// Correctness, as fio's verify headers do it: the blocks hold a fixed pattern whose first
// word in every 4 KiB page is a stamp of the pass, the block and the page. Each timed read
// checks the stamps, so a page that comes back from elsewhere in the file or from an
// earlier pass counts as wrong; after the last pass one untimed read compares every byte.
// Stamping and checking 16 words per 64 KiB instead of filling and comparing the whole
// block keeps the CPU work between the calls as small as fio's: on these VMs, a full pass
// over the block between calls slowed the calls themselves (64 KiB reads ~10%).
//
// Space: the file takes at most half the directory's free space. With less, it shrinks to
// fit (params "file_bytes" says what was used); below 64 MiB the suite throws
// Error(IoErr, "...: not enough space"). RKIT_BENCH_IO_BYTES (a size such as "8M")
// overrides the file size, rounded down to a multiple of the largest block; the unit
// tests use it. RKIT_BENCH_IO_BLOCKS ("64K,1M") sets the block sizes instead of the mode's,
// so that a benchmark can pair one block size of rbench with fio's, back to back. The file
// is removed on every way out, Ctrl-C included.
#include "io_seq.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/units.hpp"
#include "suite.hpp"

namespace rkit::rbench::io {

BlockPattern::BlockPattern(std::uint64_t block_bytes)
    : block_bytes_(block_bytes), base_(block_bytes / sizeof(std::uint64_t)) {
  for (std::size_t w = 0; w < base_.size(); ++w) base_[w] = mix64(w + 1);
}

std::uint64_t BlockPattern::page_stamp(int pass, std::uint64_t block, std::size_t page) const {
  return mix64(mix64((std::uint64_t(pass) << 32) ^ block_bytes_) ^ block) + page;
}

void BlockPattern::reset(std::uint64_t* buf) const { std::copy(base_.begin(), base_.end(), buf); }

void BlockPattern::stamp(std::uint64_t* buf, int pass, std::uint64_t block) const {
  for (std::size_t w = 0; w < base_.size(); w += kPageWords) buf[w] = page_stamp(pass, block, w / kPageWords);
}

bool BlockPattern::stamps_ok(const std::uint64_t* buf, int pass, std::uint64_t block) const {
  for (std::size_t w = 0; w < base_.size(); w += kPageWords)
    if (buf[w] != page_stamp(pass, block, w / kPageWords)) return false;
  return true;
}

bool BlockPattern::all_ok(const std::uint64_t* buf, int pass, std::uint64_t block) const {
  if (!stamps_ok(buf, pass, block)) return false;
  for (std::size_t w = 0; w < base_.size(); ++w)
    if (w % kPageWords != 0 && buf[w] != base_[w]) return false;
  return true;
}

}  // namespace rkit::rbench::io

namespace rkit::rbench {
namespace {

constexpr std::size_t kAlign = 4096;  // O_DIRECT buffer, offset and length alignment
constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kMinFileBytes = 64 * kMiB;

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The benchmark file, opened read-write, O_DIRECT where allowed; removed on destruction.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& dir) {
    // Unique even on a directory other machines benchmark at the same time (pids repeat).
    const std::string path = fmt::format("{}/.rbench-io-seq.{}.{:08x}", dir, ::getpid(), std::random_device{}());
    const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
    direct_ = fd >= 0;
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), flags, 0600);  // no O_DIRECT here
    if (fd < 0) throw system_error("create " + path, errno);
    fd_.reset(fd);
    remove_.path = path;
    if (direct_) {  // some filesystems accept O_DIRECT at open and refuse it at write
      auto probe = aligned(kAlign);
      std::fill_n(static_cast<char*>(probe.get()), kAlign, 0);
      if (::pwrite(fd_.get(), probe.get(), kAlign, 0) < 0) {
        if (errno != EINVAL) throw system_error("write " + path, errno);
        direct_ = false;
        fd_.reset(::open(path.c_str(), O_RDWR | O_CLOEXEC));
        if (!fd_) throw system_error("open " + path, errno);
      }
    }
  }
  static std::unique_ptr<void, decltype(&std::free)> aligned(std::size_t bytes) {
    void* p = nullptr;
    if (::posix_memalign(&p, kAlign, bytes) != 0) throw std::bad_alloc();
    return {p, &std::free};
  }
  // Allocates `bytes` up front, as fio does, so that a full disk fails before the first
  // pass; filesystems without fallocate skip it.
  void reserve(std::uint64_t bytes) const {
    if (::fallocate(fd_.get(), 0, 0, static_cast<off_t>(bytes)) != 0 && errno != EOPNOTSUPP)
      throw system_error("allocate " + path(), errno);
  }
  int fd() const { return fd_.get(); }
  const std::string& path() const { return remove_.path; }
  bool direct() const { return direct_; }

 private:
  struct Remover {  // a member, so that it also runs when the constructor throws
    std::string path;
    ~Remover() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } remove_;
  UniqueFd fd_;
  bool direct_ = false;
};

std::string default_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// The block sizes: the mode's, or RKIT_BENCH_IO_BLOCKS ("64K,4M": each a multiple of 4 KiB
// up to 64 MiB, in increasing order; Error(Usage) otherwise).
std::vector<std::uint64_t> block_sizes(bool quick) {
  const char* env = std::getenv("RKIT_BENCH_IO_BLOCKS");
  if (!env || !*env)
    return quick ? std::vector<std::uint64_t>{kMiB, 4 * kMiB} : std::vector<std::uint64_t>{64 << 10, kMiB, 4 * kMiB};
  std::vector<std::uint64_t> blocks;
  const std::string_view text = env;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    std::uint64_t b = 0;
    try {
      b = parse_size(text.substr(start, end - start));
    } catch (const Error& e) {
      throw Error(Exit::Usage, std::string("RKIT_BENCH_IO_BLOCKS: ") + e.what());
    }
    if (b == 0 || b % 4096 != 0 || b > 64 * kMiB || (!blocks.empty() && b <= blocks.back()))
      throw Error(Exit::Usage, "RKIT_BENCH_IO_BLOCKS: '" + std::string(text) +
                                   "': sizes must be multiples of 4K up to 64M, in increasing order");
    blocks.push_back(b);
    start = end + 1;
  }
  return blocks;
}

// The file size: the mode's default, or RKIT_BENCH_IO_BYTES (Error(Usage) when malformed
// or below `block`).
std::uint64_t file_size_asked(const RunOptions& opt, std::uint64_t block) {
  const char* env = std::getenv("RKIT_BENCH_IO_BYTES");
  if (!env || !*env) return opt.quick ? 256 * kMiB : 1024 * kMiB;
  std::uint64_t want = 0;
  try {
    want = parse_size(env);
  } catch (const Error& e) {
    throw Error(Exit::Usage, std::string("RKIT_BENCH_IO_BYTES: ") + e.what());
  }
  if (want < block) throw Error(Exit::Usage, "RKIT_BENCH_IO_BYTES: at least " + format_bytes(block));
  return want;
}

// The file size asked, a multiple of `block`, shrunk to half the free space in `dir`.
std::uint64_t file_size(const RunOptions& opt, const std::string& dir, std::uint64_t block) {
  std::uint64_t want = file_size_asked(opt, block);
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) throw system_error(dir, errno);
  const std::uint64_t budget = std::uint64_t{fs.f_bavail} * fs.f_frsize / 2;
  if (want > budget) {
    if (budget < std::min(want, kMinFileBytes))
      throw Error(Exit::IoErr, dir + ": not enough space",
                  "io.seq needs " + format_bytes(2 * std::min(want, kMinFileBytes)) + " free, twice its file");
    want = budget;
  }
  return want / block * block;
}

class IoSeq : public Suite {
 public:
  std::string name() const override { return "io.seq"; }
  std::string description() const override {
    return "sequential write (with fsync) and read of one file, O_DIRECT where allowed";
  }

  void check_options(const RunOptions& opt) const override { file_size_asked(opt, block_sizes(opt.quick).back()); }

  std::vector<Measurement> run(const RunOptions& opt, const Progress& progress) override {
    const std::string dir = opt.dir.empty() ? default_dir() : opt.dir;
    const std::vector<std::uint64_t> blocks = block_sizes(opt.quick);
    const std::uint64_t file_bytes = file_size(opt, dir, blocks.back());
    ScratchFile file(dir);
    file.reserve(file_bytes);
    std::vector<Measurement> out;
    for (std::uint64_t block : blocks) {
      if (progress)
        progress(fmt::format("io.seq {} blocks, {} file in {} ({})", format_bytes(block), format_bytes(file_bytes), dir,
                             file.direct() ? "O_DIRECT" : "buffered"));
      for (Measurement& m : measure(opt, file, block, file_bytes)) {
        m.params["dir"] = dir;
        out.push_back(std::move(m));
      }
    }
    return out;
  }

 private:
  // The "write" and "read" measurements of one block size.
  static std::vector<Measurement> measure(const RunOptions& opt, const ScratchFile& file, std::uint64_t block,
                                          std::uint64_t file_bytes) {
    const std::uint64_t nblocks = file_bytes / block;
    const io::BlockPattern pattern(block);
    auto buffer = ScratchFile::aligned(block);
    auto* buf = static_cast<std::uint64_t*>(buffer.get());

    Measurement write, read;
    write.metric = "write";
    read.metric = "read";
    write.unit = read.unit = "MB/s";
    std::uint64_t mismatches = 0;
    bool cache_dropped = false;
    const int passes = opt.warmup + opt.reps;
    for (int pass = 0; pass < passes; ++pass) {
      check_interrupted();  // Ctrl-C unwinds here, and ScratchFile removes the file
      pattern.reset(buf);
      if (::lseek(file.fd(), 0, SEEK_SET) < 0) throw system_error("seek " + file.path(), errno);
      auto t = std::chrono::steady_clock::now();
      for (std::uint64_t b = 0; b < nblocks; ++b) {
        pattern.stamp(buf, pass, b);
        write_full(file.fd(), buf, block, file.path());
      }
      if (::fsync(file.fd()) != 0) throw system_error("fsync " + file.path(), errno);
      const double write_s = seconds(t);
      cache_dropped = ::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_DONTNEED) == 0;

      t = std::chrono::steady_clock::now();
      for (std::uint64_t b = 0; b < nblocks; ++b) {
        const std::size_t got = pread_full(file.fd(), buf, block, b * block, file.path());
        if (got < block) {  // the file ended early: every block from here on is missing
          mismatches += nblocks - b;
          break;
        }
        mismatches += !pattern.stamps_ok(buf, pass, b);
      }
      const double read_s = seconds(t);
      if (pass >= opt.warmup) {
        write.samples.push_back(double(file_bytes) / 1e6 / write_s);
        read.samples.push_back(double(file_bytes) / 1e6 / read_s);
      }
    }
    // One untimed read of the last pass's blocks, every byte compared.
    for (std::uint64_t b = 0; b < nblocks; ++b) {
      if (pread_full(file.fd(), buf, block, b * block, file.path()) < block) {
        mismatches += nblocks - b;
        break;
      }
      mismatches += !pattern.all_ok(buf, passes - 1, b);
    }
    for (Measurement* m : {&write, &read}) {
      m->correct = mismatches == 0;
      m->check = fmt::format(
          "every block read back as written ({} blocks; page stamps each pass, all bytes at the end)", nblocks);
      if (mismatches) m->check += fmt::format(": {} mismatched", mismatches);
      m->params = {{"block_bytes", block},
                   {"file_bytes", file_bytes},
                   {"direct", file.direct()},
                   {"cache_dropped", cache_dropped}};
    }
    return {std::move(write), std::move(read)};
  }
};

}  // namespace

RKIT_BENCH_SUITE(IoSeq);

}  // namespace rkit::rbench
