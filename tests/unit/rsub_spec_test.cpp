#include "core/spec.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "rkit/jsonl.hpp"
#include "test_support.hpp"

namespace rkit::rsub {
namespace {

using testing::error_of;

const std::string kExamples = RKIT_FIXTURES "/../../examples/jobs/";

// Every key set to something other than its default.
const char* const kFullSpec = R"(name = "sim-42"
tenant = "desk-a"
project = "alpha"
workflow = "pipeline"
rule = "features"
command = ["python3", "sim.py", "--seed", "42"]
workdir = "/data/sim"
env = { OMP_NUM_THREADS = "4", SEED = "42" }
priority = -5
backend = "auto"
time_limit = "1h30m"
hold = true

[resources]
tasks = 2
cpus_per_task = 4
gpus_per_task = 1
gpu_type = "H100"
memory = "16G"

[retry]
max_attempts = 3
on_exit_codes = [75, 1]
on_signals = ["SIGKILL", "term", 6]
backoff = "2s"

[array]
range = "0-15:4,20"
max_concurrent = 2

[[depends]]
type = "afternotok"
job = 12
)";

// A spec whose command is `argv`, every other field at its default.
JobSpec spec_of(std::vector<std::string> argv) {
  JobSpec spec;
  spec.command = std::move(argv);
  spec.name = "job";
  return spec;
}

TEST(RsubSpecParse, ReadsEveryKey) {
  JobSpec s = parse_spec(kFullSpec, "full.toml");
  EXPECT_EQ(s.workflow, "pipeline");
  EXPECT_EQ(s.rule, "features");
  EXPECT_EQ(s.name, "sim-42");
  EXPECT_EQ(s.tenant, "desk-a");
  EXPECT_EQ(s.project, "alpha");
  EXPECT_EQ(s.command, (std::vector<std::string>{"python3", "sim.py", "--seed", "42"}));
  EXPECT_EQ(s.workdir, "/data/sim");
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{{"OMP_NUM_THREADS", "4"}, {"SEED", "42"}}));
  EXPECT_EQ(s.priority, -5);
  EXPECT_EQ(s.backend, "auto");
  EXPECT_EQ(s.time_limit_s, 5400.0);
  EXPECT_TRUE(s.hold);
  EXPECT_EQ(s.resources, (Resources{2, 4, 1, "H100", 16ull << 30}));
  EXPECT_EQ(s.retry, (RetryPolicy{3, {75, 1}, {9, 15, 6}, 2.0}));
  ASSERT_TRUE(s.array);
  EXPECT_EQ(s.array->indices, (std::vector<int>{0, 4, 8, 12, 20}));
  EXPECT_EQ(s.array->max_concurrent, 2);
  EXPECT_EQ(s.depends, (std::vector<Dependency>{{DepType::AfterNotOk, 12}}));
}

TEST(RsubSpecParse, MinimalSpecTakesDefaults) {
  JobSpec s = parse_spec("command = [\"/usr/bin/python3\", \"x.py\"]\n", "min.toml");
  JobSpec expected = spec_of({"/usr/bin/python3", "x.py"});
  expected.name = "python3";
  EXPECT_EQ(s, expected);
}

TEST(RsubSpecParse, StringCommandRunsUnderShell) {
  JobSpec s = parse_spec("command = \"make -j4 && ./run\"\n", "sh.toml");
  EXPECT_EQ(s.command, (std::vector<std::string>{"/bin/sh", "-c", "make -j4 && ./run"}));
  EXPECT_EQ(s.name, "sh");
}

TEST(RsubSpecParse, DerivedNameHasNoSpaces) {
  EXPECT_EQ(parse_spec("command = [\"./my job\"]\n", "x.toml").name, "my_job");
}

TEST(RsubSpecParse, DurationsAndSizesAsNumbers) {
  JobSpec s =
      parse_spec("command = [\"x\"]\ntime_limit = 90\n[resources]\nmemory = 1024\n[retry]\nbackoff = 0.5\n", "n.toml");
  EXPECT_EQ(s.time_limit_s, 90.0);
  EXPECT_EQ(s.resources.memory_bytes, 1024u);
  EXPECT_EQ(s.retry.backoff_s, 0.5);
}

