// File: rkit/atomic_file.hpp
//
// Files that another program may read appear whole or not at all: data goes to a
// temporary name in the same directory, is fsynced, renamed over the target, and the
// directory is fsynced so that the rename survives a crash.
//
//   rkit::atomic_write_file("state/jobs.json", text);          // all at once
//
//   rkit::AtomicFile out("ckpt/manifest.json");                 // streamed
//   out.write(part1); out.write(part2);
//   out.commit();   // without commit(), the destructor removes the temporary
//
// Errors throw rkit::Error with the exit code of the errno (74 I/O, 77 permission,
// 66 missing directory); ENOSPC leaves the old file untouched. The temporary is
// flock()ed while open, so a cleaner can tell a live writer's file from the leftover
// of a killed one (see remove_if_abandoned).
#pragma once

#include <sys/types.h>
#include <string>
#include <string_view>

namespace rkit {

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.tmp.XXXXXX" with permissions `mode` (before umask).
  explicit AtomicFile(std::string path, mode_t mode = 0644);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view data);
  // fsync, rename over the target, fsync the directory. Call once.
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  // The temporary's descriptor (for fstat, fdatasync), until commit().
  int fd() const { return fd_; }

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Whether `name` is an AtomicFile temporary (".<name>.tmp.XXXXXX").
bool is_atomic_temp_name(std::string_view name);
// Removes `path` when no live AtomicFile holds it (its writer was killed) and returns
// true; returns false when it is held or cannot be opened or removed.
bool remove_if_abandoned(const std::string& path);

// Writes `data` to `path` atomically (see above).
void atomic_write_file(const std::string& path, std::string_view data, mode_t mode = 0644);

}  // namespace rkit
