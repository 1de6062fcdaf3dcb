// File: rckpt/pack.cpp — packing a checkpoint directory into an .rkpt archive (pack.hpp): the
// walk, the tar layout through libarchive, and the frames hashed and compressed in parallel.
#include "pack.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "rkit/atomic_file.hpp"
#include "rkit/ckpt/archive.hpp"
#include "rkit/ckpt/frame_codec.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/parallel.hpp"
#include "rkit/progress.hpp"
#include "rkit/safetensors.hpp"
#include "rkit/units.hpp"
#include "rkit/version.hpp"

namespace rkit::rckpt {
namespace {

namespace fs = std::filesystem;

// zstd's levels above 19 need far more memory per thread, for little gain on tensors.
constexpr int kMaxLevel = 19;
// Tensor frames are read, hashed and shuffled this much at a time (fits in L2).
constexpr std::uint64_t kChunkBytes = std::uint64_t{256} << 10;

struct Identity {
  dev_t dev;
  ino_t ino;
  bool operator==(const Identity&) const = default;
};

// What the walk saw of an entry; a file must still be this when its frames are read.
struct InputEntry {
  FileRecord record;
  Identity id{};
  std::int64_t ctime_ns = 0;
};

std::int64_t ns(const timespec& t) { return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

// Whether `st` is still the file the walk saw (same inode, size and times).
bool unchanged(const InputEntry& e, const struct stat& st) {
  return Identity{st.st_dev, st.st_ino} == e.id && static_cast<std::uint64_t>(st.st_size) == e.record.bytes &&
         ns(st.st_mtim) == e.record.mtime_ns && ns(st.st_ctim) == e.ctime_ns;
}

// Every entry below `root`, depth first, names in byte order; symlinks are not followed.
// `ancestors`: the directories above (to refuse symlink loops under --dereference).
void walk(const std::string& root, const std::string& rel, const std::vector<Identity>& skip,
          std::vector<Identity>& ancestors, std::vector<InputEntry>& out, const PackOptions& opt) {
  std::string dir_path = rel.empty() ? root : root + "/" + rel;
  DIR* dir = ::opendir(dir_path.c_str());
  if (!dir) throw system_error("open directory " + dir_path, errno);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* d = ::readdir(dir)) {
    std::string name = d->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) throw system_error("read directory " + dir_path, err);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    std::string path = rel.empty() ? name : rel + "/" + name;
    std::string full = root + "/" + path;
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0) throw system_error("stat " + full, errno);
    if (opt.dereference && S_ISLNK(st.st_mode) && ::stat(full.c_str(), &st) != 0) {
      opt.warn(full + ": a symlink to nothing (" + std::strerror(errno) + "); skipped");
      continue;
    }
    Identity id{st.st_dev, st.st_ino};
    if (std::find(skip.begin(), skip.end(), id) != skip.end()) continue;
    if (S_ISDIR(st.st_mode) && std::find(ancestors.begin(), ancestors.end(), id) != ancestors.end()) {
      opt.warn(full + ": a symlink loop back to a directory above it; skipped");
      continue;
    }
    InputEntry e;
    e.id = id;
    e.ctime_ns = ns(st.st_ctim);
    FileRecord& r = e.record;
    r.path = path;
    r.mode = st.st_mode & 07777;
    r.mtime_ns = ns(st.st_mtim);
    if (S_ISREG(st.st_mode)) {
      r.type = EntryType::File;
      r.bytes = static_cast<std::uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      r.type = EntryType::Dir;
    } else if (S_ISLNK(st.st_mode)) {
      r.type = EntryType::Symlink;
      std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
      ssize_t n = ::readlink(full.c_str(), target.data(), target.size());
      if (n < 0) throw system_error("read link " + full, errno);
      target.resize(static_cast<std::size_t>(n));
      r.target = std::move(target);
    } else {
      opt.warn(full + ": not a file, directory or symlink; skipped");
      continue;
    }
    if (!is_safe_relative_path(r.path)) throw Error(Exit::DataErr, full + ": a name that cannot be stored");
    bool is_dir = r.type == EntryType::Dir;
    out.push_back(std::move(e));
    if (is_dir) {
      ancestors.push_back(id);
      walk(root, path, skip, ancestors, out, opt);
      ancestors.pop_back();
    }
  }
}

