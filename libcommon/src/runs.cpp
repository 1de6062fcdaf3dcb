// The run store and model registry on SQLite (see rkit/runs.hpp).
#include "rkit/runs.hpp"

#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <set>

#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "rkit/host.hpp"

namespace rkit::runs {
namespace {

// 1: runs (what a list shows), run_texts (the rest, JSON), latest (each metric's last
//    value, for filters and columns), metrics, models, model_stages.
constexpr int kSchemaVersion = 1;

// A run's row is kept narrow, so that listing 100,000 runs reads megabytes, not the
// hundreds its configurations and systems take.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL UNIQUE,
  experiment TEXT NOT NULL, name TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL, user TEXT NOT NULL, uid INTEGER NOT NULL, host TEXT NOT NULL DEFAULT '', pid INTEGER,
  start_s REAL NOT NULL, end_s REAL, tags TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS runs_experiment ON runs(experiment, id);
CREATE TABLE IF NOT EXISTS run_texts(run INTEGER PRIMARY KEY,
  params TEXT NOT NULL DEFAULT '{}', system TEXT NOT NULL DEFAULT '{}', code TEXT NOT NULL DEFAULT '{}',
  inputs TEXT NOT NULL DEFAULT '[]', outputs TEXT NOT NULL DEFAULT '[]',
  parent TEXT, job TEXT, command TEXT, summary TEXT, final TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS latest(run INTEGER NOT NULL, key TEXT NOT NULL, last REAL NOT NULL,
  PRIMARY KEY(run, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS metrics(run INTEGER NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL,
  value REAL NOT NULL, time_s REAL NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_run ON metrics(run, key, step);
CREATE TABLE IF NOT EXISTS models(name TEXT NOT NULL, version INTEGER NOT NULL, archive TEXT NOT NULL,
  archive_xxh3 TEXT NOT NULL, run_id TEXT NOT NULL DEFAULT '', stage TEXT NOT NULL,
  registered_by TEXT NOT NULL, registered_s REAL NOT NULL, PRIMARY KEY(name, version));
CREATE TABLE IF NOT EXISTS model_stages(name TEXT NOT NULL, version INTEGER NOT NULL, stage TEXT NOT NULL,
  by TEXT NOT NULL, time_s REAL NOT NULL);
CREATE INDEX IF NOT EXISTS model_stages_version ON model_stages(name, version);
)sql";

// A whole run: `r` its row of runs, `t` of run_texts (kRunFrom).
constexpr const char* kRunColumns =
    "r.run_id, r.experiment, r.name, r.status, r.user, r.uid, r.host, r.pid, r.start_s, r.end_s, t.params, r.tags, "
    "t.system, t.code, t.inputs, t.outputs, t.parent, t.job, t.command, t.summary, t.final";
constexpr const char* kRunFrom = "runs r JOIN run_texts t ON t.run = r.id";
// The same places from runs alone, the JSON left empty (Filter::light).
constexpr const char* kLightColumns =
    "r.run_id, r.experiment, r.name, r.status, r.user, r.uid, r.host, r.pid, r.start_s, r.end_s, '{}', r.tags, '{}', "
    "'{}', '[]', '[]', NULL, NULL, NULL, NULL, '{}'";

Run read_run(sql::Stmt& s) {
  Run r;
  r.id = s.text(0);
  r.experiment = s.text(1);
  r.name = s.text(2);
  r.status = s.text(3);
  r.user = s.text(4);
  r.uid = static_cast<std::uint32_t>(s.i64(5));
  r.host = s.text(6);
  r.pid = s.i64(7);
  r.start_s = s.f64(8);
  r.end_s = s.opt<double>(9);
  r.params = s.text(10);
  r.tags = s.text(11);
  r.system = s.text(12);
  r.code = s.text(13);
  r.inputs = s.text(14);
  r.outputs = s.text(15);
  r.parent = s.null(16) ? "null" : s.text(16);
  r.job = s.null(17) ? "null" : s.text(17);
  r.command = s.null(18) ? "null" : s.text(18);
  r.summary = s.null(19) ? "null" : s.text(19);
  r.metrics = s.text(20);
  return r;
}

std::string new_run_id() {
  unsigned char b[6];
  for (std::size_t got = 0; got < sizeof b;) {
    const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("getrandom", errno);
    got += static_cast<std::size_t>(n);
  }
  return fmt::format("{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3], b[4], b[5]);
}

// A key as an SQLite JSON path: '$."train.lr"'. Keys are checked to hold no quote.
std::string json_path(const std::string& key, std::string_view suffix = "") {
  return fmt::format("$.\"{}\"{}", key, suffix);
}

bool valid_key(std::string_view key) {
  return !key.empty() && key.size() <= 256 && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/' || c == ':';
  });
}

// Text for a run's name, experiment or tag: UTF-8 without control characters.
void check_text(std::string_view what, std::string_view text, std::size_t max_bytes) {
  if (!is_utf8(text) || text.size() > max_bytes ||
      std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }))
    throw Error(Exit::Usage,
                fmt::format("{} must be UTF-8 text of at most {} bytes, without control characters", what, max_bytes));
}

void check_tags(const Json& tags) {
  if (!tags.is_object()) throw Error(Exit::Usage, "tags must be an object of names and text");
  for (const auto& [k, v] : tags.items()) {
    if (!valid_key(k)) throw Error(Exit::Usage, fmt::format("tag '{}': names are letters, digits and _ . - / :", k));
    if (!v.is_string()) throw Error(Exit::Usage, fmt::format("tag '{}': the value must be text", k));
    check_text("a tag's value", v.get<std::string>(), 1024);
  }
}

// `path` when a file is there; Error(NoInput) otherwise (a reader must not make a store).
const std::string& existing(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return path;
  if (errno != ENOENT && errno != ENOTDIR) throw system_error("open " + path, errno);  // 77 when not ours to read
  throw Error(Exit::NoInput, fmt::format("no run store at {}", path),
              "rtrain run records its runs there; --project DIR or $RKIT_PROJECT_DIR names another");
}

}  // namespace

std::string store_path(const std::string& project) {
  std::string dir = project;
  if (dir.empty())
    if (const char* p = std::getenv("RKIT_PROJECT_DIR"); p && *p) dir = p;
  if (!dir.empty()) return (dir.back() == '/' ? dir : dir + "/") + "runs.db";
  return state_dir() + "/runs/runs.db";
}

std::string Run::live_status() const {
  static const std::string here = host_name();
  if (status == "RUNNING" && pid > 0 && host == here && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
    return "LOST";
  return status;
}

std::string Run::to_json_line() const {
  std::string out;
  append_json_line(out);
  return out;
}

void Run::append_json_line(std::string& out) const {
  auto num = [&out](std::optional<double> v) {  // shortest round-trip digits; null for none
    if (v && std::isfinite(*v))
      fmt::format_to(std::back_inserter(out), "{}", *v);
    else
      out += "null";
  };
  out.reserve(out.size() + 320 + params.size() + metrics.size() + tags.size() + inputs.size() + outputs.size() +
              system.size() + code.size() + summary.size() + parent.size() + job.size() + command.size());
  out += R"({"schema":"rkit.run.v1","id":)";
  append_json_string(out, id);
  out += R"(,"experiment":)";
  append_json_string(out, experiment);
  out += R"(,"name":)";
  if (name.empty())
    out += "null";  // none given
  else
    append_json_string(out, name);
  out += R"(,"status":)";
  append_json_string(out, live_status());
  out += R"(,"user":)";
  append_json_string(out, user);
  out += R"(,"uid":)";
  fmt::format_to(std::back_inserter(out), "{}", uid);
  out += R"(,"host":)";
  append_json_string(out, host);
  out += R"(,"start_unix_s":)";
  num(start_s);
  out += R"(,"end_unix_s":)";
  num(end_s);
  out += R"(,"duration_s":)";
  num(end_s ? std::optional<double>(*end_s - start_s) : std::nullopt);
  for (const auto& [key, text] : {std::pair<const char*, const std::string*>{"params", &params},
                                  {"metrics", &metrics},
                                  {"tags", &tags},
                                  {"inputs", &inputs},
                                  {"outputs", &outputs},
                                  {"parent", &parent},
                                  {"job", &job},
                                  {"code", &code},
                                  {"system", &system},
                                  {"command", &command},
                                  {"summary", &summary}}) {
    out += ",\"";
    out += key;
    out += "\":";
    out += text->empty() ? std::string_view("null") : std::string_view(*text);
  }
  out += '}';
}

Json Run::to_json() const { return parse_json(to_json_line(), "run store"); }

Condition parse_condition(std::string_view text, std::string_view flag) {
  const std::size_t at = text.find_first_of("!<>=");
  auto bad = [&]() -> Condition {
    throw Error(
        Exit::Usage,
        fmt::format("{} '{}': expected KEY OP VALUE with OP one of = != < <= > >= (e.g. train.lr>=0.001)", flag, text));
  };
  if (at == std::string_view::npos || at == 0) return bad();
  Condition c;
  c.key = std::string(text.substr(0, at));
  std::string_view rest = text.substr(at);
  for (const char* op : {"!=", "<=", ">=", "=", "<", ">"}) {
    if (rest.starts_with(op)) {
      c.op = op;
      rest.remove_prefix(std::string_view(op).size());
      break;
    }
  }
  if (c.op.empty() || !valid_key(c.key)) return bad();
  double v = 0;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  if (!rest.empty() && ec == std::errc() && ptr == rest.data() + rest.size())
    c.value = v;
  else
    c.value = std::string(rest);
  return c;
}

bool is_stage(std::string_view stage) { return stage == "candidate" || stage == "production" || stage == "archived"; }

Json ModelVersion::to_json() const {
  Json h = Json::array();
  for (const StageChange& c : history) h.push_back({{"stage", c.stage}, {"by", c.by}, {"time_unix_s", c.time_s}});
  return {{"schema", kModelSchema},
          {"name", name},
          {"version", version},
          {"stage", stage},
          {"archive", archive},
          {"archive_xxh3", archive_xxh3},
          {"run_id", run_id},
          {"registered_by", registered_by},
          {"registered_unix_s", registered_s},
          {"history", std::move(h)}};
}

Store::Store(const std::string& path, bool create)
    : db_(
          create ? path : existing(path), "run store", kSchemaVersion, [](sql::Db& db, int) { db.exec(kSchema); },
          // A run's record outlives a power cut from the moment it is written; a reader
          // leaves a database that is no run store as it found it.
          sql::Db::Options{.durable = true, .create = create}),
      user_(user_name(::getuid())),
      uid_(::getuid()) {}

std::string Store::create(const NewRun& run, double now) {
  check_text("the experiment's name", run.experiment, 256);
  if (run.experiment.empty()) throw Error(Exit::Usage, "the experiment's name must not be empty");
  check_text("the run's name", run.name, 256);
  check_tags(run.tags);
  auto text_or_null = [](const Json& j) { return j.is_null() ? std::optional<std::string>() : j.dump(); };
  std::string id;
  db_.transaction([&] {
    // Ids are random: one already taken (one in 2^48 per pair) is drawn again.
    for (;;) {
      id = new_run_id();
      sql::Stmt& taken = db_.stmt("SELECT 1 FROM runs WHERE run_id = ?");
      sql::Stmt::Finish done{taken};
      if (!taken.bind(id).step()) break;
    }
    db_.stmt(
           "INSERT INTO runs(run_id, experiment, name, status, user, uid, host, pid, start_s, tags) "
           "VALUES (?, ?, ?, 'RUNNING', ?, ?, ?, ?, ?, ?)")
        .bind(id)
        .bind(run.experiment)
        .bind(run.name)
        .bind(user_)
        .bind(std::int64_t{uid_})
        .bind(host_name())
        .bind(std::int64_t{::getpid()})
        .bind(now)
        .bind(run.tags.dump())
        .run();
    db_.stmt(
           "INSERT INTO run_texts(run, params, system, code, inputs, parent, job, command) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(db_.last_rowid())
        .bind(run.params.dump())
        .bind(run.system.dump())
        .bind(run.code.dump())
        .bind(run.inputs.dump())
        .bind(text_or_null(run.parent))
        .bind(text_or_null(run.job))
        .bind(text_or_null(run.command))
        .run();
  });
  return id;
}

void Store::attach(const std::string& id, const NewRun& run) {
  db_.transaction([&] {
    sql::Stmt& r = db_.stmt(
        "SELECT r.id, t.params, t.inputs, t.code, t.system, t.job FROM runs r JOIN run_texts t ON t.run = r.id "
        "WHERE r.run_id = ?");
    std::int64_t row = 0;
    Json params, inputs, code, system, job;
    {
      sql::Stmt::Finish done{r};
      if (!r.bind(id).step()) throw Error(Exit::NoInput, fmt::format("run store {}: no run {}", path(), id));
      row = r.i64(0);
      params = parse_json(r.view(1), "run store");
      inputs = parse_json(r.view(2), "run store");
      code = parse_json(r.view(3), "run store");
      system = parse_json(r.view(4), "run store");
      job = r.null(5) ? Json() : parse_json(r.view(5), "run store");
    }
    params.update(run.params);
    for (const Json& in : run.inputs)
      if (std::find(inputs.begin(), inputs.end(), in) == inputs.end()) inputs.push_back(in);
    if (code.empty() || code.is_null()) code = run.code;
    if (system.empty()) system = run.system;
    if (job.is_null()) job = run.job;
    db_.stmt("UPDATE run_texts SET params = ?, inputs = ?, code = ?, system = ?, job = ? WHERE run = ?")
        .bind(params.dump())
        .bind(inputs.dump())
        .bind(code.dump())
        .bind(system.dump())
        .bind(job.is_null() ? std::optional<std::string>() : job.dump())
        .bind(row)
        .run();
  });
}

std::int64_t Store::row_of(const std::string& id) {
  sql::Stmt& s = db_.stmt("SELECT id FROM runs WHERE run_id = ?");
  sql::Stmt::Finish done{s};
  if (!s.bind(id).step()) throw Error(Exit::NoInput, fmt::format("run store {}: no run {}", path(), id));
  return s.i64(0);
}

std::size_t Store::log(const std::string& id, const std::vector<Metric>& metrics, const Json& params) {
  std::size_t dropped = 0;
  db_.transaction([&] {
    dropped = 0;  // a transaction retried counts again
    sql::Stmt& r =
        db_.stmt("SELECT r.id, t.final, t.params FROM runs r JOIN run_texts t ON t.run = r.id WHERE r.run_id = ?");
    std::int64_t row = 0;
    Json final, have_params;
    {
      sql::Stmt::Finish done{r};
      if (!r.bind(id).step()) throw Error(Exit::NoInput, fmt::format("run store {}: no run {}", path(), id));
      row = r.i64(0);
      final = parse_json(r.view(1), "run store");
      if (params.is_object() && !params.empty()) have_params = parse_json(r.view(2), "run store");
    }
    sql::Stmt& ins = db_.stmt("INSERT INTO metrics(run, key, step, value, time_s) VALUES (?, ?, ?, ?, ?)");
    std::set<std::string> changed;
    for (const Metric& m : metrics) {
      if (!std::isfinite(m.value) || !valid_key(m.key)) continue;      // NaN is no measurement
      if (final.size() >= kMaxMetricKeys && !final.contains(m.key)) {  // the record stays bounded
        ++dropped;
        continue;
      }
      ins.reset().bind(row).bind(m.key).bind(m.step).bind(m.value).bind(m.time_s).run();
      changed.insert(m.key);
      Json& e = final[m.key];
      if (e.is_null()) {
        e = {{"last", m.value}, {"step", m.step}, {"min", m.value}, {"max", m.value}};
        continue;
      }
      if (m.step >= e.at("step").get<std::int64_t>()) {
        e["last"] = m.value;
        e["step"] = m.step;
      }
      e["min"] = std::min(e.at("min").get<double>(), m.value);
      e["max"] = std::max(e.at("max").get<double>(), m.value);
    }
    if (have_params.is_object()) {
      have_params.update(params);
      db_.stmt("UPDATE run_texts SET final = ?, params = ? WHERE run = ?")
          .bind(final.dump())
          .bind(have_params.dump())
          .bind(row)
          .run();
    } else {
      db_.stmt("UPDATE run_texts SET final = ? WHERE run = ?").bind(final.dump()).bind(row).run();
    }
    sql::Stmt& last = db_.stmt(
        "INSERT INTO latest(run, key, last) VALUES (?, ?, ?) ON CONFLICT(run, key) DO UPDATE SET last = excluded.last");
    for (const std::string& key : changed)
      last.reset().bind(row).bind(key).bind(final[key]["last"].get<double>()).run();
  });
  return dropped;
}

void Store::edit_json(const std::string& id, const char* select_sql, const char* update_sql,
                      const std::function<void(Json&)>& change) {
  db_.transaction([&] {
    sql::Stmt& r = db_.stmt(select_sql);
    Json value;
    {
      sql::Stmt::Finish done{r};
      if (!r.bind(id).step()) throw Error(Exit::NoInput, fmt::format("run store {}: no run {}", path(), id));
      value = parse_json(r.view(0), "run store");
    }
    change(value);
    db_.stmt(update_sql).bind(value.dump()).bind(id).run();
  });
}

void Store::add_output(const std::string& id, const Json& output) {
  edit_json(id, "SELECT t.outputs FROM runs r JOIN run_texts t ON t.run = r.id WHERE r.run_id = ?",
            "UPDATE run_texts SET outputs = ? WHERE run = (SELECT id FROM runs WHERE run_id = ?)",
            [&](Json& outputs) { outputs.push_back(output); });
}

void Store::set_tags(const std::string& id, const Json& tags) {
  check_tags(tags);
  edit_json(id, "SELECT tags FROM runs WHERE run_id = ?", "UPDATE runs SET tags = ? WHERE run_id = ?",
            [&](Json& have) { have.update(tags); });
}

void Store::set_parent(const std::string& id, const Json& parent) { set_column(id, "parent", parent); }
void Store::set_summary(const std::string& id, const Json& summary) { set_column(id, "summary", summary); }

void Store::set_column(const std::string& id, const char* column, const Json& value) {
  const std::optional<std::string> text = value.is_null() ? std::nullopt : std::optional<std::string>(value.dump());
  db_.transaction([&] {
    if (std::string_view(column) == "parent")
      db_.stmt("UPDATE run_texts SET parent = ? WHERE run = (SELECT id FROM runs WHERE run_id = ?)")
          .bind(text)
          .bind(id)
          .run();
    else
      db_.stmt("UPDATE run_texts SET summary = ? WHERE run = (SELECT id FROM runs WHERE run_id = ?)")
          .bind(text)
          .bind(id)
          .run();
    if (db_.changes() == 0) throw Error(Exit::NoInput, fmt::format("run store {}: no run {}", path(), id));
  });
}

void Store::finish(const std::string& id, const std::string& status, double now, const Json& summary) {
  db_.transaction([&] {
    db_.stmt("UPDATE runs SET status = ?, end_s = ? WHERE run_id = ?").bind(status).bind(now).bind(id).run();
    if (db_.changes() == 0) throw Error(Exit::NoInput, fmt::format("run store {}: no run {}", path(), id));
    set_column(id, "summary", summary);
  });
}

std::optional<Run> Store::find(const std::string& prefix) {
  if (prefix.size() < 4 || prefix.size() > 12 || prefix.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error(Exit::Usage, fmt::format("run id '{}': expected 4 to 12 hex digits of a run's id", prefix));
  static const std::string sql = fmt::format(
      "SELECT {} FROM {} WHERE r.run_id >= ? AND r.run_id < ? ORDER BY r.run_id LIMIT 2", kRunColumns, kRunFrom);
  sql::Stmt& s = db_.stmt(sql.c_str());
  sql::Stmt::Finish done{s};
  s.bind(prefix).bind(prefix + "g");  // 'g' sorts after every hex digit
  if (!s.step()) return std::nullopt;
  Run r = read_run(s);
  if (s.step())
    throw Error(Exit::Usage,
                fmt::format("run id '{}' names several runs ({}, {} ...): give more digits", prefix, r.id, s.text(0)));
  return r;
}

void Store::each(const Filter& f, const std::function<void(const Run&)>& fn) {
  std::string where = "1";
  std::vector<std::function<void(sql::Stmt&)>> binds;
  if (f.experiment) {
    where += " AND r.experiment = ?";
    binds.emplace_back([&](sql::Stmt& s) { s.bind(*f.experiment); });
  }
  const bool live = f.status && (*f.status == "LOST" || *f.status == "RUNNING");
  if (f.status) {
    where += " AND r.status = ?";
    binds.emplace_back([&, live](sql::Stmt& s) { s.bind(live ? std::string("RUNNING") : *f.status); });
  }
  for (const auto& [k, v] : f.tags) {
    if (!valid_key(k)) throw Error(Exit::Usage, fmt::format("--tag '{}': names are letters, digits and _ . - / :", k));
    where += " AND json_extract(r.tags, ?) = ?";
    binds.emplace_back([&](sql::Stmt& s) { s.bind(json_path(k)).bind(v); });
  }
  // A parameter from the run's texts; a metric's last value from latest. Keys are checked
  // (valid_key: no quote), so they may stand in the SQL as literals.
  const auto param_of = [](const std::string& key) {
    return fmt::format("json_extract((SELECT params FROM run_texts WHERE run = r.id), '{}')", json_path(key));
  };
  const auto metric_of = [](const std::string& key) {
    return fmt::format("(SELECT last FROM latest WHERE run = r.id AND key = '{}')", key);
  };
  auto add = [&](const Condition& c, bool param) {
    // Spliced into the SQL below: only what parse_condition makes may pass.
    static const std::set<std::string> kOps = {"=", "!=", "<", "<=", ">", ">="};
    if (!valid_key(c.key) || !kOps.contains(c.op) || !(c.value.is_number() || c.value.is_string()))
      throw Error(Exit::Usage, fmt::format("'{}{}': not a condition this store can test", c.key, c.op));
    where += fmt::format(" AND {} {} ?", param ? param_of(c.key) : metric_of(c.key), c.op);
    binds.emplace_back([&c](sql::Stmt& s) {
      if (c.value.is_number())
        s.bind(c.value.get<double>());
      else
        s.bind(c.value.get<std::string>());
    });
  };
  for (const Condition& c : f.params) add(c, true);
  for (const Condition& c : f.metrics) add(c, false);
  // The columns: all of them, or for a light read the run's own and nothing of its JSON;
  // then each picked value, by SQLite.
  std::string columns = f.light ? kLightColumns : kRunColumns;
  for (const auto& [from, key] : f.pick) {
    if (!valid_key(key) || (from != "params" && from != "metrics"))
      throw Error(Exit::Usage, fmt::format("'{}': names are letters, digits and _ . - / :", key));
    columns += ", " + (from == "params" ? param_of(key) : metric_of(key));
  }
  const std::string joined = f.light ? "" : " JOIN run_texts t ON t.run = r.id";
  std::string sql = fmt::format("SELECT {} FROM runs r{} WHERE {} ORDER BY r.id", columns, joined, where);
  // LOST and RUNNING are told apart here, not by SQLite: the newest N of them are kept below.
  const bool limit_here = live && f.limit > 0;
  if (f.limit > 0 && !limit_here)
    sql = fmt::format("SELECT {} FROM (SELECT * FROM runs r WHERE {} ORDER BY r.id DESC LIMIT {}) r{} ORDER BY r.id",
                      columns, where, f.limit, joined);
  std::unique_ptr<sql::Stmt> s = db_.prepare(sql);
  for (auto& b : binds) b(*s);
  Run r;
  std::deque<Run> newest;
  while (s->step()) {
    r = read_run(*s);
    r.picked.clear();
    for (std::size_t i = 0; i < f.pick.size(); ++i) {
      const int col = 21 + static_cast<int>(i);
      switch (s->type(col)) {
        case SQLITE_INTEGER: r.picked.emplace_back(s->i64(col)); break;
        case SQLITE_FLOAT: r.picked.emplace_back(s->f64(col)); break;
        case SQLITE_TEXT: r.picked.emplace_back(s->text(col)); break;
        default: r.picked.emplace_back(nullptr);
      }
    }
    if (live && r.live_status() != *f.status) continue;
    if (!limit_here) {
      fn(r);
      continue;
    }
    newest.push_back(std::move(r));
    if (newest.size() > static_cast<std::size_t>(f.limit)) newest.pop_front();
  }
  for (const Run& n : newest) fn(n);
}

std::unordered_map<std::string, std::string> Store::job_experiments() {
  std::unordered_map<std::string, std::string> out;
  sql::Stmt& s = db_.stmt(
      "SELECT json_extract(t.job, '$.id'), r.experiment FROM runs r JOIN run_texts t ON t.run = r.id "
      "WHERE t.job IS NOT NULL");
  while (s.step())
    if (s.type(0) == SQLITE_TEXT) out[s.text(0)] = s.text(1);
  return out;
}

std::vector<Metric> Store::metrics(const std::string& id, const std::vector<std::string>& keys) {
  const std::int64_t row = row_of(id);
  std::vector<Metric> out;
  sql::Stmt& s = db_.stmt("SELECT key, step, value, time_s FROM metrics WHERE run = ? ORDER BY key, step, rowid");
  s.bind(row);
  while (s.step()) {
    Metric m{s.text(0), s.i64(1), s.f64(2), s.f64(3)};
    if (!keys.empty() && std::find(keys.begin(), keys.end(), m.key) == keys.end()) continue;
    out.push_back(std::move(m));
  }
  return out;
}

// --- the model registry ------------------------------------------------------------------

ModelVersion Store::read_model(sql::Stmt& s) {
  ModelVersion m;
  m.name = s.text(0);
  m.version = s.i64(1);
  m.archive = s.text(2);
  m.archive_xxh3 = s.text(3);
  m.run_id = s.text(4);
  m.stage = s.text(5);
  m.registered_by = s.text(6);
  m.registered_s = s.f64(7);
  return m;
}

std::vector<StageChange> Store::history(const std::string& name, std::int64_t version) {
  std::vector<StageChange> out;
  sql::Stmt& s =
      db_.stmt("SELECT stage, by, time_s FROM model_stages WHERE name = ? AND version = ? ORDER BY time_s, rowid");
  s.bind(name).bind(version);
  while (s.step()) out.push_back({s.text(0), s.text(1), s.f64(2)});
  return out;
}

ModelVersion Store::register_model(const std::string& name, const std::string& archive, const std::string& archive_xxh3,
                                   const std::string& run_id, double now) {
  if (name.empty() || name.size() > 128 || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
      }))
    throw Error(Exit::Usage,
                fmt::format("model name '{}': 1 to 128 letters, digits and _ . - (e.g. alpha-momentum)", name));
  std::int64_t version = 0;
  db_.transaction([&] {
    sql::Stmt& last = db_.stmt("SELECT COALESCE(MAX(version), 0) FROM models WHERE name = ?");
    {
      sql::Stmt::Finish done{last};
      version = last.bind(name).step() ? last.i64(0) + 1 : 1;
    }
    db_.stmt(
           "INSERT INTO models(name, version, archive, archive_xxh3, run_id, stage, registered_by, registered_s) "
           "VALUES (?, ?, ?, ?, ?, 'candidate', ?, ?)")
        .bind(name)
        .bind(version)
        .bind(archive)
        .bind(archive_xxh3)
        .bind(run_id)
        .bind(user_)
        .bind(now)
        .run();
    db_.stmt("INSERT INTO model_stages(name, version, stage, by, time_s) VALUES (?, ?, 'candidate', ?, ?)")
        .bind(name)
        .bind(version)
        .bind(user_)
        .bind(now)
        .run();
  });
  return *model(name, std::to_string(version));
}

ModelVersion Store::set_stage(const std::string& name, std::int64_t version, const std::string& stage, double now) {
  if (!is_stage(stage))
    throw Error(Exit::Usage, fmt::format("stage '{}': expected candidate, production or archived", stage));
  db_.transaction([&] {
    sql::Stmt& have = db_.stmt("SELECT 1 FROM models WHERE name = ? AND version = ?");
    {
      sql::Stmt::Finish done{have};
      if (!have.bind(name).bind(version).step())
        throw Error(Exit::NoInput, fmt::format("model {} has no version {}", name, version));
    }
    std::vector<std::int64_t> moved;
    if (stage == "production") {
      sql::Stmt& prod = db_.stmt("SELECT version FROM models WHERE name = ? AND stage = 'production' AND version != ?");
      prod.bind(name).bind(version);
      while (prod.step()) moved.push_back(prod.i64(0));
    }
    auto set = [&](std::int64_t v, const char* to) {
      db_.stmt("UPDATE models SET stage = ? WHERE name = ? AND version = ?").bind(to).bind(name).bind(v).run();
      db_.stmt("INSERT INTO model_stages(name, version, stage, by, time_s) VALUES (?, ?, ?, ?, ?)")
          .bind(name)
          .bind(v)
          .bind(to)
          .bind(user_)
          .bind(now)
          .run();
    };
    for (std::int64_t v : moved) set(v, "archived");
    set(version, stage.c_str());
  });
  return *model(name, std::to_string(version));
}

std::optional<ModelVersion> Store::model(const std::string& name, const std::string& version) {
  std::optional<ModelVersion> m;
  if (is_stage(version) || version == "latest") {
    sql::Stmt& s = db_.stmt(
        "SELECT name, version, archive, archive_xxh3, run_id, stage, registered_by, registered_s FROM models "
        "WHERE name = ? AND (? = 'latest' OR stage = ?) ORDER BY version DESC LIMIT 1");
    sql::Stmt::Finish done{s};
    if (s.bind(name).bind(version).bind(version).step()) m = read_model(s);
  } else {
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(version.data(), version.data() + version.size(), v);
    if (version.empty() || ec != std::errc() || ptr != version.data() + version.size() || v < 1)
      throw Error(
          Exit::Usage,
          fmt::format("model version '{}': expected a number, latest, candidate, production or archived", version));
    sql::Stmt& s = db_.stmt(
        "SELECT name, version, archive, archive_xxh3, run_id, stage, registered_by, registered_s FROM models "
        "WHERE name = ? AND version = ?");
    sql::Stmt::Finish done{s};
    if (s.bind(name).bind(v).step()) m = read_model(s);
  }
  if (m) m->history = history(m->name, m->version);
  return m;
}

std::vector<ModelVersion> Store::models(const std::string& name) {
  std::vector<ModelVersion> out;
  {
    sql::Stmt& s = db_.stmt(
        "SELECT name, version, archive, archive_xxh3, run_id, stage, registered_by, registered_s FROM models "
        "WHERE ? = '' OR name = ? ORDER BY name, version");
    s.bind(name).bind(name);
    while (s.step()) out.push_back(read_model(s));
  }
  for (ModelVersion& m : out) m.history = history(m.name, m.version);
  return out;
}

}  // namespace rkit::runs
