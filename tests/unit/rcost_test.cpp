// rcost's reading and report: sacct fields, AllocTRES, times, keys, line numbers of bad
// records across chunks and threads, day splits, waits, idle sharing, budgets.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "output.hpp"  // rcost's (its report.hpp, not rbench's)
#include "rkit/error.hpp"
#include "rkit/prices.hpp"
#include "test_support.hpp"

namespace rkit::rcost {
namespace {

using testing::error_of;

// Re-reads TZ when a test that changed it ends (after its EnvGuard restored it).
struct TzGuard {
  ~TzGuard() { ::tzset(); }
};

constexpr double kDay0 = 1793491200;  // 2026-11-01T00:00:00Z

std::string job_line(int id, const std::string& tenant, double start, double end, int gpus, int cpus,
                     const std::string& extra = "") {
  return fmt::format(
      R"({{"schema":"rkit.job.v1","id":"{}","backend":"local","tenant":"{}","user":"u","state":"COMPLETED",)"
      R"("tasks":1,"memory_per_task_bytes":1073741824,"cpus":{},"gpus":{},"submit_unix_s":{},)"
      R"("start_unix_s":{},"end_unix_s":{}{}}})",
      id, tenant, cpus, gpus, start - 30, start, end, extra);
}

struct Files {
  testing::TempDir dir;
  PriceSheet sheet;
  Files() {
    testing::write(dir.file("prices.toml"),
                   "[backends.local]\ncpu_hour = 0.5\nmemory_gib_hour = 0.25\ngpu_hour = { default = 2, H200 = 4 }\n");
    sheet = load_prices(dir.file("prices.toml"));
  }
  std::string file(const std::string& name, const std::string& text) {
    testing::write(dir.file(name), text);
    return dir.file(name);
  }
};

TEST(RcostRead, TresGivesCoresGpusMemoryAndType) {
  Tres t;
  ASSERT_TRUE(parse_tres("billing=4,cpu=4,gres/gpu=2,gres/gpu:h100=2,mem=8G,node=1", t));
  EXPECT_EQ(t.cpus, 4);
  EXPECT_EQ(t.gpus, 2);
  EXPECT_EQ(t.memory_bytes, 8.0 * (1ull << 30));
  EXPECT_EQ(t.gpu_type, "h100");
  ASSERT_TRUE(parse_tres("cpu=1,mem=500", t));  // no suffix: MiB
  EXPECT_EQ(t.memory_bytes, 500.0 * (1 << 20));
  ASSERT_TRUE(parse_tres("cpu=2,gres/gpu:a100=1,gres/gpu:h100=3", t));  // typed only: they add up
  EXPECT_EQ(t.gpus, 4);
  EXPECT_EQ(t.gpu_type, "");  // mixed types: the default price
  ASSERT_TRUE(parse_tres("", t));
  EXPECT_EQ(t.cpus, 0);
  EXPECT_FALSE(parse_tres("cpu=x", t));
  EXPECT_FALSE(parse_tres("cpu", t));
  EXPECT_FALSE(parse_tres("mem=-1G", t));
}

TEST(RcostRead, SacctTimesAreLocalAndUnknownIsAbsent) {
  const TzGuard tz;
  testing::EnvGuard env({"TZ"});
  env.set("TZ", "UTC");
  ::tzset();
  EXPECT_EQ(parse_sacct_time("2026-11-01T00:00:00"), kDay0);
  env.set("TZ", "IST-5:30");
  ::tzset();
  EXPECT_EQ(parse_sacct_time("2026-11-01T05:30:00"), kDay0);
  EXPECT_TRUE(std::isnan(parse_sacct_time("Unknown")));
  EXPECT_TRUE(std::isnan(parse_sacct_time("None")));
  EXPECT_TRUE(std::isnan(parse_sacct_time("2026-11-01 00:00:00")));
}

TEST(RcostRead, BadRecordsKeepTheirLineNumbersAcrossThreads) {
  Files f;
  std::string text;
  for (int i = 1; i <= 3000; ++i) {
    if (i == 7)
      text += "{\"schema\":\"rkit.job.v1\",\"id\":\"x\"}\n";  // missing fields
    else if (i == 2500)
      text += "{\"schema\":\"rkit.gizmo.v1\"}\n";
    else if (i == 2999)
      text += job_line(i, "a", kDay0 + 100, kDay0 + 50, 0, 1) + "\n";  // ends before it starts
    else
      text += job_line(i, "a", kDay0, kDay0 + 3600, 0, 1) + "\n";
    if (i == 10) text += "\n";  // blank lines count as lines
  }
  const std::string path = f.file("jobs.jsonl", text);
  for (unsigned threads : {1u, 2u, 5u}) {
    ReadOptions opt;
    opt.threads = threads;
    const Dataset d = read_inputs({path}, opt);
    EXPECT_EQ(d.jobs.size(), 2997u);
    ASSERT_EQ(d.bad_count, 3u);
    ASSERT_EQ(d.bad.size(), 3u);
    EXPECT_EQ(d.bad[0].where, path + ":7");
    EXPECT_NE(d.bad[0].why.find("missing field"), std::string::npos) << d.bad[0].why;
    EXPECT_EQ(d.bad[1].where, path + ":2501");
    EXPECT_NE(d.bad[1].why.find("unknown schema"), std::string::npos);
    EXPECT_EQ(d.bad[2].where, path + ":3000");
    EXPECT_NE(d.bad[2].why.find("negative duration"), std::string::npos);
  }
  ReadOptions strict;
  strict.strict = true;
  const Error e = error_of([&] { read_inputs({path}, strict); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(std::string(e.what()).rfind(path + ":7: ", 0), 0u) << e.what();
}

TEST(RcostRead, SacctTextNeedsItsHeaderFields) {
  Files f;
  const std::string ok =
      f.file("ok.txt",
             "JobID|User|Account|Partition|State|Submit|Eligible|Start|End|AllocTRES|NodeList\n"
             "12|alice|desk-a|gpu|COMPLETED|2026-11-01T00:00:00|2026-11-01T00:00:10|2026-11-01T00:01:00|"
             "2026-11-01T01:01:00|cpu=2,gres/gpu:h200=1,mem=4G|node1\n"
             "12.batch|||||2026-11-01T00:00:00|2026-11-01T00:00:10|2026-11-01T00:01:00|"
             "2026-11-01T01:01:00|cpu=2,mem=4G|node1\n"
             "13|bob|desk-b|gpu|CANCELLED by 0|2026-11-01T00:00:00|Unknown|None|2026-11-01T00:05:00|"
             "|None assigned\n");
  const TzGuard tz;
  testing::EnvGuard env({"TZ"});
  env.set("TZ", "UTC");
  ::tzset();
  ReadOptions opt;
  opt.tenant_of_user["bob"] = "desk-z";
  const Dataset d = read_inputs({ok}, opt);
  ASSERT_EQ(d.jobs.size(), 2u);
  EXPECT_EQ(d.ignored, 1u);  // the step
  const Job& j = d.jobs[0];
  EXPECT_EQ(d.strings.name(j.tenant), "desk-a");
  EXPECT_EQ(d.strings.name(j.backend), "slurm");
  EXPECT_EQ(d.strings.name(j.gpu_type), "h200");
  EXPECT_EQ(d.strings.name(j.node), "node1");
  EXPECT_EQ(j.eligible, kDay0 + 10);
  EXPECT_EQ(j.end - j.start, 3600);
  EXPECT_EQ(d.strings.name(d.jobs[1].tenant), "desk-z");
  EXPECT_EQ(d.strings.name(d.jobs[1].state), "CANCELLED");
  EXPECT_TRUE(std::isnan(d.jobs[1].start));
  EXPECT_TRUE(std::isnan(d.jobs[1].end));  // cancelled while pending: no run

  const std::string no_account = f.file("bad.txt", "JobID|User|State|Submit|Start|End|AllocTRES\n");
  const Error e = error_of([&] { read_inputs({no_account}, ReadOptions{}); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("Account"), std::string::npos) << e.what();
  const Error neither = error_of([&] { read_inputs({f.file("x.txt", "hello\n")}, ReadOptions{}); });
  EXPECT_EQ(neither.code(), Exit::DataErr);
  EXPECT_EQ(error_of([&] { read_inputs({f.dir.file("missing")}, ReadOptions{}); }).code(), Exit::NoInput);
}

TEST(RcostReport, KeysAndTimesParse) {
  EXPECT_EQ(parse_keys("tenant,day"), (std::vector<Key>{Key::Tenant, Key::Day}));
  EXPECT_EQ(error_of([] { parse_keys("tenant,colour"); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([] { parse_keys("day,month"); }).code(), Exit::Usage);
  EXPECT_EQ(error_of([] { parse_keys("user,user"); }).code(), Exit::Usage);
  const double now = kDay0 + 7.5 * 3600;
  EXPECT_EQ(parse_time_arg("2026-11-01", now, "--since"), kDay0);
  EXPECT_EQ(parse_time_arg("2026-11-01T08:00", now, "--since"), kDay0 + 8 * 3600);
  EXPECT_EQ(parse_time_arg("2026-11-01 08:00:30Z", now, "--since"), kDay0 + 8 * 3600 + 30);
  EXPECT_EQ(parse_time_arg("@1793491200", now, "--since"), kDay0);
  EXPECT_EQ(parse_time_arg("today", now, "--since"), kDay0);
  EXPECT_EQ(parse_time_arg("now", now, "--since"), now);
  EXPECT_EQ(parse_time_arg("2h", now, "--since"), now - 7200);
  for (const char* bad : {"2026-13-01", "yesterdayish", "@x", "2026-11-01T25:00", "2026-11-01T08:00junk"})
    EXPECT_EQ(error_of([&] { parse_time_arg(bad, now, "--since"); }).code(), Exit::Usage) << bad;
  EXPECT_EQ(format_day(kDay0 + 86399), "2026-11-01");
  EXPECT_EQ(format_month(kDay0), "2026-11");

  EXPECT_EQ(format_iso(kDay0 + 61), "2026-11-01T00:01:01Z");
}

// Two jobs: one of 2 h on Nov 1, one across midnight (23:00 Nov 1 to 01:00 Nov 2).
struct TwoJobs : Files {
  Dataset data;
  TwoJobs() {
    const std::string path =
        file("jobs.jsonl", job_line(1, "a", kDay0 + 3600, kDay0 + 3 * 3600, 1, 2) + "\n" +
                               job_line(2, "b", kDay0 + 23 * 3600, kDay0 + 25 * 3600, 0, 4) + "\n");
    data = read_inputs({path}, ReadOptions{});
  }
  Report report(std::vector<Key> keys, ShareIdle share = ShareIdle::Weighted) {
    ReportOptions opt;
    opt.keys = std::move(keys);
    opt.since = kDay0;
    opt.until = kDay0 + 2 * 86400;
    opt.prices = &sheet;
    opt.share_idle = share;
    return make_report(data, opt);
  }
};

TEST(RcostReport, UsageIsSplitAtMidnightAndPriced) {
  TwoJobs t;
  const Report r = t.report({Key::Tenant, Key::Day});
  ASSERT_EQ(r.rows.size(), 3u);
  // Nov 1: a (2 h) then b (1 h), by cost; Nov 2: b (1 h).
  EXPECT_EQ(r.rows[0].keys, (std::vector<std::string>{"a", "2026-11-01"}));
  EXPECT_DOUBLE_EQ(r.rows[0].gpu_hours, 2);
  EXPECT_DOUBLE_EQ(r.rows[0].core_hours, 4);
  EXPECT_DOUBLE_EQ(r.rows[0].cost, 2 * (2 + 2 * 0.5 + 0.25));
  EXPECT_EQ(r.rows[1].keys, (std::vector<std::string>{"b", "2026-11-01"}));
  EXPECT_DOUBLE_EQ(r.rows[1].core_hours, 4);
  EXPECT_EQ(r.rows[2].keys, (std::vector<std::string>{"b", "2026-11-02"}));
  EXPECT_DOUBLE_EQ(r.rows[2].core_hours, 4);
  EXPECT_EQ(r.rows[2].wait_count, 0u);  // b started on Nov 1
  EXPECT_EQ(r.rows[1].wait_count, 1u);
  EXPECT_DOUBLE_EQ(*r.rows[1].wait_p50, 30);
  EXPECT_EQ(r.total.jobs, 2u);
  EXPECT_DOUBLE_EQ(r.total.cost, 6.5 + 2 * (4 * 0.5 + 0.25));
  EXPECT_DOUBLE_EQ(r.rows[0].share + r.rows[1].share + r.rows[2].share, 1);
}

TEST(RcostReport, TheWindowClipsRunsAndRunningJobsCountToUntil) {
  Files f;
  const std::string path = f.file(
      "j.jsonl",
      job_line(1, "a", kDay0 - 3600, kDay0 + 3600, 1, 0) + "\n" +
          R"({"schema":"rkit.job.v1","id":"2","backend":"local","tenant":"a","user":"u","state":"RUNNING","cpus":1,"gpus":0,)"
          R"("submit_unix_s":1793491200,"start_unix_s":1793491200,"end_unix_s":null})"
          "\n");
  const Dataset d = read_inputs({path}, ReadOptions{});
  ReportOptions opt;
  opt.since = kDay0;
  opt.until = kDay0 + 1800;
  opt.prices = &f.sheet;
  const Report r = make_report(d, opt);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(r.rows[0].gpu_hours, 0.5);
  EXPECT_DOUBLE_EQ(r.rows[0].core_hours, 0.5);
  EXPECT_EQ(r.rows[0].wait_count, 1u);  // job 1 started before the window
}

TEST(RcostReport, MonthsSplitWhereTheCalendarSays) {
  Files f;  // months, across a year end and a leap day, split where timegm says
  ReportOptions opt;
  opt.keys = {Key::Month};
  opt.prices = &f.sheet;
  for (const char* at : {"1999-12-31T23:00", "2024-02-29T12:00", "2026-11-30T23:00"}) {
    const double start = parse_time_arg(at, 0, "--since");
    const Dataset d =
        read_inputs({f.file("m.jsonl", job_line(1, "a", start, start + 2 * 86400, 0, 1) + "\n")}, ReadOptions{});
    opt.since = start;
    opt.until = start + 2 * 86400;
    const Report r = make_report(d, opt);
    std::tm tm{};
    const auto end_of_month = [&] {
      const auto t0 = static_cast<std::time_t>(start);
      ::gmtime_r(&t0, &tm);
      tm.tm_mday = 1, tm.tm_hour = tm.tm_min = tm.tm_sec = 0, tm.tm_mon += 1;
      return static_cast<double>(::timegm(&tm));
    }();
    ASSERT_EQ(r.rows.size(), 2u) << at;
    EXPECT_DOUBLE_EQ(r.rows[0].core_hours, (end_of_month - start) / 3600) << at;
  }
}

TEST(RcostReport, PercentilesAreLinearBetweenRanks) {
  Row row;
  for (double w : {40, 10, 30, 20}) row.waits.add(w);
  row.finish_waits();
  EXPECT_EQ(row.wait_count, 4u);
  EXPECT_DOUBLE_EQ(*row.wait_p50, 25);
  EXPECT_DOUBLE_EQ(*row.wait_p90, 37);
  EXPECT_DOUBLE_EQ(*row.wait_p99, 39.7);
  EXPECT_TRUE(row.waits.empty());
  Row none;
  none.finish_waits();
  EXPECT_FALSE(none.wait_p50);
}

// Host h has 2 GPUs and 2 CPUs sampled for 4 h; job 1 holds GPU 0 (util 0.5) and CPU 0
// for 2 h.
struct Sampled : Files {
  Dataset data;
  Sampled() {
    std::string text = job_line(1, "a", kDay0, kDay0 + 7200, 1, 1,
                                R"(,"host":"h","alloc":[{"task":0,"pus":[0],"gpus":[0],"memory_bytes":0}])") +
                       "\n";
    text += job_line(2, "b", kDay0, kDay0 + 3600, 0, 1, R"(,"host":"h")") + "\n";
    for (int i = 1; i <= 4; ++i)
      text += fmt::format(R"({{"schema":"rkit.sample.v1","host":"h","time_unix_s":{},"interval_s":3600,"cpu_util":0.5,)"
                          R"("cpu_util_per_cpu":[0.75,0.25],"memory_total_bytes":0,)"
                          R"("gpus":[{{"index":0,"util":0.5,"name":"NVIDIA H200"}},{{"index":1,"util":1.0}}]}})"
                          "\n",
                          kDay0 + i * 3600);
    data = read_inputs({file("in.jsonl", text)}, ReadOptions{});
  }
  Report report(ShareIdle share) {
    ReportOptions opt;
    opt.since = kDay0;
    opt.until = kDay0 + 4 * 3600;
    opt.prices = &sheet;
    opt.share_idle = share;
    return make_report(data, opt);
  }
};

TEST(RcostReport, SamplesSplitCapacityIntoUsedIdleAndUnallocated) {
  Sampled s;
  const Report r = s.report(ShareIdle::None);
  EXPECT_DOUBLE_EQ(r.gpu.capacity, 8);
  EXPECT_DOUBLE_EQ(r.gpu.used, 1);  // GPU 0 at 0.5 for 2 h; GPU 1's load held by no job is not "used"
  EXPECT_DOUBLE_EQ(r.gpu.allocated_idle, 1);
  EXPECT_DOUBLE_EQ(r.gpu.unallocated, 6);
  EXPECT_DOUBLE_EQ(r.cpu.capacity, 8);
  // CPU 0 at 0.75 for job 1 (2 h); job 2 has no alloc: the host's mean 0.5 for 1 h.
  EXPECT_DOUBLE_EQ(r.cpu.used, 1.5 + 0.5);
  EXPECT_DOUBLE_EQ(r.cpu.unallocated, 8 - 3);
  EXPECT_DOUBLE_EQ(r.gpu.unallocated_cost, 6 * 4);  // the host's GPU is an H200
  const Row& a = r.rows[0];
  EXPECT_EQ(a.keys[0], "a");
  EXPECT_DOUBLE_EQ(a.gpu_idle_hours(), 1);
  EXPECT_DOUBLE_EQ(a.waste_cost, 1 * 4 + 0.5 * 0.5);
  // none: one __idle__ row holds unallocated capacity's cost.
  ASSERT_TRUE(r.rows.back().idle_row);
  EXPECT_DOUBLE_EQ(r.rows.back().idle_cost, r.gpu.unallocated_cost + r.cpu.unallocated_cost);
  EXPECT_DOUBLE_EQ(r.total.total_cost(), r.total.cost + r.gpu.unallocated_cost + r.cpu.unallocated_cost);
}

TEST(RcostReport, CpuTimeItsCgroupMeasuredBeatsTheHostsSamples) {
  // Job 2 held one core for 1 h, where the host's samples say 0.5 busy; its cgroup
  // measured 900 CPU seconds: 0.25 of a core.
  Files f;
  std::string text = job_line(2, "b", kDay0, kDay0 + 3600, 0, 1, R"(,"host":"h","cpu_used_s":900)") + "\n";
  text += job_line(3, "c", kDay0, kDay0 + 3600, 0, 1, R"(,"host":"h","cpu_used_s":null)") + "\n";
  text += fmt::format(R"({{"schema":"rkit.sample.v1","host":"h","time_unix_s":{},"interval_s":3600,"cpu_util":0.5,)"
                      R"("cpu_util_per_cpu":[0.5,0.5],"memory_total_bytes":0,"gpus":[]}})"
                      "\n",
                      kDay0 + 3600);
  const Dataset d = read_inputs({f.file("in.jsonl", text)}, ReadOptions{});
  ReportOptions opt;
  opt.since = kDay0;
  opt.until = kDay0 + 3600;
  opt.prices = &f.sheet;
  const Report r = make_report(d, opt);
  EXPECT_DOUBLE_EQ(r.cpu.used, 0.25 + 0.5);  // job 3 (null: not measured) keeps the samples' 0.5
  ASSERT_GE(r.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(r.rows[0].core_used_hours, 0.25);
  EXPECT_DOUBLE_EQ(r.rows[1].core_used_hours, 0.5);
  ReadOptions strict;
  strict.strict = true;
  EXPECT_EQ(error_of([&] {
              read_inputs(
                  {f.file("bad.jsonl", job_line(4, "d", kDay0, kDay0 + 1, 0, 1, R"(,"cpu_used_s":"lots")") + "\n")},
                  strict);
            }).code(),
            Exit::DataErr);
}

TEST(RcostReport, IdleCostIsSharedByCostOrEvenly) {
  Sampled s;
  const Report w = s.report(ShareIdle::Weighted);
  const Report e = s.report(ShareIdle::Even);
  const double pool = w.gpu.unallocated_cost + w.cpu.unallocated_cost;
  ASSERT_EQ(w.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(w.rows[0].idle_cost + w.rows[1].idle_cost, pool);
  EXPECT_NEAR(w.rows[0].idle_cost / w.rows[1].idle_cost, w.rows[0].cost / w.rows[1].cost, 1e-12);
  EXPECT_DOUBLE_EQ(e.rows[0].idle_cost, pool / 2);
  EXPECT_DOUBLE_EQ(e.rows[1].idle_cost, pool / 2);
}

TEST(RcostReport, BudgetsAreProratedByCalendarMonth) {
  TwoJobs t;
  ReportOptions opt;
  opt.since = kDay0;
  opt.until = kDay0 + 3 * 86400;  // 3 of November's 30 days
  opt.prices = &t.sheet;
  opt.budgets = {{"a", 30}, {"b", 0.5}};
  const Report r = make_report(t.data, opt);
  ASSERT_EQ(r.budgets.size(), 2u);
  EXPECT_DOUBLE_EQ(r.budgets[0].budget, 3);
  EXPECT_DOUBLE_EQ(r.budgets[0].cost, 6.5);
  EXPECT_DOUBLE_EQ(r.budgets[1].budget, 0.05);
  ASSERT_TRUE(r.rows[0].budget);
  EXPECT_DOUBLE_EQ(*r.rows[0].budget, 3);
}

TEST(RcostOutput, MoneyHasCentsAndSeparators) {
  EXPECT_EQ(money(0), "0.00");
  EXPECT_EQ(money(1234567.891), "1,234,567.89");
  EXPECT_EQ(money(-12.5), "-12.50");
  EXPECT_EQ(money(999.999), "1,000.00");
}

TEST(RcostRead, OtherToolsRecordsAreIgnoredNotBadAndJoinedLinesAreSeen) {
  Files f;
  const std::string bench = R"({"schema":"rkit.bench.v1","suite":"cpu.stream","params":{"a":[1,2]}})";
  const std::string path = f.file("mixed.jsonl", bench + "\n" +
                                                     R"({"schema":"rkit.train.event.v1","event":"step"})"
                                                     "\n" +
                                                     R"({"schema":"rkit.cost.summary.v1","total":{}})"
                                                     "\n" +
                                                     job_line(1, "a", kDay0, kDay0 + 60, 0, 1) + "\n" + bench +
                                                     job_line(2, "a", kDay0, kDay0 + 60, 0, 1) + "\n");
  const Dataset d = read_inputs({path}, ReadOptions{});
  EXPECT_EQ(d.ignored, 3u);
  EXPECT_EQ(d.jobs.size(), 1u) << "job 2 shares its line with a bench record: the line is bad";
  ASSERT_EQ(d.bad_count, 1u);
  EXPECT_EQ(d.bad[0].where, path + ":5");
}

TEST(RcostRead, OutOfRangeNumbersAreBadRecords) {
  Files f;
  std::string text;
  text += job_line(1, "a", kDay0, kDay0 + 60, 0, 1, R"(,"tasks":-1,"memory_per_task_bytes":-1e12)") + "\n";
  text += job_line(2, "a", kDay0, kDay0 + 60, 0, 1)
              .replace(job_line(2, "a", kDay0, kDay0 + 60, 0, 1).find("\"cpus\":1"), 8, "\"cpus\":1e308") +
          "\n";
  text += job_line(3, "a", -5e15, kDay0, 0, 1) + "\n";
  text += R"({"schema":"rkit.sample.v1","host":"h","time_unix_s":1793491200,"interval_s":1e300})"
          "\n";
  text += R"({"schema":"rkit.sample.v1","host":"h","time_unix_s":1793491200,"interval_s":10,"cores":-2})"
          "\n";
  const Dataset d = read_inputs({f.file("x.jsonl", text)}, ReadOptions{});
  EXPECT_EQ(d.bad_count, 5u);
  EXPECT_TRUE(d.jobs.empty());
  EXPECT_TRUE(d.samples.empty());
  Tres t;
  EXPECT_FALSE(parse_tres("cpu=nan", t));
  EXPECT_FALSE(parse_tres("cpu=inf", t));
  EXPECT_FALSE(parse_tres("mem=4X", t));
}

TEST(RcostRead, BlankLinesBeforeTheFirstRecordAreSkippedHoweverMany) {
  Files f;
  const std::string joined = f.file(
      "joined.jsonl", job_line(1, "a", kDay0, kDay0 + 60, 0, 1) + job_line(2, "b", kDay0, kDay0 + 60, 0, 1) + "\n");
  const Dataset j = read_inputs({joined}, ReadOptions{});
  EXPECT_TRUE(j.jobs.empty()) << "two records on one line: neither is used";
  EXPECT_EQ(j.bad_count, 1u);
  const std::string path =
      f.file("blank.jsonl", std::string(1500000, '\n') + job_line(1, "a", kDay0, kDay0 + 60, 0, 1) +
                                "\n{\"schema\":\"rkit.job.v1\"}\n");
  const Dataset d = read_inputs({path}, ReadOptions{});
  EXPECT_EQ(d.jobs.size(), 1u);
  ASSERT_EQ(d.bad.size(), 1u);
  EXPECT_EQ(d.bad[0].where, path + ":1500002");
}

TEST(RcostReport, JobsOutsideTheWindowGetNoRowAndNoIdleShare) {
  Sampled s;
  ReportOptions opt;
  opt.since = kDay0 + 3 * 3600;  // after both jobs ended; samples go on
  opt.until = kDay0 + 4 * 3600;
  opt.prices = &s.sheet;
  opt.share_idle = ShareIdle::Even;
  const Report r = make_report(s.data, opt);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_TRUE(r.rows[0].idle_row) << "nobody to share with: the idle row keeps it";
  EXPECT_DOUBLE_EQ(r.gpu.unallocated, 2);
}

TEST(RcostReport, CpuCapacityIsInCoresWhenSamplesSayHowMany) {
  Files f;
  // 2 cores of 2 threads each, all four threads busy; the job holds both cores.
  const std::string text =
      job_line(1, "a", kDay0, kDay0 + 3600, 0, 2, R"(,"host":"h","alloc":[{"task":0,"pus":[0,1,2,3],"gpus":[]}])") +
      "\n" +
      R"({"schema":"rkit.sample.v1","host":"h","time_unix_s":1793494800,"interval_s":3600,"cores":2,"cpu_util":1,)"
      R"("cpu_util_per_cpu":[1,1,1,1],"memory_total_bytes":0,"gpus":[]})"
      "\n";
  const Dataset d = read_inputs({f.file("smt.jsonl", text)}, ReadOptions{});
  ReportOptions opt;
  opt.since = kDay0;
  opt.until = kDay0 + 3600;
  opt.prices = &f.sheet;
  const Report r = make_report(d, opt);
  EXPECT_DOUBLE_EQ(r.cpu.capacity, 2);
  EXPECT_DOUBLE_EQ(r.cpu.used, 2);
  EXPECT_DOUBLE_EQ(r.cpu.unallocated, 0);
}

TEST(RcostReport, BudgetTotalsAreTheSumOfTheTenantsRows) {
  Sampled s;
  ReportOptions opt;
  opt.keys = {Key::Tenant, Key::User};
  opt.since = kDay0;
  opt.until = kDay0 + 4 * 3600;
  opt.prices = &s.sheet;
  opt.share_idle = ShareIdle::Even;
  opt.budgets = {{"a", 1}};
  const Report r = make_report(s.data, opt);
  double rows = 0;
  for (const Row& row : r.rows)
    if (row.keys[0] == "a") rows += row.total_cost();
  ASSERT_EQ(r.budgets.size(), 1u);
  EXPECT_DOUBLE_EQ(r.budgets[0].cost, rows);
}

}  // namespace
}  // namespace rkit::rcost
