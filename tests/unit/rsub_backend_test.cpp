// rsub's Slurm backend without Slurm: sacct output parsed into job states, Slurm's state
// names, and the sbatch script, whose retry and exit logic runs for real under /bin/sh
// with a fake srun and scontrol.
#include "backends/remote.hpp"
#include "daemon/daemon.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "rkit/process.hpp"
#include "test_support.hpp"

extern char** environ;

namespace rkit::rsub {
namespace {

// --- parse_sacct ------------------------------------------------------------------------

std::optional<Store::RemoteState> find(const std::vector<Store::RemoteState>& states, const std::string& id) {
  for (const auto& s : states)
    if (s.remote_id == id) return s;
  return std::nullopt;
}

Store::RemoteState only(const std::string& text, const std::string& id) {
  const auto states = parse_sacct(text, {id});
  EXPECT_EQ(states.size(), 1u) << text;
  if (states.empty()) return {};
  EXPECT_EQ(states.front().remote_id, id);
  return states.front();
}

TEST(RsubSacct, CompletedJob) {
  const auto s = only("12|COMPLETED|0:0|2026-11-30T10:00:00|2026-11-30T10:01:00|vm|None\n", "12");
  EXPECT_EQ(s.state, JobState::Completed);
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(s.signal, std::nullopt);
  ASSERT_TRUE(s.start_s);
  ASSERT_TRUE(s.end_s);
  EXPECT_DOUBLE_EQ(*s.end_s - *s.start_s, 60);  // Slurm prints local time; only the difference is fixed
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 30;
  tm.tm_hour = 10;
  tm.tm_isdst = -1;
  EXPECT_DOUBLE_EQ(*s.start_s, static_cast<double>(std::mktime(&tm)));
  EXPECT_EQ(s.host, "vm");
  EXPECT_EQ(s.attempts, 1);
  EXPECT_EQ(s.reason, "");
  EXPECT_FALSE(s.held);
}

TEST(RsubSacct, FailuresSayHowTheyEnded) {
  auto s = only("13|FAILED|3:0|2026-11-30T10:00:00|2026-11-30T10:00:05|vm|None", "13");
  EXPECT_EQ(s.state, JobState::Failed);
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_EQ(s.signal, std::nullopt);
  EXPECT_EQ(s.reason, "NonZeroExitCode 3");

  s = only("14|FAILED|0:9|2026-11-30T10:00:00|2026-11-30T10:00:05|vm|None", "14");
  EXPECT_EQ(s.state, JobState::Failed);
  EXPECT_EQ(s.signal, 9);
  EXPECT_EQ(s.exit_code, std::nullopt);
  EXPECT_EQ(s.reason, "Signal SIGKILL");

  // A finished job's stale pending reason from sacct is replaced.
  s = only("15|TIMEOUT|0:15|2026-11-30T10:00:00|2026-11-30T11:00:00|vm|Resources", "15");
  EXPECT_EQ(s.state, JobState::Timeout);
  EXPECT_EQ(s.reason, "TimeLimit");
  EXPECT_DOUBLE_EQ(*s.end_s - *s.start_s, 3600);

  s = only("16|CANCELLED by 0|0:15|2026-11-30T10:00:00|2026-11-30T10:00:30|vm|Priority", "16");
  EXPECT_EQ(s.state, JobState::Cancelled);
  EXPECT_EQ(s.reason, "");
  EXPECT_TRUE(s.end_s);

  s = only("17|NODE_FAIL|0:0|2026-11-30T10:00:00|2026-11-30T10:00:30|vm2|None", "17");
  EXPECT_EQ(s.state, JobState::Lost);
  EXPECT_EQ(s.host, "vm2");
}

TEST(RsubSacct, RunningJobHasAStartButNoEnd) {
  const auto s = only("18|RUNNING|0:0|2026-11-30T10:00:00|Unknown|vm[1-2]|None", "18");
  EXPECT_EQ(s.state, JobState::Running);
  EXPECT_TRUE(s.start_s);
  EXPECT_EQ(s.end_s, std::nullopt);
  EXPECT_EQ(s.exit_code, std::nullopt) << "not over: no exit code yet";
  EXPECT_EQ(s.host, "vm[1-2]");
  EXPECT_EQ(s.attempts, 1);
}

TEST(RsubSacct, RequeuedJobCountsEachAttempt) {
  const std::string text =
      "30|REQUEUED|0:0|2026-11-30T10:00:00|2026-11-30T10:01:00|vm|None\n"
      "30|REQUEUED|0:0|2026-11-30T10:02:00|2026-11-30T10:03:00|vm|None\n"
      "30|FAILED|1:0|2026-11-30T10:04:00|2026-11-30T10:05:00|vm|None\n";
  const auto s = only(text, "30");
  EXPECT_EQ(s.attempts, 3);
  EXPECT_EQ(s.state, JobState::Failed);
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_EQ(s.reason, "NonZeroExitCode 1");
  EXPECT_DOUBLE_EQ(*s.end_s - *s.start_s, 60) << "the last attempt's times";

  // Requeued and waiting again: one attempt made, pending.
  const auto again = only(
      "31|REQUEUED|0:0|2026-11-30T10:00:00|2026-11-30T10:01:00|vm|None\n"
      "31|PENDING|0:0|Unknown|Unknown|None assigned|BeginTime\n",
      "31");
  EXPECT_EQ(again.state, JobState::Pending);
  EXPECT_EQ(again.attempts, 1);
  EXPECT_EQ(again.reason, "BeginTime");
}

TEST(RsubSacct, PendingJobsKeepTheirReason) {
  auto s = only("40|PENDING|0:0|Unknown|Unknown|None assigned|Resources", "40");
  EXPECT_EQ(s.state, JobState::Pending);
  EXPECT_EQ(s.reason, "Resources");
  EXPECT_FALSE(s.held);
  EXPECT_EQ(s.attempts, 0);
  EXPECT_EQ(s.start_s, std::nullopt);
  EXPECT_EQ(s.host, "");
  EXPECT_EQ(s.exit_code, std::nullopt);

  s = only("41|PENDING|0:0|Unknown|Unknown|None assigned|JobHeldUser", "41");
  EXPECT_EQ(s.state, JobState::Pending);
  EXPECT_TRUE(s.held);
  EXPECT_EQ(s.reason, "JobHeldUser");

  s = only("42|PENDING|0:0|Unknown|Unknown|None assigned|None", "42");
  EXPECT_EQ(s.reason, "") << "\"None\" is no reason";
}

TEST(RsubSacct, ArrayElementsAndTheirPendingRange) {
  const std::string text =
      "20_0|COMPLETED|0:0|2026-11-30T10:00:00|2026-11-30T10:01:00|vm|None\n"
      "20_[2-3%2]|PENDING|0:0|Unknown|Unknown|None assigned|Priority\n"
      "99|COMPLETED|0:0|2026-11-30T10:00:00|2026-11-30T10:01:00|vm|None\n";
  const auto states = parse_sacct(text, {"20_0", "20_1", "20_2"});
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[0].remote_id, "20_0");
  EXPECT_EQ(states[0].state, JobState::Completed);
  EXPECT_EQ(states[0].attempts, 1);
  const auto two = find(states, "20_2");
  ASSERT_TRUE(two);
  EXPECT_EQ(two->state, JobState::Pending);
  EXPECT_EQ(two->reason, "Priority");
  EXPECT_EQ(two->attempts, 0);
  // 20_1 has no line of its own: the range line stands for it (as documented; the range
  // itself is not read, see remote.hpp).
  const auto one = find(states, "20_1");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->state, JobState::Pending);
  EXPECT_FALSE(find(states, "99")) << "not wanted";
  EXPECT_FALSE(find(states, "20_[2-3%2]")) << "the range line is no job of its own";
}

