#include "workflow/snakemake.hpp"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rkit/process.hpp"
#include "test_support.hpp"

namespace rkit::rsub {
namespace {

using testing::error_of;

// What Snakemake 7.21 writes for a rule with threads and resources (its jobscript.sh).
std::string script(const std::string& properties) {
  return "#!/bin/sh\n# properties = " + properties + "\ncd '/work/p' && snakemake --force -j1 features\n";
}

TEST(RsubSnakemake, ResourcesBecomeTheJobsSpec) {
  const std::string text =
      script(R"({"type": "single", "rule": "features", "local": false, "threads": 2, "jobid": 7, )"
             R"("resources": {"mem_mb": 2000, "mem_mib": 1908, "disk_mb": 1000, "tmpdir": "/tmp", "runtime": 30, )"
             R"("gpus": 1, "gpu_type": "H100", "tenant": "desk-a", "project": "alpha", "backend": "auto", )"
             R"("partition": "debug"}})");
  const JobSpec spec = spec_of_jobscript(text, "pipeline");
  EXPECT_EQ(spec.workflow, "pipeline");
  EXPECT_EQ(spec.rule, "features");
  EXPECT_EQ(spec.name, "features");
  EXPECT_EQ(spec.resources.cpus_per_task, 2);
  EXPECT_EQ(spec.resources.tasks, 1);
  EXPECT_EQ(spec.resources.memory_bytes, 2000u * 1000 * 1000);  // mem_mb is megabytes
  EXPECT_EQ(spec.resources.gpus_per_task, 1);
  EXPECT_EQ(spec.resources.gpu_type, "H100");
  EXPECT_EQ(spec.time_limit_s, 1800.0);
  EXPECT_EQ(spec.tenant, "desk-a");
  EXPECT_EQ(spec.project, "alpha");
  EXPECT_EQ(spec.backend, "auto");
  EXPECT_EQ(spec.slurm.partition, "debug");
  EXPECT_EQ(spec.command, (std::vector<std::string>{"/bin/sh", "-c", text}));  // the script itself, kept
}

// The quick start: the same arguments, through rsub-smk-job.py when the job's machine has
// it, else plain -m snakemake (printf stands in for Python: it shows what Python got).
TEST(RsubSnakemake, TheQuickStartRunsTheSameArgumentsThroughTheProfilesFile) {
  const std::string text =
      "#!/bin/sh\n# properties = {\"rule\": \"a\"}\n"
      "cd / && printf '%s|' -m snakemake --target-jobs 'a:x=1' --mode 2 && echo ok\n";
  auto ran = [&](const std::string& quick) {
    const JobSpec spec = spec_of_jobscript(text, "w", quick);
    SpawnOptions o;
    o.argv = spec.command;
    o.out = Redirect::pipe();
    return run(o, 10).out;
  };
  EXPECT_EQ(ran(""), "-m|snakemake|--target-jobs|a:x=1|--mode|2|ok\n");
  EXPECT_EQ(ran("/dev/null"), "/dev/null|--target-jobs|a:x=1|--mode|2|ok\n");
  EXPECT_EQ(ran("/nonexistent/it's job.py"), "-m|snakemake|--target-jobs|a:x=1|--mode|2|ok\n");
  EXPECT_EQ(spec_of_jobscript(text, "w", "/dev/null").rule, "a");
}

TEST(RsubSnakemake, AGroupJobIsNamedByItsGroup) {
  const JobSpec spec = spec_of_jobscript(
      script(R"({"type": "group", "groupid": "backtest", "jobid": "5d4e", "threads": 1, "resources": {}})"), "w");
  EXPECT_EQ(spec.rule, "backtest");
  EXPECT_EQ(spec.name, "backtest");
  EXPECT_FALSE(spec.time_limit_s);
  EXPECT_EQ(spec.resources.memory_bytes, 0u);
}

TEST(RsubSnakemake, BadScriptsAndResourcesNameWhatIsWrong) {
  auto why = [](const std::string& text) {
    const Error e = error_of([&] { spec_of_jobscript(text, "w"); });
    EXPECT_EQ(e.code(), Exit::DataErr) << e.what();
    return std::string(e.what());
  };
  EXPECT_NE(why("#!/bin/sh\necho hi\n").find("no \"# properties = \" line"), std::string::npos);
  EXPECT_NE(why(script("{not json")).find("job script properties"), std::string::npos);
  EXPECT_NE(why(script(R"({"rule": "a", "threads": 0})")).find("threads"), std::string::npos);
  EXPECT_NE(why(script(R"({"rule": "a", "resources": {"mem_mb": "lots"}})")).find("mem_mb"), std::string::npos);
  EXPECT_NE(why(script(R"({"rule": "a", "resources": {"runtime": -1}})")).find("runtime"), std::string::npos);
  EXPECT_NE(why(script(R"({"rule": "a", "resources": {"tenant": 3}})")).find("tenant"), std::string::npos);
  EXPECT_NE(why(script(R"({"rule": "a", "resources": {"gpus": 1.5}})")).find("gpus"), std::string::npos);
}

TEST(RsubSnakemake, StatesBecomeSnakemakesThreeWords) {
  EXPECT_EQ(snakemake_status_word("COMPLETED"), "success");
  EXPECT_EQ(snakemake_status_word("PENDING"), "running");
  EXPECT_EQ(snakemake_status_word("RUNNING"), "running");
  for (const char* s : {"FAILED", "CANCELLED", "TIMEOUT", "LOST", "OUT_OF_MEMORY"})
    EXPECT_EQ(snakemake_status_word(s), "failed") << s;
}

TEST(RsubSnakemake, SidecarVarsAreReadOrIgnored) {
  const auto v = sidecar_vars(R"({"socket": "/run/x/socket", "workflow": "p"})");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->socket, "/run/x/socket");
  EXPECT_EQ(v->workflow, "p");
  EXPECT_FALSE(sidecar_vars(nullptr));
  EXPECT_FALSE(sidecar_vars(""));
  EXPECT_FALSE(sidecar_vars("socket=/x"));
  EXPECT_FALSE(sidecar_vars(R"({"socket": "/x"})"));
}

TEST(RsubSnakemake, DefaultWorkflowIsTheFoldersName) {
  EXPECT_EQ(default_workflow("/home/a/my pipeline"), "my_pipeline");
  EXPECT_EQ(default_workflow("/"), "workflow");
  EXPECT_EQ(default_workflow("/data/caf\xe9"), "caf_");  // not UTF-8: a name is text
}

// Snakemake's polling, as executors/__init__.py does it: each round asks about every
// active job once, those submitted during the previous round first.
TEST(RsubSnakemake, OneQueryPerPollingRound) {
  std::map<std::string, std::string> backend;  // what a query would see
  RoundCache cache([&] { return std::optional(backend); });
  std::vector<std::string> active;
  auto round = [&] {
    std::vector<std::string> words;
    for (const auto& id : active) words.emplace_back(cache.status(id));
    return words;
  };
  for (int i = 0; i < 200; ++i) {
    active.push_back(std::to_string(i));
    backend[std::to_string(i)] = "RUNNING";
  }
  round();
  EXPECT_EQ(cache.queries(), 1);
  for (int r = 2; r <= 5; ++r) round();
  EXPECT_EQ(cache.queries(), 5);

  backend["3"] = "COMPLETED";
  backend["4"] = "FAILED";
  auto words = round();
  EXPECT_EQ(cache.queries(), 6);
  EXPECT_EQ(words[3], "success");
  EXPECT_EQ(words[4], "failed");
  EXPECT_EQ(words[5], "running");

  // Jobs submitted during a round come first in the next: the first is not in the last
  // query, which queries once for it; the round's others then need no query.
  active.insert(active.begin(), {"200", "201"});
  backend["200"] = backend["201"] = "COMPLETED";
  words = round();
  EXPECT_EQ(cache.queries(), 7);
  EXPECT_EQ(words[0], "success");
  EXPECT_EQ(words[1], "success");
  round();
  EXPECT_EQ(cache.queries(), 8);

  // A job no query knows (another workflow's) costs no more than one query a round.
  active.insert(active.begin(), "ghost");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(round().front(), "running");
  EXPECT_EQ(cache.queries(), 12);
}

TEST(RsubSnakemake, AFailedQuerySaysRunningAndTriesNextRound) {
  bool up = false;
  RoundCache cache([&]() -> std::optional<std::map<std::string, std::string>> {
    if (!up) return std::nullopt;
    return std::map<std::string, std::string>{{"1", "COMPLETED"}};
  });
  EXPECT_EQ(cache.status("1"), "running");
  up = true;
  EXPECT_EQ(cache.status("1"), "success");
  EXPECT_EQ(cache.queries(), 2);
}

}  // namespace
}  // namespace rkit::rsub
