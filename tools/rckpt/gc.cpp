#include "gc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <set>

#include "rkit/atomic_file.hpp"
#include "rkit/ckpt/archive.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rckpt {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether remove_if_abandoned would remove `path` (for --dry-run).
bool remove_if_abandoned_dry(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  return fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) == 0;
}

std::string canonical_or_empty(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::canonical(path, ec);
  return ec ? std::string() : p.string();
}

// Removes an archive unless someone reads it (readers hold a shared flock); returns
// false when it is in use.
bool remove_archive(const std::string& path, bool dry_run) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) return errno == ENOENT;
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return false;
  if (!dry_run && ::unlink(path.c_str()) != 0 && errno != ENOENT) throw system_error("remove " + path, errno);
  return true;
}

}  // namespace

Json GcAction::to_json() const {
  return Json{{"schema", "rkit.ckpt.gc.v1"}, {"archive", archive}, {"action", action}, {"reason", reason}};
}

std::vector<GcAction> gc_checkpoints(const std::string& dir, std::size_t keep_last, bool dry_run) {
  if (keep_last == 0) throw Error(Exit::Usage, "--keep-last must be at least 1");
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw system_error("open directory " + dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());

  struct Candidate {
    std::string path;
    double created;
    std::vector<std::string> bases;  // canonical paths
  };
  std::vector<Candidate> archives;
  std::vector<GcAction> actions;
  for (const auto& name : names) {
    std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (is_atomic_temp_name(name) && name.find(".rkpt.tmp.") != std::string::npos) {
      if (dry_run ? remove_if_abandoned_dry(path) : remove_if_abandoned(path))
        actions.push_back({path, "remove", "left by a pack that did not finish"});
      continue;
    }
    if (!ends_with(name, ".rkpt")) continue;
    try {
      Archive a = Archive::open(path);
      Candidate c{path, a.manifest().created_unix_s, {}};
      for (std::size_t i = 0; i < a.manifest().bases.size(); ++i) c.bases.push_back(canonical_or_empty(a.base_path(i)));
      archives.push_back(std::move(c));
    } catch (const Error& e) {
      actions.push_back({path, "skip", std::string("unreadable: ") + e.what()});
    }
  }
  std::stable_sort(archives.begin(), archives.end(),
                   [](const Candidate& x, const Candidate& y) { return x.created < y.created; });

  // Kept archives, and every base they (and their bases) need.
  std::map<std::string, std::string> keep;  // canonical path -> reason
  std::map<std::string, const Candidate*> by_path;
  for (const auto& c : archives) by_path[canonical_or_empty(c.path)] = &c;
  std::vector<const Candidate*> todo;
  for (std::size_t i = archives.size() > keep_last ? archives.size() - keep_last : 0; i < archives.size(); ++i) {
    keep[canonical_or_empty(archives[i].path)] = fmt::format("one of the newest {}", keep_last);
    todo.push_back(&archives[i]);
  }
  while (!todo.empty()) {
    const Candidate* c = todo.back();
    todo.pop_back();
    for (const auto& b : c->bases) {
      auto it = by_path.find(b);
      if (b.empty() || it == by_path.end() || keep.count(b)) continue;
      keep[b] = "a base of " + c->path;
      todo.push_back(it->second);
    }
  }
  for (const auto& c : archives) {
    auto it = keep.find(canonical_or_empty(c.path));
    if (it != keep.end()) {
      actions.push_back({c.path, "keep", it->second});
    } else if (remove_archive(c.path, dry_run)) {
      actions.push_back({c.path, "remove", fmt::format("older than the newest {}", keep_last)});
    } else {
      actions.push_back({c.path, "skip", "in use by another rckpt"});
    }
  }
  return actions;
}

}  // namespace rkit::rckpt