TEST(RsubSacct, RangeLineDoesNotStandForAPlainJobOrOtherArrays) {
  const std::string text = "20_[2-3]|PENDING|0:0|Unknown|Unknown|None assigned|Priority\n";
  EXPECT_TRUE(parse_sacct(text, {"20", "21_2"}).empty());
}

TEST(RsubSacct, OrderFollowsWantedAndUnknownIdsAreLeftOut) {
  const std::string text =
      "50|RUNNING|0:0|2026-11-30T10:00:00|Unknown|vm|None\n"
      "51|COMPLETED|0:0|2026-11-30T10:00:00|2026-11-30T10:01:00|vm|None\n";
  const auto states = parse_sacct(text, {"51", "52", "50"});
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0].remote_id, "51");
  EXPECT_EQ(states[1].remote_id, "50");
}

TEST(RsubSacct, ShortAndEmptyLinesAreIgnored) {
  const std::string text =
      "\n"
      "60|COMPLETED|0:0|2026-11-30T10:00:00\n"
      "61\n"
      "60|RUNNING|0:0|2026-11-30T10:00:00|Unknown|vm\n"  // 6 fields
      "62|FAILED|2:0|2026-11-30T10:00:00|2026-11-30T10:00:01|vm|None\n";
  EXPECT_TRUE(parse_sacct(text, {"60", "61"}).empty());
  const auto s = only(text, "62");
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_TRUE(parse_sacct("", {"60"}).empty());
}

