// rcost's streamed report against the report of the same records in memory (chunks,
// threads, samples after the jobs, the second read of sampled hosts' jobs, a GPU priced
// from its host's samples), and the queue waits' sketch against exact percentiles.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "output.hpp"  // rcost's report.hpp (by this name: rbench has a report.hpp too)
#include "rkit/prices.hpp"
#include "test_support.hpp"

namespace rkit::rcost {
namespace {

constexpr double kDay0 = 1793491200;  // 2026-11-01T00:00:00Z

// Jobs on hosts h0..h5 (h0 and h1 sampled, h0's samples naming an H200), some with a
// GPU type and some without, then the samples: every chunk has jobs, and the samples
// come last, as `cat jobs.jsonl samples.jsonl` gives them.
std::string records(int jobs) {
  std::mt19937_64 rng(7);
  std::string text;
  for (int i = 1; i <= jobs; ++i) {
    const double start = kDay0 + static_cast<double>(rng() % (3 * 86400));
    const double end = start + 60 + static_cast<double>(rng() % 40000);
    const int gpus = static_cast<int>(rng() % 3);
    const std::string type = gpus && rng() % 2 ? R"("H200")" : "null";
    const std::string host = fmt::format("h{}", rng() % 6);
    text += fmt::format(
        R"({{"schema":"rkit.job.v1","id":"{}","backend":"local","tenant":"t{}","user":"u{}","state":"COMPLETED",)"
        R"("tasks":1,"memory_per_task_bytes":{},"cpus":{},"gpus":{},"gpu_type":{},"submit_unix_s":{},)"
        R"("start_unix_s":{},"end_unix_s":{},"host":"{}"}})"
        "\n",
        i, rng() % 5, rng() % 11, (rng() % 8) << 30, 1 + rng() % 8, gpus, type,
        start - static_cast<double>(rng() % 900), start, end, host);
  }
  for (int h = 0; h < 2; ++h)
    for (int k = 1; k <= 3 * 24; ++k)
      text +=
          fmt::format(R"({{"schema":"rkit.sample.v1","host":"h{}","time_unix_s":{},"interval_s":3600,"cpu_util":0.5,)"
                      R"("cores":16,"memory_total_bytes":68719476736,"gpus":[{{"index":0,"util":0.25{}}},)"
                      R"({{"index":1,"util":0.75}}]}})"
                      "\n",
                      h, kDay0 + k * 3600, h == 0 ? R"(,"name":"NVIDIA H200")" : "");
  return text;
}

void expect_same(const Report& a, const Report& b) {
  ASSERT_EQ(a.rows.size(), b.rows.size());
  EXPECT_EQ(a.jobs_read, b.jobs_read);
  EXPECT_EQ(a.jobs_run, b.jobs_run);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_DOUBLE_EQ(a.since, b.since);
  const auto near = [](double x, double y) { return std::fabs(x - y) <= 1e-9 * std::max(1.0, std::fabs(x)); };
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    const Row &x = a.rows[i], &y = b.rows[i];
    EXPECT_EQ(x.keys, y.keys) << i;
    EXPECT_EQ(x.jobs, y.jobs) << i;
    EXPECT_EQ(x.wait_count, y.wait_count) << i;
    EXPECT_EQ(x.wait_p90.has_value(), y.wait_p90.has_value()) << i;
    if (x.wait_p90 && y.wait_p90) {
      EXPECT_TRUE(near(*x.wait_p90, *y.wait_p90)) << i;
    }
    for (auto f :
         {&Row::gpu_hours, &Row::core_hours, &Row::memory_gib_hours, &Row::cost, &Row::list_cost,
          &Row::gpu_sampled_hours, &Row::gpu_used_hours, &Row::core_sampled_hours, &Row::waste_cost, &Row::idle_cost})
      EXPECT_TRUE(near(x.*f, y.*f)) << "row " << i << ": " << x.*f << " vs " << y.*f;
  }
  EXPECT_TRUE(near(a.gpu.unallocated_cost, b.gpu.unallocated_cost));
  EXPECT_TRUE(near(a.cpu.used, b.cpu.used));
}

struct Stream : ::testing::Test {
  testing::TempDir dir;
  PriceSheet sheet;
  std::string path;
  void SetUp() override {
    testing::write(dir.file("prices.toml"),
                   "[backends.local]\ncpu_hour = 0.5\nmemory_gib_hour = 0.25\ngpu_hour = { default = 2, H200 = 4 }\n");
    sheet = load_prices(dir.file("prices.toml"));
    path = dir.file("in.jsonl");
    testing::write(path, records(5000));
  }
  ReportOptions options(std::vector<Key> keys) const {
    ReportOptions opt;
    opt.keys = std::move(keys);
    opt.until = kDay0 + 4 * 86400;
    opt.prices = &sheet;
    opt.budgets = {{"t1", 100}};
    opt.threads = 3;
    return opt;
  }
};

TEST_F(Stream, StreamedReportIsTheInMemoryOne) {
  ReadOptions read;
  read.threads = 3;  // three chunks, parsed and summed by three threads
  const Dataset data = read_inputs({path}, read);
  ASSERT_EQ(data.jobs.size(), 5000u);
  for (auto keys : {std::vector<Key>{Key::Tenant, Key::Day}, {Key::Node}, {Key::Job}, {Key::User, Key::Month}}) {
    ReportOptions opt = options(keys);
    opt.share_idle = keys.size() == 1 ? ShareIdle::None : ShareIdle::Weighted;
    const Report whole = make_report(data, opt);
    Dataset totals;
    const Report streamed = stream_report(Inputs({path}), read, opt, totals);
    EXPECT_EQ(totals.lines, data.lines);
    SCOPED_TRACE(whole.key_names[0]);
    expect_same(whole, streamed);
    // The second read found what only samples show: waste on h0 and h1, and h0's GPU price.
    EXPECT_GT(streamed.total.waste_cost, 0);
    EXPECT_GT(streamed.total.gpu_sampled_hours, 0);
  }
}

TEST_F(Stream, AJobWithoutAGpuTypeIsPricedAtItsSampledHostsGpu) {
  // One job, 1 GPU for 1 h on h0 with no gpu_type: h0's samples name an H200 (4/h, not 2).
  testing::write(
      path, fmt::format(R"({{"schema":"rkit.job.v1","id":"1","backend":"local","tenant":"t","user":"u",)"
                        R"("state":"COMPLETED","tasks":1,"cpus":0,"gpus":1,"submit_unix_s":{0},)"
                        R"("start_unix_s":{0},"end_unix_s":{1},"host":"h0"}})"
                        "\n"
                        R"({{"schema":"rkit.sample.v1","host":"h0","time_unix_s":{1},"interval_s":3600,)"
                        R"("cpu_util":0,"memory_total_bytes":0,"gpus":[{{"index":0,"util":1,"name":"NVIDIA H200"}}]}})"
                        "\n",
                        kDay0, kDay0 + 3600));
  ReportOptions opt = options({Key::Tenant});
  opt.budgets.clear();
  Dataset totals;
  const Report r = stream_report(Inputs({path}), ReadOptions{}, opt, totals);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(r.rows[0].cost, 4);
  EXPECT_DOUBLE_EQ(r.rows[0].gpu_used_hours, 1);
  EXPECT_DOUBLE_EQ(r.rows[0].waste_cost, 0);
}

TEST(Waits, ExactUpToTheLimitThenWithinAlpha) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> wait(std::log(45.0), 2.0);
  Waits a, b;
  std::vector<double> all;
  for (int i = 0; i < 200000; ++i) {
    const double w = i % 97 == 0 ? 0 : i % 101 == 0 ? -wait(rng) : wait(rng);
    all.push_back(w);
    (i % 2 ? a : b).add(w);
  }
  EXPECT_FALSE(a.exact());
  a.merge(b);
  EXPECT_EQ(a.count(), all.size());
  std::sort(all.begin(), all.end());
  for (double q : {0.001, 0.5, 0.9, 0.99, 0.999}) {  // numpy's: linear between ranks
    const double pos = q * static_cast<double>(all.size() - 1);
    const auto lo = static_cast<std::size_t>(pos);
    const double exact = all[lo] + (pos - static_cast<double>(lo)) * (all[lo + 1] - all[lo]);
    EXPECT_LE(std::fabs(a.quantile(q) - exact), Waits::kAlpha * std::fabs(exact) + 1e-9) << q;
  }
  Waits tail;  // just past kExact, where ranks in the tail are far apart
  std::vector<double> some(all.begin(), all.begin() + Waits::kExact + 129);
  for (double w : some) tail.add(std::fabs(w) + 1);
  for (double& w : some) w = std::fabs(w) + 1;
  std::sort(some.begin(), some.end());
  const double pos = 0.99 * static_cast<double>(some.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const double p99 = some[lo] + (pos - static_cast<double>(lo)) * (some[lo + 1] - some[lo]);
  EXPECT_LE(std::fabs(tail.quantile(0.99) - p99), Waits::kAlpha * p99);
  Waits few;  // under kExact: numpy's linear interpolation, exactly
  for (double w : {4.0, 1.0, 3.0, 2.0}) few.add(w);
  EXPECT_TRUE(few.exact());
  EXPECT_DOUBLE_EQ(few.quantile(0.5), 2.5);
}

}  // namespace
}  // namespace rkit::rcost