// Tensors of a safetensors file, or none when the file is not one (with a warning).
std::vector<TensorRecord> read_tensors(const std::string& full, const PackOptions& opt, bool& ok) {
  ok = false;
  std::vector<TensorRecord> tensors;
  try {
    safetensors::Header h = safetensors::read_header(full);
    for (const auto& t : h.tensors)
      tensors.push_back({t.name, std::string(safetensors::dtype_name(t.dtype)), t.shape, t.offset, t.bytes});
    ok = true;
  } catch (const Error& e) {
    if (e.code() != Exit::DataErr) throw;
    opt.warn(std::string(e.what()) + "; packed as plain bytes");
  }
  return tensors;
}

// What a frame of the base archive offers: where its bytes are, in the new archive's bases.
struct BaseFrame {
  std::uint32_t base;
  std::uint64_t offset, bytes, raw_bytes;
  std::uint32_t shuffle;
};

std::string relative_to(const std::string& path, const std::string& dir) {
  fs::path rel = fs::weakly_canonical(fs::absolute(path)).lexically_relative(fs::weakly_canonical(fs::absolute(dir)));
  return rel.empty() ? fs::absolute(path).string() : rel.string();
}

// A ustar archive written through libarchive to a byte sink that counts offsets.
class TarWriter {
 public:
  using Sink = std::function<void(const void*, std::size_t)>;
  explicit TarWriter(Sink sink) : sink_(std::move(sink)), a_(archive_write_new()) {
    if (!a_) throw std::bad_alloc();
    // No blocking: every byte reaches the sink at once, so offsets are exact; no
    // padding after the end blocks, so the index sits at a fixed distance from the end.
    check(archive_write_set_format_ustar(a_));
    check(archive_write_add_filter_none(a_));
    check(archive_write_set_bytes_per_block(a_, 0));
    check(archive_write_set_bytes_in_last_block(a_, 1));
    check(archive_write_open(a_, this, nullptr, &TarWriter::write_cb, nullptr));
  }
  // Unless close() finished the archive, no end-of-archive marker is written: a reader
  // of a cut stream must not take it for a whole tar.
  ~TarWriter() {
    if (!closed_) archive_write_fail(a_);
    archive_write_free(a_);
  }
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Adds a regular file entry; returns the offset of its data in the archive.
  std::uint64_t add(const std::string& name, std::span<const std::byte> data, std::time_t mtime) {
    archive_entry* e = archive_entry_new();
    if (!e) throw std::bad_alloc();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_mtime(e, mtime, 0);
    int rc = archive_write_header(a_, e);
    archive_entry_free(e);
    check(rc);
    std::uint64_t offset = written_;
    std::size_t done = 0;
    while (done < data.size()) {
      la_ssize_t n = archive_write_data(a_, data.data() + done, data.size() - done);
      if (n <= 0) check(ARCHIVE_FATAL);
      done += static_cast<std::size_t>(n);
    }
    check(archive_write_finish_entry(a_));
    return offset;
  }
  void close() {
    check(archive_write_close(a_));
    closed_ = true;
  }
  std::uint64_t written() const { return written_; }

 private:
  static la_ssize_t write_cb(archive*, void* self_ptr, const void* buf, std::size_t n) {
    auto* self = static_cast<TarWriter*>(self_ptr);
    try {
      self->sink_(buf, n);
      self->written_ += n;
      return static_cast<la_ssize_t>(n);
    } catch (...) {
      self->error_ = std::current_exception();
      return -1;
    }
  }
  void check(int rc) {
    if (rc == ARCHIVE_OK) return;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    if (rc == ARCHIVE_WARN) return;
    const char* msg = archive_error_string(a_);
    throw Error(Exit::IoErr, std::string("write archive: ") + (msg ? msg : "libarchive failed"));
  }
  Sink sink_;
  archive* a_;
  std::uint64_t written_ = 0;
  std::exception_ptr error_;
  bool closed_ = false;
};