// --- slurm_state -----------------------------------------------------------------------

TEST(RsubSlurmState, NamesMapToRsubStates) {
  const std::pair<const char*, JobState> cases[] = {
      {"PENDING", JobState::Pending},
      {"REQUEUED", JobState::Pending},
      {"REQUEUE_HOLD", JobState::Pending},
      {"REQUEUE_FED", JobState::Pending},
      {"RUNNING", JobState::Running},
      {"COMPLETING", JobState::Running},
      {"CONFIGURING", JobState::Running},
      {"SUSPENDED", JobState::Running},
      {"COMPLETED", JobState::Completed},
      {"FAILED", JobState::Failed},
      {"OUT_OF_MEMORY", JobState::OutOfMemory},
      {"PREEMPTED", JobState::Failed},
      {"BOOT_FAIL", JobState::Failed},
      {"DEADLINE", JobState::Failed},
      {"TIMEOUT", JobState::Timeout},
      {"CANCELLED", JobState::Cancelled},
      {"CANCELLED by 0", JobState::Cancelled},
      {"CANCELLED by 1000", JobState::Cancelled},
      {"NODE_FAIL", JobState::Lost},
  };
  for (const auto& [name, state] : cases) EXPECT_EQ(state_name(slurm_state(name)), state_name(state)) << name;
}

// --- slurm_script ----------------------------------------------------------------------

const char* const kCommandScript =
    "printf '%s\\n' \"$0\" \"$@\" \"$QUOTED\" \"$RSUB_JOB_ID\" \"$RSUB_ARRAY_INDEX\" \"$RSUB_TASK_ID\" > "
    "\"$OUT_FILE\"; "
    "exit \"${FAKE_RC:-0}\"";

// 4 tasks on 2 nodes, 8 cores, 2 H100s and 16 GiB each; an array {0,1,5} of at most 2 at
// once; 3 attempts on exit 75 or SIGKILL.
JobSpec big_spec() {
  JobSpec s;
  s.name = "train";
  s.tenant = "desk-a";
  s.command = {"/bin/sh", "-c", kCommandScript, "arg zero", "it's", "a \"b\" c", "$HOME;`false`"};
  s.workdir = "/data/run";
  s.env = {{"QUOTED", "it's \"q\" $HOME `x`"}};
  s.resources = {
      .tasks = 4, .cpus_per_task = 8, .gpus_per_task = 2, .gpu_type = "H100", .memory_bytes = 16ull << 30, .nodes = 2};
  s.time_limit_s = 90 * 60;
  s.retry = {.max_attempts = 3, .on_exit_codes = {75}, .on_signals = {9}, .backoff_s = 10};
  s.array = ArraySpec{{0, 1, 5}, 2};
  s.hold = true;
  s.priority = -5;
  s.backend = "slurm";
  s.slurm.switches = 1;
  s.slurm.switch_wait_s = 600;
  return s;
}