TEST(RsubSpecParse, ZeroTimeLimitIsNone) {
  EXPECT_EQ(parse_spec("command = [\"x\"]\ntime_limit = \"0\"\n", "t.toml").time_limit_s, std::nullopt);
  EXPECT_EQ(parse_spec("command = [\"x\"]\ntime_limit = 0\n", "t.toml").time_limit_s, std::nullopt);
}

TEST(RsubSpecParse, DependsAsStringsAndTables) {
  JobSpec s = parse_spec(
      "command = [\"x\"]\n"
      "depends = [\"afterok:1:2\", \"afterany:3,afternotok:4\", { type = \"afterany\", job = 5 }]\n",
      "d.toml");
  EXPECT_EQ(s.depends, (std::vector<Dependency>{{DepType::AfterOk, 1},
                                                {DepType::AfterOk, 2},
                                                {DepType::AfterAny, 3},
                                                {DepType::AfterNotOk, 4},
                                                {DepType::AfterAny, 5}}));
}

TEST(RsubSpecParse, ExamplesParse) {
  JobSpec sim = load_spec(kExamples + "sim.toml");
  EXPECT_EQ(sim.resources.tasks, 1);
  EXPECT_EQ(sim.resources.gpus_per_task, 0);
  ASSERT_TRUE(sim.array);
  EXPECT_EQ(sim.array->indices.size(), 100u);
  EXPECT_GT(sim.retry.max_attempts, 1);
  EXPECT_FALSE(sim.retry.on_exit_codes.empty());

  JobSpec train = load_spec(kExamples + "train.toml");
  EXPECT_EQ(train.resources.tasks, 2);
  EXPECT_EQ(train.resources.gpus_per_task, 1);
  EXPECT_TRUE(train.time_limit_s);
  EXPECT_TRUE(train.depends.empty());
  EXPECT_FALSE(train.array);
}

TEST(RsubSpecLoad, MissingFileIsNoInput) {
  Error e = error_of([] { load_spec("/nonexistent/job.toml"); });
  EXPECT_EQ(e.code(), Exit::NoInput);
  EXPECT_NE(std::string(e.what()).find("/nonexistent/job.toml"), std::string::npos) << e.what();
}

TEST(RsubSpecLoad, ErrorsNameTheFile) {
  testing::TempDir dir;
  const std::string path = dir.file("job.toml");
  testing::write(path, "command = [\"x\"]\n\n[resources]\ntasks = 0\n");
  EXPECT_STREQ(error_of([&] { load_spec(path); }).what(), (path + ":4: resources.tasks must be at least 1").c_str());
}

TEST(RsubSpecLoad, DashReadsStdin) {
  testing::TempDir dir;
  const std::string path = dir.file("job.toml");
  testing::write(path, "command = [\"x\"]\nhold = 1\n");
  int saved = ::dup(STDIN_FILENO);
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::dup2(fd, STDIN_FILENO);
  ::close(fd);
  Error e = error_of([] { load_spec("-"); });
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  EXPECT_STREQ(e.what(), "<stdin>:2: hold must be a boolean");
}

