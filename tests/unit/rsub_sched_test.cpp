// rsub's scheduling pass: priority and fair share, gang placement, EASY backfill, quotas,
// arrays, dependencies, holds and impossible jobs, on a synthetic 8-core machine
// ("pack:1 numa:2 core:4 pu:2") with fake GPUs.
#include "daemon/sched.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace rkit::rsub {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;

// 8 cores (0-3 on NUMA node 0, 4-7 on node 1, core c has PUs 2c and 2c+1); the first half
// of the GPUs on node 0, the rest on node 1. Memory 0: not counted.
Machine machine(const std::vector<std::string>& gpus = {}, std::uint64_t memory = 0) {
  Machine m;
  ProbeOptions opt;
  opt.synthetic = "pack:1 numa:2 core:4 pu:2";
  m.topology = probe(opt);
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    Gpu g;
    g.index = static_cast<int>(i);
    g.name = gpus[i];
    g.numa_node = i < (gpus.size() + 1) / 2 ? 0 : 1;
    m.topology.gpus.push_back(g);
  }
  m.memory_bytes = memory;
  return m;
}

Machine gpu_machine(int n) { return machine(std::vector<std::string>(static_cast<std::size_t>(n), "NVIDIA H100")); }

PendingJob pending(std::int64_t id, std::string tenant, int cpus = 1, int gpus = 0, int tasks = 1) {
  PendingJob j;
  j.id = id;
  j.tenant = std::move(tenant);
  j.user = "alice";
  j.resources.tasks = tasks;
  j.resources.cpus_per_task = cpus;
  j.resources.gpus_per_task = gpus;
  return j;
}

PendingJob prio(PendingJob j, int priority, std::optional<double> limit = std::nullopt) {
  j.priority = priority;
  j.time_limit_s = limit;
  return j;
}

RunningJob running(std::int64_t id, std::string tenant, std::vector<int> cores, std::vector<int> gpus = {},
                   std::optional<double> limit = std::nullopt, std::uint64_t memory = 0) {
  RunningJob r;
  r.id = id;
  r.tenant = std::move(tenant);
  r.user = "alice";
  r.tasks.push_back({std::move(cores), {}, std::move(gpus), memory});
  r.time_limit_s = limit;
  return r;
}

SchedInput input(const Machine& m, double now = 1000) {
  SchedInput in;
  in.machine = &m;
  in.now = now;
  return in;
}

std::vector<std::int64_t> started(const SchedPlan& plan) {
  std::vector<std::int64_t> ids;
  for (const Start& s : plan.starts) ids.push_back(s.job);
  std::sort(ids.begin(), ids.end());
  return ids;
}

const Start& start_of(const SchedPlan& plan, std::int64_t id) {
  for (const Start& s : plan.starts)
    if (s.job == id) return s;
  throw std::runtime_error("job " + std::to_string(id) + " did not start");
}