// The backends as plug-ins: the local machine is always the first, each table is read by
// its own kind (a key of another kind is an error), and the kinds listed are the ones
// the error names.
Settings settings_of(const std::string& text) {
  Config c;
  c.path = "rkit.toml";
  c.table = parse_toml(text, c.path, Exit::Config);
  return load_settings(c);
}

// --- run_backend_command: what a kind decides on is typed, not read from rsub's message --

TEST(RsubBackendCall, AnUnreachablePeerIsTypedWithWhatItsClientSaid) {
  const BackendCall how{"slurm backend \"t\"", "Slurm", [](const std::string&) { return true; }, std::nullopt};
  try {
    run_backend_command(how, {"sh", "-c", "echo 'sh: error: Socket timed out on send/recv' >&2; exit 1"}, {}, {}, 0);
    FAIL() << "no error";
  } catch (const BackendUnreachable& e) {
    EXPECT_EQ(e.code(), Exit::Unavailable);
    EXPECT_FALSE(e.timed_out);
    EXPECT_EQ(e.client_says, "Socket timed out on send/recv");
    EXPECT_NE(std::string(e.what()).find("cannot reach Slurm"), std::string::npos) << e.what();
  }
}

TEST(RsubBackendCall, AProgramThatCannotStartSentNothing) {
  const BackendCall how{"slurm backend \"t\"", "Slurm", [](const std::string&) { return true; }, std::nullopt};
  try {
    run_backend_command(how, {"/no/such/sbatch"}, {}, {}, 0);
    FAIL() << "no error";
  } catch (const BackendUnreachable& e) {
    FAIL() << "typed as unreachable: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Unavailable);
  }
}

TEST(RsubBackendKinds, LocalFirstThenEachTableReadByItsKind) {
  const Settings s = settings_of(
      "[rsub.backends.dc1]\nkind = \"slurm\"\npartition = \"gpu\"\nrefresh = \"5s\"\n"
      "[rsub.backends.gke]\nkind = \"kubernetes\"\nimage = \"img\"\n");
  ASSERT_EQ(s.backends.size(), 3u);
  EXPECT_EQ(s.backends[0]->name, "local");
  EXPECT_EQ(s.backends[0]->kind, "local");
  EXPECT_EQ(s.backends[1]->kind, "slurm");
  EXPECT_EQ(s.backends[1]->refresh_s, 5);
  const auto* dc1 = dynamic_cast<const SlurmConfig*>(s.backend("dc1"));
  ASSERT_NE(dc1, nullptr);
  EXPECT_EQ(dc1->partition, "gpu");
  EXPECT_EQ(s.backend("gke")->kind, "kubernetes");
  EXPECT_EQ(s.backend("nosuch"), nullptr);
  EXPECT_EQ(s.auto_backends, (std::vector<std::string>{"dc1", "gke"}));  // local is not a remote choice
}

TEST(RsubBackendKinds, AKeyOfAnotherKindOrAnUnknownKindIsAnError) {
  auto message = [](const std::string& text) {
    try {
      settings_of(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::Config);
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message("[rsub.backends.dc1]\nkind = \"slurm\"\nimage = \"x\"\n"),
            "rkit.toml:3:9: unknown key rsub.backends.dc1.image for a slurm backend");
  std::string kinds;
  for (const auto& k : backend_kinds()) kinds += fmt::format("{}\"{}\"", kinds.empty() ? "" : " or ", k.name);
  EXPECT_EQ(kinds, "\"slurm\" or \"kubernetes\"");
  EXPECT_EQ(message("[rsub.backends.dc1]\nkind = \"lsf\"\n"), "rkit.toml:2:8: rsub.backends.dc1.kind must be " + kinds);
  EXPECT_NE(message("[rsub.backends.local]\nkind = \"slurm\"\n").find("backend name \"local\""), std::string::npos);
  EXPECT_NE(message("[rsub.auto]\nbackends = [\"local\"]\n").find("must name configured backends"), std::string::npos);
}

SlurmConfig slurm_config() {
  SlurmConfig c;
  c.name = "slurm";
  c.log_dir = "/tmp/x";
  c.partition = "gpu";
  c.qos = "high";
  c.tenant_map = {{"desk-a", "acct-a"}, {"desk-b", "acct-b"}};
  return c;
}

const RemoteDeps kDeps{{DepType::AfterOk, "12"}, {DepType::AfterAny, "13_2"}};

std::vector<std::string> sbatch_lines(const std::string& script) {
  std::vector<std::string> out;
  std::istringstream in(script);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("#SBATCH ")) out.push_back(line.substr(8));
  return out;
}