// Each bad spec with its exact message; all are Error(DataErr).
TEST(RsubSpecErrors, MessagesNameFileLineAndKey) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"command = [\"x\"]\nname = 3\n", "t.toml:2: name must be a string"},
      {"command = [\"x\"]\n\n\nresurces = 1\n", "t.toml:4: unknown key \"resurces\""},
      {"command = [\"x\"]\n[resources]\ntasks = 1\ntaks = 2\n", "t.toml:4: unknown key \"resources.taks\""},
      {"command = [\"x\"]\n[resources]\ncpus_per_task = 2\ntasks = 0\n",
       "t.toml:4: resources.tasks must be at least 1"},
      {"command = [\"x\"]\n[resources]\ntasks = 5000\n", "t.toml:3: resources.tasks must be at most 4096"},
      {"command = [\"x\"]\n[resources]\ntasks = 2.0\n", "t.toml:3: resources.tasks must be an integer"},
      {"command = [\"x\"]\n[resources]\ntasks = 99999999999\n", "t.toml:3: resources.tasks is out of range"},
      {"command = [\"x\"]\ntime_limit = \"soon\"\n",
       "t.toml:2: time_limit: invalid duration 'soon': expected e.g. 90s, 1h30m, 250ms (units d h m s ms us ns)"},
      {"command = [\"x\"]\ntime_limit = -5\n", "t.toml:2: time_limit must be a finite number of seconds, at least 0"},
      {"command = [\"x\"]\n[resources]\nmemory = \"lots\"\n", "t.toml:3: resources.memory: invalid size 'lots'"},
      {"command = [\"x\"]\n[resources]\nmemory = -1\n", "t.toml:3: resources.memory must not be negative"},
      {"command = [\"x\"]\n[array]\nrange = \"5-1\"\n", "t.toml:3: array.range: array range \"5-1\": end before start"},
      {"command = [\"x\"]\n[array]\nmax_concurrent = 2\n", "t.toml:2: array.range is required"},
      {"command = [\"x\"]\ndepends = [\"before:12\"]\n",
       "t.toml:2: depends: dependency \"before:12\": \"before\" is not afterok, afterany or afternotok"},
      {"command = [\"x\"]\n[[depends]]\ntype = \"afterok\"\njob = 0\n",
       "t.toml:2: depends job ids must be at least 1 (not 0)"},
      {"command = [\"x\"]\n[[depends]]\ntype = \"afterok\"\n", "t.toml:2: depends.job is required"},
      {"name = \"x\"\n", "t.toml: command is required"},
      {"command = []\n", "t.toml:1: command must not be empty"},
      {"command = [\"x\", 3]\n", "t.toml:1: command must be a string or an array of strings"},
      {"command = [\"\"]\n", "t.toml:1: command must start with a program name"},
      {"command = [\"x\"]\nname = \"two words\"\n", "t.toml:2: name must not contain whitespace or control characters"},
      {"command = [\"x\"]\n[retry]\non_exit_codes = [0]\n",
       "t.toml:3: retry.on_exit_codes must be between 1 and 255 (not 0)"},
      {"command = [\"x\"]\n[retry]\non_signals = [\"SIGNOPE\"]\n",
       "t.toml:3: retry.on_signals has an unknown signal \"SIGNOPE\""},
      {"command = [\"x\"]\n[retry]\nmax_attempts = 0\n", "t.toml:3: retry.max_attempts must be at least 1"},
      {"command = [\"x\"]\npriority = 1001\n", "t.toml:2: priority must be at most 1000"},
      {"command = [\"x\"]\nenv = { \"A=B\" = \"1\" }\n", "t.toml:2: env variable name \"A=B\" must not contain '='"},
      {"command = [\"x\"]\nenv = { A = 1 }\n", "t.toml:2: env.A must be a string"},
      {"command = [\"x\"]\nbackend = \"\"\n", "t.toml:2: backend must not be empty"},
      {"command = [\"x\"]\nresources = 3\n", "t.toml:2: resources must be a table"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    Error e = error_of([&] { parse_spec(c.text, "t.toml"); });
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_EQ(std::string(e.what()).substr(0, std::string(c.message).size()), c.message);
  }
}

// TOML syntax errors come from toml++ through rkit::parse_toml: file:line:column.
TEST(RsubSpecErrors, SyntaxErrorGivesLineAndColumn) {
  const std::pair<const char*, std::string> cases[] = {
      {"command = [\"x\"]\nname = = 1\n", "t.toml:2:8: "},
      {"command = [\"x\"\n", "t.toml:1:16: "},
  };
  for (const auto& [text, prefix] : cases) {
    Error e = error_of([&] { parse_spec(text, "t.toml"); });
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
  }
}

TEST(RsubSpecJson, RoundTripIsExact) {
  JobSpec full = parse_spec(kFullSpec, "full.toml");
  full.depends.push_back({DepType::AfterAny, 99});
  full.retry.backoff_s = 0.1;  // not exact in binary: must still come back bit for bit
  for (const JobSpec& s : {full, spec_of({"x"})}) {
    Json back = parse_json(to_json_line(s.to_json()), "record");
    EXPECT_EQ(JobSpec::from_json(back), s) << to_json_line(s.to_json());
  }
}

TEST(RsubSpecJson, NormalisedForm) {
  JobSpec s = spec_of({"x"});
  Json j = s.to_json();
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "tenant", "project", "workflow", "rule", "command", "workdir",
                                            "env", "resources", "time_limit_s", "retry", "array", "depends", "priority",
                                            "backend", "hold", "slurm", "kubernetes"}));
  EXPECT_TRUE(j["time_limit_s"].is_null());
  EXPECT_TRUE(j["array"].is_null());
  EXPECT_TRUE(j["env"].is_object());
  EXPECT_TRUE(j["depends"].is_array());
  s.depends = {{DepType::AfterNotOk, 7}};
  EXPECT_EQ(to_json_line(s.to_json()["depends"]), R"([{"type":"afternotok","job":7}])");
}

