// The run store and model registry (rkit/runs.hpp): records and their final metrics,
// filters, id prefixes, 64 concurrent writers, and the registry's stages.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sqlite3.h>

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "rkit/error.hpp"
#include "rkit/runs.hpp"
#include "test_support.hpp"

namespace rkit::runs {
namespace {

constexpr double kT0 = 1'700'000'000;  // the tests' clock: never the real one

NewRun run_of(const std::string& experiment, double lr) {
  NewRun r;
  r.experiment = experiment;
  r.params = {{"train.lr", lr}, {"model.activation", "gelu"}};
  r.tags = {{"desk", "a"}};
  return r;
}

TEST(RunStore, RecordsMetricsAndKeepsLastMinMax) {
  testing::TempDir dir;
  Store s(dir.path() + "/runs.db");
  const std::string id = s.create(run_of("alpha", 1e-3), kT0);
  EXPECT_EQ(id.size(), 12u);
  s.log(id, {{"loss", 10, 2.0, kT0 + 1}, {"loss", 20, 0.5, kT0 + 2}});
  s.log(id, {{"loss", 15, 0.25, kT0 + 3}, {"eval_loss", 20, 0.7, kT0 + 3}}, {{"extra", 3}});
  s.finish(id, "FINISHED", kT0 + 4, {{"weights_xxh3", "00"}});
  const runs::Run r = *s.find(id);
  const Json j = r.to_json();
  EXPECT_EQ(j["schema"], "rkit.run.v1");
  EXPECT_EQ(j["status"], "FINISHED");
  EXPECT_EQ(j["duration_s"], 4.0);
  // The last value is the one of the highest step, not the last written.
  EXPECT_EQ(j["metrics"]["loss"]["last"], 0.5);
  EXPECT_EQ(j["metrics"]["loss"]["step"], 20);
  EXPECT_EQ(j["metrics"]["loss"]["min"], 0.25);
  EXPECT_EQ(j["metrics"]["loss"]["max"], 2.0);
  EXPECT_EQ(j["params"]["extra"], 3);
  EXPECT_EQ(j["params"]["train.lr"], 1e-3);
  const std::vector<Metric> loss = s.metrics(id, {"loss"});
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss[0].step, 10);
  EXPECT_EQ(loss[1].step, 15);  // by step
  EXPECT_EQ(loss[2].value, 0.5);
}

// A worker logging a new key every step cannot grow a record without bound.
TEST(RunStore, KeepsAtMostItsLimitOfMetricKeys) {
  testing::TempDir dir;
  Store s(dir.path() + "/runs.db");
  const std::string id = s.create(run_of("keys", 0.1), kT0);
  std::vector<Metric> many;
  for (std::size_t k = 0; k < Store::kMaxMetricKeys + 5; ++k) many.push_back({fmt::format("m{}", k), 1, 1.0, kT0});
  EXPECT_EQ(s.log(id, many), 5u);
  EXPECT_EQ(s.log(id, {{"m0", 2, 2.0, kT0}, {"new", 2, 2.0, kT0}}), 1u);  // known keys go on
  const Json j = s.find(id)->to_json();
  EXPECT_EQ(j.at("metrics").size(), Store::kMaxMetricKeys);
  EXPECT_EQ(j.at("metrics").at("m0").at("last"), 2.0);
  EXPECT_FALSE(j.at("metrics").contains("new"));
}

TEST(RunStore, NotANumberIsNoMeasurement) {
  testing::TempDir dir;
  Store s(dir.path() + "/runs.db");
  const std::string id = s.create(run_of("alpha", 1e-3), kT0);
  s.log(id, {{"loss", 1, std::nan(""), kT0}, {"loss", 2, 1.5, kT0}});
  EXPECT_EQ(s.metrics(id).size(), 1u);
}

// Runs with chosen ids, written as the store writes them (ids are random otherwise).
void insert_run(const std::string& path, const std::string& id) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql = fmt::format(
      "INSERT INTO runs(run_id, experiment, status, user, uid, start_s) VALUES ('{}', 'x', 'FINISHED', 'u', 1, 0); "
      "INSERT INTO run_texts(run) VALUES (last_insert_rowid())",
      id);
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

TEST(RunStore, FindsByUniquePrefixOnly) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/runs.db";
  Store s(path);
  insert_run(path, "abcd00000001");
  insert_run(path, "abcd00000002");
  insert_run(path, "abce00000003");
  EXPECT_EQ(s.find("abcd00000001")->id, "abcd00000001");
  EXPECT_EQ(s.find("abce")->id, "abce00000003");
  EXPECT_EQ(s.find("abcd00000002")->id, "abcd00000002");
  EXPECT_FALSE(s.find("abcf").has_value());
  for (const char* bad : {"abcd", "abc", "ABCD", "abcd000000010", "abcd'--"}) {
    try {
      s.find(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::Usage) << bad;
    }
  }
}

