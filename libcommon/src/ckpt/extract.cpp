#include "rkit/ckpt/extract.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "rkit/ckpt/archive.hpp"
#include "rkit/ckpt/frame_codec.hpp"
#include "rkit/cpus.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"
#include "rkit/interrupt.hpp"
#include "rkit/parallel.hpp"
#include "rkit/progress.hpp"
#include "rkit/units.hpp"

namespace rkit::rckpt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Opens directory `rel` (safe relative path, "" for the root) below `root`, creating
// missing parts. No part may be a symlink: an existing one is refused, not followed.
UniqueFd open_dir(int root, const std::string& rel, const std::string& shown_root) {
  UniqueFd cur(::dup(root));
  if (!cur) throw system_error("dup", errno);
  if (rel.empty()) return cur;
  std::string so_far = shown_root;
  for (const auto& part : split_path(rel)) {
    so_far += "/" + part;
    if (::mkdirat(cur.get(), part.c_str(), 0755) != 0 && errno != EEXIST)
      throw system_error("create directory " + so_far, errno);
    int next = ::openat(cur.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      if (errno == ELOOP || errno == ENOTDIR)
        throw Error(Exit::DataErr, so_far + ": is a symlink or not a directory; refusing to write through it");
      throw system_error("open directory " + so_far, errno);
    }
    cur = UniqueFd(next);
  }
  return cur;
}

// ".rkpt-part.<pid>.<index>.<random>": unique even when pids repeat (containers).
std::string temp_name(const char* prefix, std::uint64_t index) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<std::uint64_t>(::getpid()));
  return fmt::format("{}.{}.{}.{:08x}", prefix, ::getpid(), index, rng() & 0xffffffffu);
}

std::string parent_of(const std::string& rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? "" : rel.substr(0, slash);
}

mode_t current_umask() {
  mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

// The files being unpacked: opened on first use under temporary names, renamed when
// their last frame is written, removed if unpacking fails. Used by the writing thread only.
class OutputFiles {
 public:
  OutputFiles(int root, std::string shown_root, const Manifest& m)
      : root_(root), shown_(std::move(shown_root)), m_(m), umask_(current_umask()) {}

  // The descriptor to write file `index` into.
  int fd(std::uint64_t index) {
    auto& slot = open_[index];
    if (!slot) {
      const FileRecord& r = m_.files[index];
      auto f = std::make_unique<Open>();
      f->dir = open_dir(root_, parent_of(r.path), shown_);
      std::string temp = temp_name(".rkpt-part", index);
      f->file =
          UniqueFd(::openat(f->dir.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (!f->file) throw system_error("create " + shown_ + "/" + r.path, errno);
      f->temp = std::move(temp);
      f->remaining = r.frame_count;
      slot = std::move(f);
    }
    return slot->file.get();
  }

  // Call when one frame of `index` is written; the last one puts the file in place.
  void frame_done(std::uint64_t index) {
    auto& slot = open_[index];
    if (--slot->remaining > 0) return;
    std::unique_ptr<Open> f = std::move(slot);
    open_.erase(index);
    finish(index, *f);
  }

  // An empty file, created at once.
  void create_empty(std::uint64_t index) {
    fd(index);
    std::unique_ptr<Open> f = std::move(open_[index]);
    open_.erase(index);
    finish(index, *f);
  }

  const std::set<std::string>& dirs_written() const { return dirs_; }

 private:
  // A file being written; its temporary is removed unless finish() renamed it.
  struct Open {
    UniqueFd dir, file;
    std::string temp;
    std::uint64_t remaining = 0;
    ~Open() {
      if (!temp.empty()) ::unlinkat(dir.get(), temp.c_str(), 0);
    }
  };

  void finish(std::uint64_t index, Open& f) {
    const FileRecord& r = m_.files[index];
    std::string shown = shown_ + "/" + r.path;
    if (::fchmod(f.file.get(), static_cast<mode_t>(r.mode) & 0777 & ~umask_) != 0)
      throw system_error("chmod " + shown, errno);
    timespec times[2] = {{0, UTIME_OMIT}, {r.mtime_ns / 1'000'000'000, r.mtime_ns % 1'000'000'000}};
    if (r.mtime_ns >= 0 && ::futimens(f.file.get(), times) != 0) throw system_error("set times of " + shown, errno);
    if (::fsync(f.file.get()) != 0) throw system_error("fsync " + shown, errno);
    if (::renameat(f.dir.get(), f.temp.c_str(), f.dir.get(), base_name(r.path).c_str()) != 0)
      throw system_error("rename into " + shown, errno);
    f.temp.clear();
    dirs_.insert(parent_of(r.path));
  }

  int root_;
  std::string shown_;
  const Manifest& m_;
  mode_t umask_;
  std::map<std::uint64_t, std::unique_ptr<Open>> open_;
  std::set<std::string> dirs_;
};

std::string normalize_only(std::string p) {
  while (p.size() > 2 && p.compare(0, 2, "./") == 0) p.erase(0, 2);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// Descriptors this process may still open: the soft limit, raised to the hard one.
unsigned descriptor_budget() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 256;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  rlim_t usable = lim.rlim_cur == RLIM_INFINITY ? 65536 : lim.rlim_cur;
  return static_cast<unsigned>(std::min<rlim_t>(usable > 32 ? usable - 32 : 4, 65536));
}

std::uint64_t largest_frame(const Manifest& m) {
  std::uint64_t most = 0;
  for (const auto& fr : m.frames) most = std::max(most, fr.raw_bytes);
  return most;
}

std::uint64_t archive_hash(const Archive& a) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw std::bad_alloc();
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> guard(st, XXH3_freeState);
  XXH3_64bits_reset(st);
  std::vector<char> buf(std::size_t{4} << 20);
  std::uint64_t end = a.manifest().archive_bytes;
  for (std::uint64_t at = 0; at < end;) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), end - at));
    check_interrupted();
    std::size_t got = pread_full(a.fd(), buf.data(), want, at, a.path());
    if (got == 0) break;
    XXH3_64bits_update(st, buf.data(), got);
    at += got;
  }
  return XXH3_64bits_digest(st);
}

}  // namespace