// The destination: an AtomicFile, or stdout.
class Output {
 public:
  explicit Output(const std::string& path) {
    if (path == "-") {
      if (::isatty(STDOUT_FILENO))
        throw Error(Exit::Usage, "refusing to write an archive to a terminal", "redirect stdout, or use -o FILE");
      return;
    }
    file_.emplace(path);
  }
  void write(const void* buf, std::size_t n) {
    if (file_) return file_->write({static_cast<const char*>(buf), n});
    const char* p = static_cast<const char*>(buf);
    while (n > 0) {
      ssize_t w = ::write(STDOUT_FILENO, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw system_error("write stdout", errno);
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void commit() {
    if (file_) file_->commit();
  }
  // The file being written (the temporary, or stdout redirected to a file), so that
  // a pack into the directory it reads does not pack itself.
  std::optional<Identity> identity() const {
    struct stat st {};
    if (::fstat(file_ ? file_->fd() : STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    return Identity{st.st_dev, st.st_ino};
  }

 private:
  std::optional<AtomicFile> file_;
};

struct Encoded {
  std::uint64_t hash = 0;
  std::vector<std::byte> packed;
  std::size_t packed_bytes = 0;
  const BaseFrame* hit = nullptr;
};

Error changed(const std::string& path) {
  return Error(Exit::IoErr, path + ": changed while being packed", "pack a checkpoint once it is written");
}

}  // namespace
Json PackResult::to_json() const {
  Json j;
  j["schema"] = "rkit.ckpt.pack.v1";
  j["archive"] = output;
  j["files"] = files;
  j["frames"] = frames;
  j["base_frames"] = base_frames;
  j["raw_bytes"] = raw_bytes;
  j["archive_bytes"] = written_bytes;
  j["ratio"] =
      written_bytes ? Json(static_cast<double>(raw_bytes) / static_cast<double>(written_bytes)) : Json(nullptr);
  j["time_s"] = seconds;
  j["bytes_per_s"] = seconds > 0 ? Json(static_cast<double>(raw_bytes) / seconds) : Json(nullptr);
  j["threads"] = threads;
  return j;
}

PackResult pack_checkpoint(const PackOptions& opt) {
  auto start = std::chrono::steady_clock::now();
  if (opt.frame_bytes < kMinFrameBytes || opt.frame_bytes > kMaxFrameBytes)
    throw Error(Exit::Usage, fmt::format("frame size must be between {} and {}", format_bytes(kMinFrameBytes),
                                         format_bytes(kMaxFrameBytes)));
  if (opt.level < 1 || opt.level > kMaxLevel)
    throw Error(Exit::Usage, fmt::format("level must be between 1 and {}", kMaxLevel));
  struct stat root_st {};
  if (::stat(opt.dir.c_str(), &root_st) != 0) throw system_error("open " + opt.dir, errno);
  if (!S_ISDIR(root_st.st_mode)) throw Error(Exit::NoInput, opt.dir + ": not a directory");

  std::optional<Archive> base;
  std::unordered_map<std::uint64_t, BaseFrame> base_frames;
  Manifest m;
  m.created_unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.rkit_version = kVersion;
  m.provenance = opt.provenance;
  m.frame_bytes = opt.frame_bytes;
  m.level = opt.level;
  m.shuffle = opt.shuffle;
  if (opt.base) {
    base.emplace(Archive::open(*opt.base));
    const Manifest& bm = base->manifest();
    bool bases_ok = true;
    try {
      base->open_bases();
    } catch (const Error& e) {
      opt.warn(std::string(e.what()) + "; only frames stored in " + *opt.base + " are reused");
      bases_ok = false;
    }
    std::string out_dir = opt.output == "-" ? "." : parent_dir(opt.output);
    m.bases.push_back({relative_to(*opt.base, out_dir), bm.archive_xxh3});
    for (std::size_t j = 0; j < bm.bases.size(); ++j)
      m.bases.push_back({relative_to(base->base_path(j), out_dir), bm.bases[j].archive_xxh3});
    for (const auto& fr : bm.frames) {
      if (fr.base && !bases_ok) continue;
      std::uint32_t holder = fr.base ? *fr.base + 1 : 0;
      base_frames.emplace(fr.xxh3, BaseFrame{holder, fr.offset, fr.bytes, fr.raw_bytes, fr.shuffle});
    }
  }

  // The archive must not replace one it builds on: its frames would be gone.
  struct stat out_st {};
  bool output_exists = opt.output != "-" && ::stat(opt.output.c_str(), &out_st) == 0;
  if (base && output_exists) {
    std::vector<const Archive*> needed = {&*base};
    for (const auto& b : base->bases()) needed.push_back(&b);
    for (const Archive* a : needed) {
      struct stat st {};
      if (::fstat(a->fd(), &st) == 0 && st.st_dev == out_st.st_dev && st.st_ino == out_st.st_ino)
        throw Error(Exit::Usage, opt.output + ": would replace " + a->path() + ", which the new archive needs",
                    "write the incremental archive under a new name");
    }
  }

  Output out(opt.output);
  std::vector<Identity> skip;
  if (auto id = out.identity()) skip.push_back(*id);
  if (output_exists) skip.push_back({out_st.st_dev, out_st.st_ino});
  std::vector<InputEntry> inputs;
  std::vector<Identity> ancestors = {{root_st.st_dev, root_st.st_ino}};
  walk(opt.dir, "", skip, ancestors, inputs, opt);
  // Links that unpack would refuse (absolute, leaving the checkpoint, through other links).
  std::map<std::string, EntryType> kinds;
  for (const auto& in : inputs) kinds.emplace(in.record.path, in.record.type);
  std::erase_if(inputs, [&](const InputEntry& in) {
    if (in.record.type != EntryType::Symlink) return false;
    std::string why = unsafe_symlink(in.record.path, in.record.target, kinds);
    if (!why.empty())
      opt.warn(fmt::format("{}/{} -> {}: a link with {} (unpack would refuse it); skipped", opt.dir, in.record.path,
                           in.record.target, why));
    return !why.empty();
  });

  // Plan every frame.
  struct Task {
    std::uint64_t file;  // index into m.files and inputs
    FramePlan plan;
  };
  std::vector<Task> tasks;
  for (auto& in : inputs) {
    FileRecord& r = in.record;
    if (r.type == EntryType::File) {
      if (safetensors::is_safetensors_name(r.path))
        r.tensors = read_tensors(opt.dir + "/" + r.path, opt, r.safetensors);
      r.first_frame = tasks.size();
      for (const auto& p : plan_frames(r.bytes, r.tensors, opt.frame_bytes, opt.shuffle))
        tasks.push_back({m.files.size(), p});
      r.frame_count = tasks.size() - r.first_frame;
    }
    m.files.push_back(r);
  }

  XXH3_state_t* hash_state = XXH3_createState();
  if (!hash_state) throw std::bad_alloc();
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash_guard(hash_state, XXH3_freeState);
  XXH3_64bits_reset(hash_state);
  bool hashing = true;
  TarWriter tar([&](const void* buf, std::size_t n) {
    if (hashing) XXH3_64bits_update(hash_state, buf, n);
    out.write(buf, n);
  });
  auto now = static_cast<std::time_t>(m.created_unix_s);
  std::string format_line = std::string(kSchema) + "\n";
  tar.add(kFormatEntry, std::as_bytes(std::span(format_line)), now);

  PackResult result;
  result.threads = pack_threads(opt.threads, opt.frame_bytes, opt.level);
  std::vector<std::unique_ptr<FrameEncoder>> encoders;
  std::vector<std::vector<std::byte>> raw(result.threads);
  std::vector<std::vector<std::byte>> chunks(result.threads, std::vector<std::byte>(kChunkBytes));
  std::vector<std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)>> hash_states;
  for (unsigned t = 0; t < result.threads; ++t) {
    encoders.push_back(std::make_unique<FrameEncoder>(opt.level));
    hash_states.emplace_back(XXH3_createState(), XXH3_freeState);
    if (!hash_states.back()) throw std::bad_alloc();
  }
  BufferPool pool;
  Progress bar("packing", m.raw_bytes(), opt.progress);
  std::uint64_t done_bytes = 0;
  m.frames.resize(tasks.size());
  std::vector<bool> base_used(m.bases.size(), false);

  ordered_parallel<Encoded>(
      tasks.size(), result.threads, result.threads + 2,
      [&](std::size_t i, unsigned worker) {
        const Task& task = tasks[i];
        const FileRecord& file = m.files[task.file];
        std::string full = opt.dir + "/" + file.path;
        int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC | (opt.dereference ? 0 : O_NOFOLLOW));
        if (fd < 0) throw system_error("open " + full, errno);
        struct stat st {};
        int rc = ::fstat(fd, &st);
        const FramePlan& plan = task.plan;
        FrameEncoder& encoder = *encoders[worker];
        std::vector<std::byte>& buf = raw[worker];
        Encoded e;
        std::size_t got = 0;
        try {
          if (rc != 0) throw system_error("stat " + full, errno);
          if (plan.shuffle > 1) {
            // Read, hash and shuffle a cache-sized chunk at a time: one pass over memory.
            std::vector<std::byte>& piece = chunks[worker];
            std::byte* shuffled = encoder.shuffle_buffer(plan.raw_bytes);
            XXH3_state_t* state = hash_states[worker].get();
            XXH3_64bits_reset(state);
            std::uint64_t chunk = kChunkBytes - kChunkBytes % plan.shuffle;
            for (std::uint64_t at = 0; at < plan.raw_bytes; at += chunk) {
              std::size_t want = static_cast<std::size_t>(std::min(chunk, plan.raw_bytes - at));
              std::size_t n = pread_full(fd, piece.data(), want, plan.raw_offset + at, full);
              got += n;
              if (n != want) break;
              XXH3_64bits_update(state, piece.data(), n);
              shuffle_bytes_into({piece.data(), n}, plan.shuffle, shuffled, plan.raw_bytes / plan.shuffle,
                                 at / plan.shuffle);
            }
            e.hash = XXH3_64bits_digest(state);
          } else {
            if (buf.size() < plan.raw_bytes) buf.resize(plan.raw_bytes);
            got = pread_full(fd, buf.data(), plan.raw_bytes, plan.raw_offset, full);
            e.hash = xxh3({buf.data(), got});
          }
        } catch (...) {
          ::close(fd);
          throw;
        }
        ::close(fd);
        if (got != plan.raw_bytes || !unchanged(inputs[task.file], st)) throw changed(full);
        if (auto it = base_frames.find(e.hash); it != base_frames.end() && it->second.raw_bytes == plan.raw_bytes) {
          e.hit = &it->second;
          return e;
        }
        e.packed = pool.take();
        e.packed_bytes = plan.shuffle > 1 ? encoder.compress_shuffled(plan.raw_bytes, e.packed)
                                          : encoder.encode({buf.data(), plan.raw_bytes}, 1, e.packed);
        return e;
      },
      [&](std::size_t i, Encoded&& e) {
        check_interrupted();
        const Task& task = tasks[i];
        FrameRecord& fr = m.frames[i];
        fr.file = task.file;
        fr.raw_offset = task.plan.raw_offset;
        fr.raw_bytes = task.plan.raw_bytes;
        fr.xxh3 = e.hash;
        if (e.hit) {
          fr.shuffle = e.hit->shuffle;
          fr.offset = e.hit->offset;
          fr.bytes = e.hit->bytes;
          fr.base = e.hit->base;
          base_used[e.hit->base] = true;
          ++result.base_frames;
        } else {
          fr.shuffle = task.plan.shuffle;
          fr.bytes = e.packed_bytes;
          fr.offset = tar.add(fmt::format("frames/{:08}.zst", i), {e.packed.data(), e.packed_bytes}, now);
          pool.give(std::move(e.packed));
        }
        done_bytes += fr.raw_bytes;
        bar.update(done_bytes);
      });
  check_interrupted();
  // A file rewritten after its last frame was read would make a torn checkpoint.
  for (const auto& in : inputs) {
    if (in.record.type != EntryType::File) continue;
    std::string full = opt.dir + "/" + in.record.path;
    struct stat st {};
    if ((opt.dereference ? ::stat(full.c_str(), &st) : ::lstat(full.c_str(), &st)) != 0 || !unchanged(in, st))
      throw changed(full);
  }

  // Only the bases some frame lives in are kept, renumbered.
  std::vector<std::uint32_t> renumber(m.bases.size());
  std::vector<BaseRecord> kept;
  for (std::size_t b = 0; b < m.bases.size(); ++b) {
    renumber[b] = static_cast<std::uint32_t>(kept.size());
    if (base_used[b]) kept.push_back(m.bases[b]);
  }
  m.bases = std::move(kept);
  for (auto& fr : m.frames)
    if (fr.base) fr.base = renumber[*fr.base];

  m.archive_bytes = tar.written();
  m.archive_xxh3 = XXH3_64bits_digest(hash_state);
  hashing = false;
  std::string manifest = m.to_json().dump();
  std::uint64_t manifest_offset = tar.add(kManifestEntry, std::as_bytes(std::span(manifest)), now);
  std::string index = index_text(manifest_offset, manifest.size(), xxh3(std::as_bytes(std::span(manifest))));
  tar.add(kIndexEntry, std::as_bytes(std::span(index)), now);
  tar.close();
  check_interrupted();
  out.commit();
  bar.finish();

  result.output = opt.output;
  result.files = m.files.size();
  result.frames = m.frames.size();
  result.raw_bytes = m.raw_bytes();
  result.written_bytes = tar.written();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace rkit::rckpt