const Verdict& verdict(const SchedPlan& plan, std::int64_t id) {
  for (const Verdict& v : plan.verdicts)
    if (v.job == id) return v;
  throw std::runtime_error("no verdict for job " + std::to_string(id));
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using Ids = std::vector<std::int64_t>;

TEST(RsubSchedMath, FairshareFactorAndDecay) {
  EXPECT_DOUBLE_EQ(fairshare_factor(0, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(fairshare_factor(0.5, 0.5), 0.5);
  EXPECT_DOUBLE_EQ(fairshare_factor(0.75, 0.25), 0.125);
  EXPECT_DOUBLE_EQ(fairshare_factor(0, 0), 0.0);
  EXPECT_DOUBLE_EQ(decay(100, 600, 600), 50);
  EXPECT_DOUBLE_EQ(decay(100, 1200, 600), 25);
  EXPECT_DOUBLE_EQ(decay(100, 30, 0), 100);
}

// Tenant a used three times what b used, equal shares, equal age: b goes first; the
// factors are Slurm's, with S counted over tenants with jobs only (idle has none).
TEST(RsubSchedPriority, LessUsageRelativeToSharesGoesFirst) {
  Machine m = machine();
  SchedInput in = input(m, 86400);
  in.config.tenants["idle"].shares = 100;
  in.running = {running(1, "a", {0, 1, 2, 3, 4, 5, 6, 7})};
  in.pending = {pending(10, "a"), pending(11, "b")};
  in.pending[0].submit_s = in.pending[1].submit_s = 0;
  in.pending[1].priority = 5;
  in.usage = {{"a", 300}, {"b", 100}, {"idle", 0}};
  SchedPlan plan = schedule(in);
  EXPECT_TRUE(plan.starts.empty());
  ASSERT_EQ(plan.verdicts.size(), 2u);
  EXPECT_EQ(plan.verdicts[0].job, 11);  // verdicts come in score order
  const Verdict& a = verdict(plan, 10);
  const Verdict& b = verdict(plan, 11);
  EXPECT_EQ(b.reason, "Resources");
  EXPECT_EQ(b.position, 1);
  EXPECT_EQ(a.reason, "Priority");
  EXPECT_EQ(a.position, 2);
  EXPECT_DOUBLE_EQ(a.priority.fairshare, std::exp2(-0.75 / 0.5));
  EXPECT_DOUBLE_EQ(b.priority.fairshare, std::exp2(-0.25 / 0.5));
  EXPECT_DOUBLE_EQ(a.priority.age, 1.0 / 7);
  EXPECT_EQ(b.priority.priority, 5);
  EXPECT_DOUBLE_EQ(b.priority.score, 10000 * std::exp2(-0.5) + 1000.0 / 7 + 5);
}

// With shares 3:1, a tenant with twice the other's usage is still below its share.
TEST(RsubSchedPriority, SharesWeighUsage) {
  Machine m = machine();
  SchedInput in = input(m);
  in.config.tenants["a"].shares = 3;
  in.running = {running(1, "a", {0, 1, 2, 3, 4, 5, 6})};  // one core free: one job starts
  in.pending = {pending(10, "b"), pending(11, "a")};
  in.usage = {{"a", 200}, {"b", 100}};
  EXPECT_EQ(started(schedule(in)), Ids{11});
  in.usage = {{"a", 400}, {"b", 100}};  // U/S: 0.8/0.75 > 0.2/0.25
  EXPECT_EQ(started(schedule(in)), Ids{10});
}

TEST(RsubSchedPriority, TiesGoToEarlierSubmitThenLowerId) {
  Machine m = machine();
  SchedInput in = input(m);
  in.running = {running(1, "a", {0, 1, 2, 3, 4, 5, 6, 7})};
  in.pending = {pending(12, "a"), pending(11, "a"), pending(10, "a")};
  in.pending[2].submit_s = 1;  // the lowest id, but submitted last
  in.config.weight_age = 0;    // equal scores: only the tie-breakers tell them apart
  SchedPlan plan = schedule(in);
  ASSERT_EQ(plan.verdicts.size(), 3u);
  EXPECT_EQ(plan.verdicts[0].job, 11);
  EXPECT_EQ(plan.verdicts[1].job, 12);
  EXPECT_EQ(plan.verdicts[2].job, 10);
}

// Every task of a gang is placed, on disjoint cores and GPUs, clear of running jobs and of
// jobs started earlier in the same pass; a gang that does not fit gets nothing.
TEST(RsubSchedGang, AllTasksPlacedTogetherAndDisjoint) {
  Machine m = gpu_machine(4);
  SchedInput in = input(m);
  in.running = {running(1, "a", {0}, {0})};
  in.pending = {prio(pending(10, "a", 2, 1, 3), 10), pending(11, "a")};
  in.pending[0].resources.memory_bytes = kGiB;
  SchedPlan plan = schedule(in);
  ASSERT_EQ(started(plan), (Ids{10, 11}));
  const Start& gang = start_of(plan, 10);
  ASSERT_EQ(gang.tasks.size(), 3u);
  std::set<int> cores{0}, gpus{0};
  for (const Start& s : plan.starts)
    for (const TaskAlloc& t : s.tasks) {
      for (int c : t.cores) EXPECT_TRUE(cores.insert(c).second) << "core " << c << " given twice";
      for (int g : t.gpus) EXPECT_TRUE(gpus.insert(g).second) << "GPU " << g << " given twice";
      std::vector<int> pus;
      for (int c : t.cores) pus.insert(pus.end(), {2 * c, 2 * c + 1});
      EXPECT_EQ(t.pus, pus);
    }
  for (const TaskAlloc& t : gang.tasks) {
    EXPECT_EQ(t.cores.size(), 2u);
    EXPECT_EQ(t.gpus.size(), 1u);
    EXPECT_EQ(t.memory_bytes, kGiB);
  }
  EXPECT_EQ(cores.size(), 8u);  // 1 running + 3 × 2 + 1
  EXPECT_EQ(gpus.size(), 4u);
}

TEST(RsubSchedGang, NoPartialStart) {
  Machine m = gpu_machine(4);
  SchedInput in = input(m);
  in.running = {running(1, "a", {0}, {0})};
  in.pending = {prio(pending(10, "a", 1, 1, 4), 10), pending(11, "a")};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), Ids{11});  // uses a core the gang does not need
  const Verdict& v = verdict(plan, 10);
  EXPECT_EQ(v.reason, "Resources");
  EXPECT_TRUE(contains(v.detail, "needs 4 GPUs, 3 of 4 free")) << v.detail;
  EXPECT_FALSE(v.never);
  EXPECT_EQ(v.waits_for, Ids{1});
  EXPECT_FALSE(v.expected_start_s);  // job 1 has no time limit
}

// Tenants A (shares 3) and B (shares 1) keep a 1-GPU machine busy with 60 s jobs; usage
// decays with a 600 s half-life. A should get about three quarters of the GPU time.
TEST(RsubSchedFairShare, ThreeToOneOnOneGpu) {
  Machine m = gpu_machine(1);
  SchedInput in = input(m, 0);
  in.config.tenants["A"].shares = 3;
  in.config.tenants["B"].shares = 1;
  for (int k = 0; k < 50; ++k) {
    in.pending.push_back(prio(pending(1 + k, "A", 1, 1), 0, 60));
    in.pending.push_back(prio(pending(101 + k, "B", 1, 1), 0, 60));
  }
  double gpu_seconds_a = 0, gpu_seconds_b = 0;
  for (int round = 0; round < 40; ++round) {
    SchedPlan plan = schedule(in);
    ASSERT_EQ(plan.starts.size(), 1u) << "round " << round;
    auto it = std::find_if(in.pending.begin(), in.pending.end(),
                           [&](const PendingJob& j) { return j.id == plan.starts[0].job; });
    const std::string tenant = it->tenant;
    in.pending.erase(it);
    for (auto& [name, usage] : in.usage) usage = decay(usage, 60, 600);
    in.usage[tenant] += 60;
    (tenant == "A" ? gpu_seconds_a : gpu_seconds_b) += 60;
    in.now += 60;
  }
  const double share_a = gpu_seconds_a / (gpu_seconds_a + gpu_seconds_b);
  EXPECT_GE(share_a, 0.65);
  EXPECT_LE(share_a, 0.85);
}

TEST(RsubSchedQuota, TenantGpusCountRunningJobsAndThisPass) {
  Machine m = gpu_machine(4);
  SchedInput in = input(m);
  in.config.tenants["desk-a"].max_gpus = 3;
  in.running = {running(1, "desk-a", {0}, {0})};
  in.pending = {prio(pending(10, "desk-a", 1, 1), 3), prio(pending(11, "desk-a", 1, 1), 2),
                prio(pending(12, "desk-a", 1, 1), 1), pending(13, "desk-b", 1, 1)};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{10, 11, 13}));
  const Verdict& v = verdict(plan, 12);
  EXPECT_EQ(v.reason, "TenantGpuLimit");
  EXPECT_EQ(v.detail, "tenant desk-a holds 3 of its 3 GPUs");
  EXPECT_EQ(v.position, 0);
}