Json UnpackResult::to_json() const {
  return Json{{"schema", "rkit.ckpt.unpack.v1"},
              {"archive", archive},
              {"dir", dir},
              {"files", files},
              {"bytes", bytes},
              {"time_s", seconds},
              {"bytes_per_s", seconds > 0 ? Json(static_cast<double>(bytes) / seconds) : Json(nullptr)}};
}

unsigned decode_threads(unsigned requested, std::uint64_t max_frame_bytes) {
  unsigned threads = requested ? requested : usable_cpus();
  // Each worker: compressed, shuffled and raw copies of a frame; each result in flight: one more.
  std::uint64_t per_worker = 4 * ZSTD_compressBound(std::max<std::uint64_t>(max_frame_bytes, 1));
  return static_cast<unsigned>(std::clamp<std::uint64_t>(kMemoryBudget / per_worker, 1, threads));
}

UnpackResult unpack_checkpoint(const UnpackOptions& opt) {
  auto start = std::chrono::steady_clock::now();
  Archive a = Archive::open(opt.archive);
  const Manifest& m = a.manifest();

  std::vector<bool> selected(m.files.size(), opt.only.empty());
  for (const auto& raw : opt.only) {
    std::string p = normalize_only(raw);
    bool found = false;
    for (std::size_t i = 0; i < m.files.size(); ++i) {
      const std::string& path = m.files[i].path;
      if (path == p || (path.size() > p.size() && path.compare(0, p.size(), p) == 0 && path[p.size()] == '/')) {
        selected[i] = true;
        found = true;
      }
    }
    if (!found)
      throw Error(Exit::NoInput, fmt::format("{}: not in {}", raw, opt.archive), "rckpt ls lists the archive");
  }
  std::vector<std::size_t> frames;
  std::uint64_t total = 0;
  bool need_bases = false;
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const FileRecord& f = m.files[i];
    if (!selected[i] || f.type != EntryType::File) continue;
    total += f.bytes;
    for (std::uint64_t k = f.first_frame; k < f.first_frame + f.frame_count; ++k) {
      frames.push_back(k);
      need_bases |= m.frames[k].base.has_value();
    }
  }
  if (need_bases) a.open_bases();

  if (::mkdir(opt.dir.c_str(), 0755) != 0 && errno != EEXIST) throw system_error("create directory " + opt.dir, errno);
  UniqueFd root(::open(opt.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) throw system_error("open directory " + opt.dir, errno);
  struct statvfs vfs {};
  if (::fstatvfs(root.get(), &vfs) == 0) {
    std::uint64_t free_bytes = std::uint64_t{vfs.f_bavail} * vfs.f_frsize;
    if (total > free_bytes)
      throw Error(Exit::IoErr, fmt::format("{}: not enough space: the files take {}, {} is free", opt.dir,
                                           format_bytes(total), format_bytes(free_bytes)));
  }

  for (std::size_t i = 0; i < m.files.size(); ++i)
    if (selected[i] && m.files[i].type == EntryType::Dir) open_dir(root.get(), m.files[i].path, opt.dir);

  OutputFiles out(root.get(), opt.dir, m);
  for (std::size_t i = 0; i < m.files.size(); ++i)
    if (selected[i] && m.files[i].type == EntryType::File && m.files[i].frame_count == 0) out.create_empty(i);

  // Each file being written holds two descriptors; at most 2 * threads + 1 are open.
  unsigned threads = std::min(decode_threads(opt.threads, largest_frame(m)), descriptor_budget() / 4);
  std::vector<Archive::FrameBuffers> decoders(std::max(threads, 1u));
  Progress bar("unpacking", total, opt.progress);
  std::uint64_t done_bytes = 0;
  // Workers decode; this thread writes, in order. Concurrent writes into one file
  // serialise on its inode lock (and spin there), so one writer is faster.
  BufferPool spare;
  ordered_parallel<std::vector<std::byte>>(
      frames.size(), threads, threads + 1,
      [&](std::size_t k, unsigned worker) {
        std::size_t i = frames[k];
        Archive::FrameBuffers& d = decoders[worker];
        try {
          a.decode_frame(i, d);
        } catch (const FrameError& e) {
          throw a.corrupt_frame(i, e);
        }
        return std::exchange(d.raw, spare.take());
      },
      [&](std::size_t k, std::vector<std::byte>&& raw) {
        check_interrupted();
        const FrameRecord& fr = m.frames[frames[k]];
        int fd = out.fd(fr.file);
        std::size_t done = 0;
        while (done < fr.raw_bytes) {
          ssize_t w = ::pwrite(fd, raw.data() + done, fr.raw_bytes - done, static_cast<off_t>(fr.raw_offset + done));
          if (w < 0) {
            if (errno == EINTR) continue;
            throw system_error("write " + opt.dir + "/" + m.files[fr.file].path, errno);
          }
          done += static_cast<std::size_t>(w);
        }
        out.frame_done(fr.file);
        spare.give(std::move(raw));
        done_bytes += fr.raw_bytes;
        bar.update(done_bytes);
      });
  check_interrupted();

  // Symlinks last, so that nothing is written through one; then directory modes.
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const FileRecord& f = m.files[i];
    if (!selected[i] || f.type != EntryType::Symlink) continue;
    UniqueFd dir = open_dir(root.get(), parent_of(f.path), opt.dir);
    std::string temp = temp_name(".rkpt-link", i);
    if (::symlinkat(f.target.c_str(), dir.get(), temp.c_str()) != 0)
      throw system_error("create symlink " + opt.dir + "/" + f.path, errno);
    if (::renameat(dir.get(), temp.c_str(), dir.get(), base_name(f.path).c_str()) != 0) {
      int err = errno;
      ::unlinkat(dir.get(), temp.c_str(), 0);
      throw system_error("rename into " + opt.dir + "/" + f.path, err);
    }
  }
  mode_t mask = current_umask();
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const FileRecord& f = m.files[i];
    if (selected[i] && f.type == EntryType::Dir)
      ::fchmod(open_dir(root.get(), f.path, opt.dir).get(), (static_cast<mode_t>(f.mode) & 0777 & ~mask) | S_IRWXU);
  }
  // The renames survive a crash once their directories are synced.
  for (const auto& d : out.dirs_written()) ::fsync(open_dir(root.get(), d, opt.dir).get());
  bar.finish();

  UnpackResult r;
  r.archive = opt.archive;
  r.dir = opt.dir;
  for (std::size_t i = 0; i < m.files.size(); ++i) r.files += selected[i];
  r.bytes = total;
  r.seconds = seconds_since(start);
  return r;
}