bool has_line(const std::string& script, const std::string& wanted) {
  std::istringstream in(script);
  for (std::string line; std::getline(in, line);)
    if (line == wanted) return true;
  return false;
}

TEST(RsubSlurmScript, SbatchOptions) {
  const std::string script = slurm_script(big_spec(), kDeps, slurm_config(), "rsub:0a1b2c3d:41");
  EXPECT_TRUE(script.starts_with("#!/bin/sh\n"));
  EXPECT_EQ(sbatch_lines(script), (std::vector<std::string>{
                                      "--job-name=train",
                                      "--nodes=2",
                                      "--ntasks-per-node=2",
                                      "--cpus-per-task=8",
                                      "--mem=32768M",  // per node: 2 tasks of 16 GiB
                                      "--gres=gpu:H100:4",
                                      "--time=0-01:30:00",
                                      "--partition=gpu",
                                      "--qos=high",
                                      "--account=acct-a",
                                      "--array=0,1,5%2",
                                      "--dependency=afterok:12,afterany:13_2",
                                      "--kill-on-invalid-dep=yes",
                                      "--requeue",
                                      "--switches=1@0-00:10:00",
                                      "--hold",
                                      "--nice=5",
                                      "--chdir=/data/run",
                                      "--output=/tmp/x/%j.batch.out",
                                      "--comment=rsub:0a1b2c3d:41",
                                      "--open-mode=append",
                                  }))
      << script;
  EXPECT_TRUE(has_line(script, R"(export QUOTED='it'\''s "q" $HOME `x`')")) << script;
  EXPECT_TRUE(has_line(script, "export RSUB_ARRAY_INDEX=\"$SLURM_ARRAY_TASK_ID\"")) << script;
  EXPECT_NE(script.find("scontrol requeue"), std::string::npos);
}

TEST(RsubSlurmScript, SpecHintsBeatTheBackendsDefaults) {
  JobSpec s = big_spec();
  s.slurm.partition = "debug";
  s.slurm.qos = "low";
  s.slurm.account = "own";
  s.slurm.switches = 2;
  s.slurm.switch_wait_s = 0;
  s.resources = {.tasks = 3, .cpus_per_task = 1, .gpus_per_task = 1, .gpu_type = "", .memory_bytes = 1000, .nodes = 1};
  s.time_limit_s = 86400 * 2 + 0.5;  // rounded up
  s.array.reset();
  s.hold = false;
  s.priority = 5;  // only admins may raise a priority: not passed on
  s.workdir.clear();
  s.retry = {};
  SlurmConfig logs_config = slurm_config();
  logs_config.log_dir = "/logs";
  const std::string script = slurm_script(s, {}, logs_config);
  EXPECT_EQ(sbatch_lines(script), (std::vector<std::string>{
                                      "--job-name=train",
                                      "--nodes=1",
                                      "--ntasks-per-node=3",
                                      "--cpus-per-task=1",
                                      "--mem=3M",  // 1000 bytes rounded up to 1 MiB, 3 tasks
                                      "--gres=gpu:3",
                                      "--time=2-00:00:01",
                                      "--partition=debug",
                                      "--qos=low",
                                      "--account=own",
                                      "--no-requeue",
                                      "--switches=2",
                                      "--output=/logs/%j.batch.out",
                                      "--open-mode=append",
                                  }))
      << script;
  EXPECT_EQ(script.find("scontrol requeue"), std::string::npos) << script;
  EXPECT_EQ(script.find("export RSUB_ARRAY_INDEX"), std::string::npos) << script;
}