TEST(RsubSchedQuota, TenantCores) {
  Machine m = machine();
  SchedInput in = input(m);
  in.config.tenants["desk-a"].max_cpus = 4;
  in.running = {running(1, "desk-a", {0, 1})};
  in.pending = {prio(pending(10, "desk-a", 2), 2), prio(pending(11, "desk-a", 1), 1), pending(12, "desk-b", 4)};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{10, 12}));
  EXPECT_EQ(verdict(plan, 11).reason, "TenantCpuLimit");
  EXPECT_EQ(verdict(plan, 11).detail, "tenant desk-a holds 4 of its 4 cores");
}

TEST(RsubSchedQuota, UserRunningJobs) {
  Machine m = machine();
  SchedInput in = input(m);
  in.config.max_running_jobs_per_user = 2;
  in.running = {running(1, "a", {0})};  // alice's
  in.pending = {prio(pending(10, "a"), 2), prio(pending(11, "a"), 1), pending(12, "a")};
  in.pending[2].user = "bob";
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{10, 12}));
  EXPECT_EQ(verdict(plan, 11).reason, "UserJobLimit");
  EXPECT_TRUE(contains(verdict(plan, 11).detail, "alice runs 2 jobs")) << verdict(plan, 11).detail;
}

// The top job (8 cores) waits for job 1 (6 cores, ends at 100). A 2-core job ending at 60
// starts ahead of it; one ending at 510, or never, would delay it and does not.
TEST(RsubSchedBackfill, ShortJobGoesAheadLongOneWaits) {
  Machine m = machine();
  SchedInput in = input(m, 10);
  in.running = {running(1, "a", {0, 1, 2, 3, 4, 5}, {}, 100)};
  in.pending = {prio(pending(10, "a", 8), 100), prio(pending(11, "a", 2), 50, 500), prio(pending(12, "a", 2), 40),
                prio(pending(13, "a", 2), 0, 50)};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), Ids{13});
  const Verdict& top = verdict(plan, 10);
  EXPECT_EQ(top.reason, "Resources");
  EXPECT_EQ(top.position, 1);
  ASSERT_TRUE(top.expected_start_s);
  EXPECT_DOUBLE_EQ(*top.expected_start_s, 100);
  EXPECT_EQ(top.waits_for, Ids{1});
  EXPECT_TRUE(contains(top.detail, "needs 8 cores, 2 of 8 free")) << top.detail;
  for (std::int64_t id : {11, 12}) {
    EXPECT_EQ(verdict(plan, id).reason, "Priority");
    EXPECT_TRUE(contains(verdict(plan, id).detail, "would delay job 10")) << verdict(plan, id).detail;
  }
  EXPECT_EQ(verdict(plan, 11).position, 2);
  EXPECT_EQ(verdict(plan, 12).position, 3);
}