Json VerifyReport::to_json() const {
  Json j;
  j["schema"] = "rkit.ckpt.verify.v1";
  j["archive"] = archive;
  j["ok"] = ok();
  j["frames"] = frames;
  j["bytes"] = bytes;
  j["time_s"] = seconds;
  j["problems"] = Json::array();
  for (const auto& p : problems) {
    Json e;
    e["frame"] = p.frame ? Json(*p.frame) : Json(nullptr);
    e["file"] = p.file.empty() ? Json(nullptr) : Json(p.file);
    e["tensors"] = p.tensors;
    e["message"] = p.message;
    j["problems"].push_back(std::move(e));
  }
  return j;
}

VerifyReport verify_checkpoint(const std::string& path, unsigned threads, bool progress) {
  auto start = std::chrono::steady_clock::now();
  Archive a = Archive::open(path);
  a.open_bases();
  const Manifest& m = a.manifest();
  VerifyReport report;
  report.archive = path;

  // The bytes around the frames (tar headers, padding) are covered by the archive hash.
  std::uint64_t whole = 0;
  std::exception_ptr hash_error;
  std::thread hasher([&] {
    try {
      whole = archive_hash(a);
    } catch (...) {
      hash_error = std::current_exception();
    }
  });
  struct Outcome {
    std::string error;
  };
  threads = decode_threads(threads, largest_frame(m));
  std::vector<Archive::FrameBuffers> decoders(threads);
  Progress bar("verifying", m.raw_bytes(), progress);
  try {
    ordered_parallel<Outcome>(
        m.frames.size(), threads, 2 * threads,
        [&](std::size_t i, unsigned worker) {
          try {
            a.decode_frame(i, decoders[worker]);
          } catch (const FrameError& e) {
            return Outcome{e.what()};
          }
          return Outcome{};
        },
        [&](std::size_t i, Outcome&& o) {
          check_interrupted();
          const FrameRecord& fr = m.frames[i];
          report.bytes += fr.raw_bytes;
          ++report.frames;
          bar.update(report.bytes);
          if (o.error.empty()) return;
          VerifyProblem p;
          p.frame = i;
          p.file = m.files[fr.file].path;
          p.tensors = m.tensors_in_frame(i);
          p.message = a.describe_corruption(i, o.error);
          report.problems.push_back(std::move(p));
        });
  } catch (...) {
    hasher.join();
    throw;
  }
  hasher.join();
  bar.finish();
  if (hash_error) std::rethrow_exception(hash_error);
  if (whole != m.archive_xxh3 && report.ok())
    report.problems.push_back(
        {std::nullopt, "", {}, "the bytes around the frames (tar headers, padding) do not match the archive hash"});
  report.seconds = seconds_since(start);
  return report;
}

