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
// 66 missing directory); ENOSPC leaves the old file untouched.
#pragma once

#include <string>
#include <string_view>
#include <sys/types.h>

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

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `data` to `path` atomically (see above).
void atomic_write_file(const std::string& path, std::string_view data, mode_t mode = 0644);

}  // namespace rkit
