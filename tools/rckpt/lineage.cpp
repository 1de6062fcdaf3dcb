// rckpt log: a checkpoint's lineage (see lineage.hpp).
#include "lineage.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>

#include "rkit/ckpt/archive.hpp"
#include "rkit/error.hpp"
#include "rkit/file.hpp"

namespace rkit::rckpt {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The record of one archive of the walk, from its manifest's provenance.
Json record_of(int depth, const std::string& path, const Manifest& m) {
  const Json& p = m.provenance;
  Json r{{"schema", "rkit.ckpt.log.v1"},
         {"depth", depth},
         {"archive", path},
         {"archive_xxh3", hash_hex(m.archive_xxh3)},
         {"status", p.is_object() ? "ok" : "unknown"},
         {"run_id", nullptr},
         {"step", nullptr},
         {"config_xxh3", nullptr},
         {"inputs", Json::array()},
         {"parent_kind", nullptr}};
  if (!p.is_object()) return r;
  for (const char* key : {"run_id", "step", "config_xxh3", "inputs"})
    if (const auto it = p.find(key); it != p.end()) r[key] = *it;
  if (const auto it = p.find("parent"); it != p.end() && it->is_object()) r["parent_kind"] = json_text(*it, "kind");
  return r;
}

}  // namespace

Lineage lineage(const std::string& archive) {
  Lineage out;
  std::set<std::uint64_t> seen;
  std::string path = archive;
  Archive a = Archive::open(path);
  for (int depth = 0;; ++depth) {
    const Manifest& m = a.manifest();
    out.records.push_back(record_of(depth, path, m));
    if (!seen.insert(m.archive_xxh3).second) {
      out.broken = fmt::format("{} appears twice in its own lineage", path);
      out.records.back()["status"] = "loop";
      return out;
    }
    const Json& p = m.provenance;
    const auto parent = p.is_object() ? p.find("parent") : p.end();
    if (!p.is_object() || parent == p.end() || !parent->is_object()) {
      if (!p.is_object() && depth > 0) out.broken = fmt::format("{} carries no provenance", path);
      return out;
    }
    if (depth == 1000) {
      out.broken = "more than 1000 links";
      return out;
    }
    const std::string want = json_text(*parent, "archive"), want_xxh3 = json_text(*parent, "archive_xxh3");
    std::string next = want;
    if (!next.empty() && !exists(next)) {  // moved with its child?
      const std::string beside = parent_dir(path) + "/" + base_name(want);
      if (exists(beside)) next = beside;
    }
    Json missing{{"schema", "rkit.ckpt.log.v1"},
                 {"depth", depth + 1},
                 {"archive", want},
                 {"archive_xxh3", want_xxh3},
                 {"status", "missing"},
                 {"run_id", parent->value("run_id", Json())},
                 {"step", nullptr},
                 {"config_xxh3", nullptr},
                 {"inputs", Json::array()},
                 {"parent_kind", nullptr}};
    struct stat st {};
    if (!next.empty() && ::stat(next.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {  // a step-N/ folder: no manifest
      missing["status"] = "folder";
      missing["archive"] = next;
      out.records.push_back(missing);
      return out;
    }
    if (next.empty() || !exists(next)) {
      out.records.push_back(missing);
      out.broken = fmt::format("{}'s parent {} is missing", path, want.empty() ? "(unnamed)" : want);
      return out;
    }
    try {
      a = Archive::open(next);
    } catch (const Error& e) {
      missing["status"] = "unreadable";
      missing["archive"] = next;
      out.records.push_back(missing);
      out.broken = fmt::format("{}'s parent: {}", path, e.what());
      return out;
    }
    path = next;
    if (!want_xxh3.empty() && hash_hex(a.manifest().archive_xxh3) != want_xxh3) {
      Json r = record_of(depth + 1, path, a.manifest());
      r["status"] = "changed";
      out.records.push_back(r);
      out.broken = fmt::format("{} is not the parent {} was made from: its digest is {}, not {}", path,
                               out.records[out.records.size() - 2].at("archive").get<std::string>(),
                               hash_hex(a.manifest().archive_xxh3), want_xxh3);
      return out;
    }
  }
}

Json read_provenance(const std::string& path) {
  struct stat st {};
  if (path != "-" && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error(Exit::DataErr, fmt::format("--provenance {}: not a regular file", path));
  Json p = parse_json(read_file(path, std::uint64_t{1} << 20), input_name(path));
  if (!p.is_object()) throw Error(Exit::DataErr, fmt::format("--provenance {}: expected a JSON object", path));
  return p;
}

}  // namespace rkit::rckpt