TEST(RsubSlurmScript, NoAccountWithoutTenantMappingAndNoMemoryOrGpusUnasked) {
  JobSpec s = big_spec();
  s.tenant = "desk-z";
  s.resources = {};
  s.time_limit_s.reset();
  SlurmConfig c = slurm_config();
  c.partition.clear();
  c.qos.clear();
  const auto lines = sbatch_lines(slurm_script(s, {}, c));
  for (const auto& line : lines) {
    EXPECT_FALSE(line.starts_with("--account")) << line;
    EXPECT_FALSE(line.starts_with("--partition")) << line;
    EXPECT_FALSE(line.starts_with("--qos")) << line;
    EXPECT_FALSE(line.starts_with("--mem")) << line;
    EXPECT_FALSE(line.starts_with("--gres")) << line;
    EXPECT_FALSE(line.starts_with("--time")) << line;
    EXPECT_FALSE(line.starts_with("--dependency")) << line;
  }
}

TEST(RsubSlurmScript, SingleAttemptNeverRequeues) {
  JobSpec s = big_spec();
  s.retry.max_attempts = 1;  // codes listed, but no second attempt
  const std::string script = slurm_script(s, {}, slurm_config());
  const auto lines = sbatch_lines(script);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "--no-requeue"), lines.end()) << script;
  EXPECT_EQ(std::find(lines.begin(), lines.end(), "--requeue"), lines.end()) << script;
  EXPECT_EQ(script.find("scontrol requeue"), std::string::npos) << script;
}

// Runs the batch script under /bin/sh with a fake srun (runs the task's command in
// place) and a fake scontrol (records its arguments) first on PATH.
class RsubSlurmScriptRun : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(bin());
    std::filesystem::create_directories(logs());
    executable(bin() + "/srun",
               "#!/bin/sh\n"
               "printf '%s\\n' \"$@\" > '" +
                   dir_.file("srun.args") +
                   "'\n"
                   "while [ $# -gt 0 ] && [ \"$1\" != /bin/sh ]; do shift; done\n"
                   "exec \"$@\"\n");
    executable(bin() + "/scontrol",
               "#!/bin/sh\n"
               "echo \"$@\" >> '" +
                   dir_.file("scontrol.log") +
                   "'\n"
                   "exit \"${FAKE_SCONTROL_RC:-0}\"\n");
  }

  std::string bin() const { return dir_.file("bin"); }
  std::string logs() const { return dir_.file("logs"); }

  static void executable(const std::string& path, const std::string& text) {
    testing::write(path, text);
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  }

  // The wait status of /bin/sh running the script of `spec`, with this environment.
  int run(const JobSpec& spec, std::vector<std::string> env) {
    const std::string script = dir_.file("job.sh");
    SlurmConfig config = slurm_config();
    config.log_dir = logs();
    testing::write(script, slurm_script(spec, kDeps, config));
    std::error_code ec;
    std::filesystem::remove(dir_.file("scontrol.log"), ec);
    std::filesystem::remove(dir_.file("out"), ec);
    env.push_back("PATH=" + bin() + ":/usr/bin:/bin");
    env.push_back("OUT_FILE=" + dir_.file("out"));
    env.push_back("HOME=/nonexistent-home");
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string sh = "/bin/sh";
    std::vector<char*> argv{sh.data(), const_cast<char*>(script.c_str()), nullptr};
    pid_t pid = 0;
    if (::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv.data(), envp.data()) != 0) {
      ADD_FAILURE() << "posix_spawn /bin/sh failed";
      return -1;
    }
    // A script that stops itself would never end: report the stop, then end it.
    int status = 0;
    while (::waitpid(pid, &status, WUNTRACED) < 0 && errno == EINTR) {
    }
    if (WIFSTOPPED(status)) {
      const int stopped = status;
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return stopped;
    }
    return status;
  }

  std::string scontrol_log() const { return testing::slurp(dir_.file("scontrol.log")); }
  std::string out() const { return testing::slurp(dir_.file("out")); }
  std::string srun_args() const { return testing::slurp(dir_.file("srun.args")); }

  static int exited(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

  testing::TempDir dir_;
};

