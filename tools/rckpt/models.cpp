// rckpt model and verify --model (see models.hpp).
#include "models.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "rkit/ckpt/archive.hpp"
#include "rkit/error.hpp"
#include "rkit/time.hpp"

namespace rkit::rckpt {
namespace {

std::vector<Column> model_columns() {
  auto when = [](const Json& v) { return v.is_number() ? format_utc(v.get<double>(), "%Y-%m-%d %H:%M") : "-"; };
  auto digest = [](const Json& v) { return v.is_string() ? v.get<std::string>().substr(0, 8) : "-"; };
  return {{"NAME", "name"},
          {"VERSION", "version"},
          {"STAGE", "stage"},
          {"RUN", "run_id"},
          {"XXH3", "archive_xxh3", digest},
          {"REGISTERED", "registered_unix_s", when},
          {"BY", "registered_by"},
          {"ARCHIVE", "archive"}};
}

void print_versions(const std::vector<runs::ModelVersion>& versions, Format format, std::ostream& out) {
  Printer p(out, format, model_columns());
  for (const auto& v : versions) p.print(v.to_json());
  p.finish();
}

}  // namespace

ModelRef parse_model_ref(const std::string& text) {
  ModelRef r;
  const std::size_t at = text.find('@');
  r.name = text.substr(0, at);
  if (at != std::string::npos) r.version = text.substr(at + 1);
  if (r.name.empty() || r.version.empty())
    throw Error(Exit::Usage,
                fmt::format("model '{}': expected NAME or NAME@VERSION (a number, latest or a stage)", text));
  return r;
}

runs::ModelVersion find_model(runs::Store& store, const ModelRef& ref) {
  std::optional<runs::ModelVersion> v = store.model(ref.name, ref.version);
  if (!v)
    throw Error(Exit::NoInput, fmt::format("no model {}@{} in run store {}", ref.name, ref.version, store.path()));
  return *v;
}

void check_registered(const std::string& archive, const std::string& registered, VerifyReport& report) {
  const std::string have = hash_hex(Archive::open(archive).manifest().archive_xxh3);
  if (have == registered) return;
  VerifyProblem p;
  p.message =
      fmt::format("{} is not the archive registered: its digest is {}, the registry's {}", archive, have, registered);
  report.problems.push_back(std::move(p));
}

int model_register_main(const ModelCommand& m, Format format, std::ostream& out) {
  Archive a = Archive::open(m.archive);
  a.open_bases();  // an incremental archive needs its bases: registering one without them is a mistake
  const Json& p = a.manifest().provenance;
  const std::string run_id = p.is_object() ? json_text(p, "run_id") : "";
  runs::Store store(runs::store_path(m.project));
  const runs::ModelVersion v = store.register_model(m.name, std::filesystem::absolute(m.archive).lexically_normal(),
                                                    hash_hex(a.manifest().archive_xxh3), run_id, unix_now_s());
  print_versions({v}, format, out);
  return 0;
}

int model_ls_main(const ModelCommand& m, Format format, std::ostream& out) {
  runs::Store store(runs::store_path(m.project), /*create=*/false);
  print_versions(store.models(m.name), format, out);
  return 0;
}

int model_show_main(const ModelCommand& m, Format format, std::ostream& out) {
  runs::Store store(runs::store_path(m.project), /*create=*/false);
  const runs::ModelVersion v = find_model(store, parse_model_ref(m.ref));
  if (format != Format::Table) {
    print_versions({v}, format, out);
    return 0;
  }
  out << fmt::format("{} version {}: {}\narchive  {}\nxxh3     {}\nrun      {}\n", v.name, v.version, v.stage,
                     v.archive, v.archive_xxh3, v.run_id.empty() ? "-" : v.run_id);
  for (const runs::StageChange& c : v.history)
    out << fmt::format("  {}  {:<10} by {}\n", format_utc(c.time_s, "%Y-%m-%dT%H:%M:%SZ"), c.stage, c.by);
  return 0;
}

int model_promote_main(const ModelCommand& m, Format format, std::ostream& out) {
  const ModelRef ref = parse_model_ref(m.ref);
  std::int64_t version = 0;
  if (ref.version.find_first_not_of("0123456789") != std::string::npos || ref.version.size() > 12 ||
      (version = std::stoll(ref.version)) < 1)
    throw Error(Exit::Usage, fmt::format("promote needs NAME@VERSION with a version number, not '{}'", m.ref));
  runs::Store store(runs::store_path(m.project));
  print_versions({store.set_stage(ref.name, version, m.stage, unix_now_s())}, format, out);
  return 0;
}

}  // namespace rkit::rckpt
