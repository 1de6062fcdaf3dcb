// File: rkit/runs.hpp
//
// The run store: what each training run was (its configuration, system, code revision,
// inputs by digest, parent), what it logged (metrics as time series), what it made
// (checkpoint archives and weights by digest), and the model registry (named, versioned
// models pointing at archives by digest, with a stage). One SQLite database in WAL mode
// (rkit/sqlite.hpp): <state>/runs/runs.db, or runs.db in a project folder shared by a
// team (--project DIR, $RKIT_PROJECT_DIR). rtrain writes it; rtrain runs, rckpt (log,
// model) and rcost read it. Records: rkit.run.v1, rkit.metric.v1, rkit.model.v1 (rkit(7)).
//
//   runs::Store store(runs::store_path(""));
//   std::string id = store.create(new_run, now);           // "3f9c2a7d41b0"
//   store.log(id, {{"loss", 10, 0.52, now}});               // one transaction
//   store.finish(id, "FINISHED", now, summary);
//   std::optional<runs::Run> r = store.find("3f9c");        // a unique prefix will do
//
// Identity comes from the kernel: a run's user is the uid of the process that created
// it, a promotion's that of the process that promoted. The store is the user's own
// (the folder is made 0700); a project folder is shared through its file permissions,
// as a Git repository is.
//
// Concurrency as rkit/sqlite.hpp: any number of processes (ranks, jobs, launchers) may
// write at once; each call is one transaction, whole or absent. Durable: a call that
// returned is on disk, power cut or not (synchronous=FULL).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rkit/jsonl.hpp"
#include "rkit/sqlite.hpp"

namespace rkit::runs {

inline constexpr const char* kRunSchema = "rkit.run.v1";
inline constexpr const char* kMetricSchema = "rkit.metric.v1";
inline constexpr const char* kModelSchema = "rkit.model.v1";

// The store's file: DIR/runs.db for a project folder `project` (else $RKIT_PROJECT_DIR
// when set), else <state>/runs/runs.db.
std::string store_path(const std::string& project);

// One value of a time series.
struct Metric {
  std::string key;  // "loss", "eval_loss", "samples_per_s" ...
  std::int64_t step = 0;
  double value = 0;
  double time_s = 0;  // Unix seconds
};

// What a run starts with. JSON fields are stored as given (objects, arrays or null).
struct NewRun {
  std::string experiment = "default";
  std::string name;
  Json params = Json::object();  // the resolved configuration, by key
  Json tags = Json::object();    // string → string
  Json system = Json::object();  // host, topology digest, versions
  Json code = Json::object();    // {"repo", "commit", "dirty", "diff_xxh3"}
  Json inputs = Json::array();   // [{"name", "path", "bytes", "xxh3"}]
  Json parent = nullptr;         // {"kind": "resume"|"finetune"|"reproduce", "run_id", "archive", "archive_xxh3"}
  Json job = nullptr;            // {"backend", "id"}: the scheduler's job this run is
  Json command = nullptr;        // argv, for a launched run
};

// A run as stored. The JSON fields stay text until asked for, so that listing many runs
// parses little.
struct Run {
  std::string id, experiment, name, status, user, host;
  std::uint32_t uid = 0;
  std::int64_t pid = 0;
  double start_s = 0;
  std::optional<double> end_s;
  // JSON text: params, tags, system, code, inputs, outputs, parent, job, command, summary,
  // and metrics: {"loss": {"last": 0.1, "step": 1000, "min": 0.09, "max": 2.3}, ...}.
  std::string params, tags, system, code, inputs, outputs, parent, job, command, summary, metrics;
  // Filter::pick's values, in its order (null where the run has none).
  std::vector<Json> picked;

  // RUNNING, FINISHED, FAILED, KILLED, or LOST: a RUNNING run of this host whose
  // process is gone.
  std::string live_status() const;
  // The rkit.run.v1 record, as one JSON line (text spliced, nothing parsed) and as JSON.
  std::string to_json_line() const;
  void append_json_line(std::string& out) const;  // the same, appended (no newline)
  Json to_json() const;
};

// A filter's test of one value: "train.lr>=0.001", "eval_loss<0.5", "model.activation=gelu".
struct Condition {
  std::string key, op;  // op: = != < <= > >=
  Json value;           // a number when the text is one, else a string
};
// Parses KEY OP VALUE; Error(Usage) naming `flag` otherwise.
Condition parse_condition(std::string_view text, std::string_view flag);

struct Filter {
  std::optional<std::string> experiment, status;
  std::vector<std::pair<std::string, std::string>> tags;  // tag KEY equals VALUE
  std::vector<Condition> params, metrics;                 // metrics: on the last value
  std::size_t limit = 0;                                  // the newest N (0: all), oldest first
  // For a table of many runs: read only the run's own fields (no JSON text but these),
  // and pick single values out of the JSON in the database: a parameter
  // ({"params", "train.lr"}) or a metric's last value ({"metrics", "loss"}).
  bool light = false;
  std::vector<std::pair<std::string, std::string>> pick;
};

struct StageChange {
  std::string stage, by;
  double time_s = 0;
};

struct ModelVersion {
  std::string name;
  std::int64_t version = 0;
  std::string archive;       // absolute path when registered
  std::string archive_xxh3;  // the archive's digest when registered
  std::string run_id;        // the run that made it ("" when unknown)
  std::string stage;         // candidate, production, archived
  std::string registered_by;
  double registered_s = 0;
  std::vector<StageChange> history;  // oldest first, registration included
  Json to_json() const;              // rkit.model.v1
};

// The stages a version may be in.
bool is_stage(std::string_view stage);  // candidate | production | archived

class Store {
 public:
  // Opens the store at `path`, creating it when `create` (what records runs), else
  // Error(NoInput) "no run store at PATH" when it is missing (what only reads one). Other
  // errors as sql::Db.
  explicit Store(const std::string& path, bool create = true);
  const std::string& path() const { return db_.path(); }

