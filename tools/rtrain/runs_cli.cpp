// rtrain runs: the run store's commands (see runs_cli.hpp).
#include "runs_cli.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "rkit/atomic_file.hpp"
#include "rkit/digest.hpp"
#include "rkit/error.hpp"
#include "rkit/printer.hpp"
#include "rkit/time.hpp"
#include "rkit/units.hpp"
#include "rkit/version.hpp"
#include "run_cli.hpp"
#include "runs_html.hpp"
#include "tracking.hpp"

namespace rkit::rtrain {
namespace {

std::string when(const Json& v) { return v.is_number() ? format_utc(v.get<double>(), "%Y-%m-%d %H:%M:%S") : "-"; }
std::string seconds(const Json& v) { return v.is_number() ? format_duration(v.get<double>()) : "-"; }
std::string number(const Json& v) {
  return v.is_number() ? fmt::format("{:.6g}", v.get<double>()) : Printer::cell(v, "-");
}

// The runs named, each found whole; Error(NoInput) for one the store does not hold.
std::vector<runs::Run> find_all(runs::Store& store, const std::vector<std::string>& ids) {
  std::vector<runs::Run> out;
  for (const std::string& id : ids) {
    std::optional<runs::Run> r = store.find(id);
    if (!r) throw Error(Exit::NoInput, fmt::format("no run {} in run store {}", id, store.path()));
    out.push_back(std::move(*r));
  }
  return out;
}

// The table row of a run for ls: its own fields, then the values Filter::pick named,
// under the keys `picked` gives them ("param:train.lr", "metric:loss").
Json ls_row(const runs::Run& r, const std::vector<std::string>& picked) {
  Json row{{"id", r.id},
           {"experiment", r.experiment},
           {"name", r.name.empty() ? Json() : Json(r.name)},
           {"status", r.live_status()},
           {"start_unix_s", r.start_s},
           {"duration_s", r.end_s ? Json(*r.end_s - r.start_s) : Json()}};
  for (std::size_t i = 0; i < picked.size(); ++i) row[picked[i]] = r.picked[i];
  return row;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Writes runs as JSON lines to stdout in large pieces: ls of 100,000 runs is a few hundred
// MB of JSON.
class LineWriter {
 public:
  void line(const runs::Run& r) {
    r.append_json_line(buf_);
    buf_ += '\n';
    if (buf_.size() > (1u << 20)) flush();
  }
  void flush() {
    std::cout.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }
  ~LineWriter() {  // a write that failed has thrown already: nothing more to say here
    try {
      flush();
    } catch (...) {
    }
  }

 private:
  std::string buf_;
};

}  // namespace

RunsCli::RunsCli(Tool& tool) : tool_(tool) {
  runs_ = tool.add_subcommand("runs", "The run store: list, show, compare and reproduce recorded runs");
  runs_->require_subcommand(1);
  runs_
      ->add_option("--project", project_,
                   "The store of this project folder, DIR/runs.db (default $RKIT_PROJECT_DIR, else the state "
                   "directory's)")
      ->type_name("DIR");
  ls_ = runs_->add_subcommand("ls", "List runs, oldest first, with their final metrics");
  ls_->add_option("--experiment", experiment_, "Only this experiment's runs")->type_name("NAME");
  ls_->add_option("--status", status_, "Only runs in this state")
      ->check(CLI::IsMember({"RUNNING", "FINISHED", "FAILED", "KILLED", "LOST"}))
      ->type_name("STATE");
  ls_->add_option("--tag", tags_, "Only runs with this tag (repeatable)")->type_name("KEY=VALUE");
  ls_->add_option("--param", params_, "Only runs whose parameter passes: train.lr>=0.001 (repeatable)")
      ->type_name("COND");
  ls_->add_option("--metric", metric_filters_, "Only runs whose final metric passes: eval_loss<0.5 (repeatable)")
      ->type_name("COND");
  ls_->add_option("--last", last_, "Only the newest N")
      ->type_name("N")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  ls_->add_option("--show-metric", show_metrics_, "Final metrics to show as columns (default loss, eval_loss)")
      ->type_name("KEY")
      ->delimiter(',');
  ls_->add_option("--show-param", show_params_, "Parameters to show as columns")->type_name("KEY")->delimiter(',');
  show_ = runs_->add_subcommand("show", "One run: configuration, system, code, inputs, outputs, metrics");
  show_->add_option("id", ids_, "Run id (a unique prefix of 4 or more digits will do)")
      ->required()
      ->expected(1)
      ->type_name("ID");
  metrics_ = runs_->add_subcommand("metrics", "A run's metrics as time series, a row per step");
  metrics_->add_option("id", ids_, "Run id")->required()->expected(1)->type_name("ID");
  metrics_->add_option("--key", keys_, "Only these metrics (repeatable, or comma-separated)")
      ->type_name("KEY")
      ->delimiter(',');
  compare_ = runs_->add_subcommand("compare", "Compare runs: parameters that differ, final and best metrics");
  compare_->add_option("ids", ids_, "Two or more run ids")->required()->type_name("ID");
  compare_->add_flag("--all", all_, "Show every parameter, not only those that differ");
  compare_->add_option("--html", html_, "Also write a self-contained page with the metrics' curves")->type_name("FILE");
  reproduce_ = runs_->add_subcommand(
      "reproduce", "Train a recorded run again; exit 1 unless its final weights are bitwise the same");
  reproduce_->add_option("id", ids_, "Run id")->required()->expected(1)->type_name("ID");
  reproduce_->add_option("--ckpt-dir", ckpt_dir_, "Checkpoint the reproduction here (default: no checkpoints)")
      ->type_name("D");
  reproduce_->add_option("--output", output_, "Write the reproduction's final weights here (safetensors)")
      ->type_name("FILE");
}

bool RunsCli::active() const { return runs_ && *runs_; }

int RunsCli::main(const CommonOptions& o) {
  if (*ls_) return ls(o);
  if (*show_) return show(o);
  if (*metrics_) return metrics(o);
  if (*compare_) return compare(o);
  return reproduce(o);
}

int RunsCli::ls(const CommonOptions& o) {
  runs::Filter f;
  if (!experiment_.empty()) f.experiment = experiment_;
  if (!status_.empty()) f.status = status_;
  for (const std::string& t : tags_) {
    const std::size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0) usage_error(fmt::format("--tag '{}': expected KEY=VALUE", t));
    f.tags.emplace_back(t.substr(0, eq), t.substr(eq + 1));
  }
  for (const std::string& c : params_) f.params.push_back(runs::parse_condition(c, "--param"));
  for (const std::string& c : metric_filters_) f.metrics.push_back(runs::parse_condition(c, "--metric"));
  f.limit = last_;
  runs::Store store(runs::store_path(project_), /*create=*/false);
  if (o.format() == Format::Json) {
    LineWriter out;
    store.each(f, [&](const runs::Run& r) { out.line(r); });
    out.flush();
    return 0;
  }
  const std::vector<std::string> metric_keys =
      show_metrics_.empty() ? std::vector<std::string>{"loss", "eval_loss"} : show_metrics_;
  std::vector<Column> cols = {
      {"ID", "id"},         {"EXPERIMENT", "experiment"},      {"NAME", "name"},
      {"STATUS", "status"}, {"STARTED", "start_unix_s", when}, {"DURATION", "duration_s", seconds}};
  // The table's few values are picked out by SQLite: nothing else of the runs is read.
  f.light = true;
  std::vector<std::string> picked;
  for (const std::string& k : show_params_) {
    f.pick.emplace_back("params", k);
    picked.push_back("param:" + k);
    cols.push_back({upper(k), picked.back(), number});
  }
  for (const std::string& k : metric_keys) {
    f.pick.emplace_back("metrics", k);
    picked.push_back("metric:" + k);
    cols.push_back({upper(k), picked.back(), number});
  }
  Printer out(std::cout, o.format(), cols);
  store.each(f, [&](const runs::Run& r) {
    if (o.format() != Format::Table) return out.print(ls_row(r, picked));
    // A table of 100,000 runs: its cells made straight from the run, with no record between.
    std::vector<std::string> cells{r.id,
                                   r.experiment,
                                   r.name.empty() ? "-" : r.name,
                                   r.live_status(),
                                   when(r.start_s),
                                   r.end_s ? seconds(*r.end_s - r.start_s) : "-"};
    for (const Json& v : r.picked) cells.push_back(number(v));
    out.print_cells(std::move(cells));
  });
  out.finish();
  return 0;
}

int RunsCli::show(const CommonOptions& o) {
  runs::Store store(runs::store_path(project_), /*create=*/false);
  const runs::Run r = find_all(store, ids_).front();
  if (o.format() != Format::Table) {
    const Json rec = r.to_json();
    Printer out(std::cout, o.format(), {{"ID", "id"}, {"EXPERIMENT", "experiment"}, {"STATUS", "status"}});
    out.print(rec);
    out.finish();
    return 0;
  }
  const Json j = r.to_json();
  std::string text = fmt::format("run {}  {}{}  {}\n", r.id, r.experiment, r.name.empty() ? "" : " / " + r.name,
                                 j.at("status").get<std::string>());
  text += fmt::format("  user      {} (uid {}) on {}\n", r.user, r.uid, r.host);
  text += fmt::format("  started   {}, {}\n", when(j.at("start_unix_s")),
                      r.end_s ? "took " + seconds(j.at("duration_s")) : "still running");
  const Json& code = j.at("code");
  if (code.is_object() && code.value("commit", Json()).is_string())
    text += fmt::format(
        "  code      {} at {}{}{}\n", json_text(code, "repo", "?"), json_text(code, "commit", "?"),
        code.value("branch", Json()).is_string() ? " (" + code["branch"].get<std::string>() + ")" : "",
        code.value("dirty", Json()) == true ? ", with uncommitted changes " + json_text(code, "diff_xxh3") : "");
  if (j.at("job").is_object())
    text += fmt::format("  job       {} {}\n", json_text(j["job"], "backend", "?"), json_text(j["job"], "id", "?"));
  if (const Json& summary = j.at("summary"); summary.is_object() && summary.value("cost", Json()).is_object()) {
    const Json& c = summary["cost"];
    const std::string held = fmt::format(
        "{} CPUs, {} GPUs, {} for {} on {}", number(c.value("cpus", Json())), number(c.value("gpus", Json())),
        c.value("memory_bytes", Json()).is_number() ? format_bytes(c["memory_bytes"].get<std::uint64_t>()) : "-",
        c.value("hours", Json()).is_number() ? format_duration(c["hours"].get<double>() * 3600) : "-",
        json_text(c, "backend", "?"));
    text +=
        c.value("amount", Json()).is_number()
            ? fmt::format("  cost      {:.4g} {}: {}\n", c["amount"].get<double>(), json_text(c, "currency", "?"), held)
            : fmt::format("  cost      unpriced ({}): {}\n",
                          c.contains("error") ? json_text(c, "error") : "no price sheet", held);
  }
  if (j.at("parent").is_object())
    text +=
        fmt::format("  parent    {} of {} (run {})\n", json_text(j["parent"], "kind", "?"),
                    json_text(j["parent"], "archive", "?"), Printer::cell(j["parent"].value("run_id", Json()), "-"));
  for (const Json& i : j.at("inputs"))
    text += fmt::format("  input     {} {} ({}, xxh3 {})\n", json_text(i, "name", "?"), json_text(i, "path", "?"),
                        i.value("bytes", Json()).is_number() ? format_bytes(i["bytes"].get<std::uint64_t>()) : "-",
                        json_text(i, "xxh3", "-"));
  for (const Json& out : j.at("outputs"))
    text += fmt::format("  output    {} {} step {} xxh3 {}\n", json_text(out, "kind", "?"), json_text(out, "path", "?"),
                        Printer::cell(out.value("step", Json()), "-"), Printer::cell(out.value("xxh3", Json()), "-"));
  const Json& sys = j.at("system");
  if (sys.is_object())
    text += fmt::format("  system    {}, {} CPUs, {}, rkit {} (git {}){}\n", json_text(sys, "cpu_model", "?"),
                        Printer::cell(sys.value("cpus", Json()), "?"),
                        sys.value("memory_bytes", Json()).is_number()
                            ? format_bytes(sys["memory_bytes"].get<std::uint64_t>())
                            : std::string("?"),
                        json_text(sys, "rkit_version", "?"), json_text(sys, "rkit_revision", "?"),
                        sys.value("blas", Json()).is_string() ? ", " + sys["blas"].get<std::string>() : "");
  if (const Json& summary = j.at("summary"); summary.is_object() && summary.value("device", Json()).is_string())
    text += fmt::format("  device    {}{}\n", summary["device"].get<std::string>(),
                        summary.value("device_libraries", Json()).is_string()
                            ? ", " + summary["device_libraries"].get<std::string>()
                            : "");
  text += "  params\n";
  for (const auto& [k, v] : j.at("params").items()) text += fmt::format("    {:<26} {}\n", k, Printer::cell(v, "-"));
  text += "  metrics                      last       min        max        step\n";
  for (const auto& [k, v] : j.at("metrics").items())
    text += fmt::format("    {:<26} {:<10} {:<10} {:<10} {}\n", k, number(v.value("last", Json())),
                        number(v.value("min", Json())), number(v.value("max", Json())),
                        Printer::cell(v.value("step", Json()), "-"));
  const Json& summary = j.at("summary");
  if (summary.is_object() && summary.contains("error"))
    text += fmt::format("  error     {}\n", summary["error"].get<std::string>());
  std::cout << text;
  return 0;
}

int RunsCli::metrics(const CommonOptions& o) {
  runs::Store store(runs::store_path(project_), /*create=*/false);
  const runs::Run r = find_all(store, ids_).front();
  // One record per step, its metrics together, as a worker writes them.
  std::map<std::int64_t, Json> by_step;
  std::set<std::string> keys;
  for (const runs::Metric& m : store.metrics(r.id, keys_)) {
    Json& rec = by_step[m.step];
    if (rec.is_null())
      rec = {{"schema", runs::kMetricSchema},
             {"run_id", r.id},
             {"step", m.step},
             {"time_unix_s", m.time_s},
             {"metrics", Json::object()}};
    rec["metrics"][m.key] = m.value;
    rec["time_unix_s"] = std::max(rec["time_unix_s"].get<double>(), m.time_s);
    keys.insert(m.key);
  }
  std::vector<Column> cols = {{"STEP", "step"}};
  for (const std::string& k : keys)  // a JSON pointer: "train/loss" is one key, not two
    cols.push_back({upper(k), (Json::json_pointer("/metrics") / k).to_string(), number});
  Printer out(std::cout, o.format(), cols);
  for (const auto& [step, rec] : by_step) out.print(rec);
  out.finish();
  return 0;
}

int RunsCli::compare(const CommonOptions& o) {
  if (ids_.size() < 2 || ids_.size() > 50) usage_error("compare needs 2 to 50 run ids");
  runs::Store store(runs::store_path(project_), /*create=*/false);
  const std::vector<runs::Run> rs = find_all(store, ids_);
  std::vector<Json> params, metrics;
  std::set<std::string> param_keys, metric_keys;
  for (const runs::Run& r : rs) {
    params.push_back(parse_json(r.params, "run store"));
    metrics.push_back(parse_json(r.metrics, "run store"));
    for (const auto& [k, v] : params.back().items()) param_keys.insert(k);
    for (const auto& [k, v] : metrics.back().items()) metric_keys.insert(k);
  }
  Json rec{{"schema", "rkit.run.compare.v1"},
           {"runs", Json::array()},
           {"params", Json::object()},
           {"differing", Json::array()},
           {"metrics", Json::object()}};
  for (const runs::Run& r : rs) rec["runs"].push_back(r.id);
  for (const std::string& k : param_keys) {
    Json values = Json::array();
    for (const Json& p : params) values.push_back(p.value(k, Json()));
    const bool differs = std::any_of(values.begin(), values.end(), [&](const Json& v) { return v != values[0]; });
    if (differs) rec["differing"].push_back(k);
    if (differs || all_) rec["params"][k] = values;
  }
  for (const std::string& k : metric_keys) {
    Json m{{"last", Json::array()}, {"min", Json::array()}, {"max", Json::array()}, {"step", Json::array()}};
    for (const Json& ms : metrics) {
      const Json e = ms.value(k, Json());
      for (const char* f : {"last", "min", "max", "step"}) m[f].push_back(e.is_object() ? e.value(f, Json()) : Json());
    }
    rec["metrics"][k] = m;
  }
  if (!html_.empty()) {
    std::map<std::string, std::vector<std::vector<runs::Metric>>> curves;  // key → per run
    for (std::size_t i = 0; i < rs.size(); ++i)
      for (runs::Metric& m : store.metrics(rs[i].id)) {
        auto& per_run = curves[m.key];
        per_run.resize(rs.size());
        per_run[i].push_back(std::move(m));
      }
    atomic_write_file(html_, compare_html(rs, rec, curves));
  }
  if (o.format() == Format::Json) {
    std::cout << to_json_line(rec) << '\n';
    return 0;
  }
  // A row per parameter that differs, then per metric: last, then the lowest and highest.
  std::vector<Column> cols = {{"KEY", "key"}, {"WHAT", "what"}};
  for (std::size_t i = 0; i < rs.size(); ++i) cols.push_back({rs[i].id, "/values/" + std::to_string(i), number});
  Printer out(std::cout, o.format(), cols);
  for (const auto& [k, values] : rec["params"].items()) out.print({{"key", k}, {"what", "param"}, {"values", values}});
  for (const auto& [k, m] : rec["metrics"].items())
    for (const char* f : {"last", "min", "max"}) out.print({{"key", k}, {"what", f}, {"values", m[f]}});
  out.finish();
  return 0;
}

int RunsCli::reproduce(const CommonOptions& o) {
  runs::Store store(runs::store_path(project_), /*create=*/false);
  const runs::Run r = find_all(store, ids_).front();
  const Json j = r.to_json();
  const Json& summary = j.at("summary");
  if (!summary.is_object() || !summary.value("weights_xxh3", Json()).is_string() || r.status != "FINISHED")
    throw Error(Exit::DataErr, fmt::format("run {} did not finish ({}): there are no final weights to reproduce", r.id,
                                           j.at("status").get<std::string>()));
  // The same world: a run of N ranks is reproduced under rtrain launch --nproc-per-node N.
  const int world = summary.value("world_size", 1);
  const char* ws = std::getenv("WORLD_SIZE");
  if ((ws && *ws ? std::atoi(ws) : 1) != world)
    throw Error(Exit::Usage, fmt::format("run {} had {} ranks: rtrain launch --nproc-per-node {} -- rtrain runs "
                                         "reproduce {}",
                                         r.id, world, world, r.id));
  // The same trainer: rtrain's own revision decides the arithmetic.
  const Json& sys = j.at("system");
  if (json_text(sys, "rkit_revision") != kGitRevision)
    throw Error(Exit::DataErr, fmt::format("revision changed: run {} was trained by rkit git {}, this is rkit git {}",
                                           r.id, json_text(sys, "rkit_revision", "?"), kGitRevision));
  // The same code: the work tree the run started in, at the same commit and changes.
  const Json& code = j.at("code");
  if (code.is_object() && code.value("repo", Json()).is_string()) {
    const std::string repo = code["repo"].get<std::string>();
    const Json now = code_revision(repo);
    if ((code.contains("dirty") && code["dirty"].is_null()) || (now.is_object() && now["dirty"].is_null()))
      throw Error(Exit::DataErr,
                  fmt::format("revision unknown: git could not say what changed in {} (then or now)", repo));
    if (!now.is_object())
      throw Error(Exit::DataErr,
                  fmt::format("revision changed: run {} ran in the Git work tree {}, which is gone", r.id, repo));
    if (now.value("commit", Json()) != code.value("commit", Json()))
      throw Error(Exit::DataErr, fmt::format("revision changed: run {} ran at commit {} of {}, which is at {} now",
                                             r.id, Printer::cell(code.value("commit", Json()), "-"), repo,
                                             Printer::cell(now.value("commit", Json()), "-")));
    if (now.value("diff_xxh3", Json()) != code.value("diff_xxh3", Json()))
      throw Error(Exit::DataErr,
                  fmt::format("revision changed: {} has other uncommitted changes than run {} had (diff xxh3 {}, then "
                              "{})",
                              repo, r.id, Printer::cell(now.value("diff_xxh3", Json()), "none"),
                              Printer::cell(code.value("diff_xxh3", Json()), "none")));
  }
  // The same data, byte for byte.
  for (const Json& in : j.at("inputs")) {
    const std::string path = json_text(in, "path");
    if (path.empty() || path == "synthetic") continue;
    const FileDigest d = digest_file(path);
    if (digest_hex(d.xxh3) != json_text(in, "xxh3") || d.bytes != in.value("bytes", std::uint64_t{0}))
      throw Error(Exit::DataErr,
                  fmt::format("{} {} changed since run {}: xxh3 {} now, {} when it ran", json_text(in, "name", "input"),
                              path, r.id, digest_hex(d.xxh3), json_text(in, "xxh3", "?")));
  }
  TrainConfig c;
  run_options().apply_json(j.at("params"), c, fmt::format("run {}", r.id));
  c.threads = summary.value("threads", c.threads);
  c.output = output_;
  c.events.clear();
  c.resume_from.clear();
  c.init_from.clear();
  c.ckpt_dir = ckpt_dir_.empty() ? "" : std::filesystem::absolute(ckpt_dir_).string();
  if (c.ckpt_dir.empty()) c.ckpt_every = 0;
  ::unsetenv("RKIT_RESUME_FROM");  // the recorded parent, or none: not the environment's
  // The same start: the checkpoint it resumed or was fine-tuned from, unchanged.
  const Json& parent = j.at("parent");
  if (parent.is_object()) {
    const std::string archive = json_text(parent, "archive");
    const Json now = parent_record(json_text(parent, "kind"), archive);
    if (now.value("archive_xxh3", Json()) != parent.value("archive_xxh3", Json()))
      throw Error(Exit::DataErr, fmt::format("checkpoint {} changed since run {} started from it", archive, r.id));
    (json_text(parent, "kind") == "finetune" ? c.init_from : c.resume_from) = archive;
  }
  TrackOptions t;
  t.resolve(tool_.config());
  t.project = project_;
  t.experiment = r.experiment;
  t.tags.push_back("reproduces=" + r.id);
  const RunCommandResult result = run_command(o, c, t, [&](runs::NewRun& d) {
    if (!parent.is_object())
      d.parent = {{"kind", "reproduce"}, {"run_id", r.id}, {"archive", nullptr}, {"archive_xxh3", nullptr}};
  });
  if (!result.summary.is_object()) return 0;  // another rank: rank 0 says
  const std::string want = summary["weights_xxh3"].get<std::string>();
  const std::string got = json_text(result.summary, "weights_xxh3");
  const bool same = got == want;
  if (o.format() == Format::Json)
    std::cout << to_json_line({{"schema", "rkit.run.reproduce.v1"},
                               {"run_id", r.id},
                               {"reproduction", result.run_id.empty() ? Json() : Json(result.run_id)},
                               {"weights_xxh3", got},
                               {"recorded_weights_xxh3", want},
                               {"identical", same}})
              << '\n';
  else if (!o.quiet)
    std::cout << (same ? fmt::format("reproduced run {}: final weights bitwise identical (xxh3 {})\n", r.id, got)
                       : fmt::format("run {} NOT reproduced: final weights differ (xxh3 {}, recorded {})\n", r.id, got,
                                     want));
  return same ? 0 : 1;
}

}  // namespace rkit::rtrain