TEST(RsubSpecJson, MalformedRecordsAreDataErrors) {
  Json j = spec_of({"x"}).to_json();
  Json wrong_type = j;
  wrong_type["resources"]["tasks"] = "two";
  Json invalid = j;
  invalid["resources"]["tasks"] = 0;
  Json bad_dep = j;
  bad_dep["depends"] = Json::array({Json{{"type", "before"}, {"job", 1}}});
  Json too_big = j;
  too_big["priority"] = 1ll << 40;
  const std::pair<Json, const char*> cases[] = {
      {Json::array(), "job spec record: the record must be an object"},
      {wrong_type, "job spec record: resources.tasks must be an integer in range"},
      {invalid, "job spec record: resources.tasks must be at least 1"},
      {bad_dep, "job spec record: depends.type must be afterok, afterany or afternotok"},
      {too_big, "job spec record: priority must be an integer in range"},
  };
  for (const auto& [json, message] : cases) {
    Error e = error_of([&] { JobSpec::from_json(json); });
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_STREQ(e.what(), message);
  }
}

TEST(RsubSpecOverrides, ReplaceAndMerge) {
  JobSpec s = parse_spec(kFullSpec, "full.toml");
  SpecOverrides o;
  o.env = {"SEED=3", "NEW=a=b"};
  o.tasks = 4;
  o.retries = 0;
  o.retry_on = "75,SIGKILL,sig:15,kill";
  o.array = "0-9%2";
  o.depends = {"afterok:3:4,afterany:5"};
  o.time_limit = "0";
  o.memory = "1G";
  o.hold = false;
  apply_overrides(s, o);
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{{"OMP_NUM_THREADS", "4"}, {"SEED", "3"}, {"NEW", "a=b"}}));
  EXPECT_EQ(s.resources.tasks, 4);
  EXPECT_EQ(s.resources.cpus_per_task, 4) << "not overridden: kept";
  EXPECT_EQ(s.retry.max_attempts, 1);
  EXPECT_EQ(s.retry.on_exit_codes, (std::vector<int>{75}));
  EXPECT_EQ(s.retry.on_signals, (std::vector<int>{9, 15, 9}));
  ASSERT_TRUE(s.array);
  EXPECT_EQ(s.array->indices, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(s.array->max_concurrent, 2);
  EXPECT_EQ(s.depends, (std::vector<Dependency>{{DepType::AfterOk, 3}, {DepType::AfterOk, 4}, {DepType::AfterAny, 5}}));
  EXPECT_EQ(s.time_limit_s, std::nullopt);
  EXPECT_EQ(s.resources.memory_bytes, 1ull << 30);
  EXPECT_FALSE(s.hold);
  EXPECT_EQ(s.name, "sim-42");
}

TEST(RsubSpecOverrides, CommandReplacesAndRenamesDerivedName) {
  JobSpec s;
  SpecOverrides o;
  o.command = {"/opt/bin/solve", "--fast"};
  apply_overrides(s, o);
  EXPECT_EQ(s.command, o.command);
  EXPECT_EQ(s.name, "solve");

  o.command = {"./other"};
  apply_overrides(s, o);
  EXPECT_EQ(s.name, "other") << "a name derived from the command follows it";

  JobSpec named = parse_spec(kFullSpec, "full.toml");
  apply_overrides(named, o);
  EXPECT_EQ(named.name, "sim-42") << "a name given in the file is kept";
}