  // A new RUNNING run of this process's user, pid and host; returns its id (12 random
  // hex digits).
  std::string create(const NewRun& run, double now);
  // Adds a process's description to a run another made (a trainer under `rtrain launch
  // --track`): its params merged in, its inputs added, its code, system and job where the
  // run has none. Error(NoInput) for an unknown run.
  void attach(const std::string& id, const NewRun& run);
  // Appends metrics (and merges `params`, an object, into the run's), in one
  // transaction. A run keeps at most kMaxMetricKeys metrics: values of further keys are
  // dropped, and their number returned (0 when all were kept), for the caller to warn.
  // Error(NoInput) for an unknown run.
  static constexpr std::size_t kMaxMetricKeys = 1000;
  std::size_t log(const std::string& id, const std::vector<Metric>& metrics, const Json& params = Json());
  // Appends an output: {"kind": "checkpoint"|"weights", "path", "step", "bytes", "xxh3"}.
  void add_output(const std::string& id, const Json& output);
  // Sets tags (string values) on a run.
  void set_tags(const std::string& id, const Json& tags);
  // Sets the run's parent (a resume or fine-tune's checkpoint), or its summary while it
  // runs (a trainer under a launcher that ends the run itself).
  void set_parent(const std::string& id, const Json& parent);
  void set_summary(const std::string& id, const Json& summary);
  // Ends a run: FINISHED, FAILED or KILLED, with its summary (an object or null).
  void finish(const std::string& id, const std::string& status, double now, const Json& summary);
  // The run with this id, or the only one whose id starts with `prefix` (4 or more
  // digits). nullopt when none; Error(Usage) when the prefix names several.
  std::optional<Run> find(const std::string& prefix);
  // Runs that pass `filter`, oldest first.
  void each(const Filter& filter, const std::function<void(const Run&)>& fn);
  // The experiment of each scheduler job a run was ("12", "slurm:1234": the job's id as
  // its record gives it), for a cost report by experiment.
  std::unordered_map<std::string, std::string> job_experiments();
  // The run's metrics, by key then step; only `keys` when given.
  std::vector<Metric> metrics(const std::string& id, const std::vector<std::string>& keys = {});

  // --- the model registry ---------------------------------------------------------------
  // A new version (the last + 1) of `name`, a candidate. Error(Usage) for a name that is
  // not [A-Za-z0-9._-]{1,128}.
  ModelVersion register_model(const std::string& name, const std::string& archive, const std::string& archive_xxh3,
                              const std::string& run_id, double now);
  // Moves a version to `stage`; promoting one to production moves the version there
  // before it to archived. Error(NoInput) for an unknown version, Error(Usage) for a
  // stage that is not one.
  ModelVersion set_stage(const std::string& name, std::int64_t version, const std::string& stage, double now);
  // A version: a number, "latest", or a stage ("production": the newest version there).
  std::optional<ModelVersion> model(const std::string& name, const std::string& version);
  // Every version of `name` (of every model when empty), by name then version.
  std::vector<ModelVersion> models(const std::string& name);

 private:
  std::int64_t row_of(const std::string& id);
  void set_column(const std::string& id, const char* column, const Json& value);
  // Reads one JSON column of a run (`select_sql`), changes it, writes it back
  // (`update_sql`), in one transaction. Error(NoInput) for an unknown run.
  void edit_json(const std::string& id, const char* select_sql, const char* update_sql,
                 const std::function<void(Json&)>& change);
  std::vector<StageChange> history(const std::string& name, std::int64_t version);
  ModelVersion read_model(sql::Stmt& s);
  sql::Db db_;
  std::string user_;
  std::uint32_t uid_ = 0;
};

}  // namespace rkit::runs