TEST(RunStore, FiltersOnExperimentTagsParamsAndFinalMetrics) {
  testing::TempDir dir;
  Store s(dir.path() + "/runs.db");
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    NewRun r = run_of(i % 2 ? "beta" : "alpha", 1e-3 * (i + 1));
    if (i == 5) r.tags["desk"] = "b";
    ids.push_back(s.create(r, kT0 + i));
    s.log(ids.back(), {{"eval_loss", 100, 1.0 / (i + 1), kT0 + i}});
  }
  auto list = [&](const Filter& f) {
    std::vector<std::string> out;
    s.each(f, [&](const runs::Run& r) { out.push_back(r.id); });
    return out;
  };
  Filter f;
  f.experiment = "alpha";
  EXPECT_EQ(list(f), (std::vector<std::string>{ids[0], ids[2], ids[4]}));
  f = {};
  f.params.push_back(parse_condition("train.lr>=0.004", "--param"));
  EXPECT_EQ(list(f), (std::vector<std::string>{ids[3], ids[4], ids[5]}));
  f.metrics.push_back(parse_condition("eval_loss<0.2", "--metric"));
  EXPECT_EQ(list(f), (std::vector<std::string>{ids[5]}));
  f = {};
  f.tags.emplace_back("desk", "b");
  EXPECT_EQ(list(f), (std::vector<std::string>{ids[5]}));
  f = {};
  f.params.push_back(parse_condition("model.activation=gelu", "--param"));
  f.limit = 2;
  EXPECT_EQ(list(f), (std::vector<std::string>{ids[4], ids[5]}));  // the newest 2, oldest first
  // A value is bound, never spliced into the SQL.
  f = {};
  f.params.push_back(parse_condition("model.activation=x' OR '1'='1", "--param"));
  EXPECT_TRUE(list(f).empty());
  // Keys and operators are spliced into the SQL: each() takes only what parse_condition makes.
  for (const auto& [key, op] : std::vector<std::pair<std::string, std::string>>{
           {"train.lr", "= 1 OR 1 ="}, {"x') OR ('1", "="}, {"train.lr", "LIKE"}}) {
    f = {};
    f.params.push_back({key, op, 1.0});
    EXPECT_THROW(list(f), Error) << key << " " << op;
    f = {};
    f.metrics.push_back({key, op, 1.0});
    EXPECT_THROW(list(f), Error) << key << " " << op;
  }
  EXPECT_THROW(parse_condition("lr", "--param"), Error);
  EXPECT_THROW(parse_condition("a\"b=1", "--param"), Error);
}

// --last N with --status LOST or RUNNING: the newest N of that state, though SQLite sees
// both as RUNNING (a run is LOST when its process is gone, which only a live check tells).
TEST(RunStore, LastNOfLostRunsCountsOnlyLostOnes) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/runs.db";
  Store s(path);
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(s.create(run_of("live", i), kT0 + i));
  const pid_t gone = ::fork();  // a process that has been and gone: its pid is dead
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql = fmt::format("UPDATE runs SET pid = {} WHERE run_id IN ('{}', '{}', '{}')", gone, ids[0],
                                      ids[1], ids[2]);  // the newest stays this live process's
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto list = [&](const std::string& status, std::size_t last) {
    Filter f;
    f.status = status;
    f.limit = last;
    std::vector<std::string> out;
    s.each(f, [&](const runs::Run& r) { out.push_back(r.id); });
    return out;
  };
  EXPECT_EQ(list("LOST", 2), (std::vector<std::string>{ids[1], ids[2]}));
  EXPECT_EQ(list("LOST", 0), (std::vector<std::string>{ids[0], ids[1], ids[2]}));
  EXPECT_EQ(list("RUNNING", 1), (std::vector<std::string>{ids[3]}));
}

