// File: suites/io_seq.hpp
//
// The data pattern of the io.seq suite, named here so that tests can corrupt blocks and
// see them caught. A block is a fixed pattern whose first word in every 4 KiB page is a
// stamp of the pass, the block and the page (fio's verify header, reduced to one word).
//
//   BlockPattern pat(64 << 10);
//   pat.reset(buf);                    // the fixed pattern, once per write pass
//   pat.stamp(buf, pass, b);           // before writing block b: 16 stores
//   bool ok = pat.stamps_ok(buf, pass, b);   // after each timed read
//   bool all = pat.all_ok(buf, pass, b);     // stamps and every other word
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rkit::rbench::io {

class BlockPattern {
 public:
  static constexpr std::size_t kPageBytes = 4096;
  static constexpr std::size_t kPageWords = kPageBytes / sizeof(std::uint64_t);

  explicit BlockPattern(std::uint64_t block_bytes);  // a multiple of kPageBytes
  std::size_t words() const { return base_.size(); }

  void reset(std::uint64_t* buf) const;
  void stamp(std::uint64_t* buf, int pass, std::uint64_t block) const;
  bool stamps_ok(const std::uint64_t* buf, int pass, std::uint64_t block) const;
  bool all_ok(const std::uint64_t* buf, int pass, std::uint64_t block) const;

 private:
  std::uint64_t page_stamp(int pass, std::uint64_t block, std::size_t page) const;
  std::uint64_t block_bytes_;
  std::vector<std::uint64_t> base_;
};

}  // namespace rkit::rbench::io