TEST_F(RsubSlurmScriptRun, TaskSeesItsArgumentsAndEnvironmentQuotedExactly) {
  const int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_ARRAY_JOB_ID=550", "SLURM_ARRAY_TASK_ID=5",
                                      "SLURM_PROCID=0", "FAKE_RC=0"});
  EXPECT_EQ(exited(status), 0);
  EXPECT_EQ(out(),
            "arg zero\n"
            "it's\n"
            "a \"b\" c\n"
            "$HOME;`false`\n"
            "it's \"q\" $HOME `x`\n"
            "slurm:550_5\n"
            "5\n"
            "0\n");
  EXPECT_EQ(scontrol_log(), "");
  EXPECT_TRUE(std::filesystem::is_directory(logs() + "/550_5")) << "each job's own log folder";
  const std::string args = srun_args();
  EXPECT_NE(args.find("--output=" + logs() + "/550_5/task-%t.out\n"), std::string::npos) << args;
  EXPECT_NE(args.find("--error=" + logs() + "/550_5/task-%t.err\n"), std::string::npos) << args;
  EXPECT_NE(args.find("--kill-on-bad-exit=1\n"), std::string::npos) << args;
}

TEST_F(RsubSlurmScriptRun, PlainJobIdWithoutArray) {
  JobSpec s = big_spec();
  s.array.reset();
  EXPECT_EQ(exited(run(s, {"SLURM_JOB_ID=555"})), 0);
  const std::string o = out();
  EXPECT_NE(o.find("\nslurm:555\n"), std::string::npos) << o;
  EXPECT_TRUE(std::filesystem::is_directory(logs() + "/555"));
}

TEST_F(RsubSlurmScriptRun, RetryCodeRequeuesWhileAttemptsRemain) {
  int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=0", "FAKE_RC=75"});
  EXPECT_EQ(exited(status), 0) << "requeued: this attempt ends quietly";
  EXPECT_EQ(scontrol_log(), "requeue 555\n");

  status = run(big_spec(), {"SLURM_JOB_ID=555", "FAKE_RC=75"});  // first run: no restart count yet
  EXPECT_EQ(exited(status), 0);
  EXPECT_EQ(scontrol_log(), "requeue 555\n");

  status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=1", "FAKE_RC=75"});
  EXPECT_EQ(exited(status), 0);
  EXPECT_EQ(scontrol_log(), "requeue 555\n");
}

TEST_F(RsubSlurmScriptRun, LastAttemptEndsWithTheTasksCode) {
  const int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=2", "FAKE_RC=75"});
  EXPECT_EQ(exited(status), 75);
  EXPECT_EQ(scontrol_log(), "");
}

TEST_F(RsubSlurmScriptRun, ListedSignalRequeues) {
  const int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=0", "FAKE_RC=137"});
  EXPECT_EQ(exited(status), 0);
  EXPECT_EQ(scontrol_log(), "requeue 555\n");
}

TEST_F(RsubSlurmScriptRun, UnlistedCodeNeverRequeues) {
  const int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=0", "FAKE_RC=3"});
  EXPECT_EQ(exited(status), 3);
  EXPECT_EQ(scontrol_log(), "");
}

TEST_F(RsubSlurmScriptRun, SignalAtTheLastAttemptEndsTheScriptBySignal) {
  const int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=2", "FAKE_RC=137"});
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), 9);
  EXPECT_EQ(scontrol_log(), "");
}

TEST_F(RsubSlurmScriptRun, UnlistedSignalEndsBySignalWithoutRequeue) {
  const int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=0", "FAKE_RC=143"});
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), 15);
  EXPECT_EQ(scontrol_log(), "");
}

TEST_F(RsubSlurmScriptRun, FailedRequeueEndsWithTheTasksCode) {
  const int status = run(big_spec(), {"SLURM_JOB_ID=555", "SLURM_RESTART_COUNT=0", "FAKE_RC=75", "FAKE_SCONTROL_RC=1"});
  EXPECT_EQ(exited(status), 75);
  EXPECT_EQ(scontrol_log(), "requeue 555\n");
}