// 64 writers at once, each its own connection (as ranks and jobs are processes): every
// record arrives whole, none twice, and the database stays intact.
TEST(RunStore, SixtyFourConcurrentWritersLoseNothing) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/runs.db";
  Store(path).models("");  // the schema, once
  constexpr int kWriters = 64, kBatches = 20, kPerBatch = 10;
  std::vector<std::string> ids(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w)
    threads.emplace_back([&, w] {
      Store s(path);
      ids[w] = s.create(run_of("concurrent", w), kT0 + w);
      for (int b = 0; b < kBatches; ++b) {
        std::vector<Metric> batch;
        for (int i = 0; i < kPerBatch; ++i) batch.push_back({"loss", b * kPerBatch + i, w + 0.001 * i, kT0});
        s.log(ids[w], batch);
      }
      s.finish(ids[w], "FINISHED", kT0 + 100, nullptr);
    });
  for (auto& t : threads) t.join();
  Store s(path);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), static_cast<std::size_t>(kWriters));
  for (int w = 0; w < kWriters; ++w) {
    const std::vector<Metric> m = s.metrics(ids[w]);
    ASSERT_EQ(m.size(), static_cast<std::size_t>(kBatches * kPerBatch)) << "writer " << w;
    for (std::size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].step, static_cast<std::int64_t>(i));
    EXPECT_EQ(s.find(ids[w])->status, "FINISHED");
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "ok");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(ModelRegistry, VersionsStagesAndHistory) {
  testing::TempDir dir;
  Store s(dir.path() + "/runs.db");
  const ModelVersion v1 = s.register_model("alpha", "/a/1.rkpt", "00000000000000a1", "r1", kT0);
  const ModelVersion v2 = s.register_model("alpha", "/a/2.rkpt", "00000000000000a2", "r2", kT0 + 1);
  EXPECT_EQ(v1.version, 1);
  EXPECT_EQ(v2.version, 2);
  EXPECT_EQ(v2.stage, "candidate");
  s.set_stage("alpha", 1, "production", kT0 + 2);
  s.set_stage("alpha", 2, "production", kT0 + 3);  // the one before is archived
  EXPECT_EQ(s.model("alpha", "1")->stage, "archived");
  EXPECT_EQ(s.model("alpha", "production")->version, 2);
  EXPECT_EQ(s.model("alpha", "latest")->version, 2);
  const ModelVersion h = *s.model("alpha", "1");
  ASSERT_EQ(h.history.size(), 3u);  // candidate, production, archived
  EXPECT_EQ(h.history[1].stage, "production");
  EXPECT_FALSE(s.model("alpha", "candidate").has_value());
  EXPECT_FALSE(s.model("beta", "latest").has_value());
  EXPECT_THROW(s.register_model("no spaces", "/x", "0", "", kT0), Error);
  EXPECT_THROW(s.set_stage("alpha", 9, "production", kT0), Error);
  EXPECT_THROW(s.set_stage("alpha", 1, "staging", kT0), Error);
  EXPECT_EQ(s.models("").size(), 2u);
}

TEST(RunStore, RefusesBadNamesAndTags) {
  testing::TempDir dir;
  Store s(dir.path() + "/runs.db");
  NewRun r = run_of("alpha", 1e-3);
  r.experiment = "bad\nname";
  EXPECT_THROW(s.create(r, kT0), Error);
  r = run_of("alpha", 1e-3);
  r.tags["x y"] = "1";
  EXPECT_THROW(s.create(r, kT0), Error);
  EXPECT_THROW(s.log("000000000000", {}), Error);
}

}  // namespace
}  // namespace rkit::runs
