#include "rkit/ckpt/archive.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rkit/ckpt/frame_codec.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rckpt {
namespace {

// The name field of a ustar header block.
std::string tar_name(const char* block) { return std::string(block, strnlen(block, 100)); }

}  // namespace

Archive::Archive(Archive&& other) noexcept { *this = std::move(other); }

Archive& Archive::operator=(Archive&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    manifest_offset_ = other.manifest_offset_;
    manifest_ = std::move(other.manifest_);
    bases_ = std::move(other.bases_);
  }
  return *this;
}

Archive::~Archive() {
  if (fd_ >= 0) ::close(fd_);
}

Archive Archive::open(const std::string& path) {
  if (path == "-")
    throw Error(Exit::Usage, "archives are read by random access: give a file, not -",
                "save the stream to a file first");
  Archive a;
  a.path_ = path;
  // O_NONBLOCK: a FIFO in its place must not hang the open; it is refused below.
  a.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (a.fd_ < 0) throw system_error("open " + path, errno);
  struct stat st {};
  if (::fstat(a.fd_, &st) != 0) throw system_error("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) throw Error(Exit::NoInput, path + ": not a regular file");
  ::flock(a.fd_, LOCK_SH);  // advisory, against gc; where flock is unsupported, read anyway
  a.size_ = static_cast<std::uint64_t>(st.st_size);

  char block[kTarBlock] = {};
  std::size_t got = pread_full(a.fd_, block, sizeof block, 0, path);
  if (got < sizeof block || tar_name(block) != kFormatEntry)
    throw Error(Exit::DataErr, path + ": not an rckpt archive", got == 0 ? "the file is empty" : "");

  // The index is the last entry's data: the last block that is not zero, followed by
  // the two zero blocks that end a tar (copies may pad to a record of 20 blocks).
  constexpr std::uint64_t kTail = 24 * kTarBlock;
  std::optional<IndexRecord> index;
  if (a.size_ % kTarBlock == 0) {
    std::uint64_t tail_start = a.size_ > kTail ? a.size_ - kTail : 0;
    std::vector<char> tail(a.size_ - tail_start);
    pread_full(a.fd_, tail.data(), tail.size(), tail_start, path);
    std::uint64_t zero_blocks = 0;
    for (std::uint64_t end = a.size_; end >= tail_start + kTarBlock; end -= kTarBlock, ++zero_blocks) {
      const char* b = tail.data() + (end - kTarBlock - tail_start);
      if (std::all_of(b, b + kTarBlock, [](char c) { return c == 0; })) continue;
      if (zero_blocks >= 2) index = parse_index({b, kTarBlock});
      break;
    }
  }
  if (!index)
    throw Error(Exit::DataErr,
                fmt::format("{}: truncated or damaged archive: no index at its end ({} bytes)", path, a.size_),
                "the pack that wrote it did not finish, or the copy was cut short");
  const IndexRecord& ix = *index;
  if (ix.manifest_bytes > kMaxManifestBytes || ix.manifest_offset < 2 * kTarBlock || ix.manifest_offset > a.size_ ||
      ix.manifest_bytes > a.size_ - ix.manifest_offset)
    throw Error(Exit::DataErr, path + ": damaged archive: the index points outside the file");
  std::string text(ix.manifest_bytes, '\0');
  pread_full(a.fd_, text.data(), text.size(), ix.manifest_offset, path);
  if (xxh3(std::as_bytes(std::span(text))) != ix.manifest_xxh3)
    throw Error(Exit::DataErr, path + ": damaged archive: the manifest does not match its hash");
  a.manifest_offset_ = ix.manifest_offset;
  a.manifest_ = parse_manifest(text, path + ": manifest");
  if (a.manifest_.archive_bytes != a.manifest_header_offset())
    throw Error(Exit::DataErr, path + ": damaged archive: the manifest does not sit where it says");
  return a;
}

std::string Archive::base_path(std::size_t i) const {
  const std::string& name = manifest_.bases.at(i).name;
  return name.front() == '/' ? name : parent_dir(path_) + "/" + name;
}

bool Archive::complete(const std::string& path) {
  try {
    Archive a = open(path);
    a.open_bases();
    return true;
  } catch (const Error&) {
    return false;
  }
}

void Archive::open_bases() {
  if (bases_.size() == manifest_.bases.size()) return;
  bases_.clear();
  for (std::size_t i = 0; i < manifest_.bases.size(); ++i) {
    std::string where = base_path(i);
    std::size_t needed = 0;
    for (const auto& fr : manifest_.frames) needed += fr.base == i;
    try {
      bases_.push_back(Archive::open(where));
    } catch (const Error& e) {
      if (e.code() == Exit::NoInput)
        throw Error(Exit::NoInput,
                    fmt::format("{}: base archive {} is missing ({} frames live there)", path_, where, needed),
                    "incremental archives need the archives they were packed against");
      throw Error(e.code(), fmt::format("{}: its base archive: {}", path_, e.what()), e.hint(), e.detail());
    }
    if (bases_.back().manifest().archive_xxh3 != manifest_.bases[i].archive_xxh3)
      throw Error(Exit::DataErr, fmt::format("{}: base archive {} is not the one it was packed against (hash {} ≠ {})",
                                             path_, where, hash_hex(bases_.back().manifest().archive_xxh3),
                                             hash_hex(manifest_.bases[i].archive_xxh3)));
  }
}

std::span<const std::byte> Archive::decode_frame(std::size_t i, FrameBuffers& b) const {
  const FrameRecord& fr = manifest_.frames.at(i);
  read_frame(i, b.packed);
  if (b.raw.size() < fr.raw_bytes) b.raw.resize(fr.raw_bytes);
  b.codec.decode(b.packed, fr.raw_bytes, fr.shuffle, b.raw.data());
  std::span<const std::byte> raw(b.raw.data(), fr.raw_bytes);
  if (xxh3(raw) != fr.xxh3) throw FrameError("its bytes do not match their hash");
  return raw;
}

std::string Archive::describe_corruption(std::size_t i, const std::string& why) const {
  const FrameRecord& fr = manifest_.frames.at(i);
  std::string where = fr.base ? " in base " + base_path(*fr.base) : "";
  return fmt::format("{}{} is corrupt: {}", manifest_.describe_frame(i), where, why);
}

Error Archive::corrupt_frame(std::size_t i, const FrameError& e) const {
  return Error(Exit::DataErr, path_ + ": " + describe_corruption(i, e.what()),
               "rckpt verify lists every damaged frame");
}

void Archive::read_frame(std::size_t i, std::vector<std::byte>& out) const {
  const FrameRecord& fr = manifest_.frames.at(i);
  const Archive& holder = fr.base ? bases_.at(*fr.base) : *this;
  out.resize(fr.bytes);
  if (pread_full(holder.fd_, out.data(), fr.bytes, fr.offset, holder.path_) != fr.bytes)
    throw FrameError(fmt::format("lies beyond the end of {}", holder.path_));
}

}  // namespace rkit::rckpt