void cat_entry(const std::string& path, const std::string& spec, unsigned threads, int fd) {
  Archive a = Archive::open(path);
  const Manifest& m = a.manifest();
  std::optional<std::size_t> file = m.find(spec);
  std::string tensor;
  bool tensor_given = false;
  if (!file) {
    auto colon = spec.rfind(':');
    if (colon != std::string::npos) {
      file = m.find(spec.substr(0, colon));
      tensor = spec.substr(colon + 1);
      tensor_given = file.has_value();
    }
  }
  if (!file) throw Error(Exit::NoInput, fmt::format("{}: not in {}", spec, path), "rckpt ls lists the archive");
  const FileRecord& f = m.files[*file];
  if (f.type != EntryType::File) throw Error(Exit::NoInput, fmt::format("{}: not a file in {}", f.path, path));
  std::uint64_t begin = 0, end = f.bytes;
  if (tensor_given) {
    if (tensor.empty()) throw Error(Exit::Usage, spec + ": no tensor name after ':'");
    auto t = std::find_if(f.tensors.begin(), f.tensors.end(), [&](const TensorRecord& r) { return r.name == tensor; });
    if (t == f.tensors.end())
      throw Error(Exit::NoInput, fmt::format("{}: no tensor '{}' in {}", path, tensor, f.path),
                  "rckpt ls --tensors lists them");
    begin = t->offset;
    end = t->offset + t->bytes;
  }
  std::vector<std::size_t> frames;
  bool need_bases = false;
  for (std::uint64_t k = f.first_frame; k < f.first_frame + f.frame_count; ++k) {
    const FrameRecord& fr = m.frames[k];
    if (fr.raw_offset < end && fr.raw_offset + fr.raw_bytes > begin) {
      frames.push_back(k);
      need_bases |= fr.base.has_value();
    }
  }
  if (need_bases) a.open_bases();
  threads = decode_threads(threads, largest_frame(m));
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(frames.size(), 1)));
  std::vector<Archive::FrameBuffers> decoders(threads);
  ordered_parallel<std::vector<std::byte>>(
      frames.size(), threads, threads + 1,
      [&](std::size_t k, unsigned worker) {
        Archive::FrameBuffers& d = decoders[worker];
        try {
          a.decode_frame(frames[k], d);
        } catch (const FrameError& e) {
          throw a.corrupt_frame(frames[k], e);
        }
        return std::exchange(d.raw, {});
      },
      [&](std::size_t k, std::vector<std::byte>&& raw) {
        const FrameRecord& fr = m.frames[frames[k]];
        std::uint64_t from = std::max(begin, fr.raw_offset), to = std::min(end, fr.raw_offset + fr.raw_bytes);
        write_full(fd, raw.data() + (from - fr.raw_offset), to - from, "stdout");
      });
}

}  // namespace rkit::rckpt