TEST_F(RsubSlurmScriptRun, SingleAttemptEndsWithTheCode) {
  JobSpec s = big_spec();
  s.retry.max_attempts = 1;
  EXPECT_EQ(exited(run(s, {"SLURM_JOB_ID=555", "FAKE_RC=75"})), 75);
  EXPECT_EQ(scontrol_log(), "");
}

// A task's exit code of 128 + a stopping signal (147: SIGSTOP; 148-150: SIGTSTP, SIGTTIN,
// SIGTTOU) makes the script stop itself with `kill -19 $$`, so the job hangs until its
// time limit. DISABLED: fails today, see the report.
TEST_F(RsubSlurmScriptRun, StopSignalCodesDoNotStopTheScript) {
  for (int code : {147, 148, 149, 150}) {
    SCOPED_TRACE(code);
    const int status = run(big_spec(), {"SLURM_JOB_ID=555", "FAKE_RC=" + std::to_string(code)});
    EXPECT_FALSE(WIFSTOPPED(status));
    EXPECT_EQ(exited(status), code);
  }
}

TEST(RsubSlurmScript, ValuesAnSbatchLineCannotCarryAreRefusedAndSpacesQuoted) {
  JobSpec s = big_spec();
  s.workdir = "/data/my run";
  const std::string script = slurm_script(s, {}, slurm_config());
  EXPECT_TRUE(has_line(script, "#SBATCH --chdir=\"/data/my run\"")) << script;
  // srun does not inherit --cpus-per-task from sbatch since 22.05.
  EXPECT_NE(script.find("srun --kill-on-bad-exit=1 --cpus-per-task=8 "), std::string::npos) << script;
  for (auto set : std::vector<std::function<void(JobSpec&)>>{
           [](JobSpec& j) { j.slurm.partition = "gpu\n#SBATCH --uid=0"; },
           [](JobSpec& j) { j.slurm.account = "a\"b"; },
           [](JobSpec& j) { j.workdir = "/x\\y"; },
           [](JobSpec& j) { j.resources.gpu_type = "H100:2"; },
       }) {
    JobSpec bad = big_spec();
    set(bad);
    EXPECT_EQ(testing::error_of([&] { slurm_script(bad, {}, slurm_config()); }).code(), Exit::DataErr);
  }
  JobSpec env = big_spec();
  env.env = {{"MY-VAR", "1"}};
  EXPECT_EQ(testing::error_of([&] { slurm_script(env, {}, slurm_config()); }).code(), Exit::DataErr);
}

TEST(RsubScontrol, JobsReadAsSacctWouldPrintThem) {
  // scontrol -o show job: a requeued job that failed, an array's element and its pending rest.
  const std::string text =
      "JobId=7 JobName=a JobState=FAILED Reason=NonZeroExitCode Restarts=2 ExitCode=3:0 "
      "StartTime=2026-11-30T10:00:00 EndTime=2026-11-30T10:00:30 NodeList=vm WorkDir=/tmp/a b\n"
      "JobId=9 ArrayJobId=8 ArrayTaskId=0 JobState=COMPLETED Reason=None Restarts=0 ExitCode=0:0 "
      "StartTime=2026-11-30T10:00:00 EndTime=2026-11-30T10:00:01 NodeList=vm\n"
      "JobId=8 ArrayJobId=8 ArrayTaskId=1-2%1 JobState=PENDING Reason=JobArrayTaskLimit Restarts=0 ExitCode=0:0 "
      "StartTime=Unknown EndTime=Unknown NodeList=(null)\n";
  const auto states = parse_scontrol_jobs(text, {"7", "8_0", "8_2"});
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[0].state, JobState::Failed);
  EXPECT_EQ(states[0].exit_code, 3);
  EXPECT_EQ(states[0].attempts, 3);
  EXPECT_EQ(*states[0].end_s - *states[0].start_s, 30);
  EXPECT_EQ(states[1].state, JobState::Completed);
  EXPECT_EQ(states[2].state, JobState::Pending);
  EXPECT_EQ(states[2].reason, "JobArrayTaskLimit");
}

}  // namespace
}  // namespace rkit::rsub