TEST(RsubSpecOverrides, ErrorsNameTheFlag) {
  struct Case {
    std::function<void(SpecOverrides&)> set;
    const char* message;
  };
  const Case cases[] = {
      {[](SpecOverrides& o) { o.tasks = 0; }, "--tasks: must be at least 1"},
      {[](SpecOverrides& o) { o.memory = "lots"; }, "--mem: invalid size 'lots'"},
      {[](SpecOverrides& o) { o.env = {"FOO"}; }, "--env: expected NAME=VALUE, not \"FOO\""},
      {[](SpecOverrides& o) { o.env = {"=x"}; }, "--env: variable name must not be empty"},
      {[](SpecOverrides& o) { o.retry_on = "75,nope"; }, "--retry-on: \"nope\" is neither an exit code nor a signal"},
      {[](SpecOverrides& o) { o.retry_on = "0"; }, "--retry-on: must be between 1 and 255 (not 0)"},
      {[](SpecOverrides& o) { o.array = "5-1"; }, "--array: array range \"5-1\": end before start"},
      {[](SpecOverrides& o) { o.array = "0-9%x"; }, "--array: \"0-9%x\": expected RANGE or RANGE%MAX"},
      {[](SpecOverrides& o) {
         o.depends = {"afterok:1", "before:1"};
       },
       "--depends: dependency \"before:1\": \"before\" is not"},
      {[](SpecOverrides& o) { o.retries = -1; }, "--retries: must be between 0 and 99"},
      {[](SpecOverrides& o) { o.time_limit = "-1s"; }, "--time: invalid duration '-1s'"},
      {[](SpecOverrides& o) { o.priority = 2000; }, "--priority: must be at most 1000"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    JobSpec s = spec_of({"x"});
    SpecOverrides o;
    c.set(o);
    Error e = error_of([&] { apply_overrides(s, o); });
    EXPECT_EQ(e.code(), Exit::Usage);
    EXPECT_EQ(std::string(e.what()).substr(0, std::string(c.message).size()), c.message);
  }
  JobSpec empty;
  EXPECT_STREQ(error_of([&] { apply_overrides(empty, {}); }).what(), "command is required");
}

TEST(RsubSpecArrayRange, Forms) {
  EXPECT_EQ(parse_array_range("3"), (std::vector<int>{3}));
  EXPECT_EQ(parse_array_range("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_array_range("1,3,5-7"), (std::vector<int>{1, 3, 5, 6, 7}));
  EXPECT_EQ(parse_array_range("0-15:4"), (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(parse_array_range("7,1-3,2"), (std::vector<int>{1, 2, 3, 7})) << "sorted, duplicates removed";
  EXPECT_EQ(parse_array_range("5-6:9223372036854775807"), (std::vector<int>{5})) << "a huge step";
  EXPECT_EQ(parse_array_range("0-999990:10").size(), 100000u) << "the most elements";
  EXPECT_EQ(parse_array_range("0-1000000:500000"), (std::vector<int>{0, 500000, 1000000})) << "the highest index";
}

TEST(RsubSpecArrayRange, Errors) {
  const std::pair<const char*, const char*> cases[] = {
      {"5-1", "array range \"5-1\": end before start"},
      {"", "array range \"\": empty"},
      {"1,,3", "array range \"1,,3\": \"\" is not N, A-B or A-B:STEP"},
      {"-3", "array range \"-3\": \"-3\" is not N, A-B or A-B:STEP"},
      {"a-b", "array range \"a-b\": \"a-b\" is not N, A-B or A-B:STEP"},
      {"0-9:0", "array range \"0-9:0\": step must be at least 1"},
      {"0-1000001", "array range \"0-1000001\": indices must be at most 1000000"},
      {"0-100000", "array range \"0-100000\": more than 100000 elements"},
  };
  for (const auto& [text, message] : cases) {
    Error e = error_of([&] { parse_array_range(text); });
    EXPECT_EQ(e.code(), Exit::Usage);
    EXPECT_STREQ(e.what(), message);
  }
}

TEST(RsubSpecDependency, Forms) {
  EXPECT_EQ(parse_dependency("afterok:12"), (std::vector<Dependency>{{DepType::AfterOk, 12}}));
  EXPECT_EQ(parse_dependency("afterany:12:13"),
            (std::vector<Dependency>{{DepType::AfterAny, 12}, {DepType::AfterAny, 13}}));
  EXPECT_EQ(parse_dependency("afternotok:7,afterok:8"),
            (std::vector<Dependency>{{DepType::AfterNotOk, 7}, {DepType::AfterOk, 8}}));
  for (const char* bad :
       {"afterok", "afterok:", "afterok:0", "afterok:x", "afterok:1:", "singleton", "afterok:1,", "afterok:-1"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(error_of([&] { parse_dependency(bad); }).code(), Exit::Usage);
  }
  EXPECT_EQ(dep_type_name(DepType::AfterNotOk), "afternotok");
}

TEST(RsubSpecSignal, NamesAndNumbers) {
  EXPECT_EQ(parse_signal("SIGKILL"), 9);
  EXPECT_EQ(parse_signal("KILL"), 9);
  EXPECT_EQ(parse_signal("kill"), 9);
  EXPECT_EQ(parse_signal("SigTerm"), 15);
  EXPECT_EQ(parse_signal("9"), 9);
  EXPECT_EQ(parse_signal("64"), 64);
  EXPECT_EQ(parse_signal("USR1"), 10);
  for (const char* bad : {"", "0", "65", "SIG", "SIGNOPE", "-9", "9x", " 9"})
    EXPECT_EQ(parse_signal(bad), std::nullopt) << bad;
}

// --- remote backends: nodes, [slurm], [kubernetes], remote dependencies ---------------

TEST(RsubSpecRemote, NodesSpreadTasks) {
  JobSpec s = parse_spec("command = [\"x\"]\n[resources]\ntasks = 4\nnodes = 2\n", "n.toml");
  EXPECT_EQ(s.resources.nodes, 2);
  EXPECT_EQ(s.resources.tasks, 4);
  EXPECT_EQ(parse_spec("command = [\"x\"]\n", "n.toml").resources.nodes, 1) << "default: one node";
}

TEST(RsubSpecRemote, NodeErrorsNameFileAndLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"command = [\"x\"]\n[resources]\ntasks = 3\nnodes = 2\n",
       "t.toml:4: resources.nodes must divide resources.tasks (3 tasks on 2 nodes)"},
      {"command = [\"x\"]\n[resources]\nnodes = 0\n", "t.toml:3: resources.nodes must be at least 1"},
      {"command = [\"x\"]\n[resources]\nnodes = \"2\"\n", "t.toml:3: resources.nodes must be an integer"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    Error e = error_of([&] { parse_spec(text, "t.toml"); });
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_STREQ(e.what(), message);
  }
}

TEST(RsubSpecRemote, SlurmAndKubernetesTables) {
  JobSpec s = parse_spec(
      "command = [\"x\"]\n"
      "backend = \"slurm\"\n"
      "[slurm]\npartition = \"gpu\"\nqos = \"high\"\naccount = \"acct\"\nswitches = 1\nswitch_wait = \"10m\"\n"
      "[kubernetes]\nimage = \"ghcr.io/acme/train:1\"\nqueue = \"team-a\"\n",
      "h.toml");
  EXPECT_EQ(s.slurm, (SlurmHints{"gpu", "high", "acct", 1, 600}));
  EXPECT_EQ(s.kube, (KubeHints{"ghcr.io/acme/train:1", "team-a"}));
  EXPECT_EQ(parse_spec("command = [\"x\"]\n[slurm]\nswitch_wait = 90\n", "h.toml").slurm.switch_wait_s, 90);
  JobSpec plain = parse_spec("command = [\"x\"]\n", "h.toml");
  EXPECT_EQ(plain.slurm, SlurmHints{});
  EXPECT_EQ(plain.kube, KubeHints{});
}

TEST(RsubSpecRemote, HintErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"command = [\"x\"]\n[slurm]\npartition = \"gpu\"\npartiton = \"x\"\n",
       "t.toml:4: unknown key \"slurm.partiton\""},
      {"command = [\"x\"]\n[kubernetes]\nimages = \"x\"\n", "t.toml:3: unknown key \"kubernetes.images\""},
      {"command = [\"x\"]\n[slurm]\nqos = 1\n", "t.toml:3: slurm.qos must be a string"},
      {"command = [\"x\"]\n[slurm]\nswitches = -1\n", "t.toml:3: slurm.switches must be at least 0"},
      {"command = [\"x\"]\n[slurm]\nswitch_wait = -5\n", "t.toml:3: slurm.switch_wait must not be negative"},
      {"command = [\"x\"]\nslurm = \"gpu\"\n", "t.toml:2: slurm must be a table"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    Error e = error_of([&] { parse_spec(text, "t.toml"); });
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_STREQ(e.what(), message);
  }
}

TEST(RsubSpecRemote, RemoteDependencies) {
  EXPECT_EQ(parse_dependency("afterok:slurm:1234:12"),
            (std::vector<Dependency>{{DepType::AfterOk, 0, "slurm:1234"}, {DepType::AfterOk, 12, ""}}));
  EXPECT_EQ(parse_dependency("afterany:12,afternotok:dc1:7"),
            (std::vector<Dependency>{{DepType::AfterAny, 12, ""}, {DepType::AfterNotOk, 0, "dc1:7"}}));
  // A backend's ids are its own: Slurm array elements, Kubernetes Job names.
  EXPECT_EQ(
      parse_dependency("afterok:slurm:1234_5:gke:rsub-12-train"),
      (std::vector<Dependency>{{DepType::AfterOk, 0, "slurm:1234_5"}, {DepType::AfterOk, 0, "gke:rsub-12-train"}}));
  for (const char* bad : {"afterok:slurm", "afterok:slurm:", "afterok::12", "afterok:slurm:a b", "afterok:slurm:1$"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(error_of([&] { parse_dependency(bad); }).code(), Exit::Usage);
  }
  JobSpec s = parse_spec("command = [\"x\"]\ndepends = [\"afterok:slurm:1234\"]\n", "d.toml");
  EXPECT_EQ(s.depends, (std::vector<Dependency>{{DepType::AfterOk, 0, "slurm:1234"}}));
}

TEST(RsubSpecRemote, OverridesSetNodesAndHints) {
  JobSpec s = spec_of({"x"});
  SpecOverrides o;
  o.tasks = 8;
  o.nodes = 4;
  o.partition = "gpu";
  o.qos = "high";
  o.account = "acct";
  o.image = "img:1";
  o.backend = "slurm";
  o.depends = {"afterok:slurm:99"};
  apply_overrides(s, o);
  EXPECT_EQ(s.resources.nodes, 4);
  EXPECT_EQ(s.slurm.partition, "gpu");
  EXPECT_EQ(s.slurm.qos, "high");
  EXPECT_EQ(s.slurm.account, "acct");
  EXPECT_EQ(s.kube.image, "img:1");
  EXPECT_EQ(s.backend, "slurm");
  EXPECT_EQ(s.depends, (std::vector<Dependency>{{DepType::AfterOk, 0, "slurm:99"}}));

  JobSpec bad = spec_of({"x"});
  SpecOverrides uneven;
  uneven.tasks = 4;
  uneven.nodes = 3;
  Error e = error_of([&] { apply_overrides(bad, uneven); });
  EXPECT_EQ(e.code(), Exit::Usage);
  EXPECT_STREQ(e.what(), "--nodes: must divide resources.tasks (4 tasks on 3 nodes)");
}

TEST(RsubSpecRemote, JsonRoundTripKeepsRemoteFields) {
  JobSpec s = spec_of({"x"});
  s.resources.tasks = 6;
  s.resources.nodes = 3;
  s.backend = "slurm";
  s.slurm = {"gpu", "high", "acct", 2, 90.5};
  s.kube = {"img:2", "q"};
  s.depends = {{DepType::AfterOk, 0, "slurm:1234"}, {DepType::AfterAny, 5, ""}};
  const Json j = s.to_json();
  EXPECT_EQ(j["resources"]["nodes"], 3);
  EXPECT_EQ(j["depends"][0]["remote"], "slurm:1234");
  EXPECT_FALSE(j["depends"][1].contains("remote")) << "local dependencies keep their old form";
  const JobSpec back = JobSpec::from_json(parse_json(to_json_line(j), "record"));
  EXPECT_EQ(back, s);
  EXPECT_EQ(back.slurm, s.slurm);
  EXPECT_EQ(back.kube, s.kube);
  EXPECT_EQ(back.depends, s.depends);
}

TEST(RsubSpecRemote, RecordsFromBeforeRemoteBackendsStillRead) {
  Json j = spec_of({"x"}).to_json();
  j.erase("slurm");
  j.erase("kubernetes");
  j["resources"].erase("nodes");
  const JobSpec back = JobSpec::from_json(j);
  EXPECT_EQ(back.resources.nodes, 1);
  EXPECT_EQ(back.slurm, SlurmHints{});
  EXPECT_EQ(back.kube, KubeHints{});
  Json bad = spec_of({"x"}).to_json();
  bad["resources"]["tasks"] = 3;
  bad["resources"]["nodes"] = 2;
  EXPECT_STREQ(error_of([&] { JobSpec::from_json(bad); }).what(),
               "job spec record: resources.nodes must divide resources.tasks (3 tasks on 2 nodes)");
}

}  // namespace
}  // namespace rkit::rsub