// The top job needs both GPUs and one core: jobs without a limit may take the seven cores
// left beyond its needs, and no more.
TEST(RsubSchedBackfill, ResourcesTheTopJobDoesNotNeed) {
  Machine m = gpu_machine(2);
  SchedInput in = input(m, 10);
  in.running = {running(1, "a", {0}, {0, 1}, 100)};
  in.pending = {prio(pending(10, "a", 1, 2), 100), prio(pending(11, "a", 4), 50), prio(pending(12, "a", 4), 40),
                prio(pending(13, "a", 3), 30, 1000)};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{11, 13}));
  EXPECT_EQ(verdict(plan, 10).reason, "Resources");
  EXPECT_DOUBLE_EQ(verdict(plan, 10).expected_start_s.value_or(-1), 100);
  EXPECT_EQ(verdict(plan, 12).reason, "Priority");
}

// Jobs started earlier in the pass count as running when the reservation is made.
TEST(RsubSchedBackfill, ReservationCountsThisPassStarts) {
  Machine m = machine();
  SchedInput in = input(m, 0);
  in.pending = {prio(pending(10, "a", 6), 100, 300), prio(pending(11, "a", 4), 90), prio(pending(12, "a", 2), 0, 200),
                prio(pending(13, "a", 2), 0, 400)};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{10, 12}));
  EXPECT_DOUBLE_EQ(verdict(plan, 11).expected_start_s.value_or(-1), 300);
  EXPECT_EQ(verdict(plan, 11).waits_for, Ids{10});
  EXPECT_EQ(verdict(plan, 13).reason, "Priority");
}

// Without a reservation time (the top job waits for a job without a limit), later jobs
// take only what is left beyond the top job's needs, however short they are.
TEST(RsubSchedBackfill, NoReservationTimeLeavesTheTopJobsShare) {
  Machine m = gpu_machine(1);
  SchedInput in = input(m);
  in.running = {running(1, "a", {0}, {0})};
  in.pending = {prio(pending(10, "a", 1, 1), 100), prio(pending(11, "a", 7), 50, 10), prio(pending(12, "a", 6), 0)};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), Ids{12});
  const Verdict& top = verdict(plan, 10);
  EXPECT_FALSE(top.expected_start_s);
  EXPECT_EQ(top.waits_for, Ids{1});
  EXPECT_TRUE(contains(top.detail, "no expected start")) << top.detail;
  EXPECT_EQ(verdict(plan, 11).reason, "Priority");
}

TEST(RsubSchedArray, MaxConcurrent) {
  Machine m = machine();
  SchedInput in = input(m);
  RunningJob element = running(101, "a", {0});
  element.array_parent = 100;
  in.running = {element};
  for (std::int64_t id : {102, 103, 104, 201, 202, 203}) {
    PendingJob j = pending(id, "a");
    j.array_parent = id / 100 * 100;
    j.array_max_concurrent = id < 200 ? 2 : 0;
    in.pending.push_back(j);
  }
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{102, 201, 202, 203}));
  EXPECT_EQ(verdict(plan, 103).reason, "JobArrayTaskLimit");
  EXPECT_EQ(verdict(plan, 104).detail, "array 100 runs 2 of its 2 at once");
}

TEST(RsubSchedDependency, Kinds) {
  Machine m = machine();
  SchedInput in = input(m);
  in.running = {running(1, "a", {0})};
  in.dependencies = {{1, DepStatus::Active}, {2, DepStatus::NotOk}, {3, DepStatus::Completed}, {4, DepStatus::Active}};
  auto with = [](std::int64_t id, std::vector<Dependency> deps) {
    PendingJob j = pending(id, "a");
    j.depends = std::move(deps);
    return j;
  };
  using T = DepType;
  in.pending = {with(10, {{T::AfterOk, 1}}),    with(11, {{T::AfterOk, 2}}),
                with(12, {{T::AfterAny, 2}}),   with(13, {{T::AfterNotOk, 2}}),
                with(14, {{T::AfterNotOk, 3}}), with(15, {{T::AfterOk, 3}}),
                with(16, {{T::AfterOk, 99}}),   with(17, {{T::AfterAny, 99}}),
                with(18, {{T::AfterAny, 1}}),   with(19, {{T::AfterOk, 3}, {T::AfterOk, 1}, {T::AfterAny, 4}})};
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{12, 13, 15}));
  EXPECT_EQ(verdict(plan, 10).reason, "Dependency");
  EXPECT_EQ(verdict(plan, 10).detail, "waits for job 1 (afterok, running)");
  EXPECT_EQ(verdict(plan, 10).waits_for, Ids{1});
  EXPECT_FALSE(verdict(plan, 10).never);
  EXPECT_EQ(verdict(plan, 18).reason, "Dependency");
  EXPECT_EQ(verdict(plan, 19).waits_for, (Ids{1, 4}));
  EXPECT_EQ(verdict(plan, 19).detail, "waits for job 1 (afterok, running) and 1 more");
  for (std::int64_t id : {11, 14, 16, 17}) {
    EXPECT_EQ(verdict(plan, id).reason, "DependencyNeverSatisfied") << id;
    EXPECT_TRUE(verdict(plan, id).never) << id;
    EXPECT_EQ(verdict(plan, id).position, 0) << id;
  }
  EXPECT_EQ(verdict(plan, 11).detail, "afterok:2 can never be satisfied: job 2 did not succeed");
  EXPECT_EQ(verdict(plan, 16).detail, "afterok:99 can never be satisfied: job 99 is unknown");
}

TEST(RsubSchedBlocked, HeldAndBeginTimeInOrder) {
  Machine m = machine();
  SchedInput in = input(m);
  in.pending = {pending(10, "a"), pending(11, "a"), pending(12, "a"), pending(13, "a"), pending(14, "a", 9)};
  in.pending[0].held = true;
  in.pending[1].held = true;
  in.pending[1].depends = {{DepType::AfterOk, 99}};  // never beats held
  in.pending[2].eligible_s = 1030;
  in.pending[3].eligible_s = 1000;
  in.pending[4].held = true;  // impossible beats held
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), Ids{13});
  EXPECT_EQ(verdict(plan, 10).reason, "JobHeldUser");
  EXPECT_FALSE(verdict(plan, 10).never);
  EXPECT_EQ(verdict(plan, 11).reason, "DependencyNeverSatisfied");
  EXPECT_EQ(verdict(plan, 12).reason, "BeginTime");
  EXPECT_TRUE(contains(verdict(plan, 12).detail, "30s")) << verdict(plan, 12).detail;
  EXPECT_EQ(verdict(plan, 14).reason, "Impossible");
}

// More than the whole machine never runs, and never blocks the queue as the top job.
TEST(RsubSchedImpossible, MoreThanTheMachine) {
  Machine m = machine({"NVIDIA H100", "NVIDIA H100"}, 16 * kGiB);
  SchedInput in = input(m);
  in.pending = {prio(pending(10, "a", 3, 0, 3), 9), prio(pending(11, "a", 1, 3), 9), prio(pending(12, "a", 1, 1), 9),
                prio(pending(13, "a"), 9), pending(14, "a", 8)};
  in.pending[2].resources.gpu_type = "A100";
  in.pending[3].resources.memory_bytes = 17 * kGiB;
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), Ids{14});
  for (std::int64_t id : {10, 11, 12, 13}) {
    EXPECT_EQ(verdict(plan, id).reason, "Impossible") << id;
    EXPECT_TRUE(verdict(plan, id).never) << id;
  }
  EXPECT_EQ(verdict(plan, 10).detail, "needs 9 cores, the machine has 8");
  EXPECT_EQ(verdict(plan, 12).detail, "needs 1 GPU of type A100, the machine has 0");
}

TEST(RsubSchedGpuType, OnlyMatchingGpus) {
  Machine m =
      machine({"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"});
  SchedInput in = input(m);
  in.pending = {prio(pending(10, "a", 1, 1, 2), 2), prio(pending(11, "a", 1, 1), 1)};
  in.pending[0].resources.gpu_type = "a100";
  in.pending[1].resources.gpu_type = "H100";
  SchedPlan plan = schedule(in);
  ASSERT_EQ(started(plan), (Ids{10, 11}));
  for (const TaskAlloc& t : start_of(plan, 10).tasks)
    for (int g : t.gpus) EXPECT_TRUE(g == 2 || g == 3) << g;
  for (int g : start_of(plan, 11).tasks[0].gpus) EXPECT_TRUE(g == 0 || g == 1) << g;
}

// Two H100s wanted, one free: the free A100s do not count, and a later H100 job may not
// take the last H100 (the top job waits for a job without a limit).
TEST(RsubSchedGpuType, WaitsForItsType) {
  Machine m = machine({"NVIDIA H100", "NVIDIA H100", "NVIDIA A100", "NVIDIA A100"});
  SchedInput in = input(m);
  in.running = {running(1, "a", {0}, {0})};
  in.pending = {prio(pending(10, "a", 1, 2), 9), prio(pending(11, "a", 1, 1), 5), pending(12, "a", 1, 1)};
  in.pending[0].resources.gpu_type = "H100";
  in.pending[1].resources.gpu_type = "h100";
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), Ids{12});
  for (int g : start_of(plan, 12).tasks[0].gpus) EXPECT_TRUE(g == 2 || g == 3) << g;  // not the top job's H100
  EXPECT_EQ(verdict(plan, 10).reason, "Resources");
  EXPECT_TRUE(contains(verdict(plan, 10).detail, "needs 2 GPUs of type H100, 1 of 2 free")) << verdict(plan, 10).detail;
  EXPECT_EQ(verdict(plan, 11).reason, "Priority");
}

// The top job wants 12 of 16 GiB while job 1 holds 8 until t=100: 4 GiB are left beyond
// its needs then, which job 11 (2 tasks × 2 GiB) takes; job 12 would cut into the top
// job's memory, job 13 ends before t=100.
TEST(RsubSchedMemory, CountedNotPlaced) {
  Machine m = machine({}, 16 * kGiB);
  SchedInput in = input(m, 10);
  in.running = {running(1, "a", {0}, {}, 100, 8 * kGiB)};
  in.pending = {prio(pending(10, "a"), 9), prio(pending(11, "a", 1, 0, 2), 5), prio(pending(12, "a"), 3),
                prio(pending(13, "a"), 0, 50)};
  in.pending[0].resources.memory_bytes = 12 * kGiB;
  in.pending[1].resources.memory_bytes = 2 * kGiB;
  in.pending[2].resources.memory_bytes = 1 * kGiB;
  in.pending[3].resources.memory_bytes = 1 * kGiB;
  SchedPlan plan = schedule(in);
  EXPECT_EQ(started(plan), (Ids{11, 13}));
  for (const TaskAlloc& t : start_of(plan, 11).tasks) EXPECT_EQ(t.memory_bytes, 2 * kGiB);
  EXPECT_EQ(verdict(plan, 10).reason, "Resources");
  EXPECT_TRUE(contains(verdict(plan, 10).detail, "of memory")) << verdict(plan, 10).detail;
  EXPECT_EQ(verdict(plan, 12).reason, "Priority");
  EXPECT_TRUE(contains(verdict(plan, 12).detail, "would delay job 10")) << verdict(plan, 12).detail;
}

}  // namespace
}  // namespace rkit::rsub
