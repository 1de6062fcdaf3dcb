// rcost's FOCUS CSV and HTML page: columns, totals that match the report, day splits,
// spot pricing, CSV quoting, and a well-formed page with its three charts.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <sstream>

#include "output.hpp"  // rcost's (its report.hpp, not rbench's)
#include "rkit/prices.hpp"
#include "test_support.hpp"

namespace rkit::rcost {
namespace {

constexpr double kDay0 = 1793491200;  // 2026-11-01T00:00:00Z
constexpr double kHour = 3600;

constexpr const char* kSheet = R"(
currency = "USD"
[backends.local]
cpu_hour = 0.02
memory_gib_hour = 0.002
gpu_hour = { default = 1.0, H200 = 2.0 }

[backends.spot]
market = "spot"
spot_discount = 0.6
cpu_hour = 0.05
memory_gib_hour = 0.006
gpu_hour = { default = 3.0 }
)";

struct Fixture {
  testing::TempDir dir;
  PriceSheet sheet;
  Dataset data;

  Fixture() {
    testing::write(dir.file("prices.toml"), kSheet);
    sheet = load_prices(dir.file("prices.toml"));
  }

  Job& job(const std::string& id, const std::string& tenant, const std::string& backend, const std::string& node,
           double start, double end, double gpus, double cpus, double memory_gib = 0) {
    Strings& s = data.strings;
    Job j;
    data.ids.push_back(id);
    j.tenant = s.id(tenant);
    j.user = s.id("u-" + tenant);
    j.project = s.id("proj");
    j.backend = s.id(backend);
    j.node = s.id(node);
    j.state = s.id(known(end) ? "COMPLETED" : "RUNNING");
    j.submit = start - 60;
    j.start = start;
    j.end = end;
    j.gpus = gpus;
    j.cpus = cpus;
    j.memory_bytes = memory_gib * (1ull << 30);
    data.jobs.push_back(j);
    return data.jobs.back();
  }

  // Hourly samples of `host` over [from, to): 4 GPUs at half load, 8 CPUs at a quarter.
  void samples(const std::string& host, double from, double to) {
    for (double t = from + kHour; t <= to; t += kHour) {
      Sample s;
      s.host = data.strings.id(host);
      s.end = t;
      s.interval_s = kHour;
      s.cpu_util = 0.25;
      s.cpus_at = static_cast<std::uint32_t>(data.utils.size());
      s.cpus_count = 8;
      data.utils.insert(data.utils.end(), 8, 0.25f);
      s.gpus_at = static_cast<std::uint32_t>(data.gpu_utils.size());
      s.gpus_count = 4;
      for (std::uint32_t g = 0; g < 4; ++g) data.gpu_utils.emplace_back(g, 0.5f);
      s.gpu_util_mean = 0.5;
      s.memory_total_bytes = 64.0 * (1ull << 30);
      s.gpu_model = data.strings.id("NVIDIA H200");
      data.samples.push_back(s);
    }
  }

  ReportOptions options(double until) const {
    ReportOptions o;
    o.until = until;
    o.prices = &sheet;
    return o;
  }
};

// A small RFC 4180 reader: rows of fields (quoted fields may hold , and "").
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false, was_quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        field += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = was_quoted = true;
    } else if (c == ',') {
      rows.back().push_back(field);
      field.clear();
    } else if (c == '\n') {
      rows.back().push_back(field);
      field.clear();
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  if (!rows.back().empty() || !field.empty())
    rows.back().push_back(field);
  else
    rows.pop_back();
  return rows;
}

// FOCUS rows as column → value maps.
struct Focus {
  std::string text;
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;

  std::vector<const std::map<std::string, std::string>*> where(const std::string& column,
                                                               const std::string& value) const {
    std::vector<const std::map<std::string, std::string>*> out;
    for (const auto& r : rows)
      if (r.at(column) == value) out.push_back(&r);
    return out;
  }
  double sum(const std::string& column, const std::string& kind) const {
    double s = 0;
    for (const auto& r : rows)
      if (kind.empty() || r.at("x_ChargeKind") == kind) s += std::stod(r.at(column));
    return s;
  }
};

Focus focus_of(const Dataset& data, const ReportOptions& opt) {
  std::ostringstream out;
  write_focus(out, data, opt);
  Focus f;
  f.text = out.str();
  auto rows = parse_csv(f.text);
  EXPECT_FALSE(rows.empty());
  if (rows.empty()) return f;
  f.header = rows[0];
  for (std::size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].size(), f.header.size()) << "row " << i;
    std::map<std::string, std::string> m;
    for (std::size_t c = 0; c < f.header.size() && c < rows[i].size(); ++c) m[f.header[c]] = rows[i][c];
    f.rows.push_back(std::move(m));
  }
  return f;
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

TEST(RcostFocus, HeaderHasTheFocusColumns) {
  Fixture fx;
  fx.job("1", "alpha", "local", "n1", kDay0 + kHour, kDay0 + 2 * kHour, 1, 2);
  const Focus f = focus_of(fx.data, fx.options(kDay0 + 86400));
  for (const char* c : {"BilledCost",
                        "EffectiveCost",
                        "ListCost",
                        "ContractedCost",
                        "BillingCurrency",
                        "BillingAccountId",
                        "BillingAccountName",
                        "BillingPeriodStart",
                        "BillingPeriodEnd",
                        "ChargePeriodStart",
                        "ChargePeriodEnd",
                        "ChargeCategory",
                        "ChargeClass",
                        "ChargeDescription",
                        "ChargeFrequency",
                        "ConsumedQuantity",
                        "ConsumedUnit",
                        "PricingQuantity",
                        "PricingUnit",
                        "PricingCategory",
                        "ListUnitPrice",
                        "ContractedUnitPrice",
                        "ProviderName",
                        "PublisherName",
                        "InvoiceIssuerName",
                        "RegionId",
                        "RegionName",
                        "ResourceId",
                        "ResourceName",
                        "ResourceType",
                        "ServiceCategory",
                        "ServiceName",
                        "SkuId",
                        "SubAccountId",
                        "SubAccountName",
                        "Tags",
                        "x_User",
                        "x_Project",
                        "x_Node"})
    EXPECT_NE(std::find(f.header.begin(), f.header.end(), c), f.header.end()) << c;
  // Custom columns come after every FOCUS column.
  const auto first_custom =
      std::find_if(f.header.begin(), f.header.end(), [](auto& h) { return h.rfind("x_", 0) == 0; });
  EXPECT_TRUE(std::all_of(first_custom, f.header.end(), [](auto& h) { return h.rfind("x_", 0) == 0; }));
  ASSERT_EQ(f.rows.size(), 2u);  // GPU and CPU; no memory held, no row
  const auto& gpu = *f.where("ResourceType", "GPU").at(0);
  EXPECT_EQ(gpu.at("ConsumedUnit"), "GPU-Hours");
  EXPECT_EQ(gpu.at("ConsumedQuantity"), "1");
  EXPECT_EQ(gpu.at("BilledCost"), "1");  // no GPU type, no samples naming one: the default price
  EXPECT_EQ(gpu.at("ListUnitPrice"), "1");
  EXPECT_EQ(gpu.at("SkuId"), "local/gpu");
  EXPECT_EQ(gpu.at("ChargeCategory"), "Usage");
  EXPECT_EQ(gpu.at("ChargeClass"), "");
  EXPECT_EQ(gpu.at("ChargeFrequency"), "Usage-Based");
  EXPECT_EQ(gpu.at("PricingCategory"), "Standard");
  EXPECT_EQ(gpu.at("BillingPeriodStart"), "2026-11-01T00:00:00Z");
  EXPECT_EQ(gpu.at("BillingPeriodEnd"), "2026-12-01T00:00:00Z");
  EXPECT_EQ(gpu.at("ResourceId"), "1");
  EXPECT_EQ(gpu.at("SubAccountName"), "alpha");
  EXPECT_EQ(gpu.at("ServiceName"), "rkit local");
  EXPECT_EQ(gpu.at("x_User"), "u-alpha");
  EXPECT_EQ(gpu.at("Tags"), R"({"user":"u-alpha","project":"proj","node":"n1","state":"COMPLETED"})");
  EXPECT_EQ(f.where("ResourceType", "CPU").at(0)->at("ConsumedUnit"), "Core-Hours");
}

// Jobs of three tenants over two days: one across midnight, one still running, one on
// spot capacity; hourly samples of n1 when `with_samples`.
void two_days(Fixture& fx, bool with_samples) {
  Job& across = fx.job("12", "alpha", "local", "n1", kDay0 + 22 * kHour, kDay0 + 26 * kHour, 2, 4, 8);
  across.gpu_type = fx.data.strings.id("NVIDIA H200");
  fx.job("13", "acme, inc", "local", "n1", kDay0 + 3 * kHour, kDay0 + 5 * kHour, 1, 2, 4);
  fx.job("slurm:14", "beta", "spot", "n2", kDay0 + 25 * kHour, kDay0 + 27 * kHour, 1, 8, 16);
  fx.job("15", "alpha", "local", "n1", kDay0 + 34 * kHour, kNone, 1, 1);
  fx.job("16", "beta", "local", "n1", kNone, kNone, 1, 1);  // never started: no row
  if (with_samples) fx.samples("n1", kDay0, kDay0 + 2 * 86400);
}

TEST(RcostFocus, JobRowsAddUpToTheReportCost) {
  Fixture fx;
  two_days(fx, false);
  const ReportOptions opt = fx.options(kDay0 + 2 * 86400);
  const Report r = make_report(fx.data, opt);
  const Focus f = focus_of(fx.data, opt);
  EXPECT_NEAR(f.sum("BilledCost", "usage"), r.total.cost, 1e-6);
  EXPECT_NEAR(f.sum("ListCost", "usage"), r.total.list_cost, 1e-6);
  EXPECT_NEAR(f.sum("BilledCost", ""), r.total.total_cost(), 1e-6);
  EXPECT_TRUE(f.where("x_ChargeKind", "idle").empty()) << "no samples, no idle rows";
  EXPECT_TRUE(f.where("ResourceId", "16").empty());
  // The running job counts up to --until: 14 hours on day 2.
  const auto running = f.where("ResourceId", "15");
  ASSERT_EQ(running.size(), 2u);  // GPU and CPU
  EXPECT_EQ(running[0]->at("ChargePeriodEnd"), "2026-11-03T00:00:00Z");
  EXPECT_NEAR(std::stod(running[0]->at("ConsumedQuantity")), 14, 1e-9);
  // Quantities are unit-hours, cost is quantity × unit price.
  for (const auto& row : f.rows)
    EXPECT_NEAR(std::stod(row.at("BilledCost")),
                std::stod(row.at("ConsumedQuantity")) * std::stod(row.at("ContractedUnitPrice")), 1e-6);
}

TEST(RcostFocus, WithSamplesIdleRowsMakeUpTheTotalWhicheverWayIdleIsShared) {
  Fixture fx;
  two_days(fx, true);
  for (ShareIdle share : {ShareIdle::Weighted, ShareIdle::Even, ShareIdle::None}) {
    ReportOptions opt = fx.options(kDay0 + 2 * 86400);
    opt.share_idle = share;
    const Report r = make_report(fx.data, opt);
    const Focus f = focus_of(fx.data, opt);
    EXPECT_NEAR(f.sum("BilledCost", "usage"), r.total.cost, 1e-6);
    EXPECT_NEAR(f.sum("BilledCost", ""), r.total.total_cost(), 1e-6);
    EXPECT_GT(r.total.idle_cost, 1);
  }
  const Focus f = focus_of(fx.data, fx.options(kDay0 + 2 * 86400));
  const auto idle = f.where("x_ChargeKind", "idle");
  ASSERT_EQ(idle.size(), 6u);  // n1 × 2 days × GPU, CPU, memory
  for (const auto* row : idle) {
    EXPECT_EQ(row->at("ResourceId"), "n1");
    EXPECT_EQ(row->at("SubAccountName"), "");
    EXPECT_EQ(row->at("SkuId").rfind("local/", 0), 0u);
    EXPECT_GT(std::stod(row->at("ConsumedQuantity")), 0);
  }
  // Day 1 on n1: 4 GPUs × 24 h, less what jobs 12 (2 GPUs, 2 h) and 13 (1 GPU, 2 h) held.
  for (const auto* row : idle)
    if (row->at("ResourceType") == "GPU" && row->at("ChargePeriodStart") == "2026-11-01T00:00:00Z") {
      EXPECT_NEAR(std::stod(row->at("ConsumedQuantity")), 96 - 4 - 2, 1e-6);
      EXPECT_EQ(row->at("SkuId"), "local/gpu/NVIDIA H200");  // the GPU its samples name
      EXPECT_NEAR(std::stod(row->at("ContractedUnitPrice")), 2.0, 1e-12);
    }
}

TEST(RcostFocus, AJobAcrossMidnightGivesOneRowPerDay) {
  Fixture fx;
  two_days(fx, false);
  const Focus f = focus_of(fx.data, fx.options(kDay0 + 2 * 86400));
  std::vector<const std::map<std::string, std::string>*> gpu;
  for (const auto* row : f.where("ResourceId", "12"))
    if (row->at("ResourceType") == "GPU") gpu.push_back(row);
  ASSERT_EQ(gpu.size(), 2u);
  EXPECT_EQ(gpu[0]->at("ChargePeriodStart"), "2026-11-01T22:00:00Z");
  EXPECT_EQ(gpu[0]->at("ChargePeriodEnd"), "2026-11-02T00:00:00Z");
  EXPECT_EQ(gpu[1]->at("ChargePeriodStart"), "2026-11-02T00:00:00Z");
  EXPECT_EQ(gpu[1]->at("ChargePeriodEnd"), "2026-11-02T02:00:00Z");
  for (const auto* row : gpu) {
    EXPECT_EQ(row->at("ConsumedQuantity"), "4");  // 2 GPUs × 2 hours
    EXPECT_EQ(row->at("BilledCost"), "8");        // at H200's 2.0
    EXPECT_EQ(row->at("ChargeDescription"), "2 GPU (NVIDIA H200) on local, job 12");
  }
  EXPECT_EQ(f.where("ResourceId", "12").size(), 6u);  // GPU, CPU, memory × 2 days
  // The window cuts too: from 23:00 only the last hour of day 1.
  ReportOptions late = fx.options(kDay0 + 2 * 86400);
  late.since = kDay0 + 23 * kHour;
  const Focus g = focus_of(fx.data, late);
  const auto first = g.where("ChargePeriodStart", "2026-11-01T23:00:00Z");
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first[0]->at("ResourceId"), "12");
}

TEST(RcostFocus, SpotIsDynamicPricingBilledBelowList) {
  Fixture fx;
  two_days(fx, false);
  const Focus f = focus_of(fx.data, fx.options(kDay0 + 2 * 86400));
  const auto spot = f.where("ResourceId", "slurm:14");
  ASSERT_EQ(spot.size(), 3u);
  for (const auto* row : spot) {
    EXPECT_EQ(row->at("PricingCategory"), "Dynamic");
    EXPECT_EQ(row->at("RegionId"), "spot");
    const double billed = std::stod(row->at("BilledCost")), list = std::stod(row->at("ListCost"));
    EXPECT_GT(list, billed);
    EXPECT_NEAR(billed, list * 0.4, 1e-6);  // 60% off
    EXPECT_EQ(row->at("EffectiveCost"), row->at("BilledCost"));
    EXPECT_EQ(row->at("ContractedCost"), row->at("BilledCost"));
  }
  for (const auto* row : f.where("ResourceId", "13")) {
    EXPECT_EQ(row->at("PricingCategory"), "Standard");
    EXPECT_EQ(row->at("ListCost"), row->at("BilledCost"));
  }
}

TEST(RcostFocus, QuotesFieldsWithCommasAndQuotes) {
  Fixture fx;
  two_days(fx, false);
  const Focus f = focus_of(fx.data, fx.options(kDay0 + 2 * 86400));
  EXPECT_NE(f.text.find(",\"acme, inc\",\"acme, inc\","), std::string::npos);   // SubAccountId, SubAccountName
  EXPECT_NE(f.text.find(R"("{""user"":""u-acme, inc"",)"), std::string::npos);  // Tags: JSON, quoted
  const auto acme = f.where("SubAccountName", "acme, inc");
  ASSERT_EQ(acme.size(), 3u);
  EXPECT_EQ(acme[0]->at("x_User"), "u-acme, inc");
}

// ---------------------------------------------------------------- HTML

std::string html_of(const Dataset& data, const ReportOptions& opt, ReadStats stats = {}) {
  std::ostringstream out;
  write_html(out, data, opt, stats);
  return out.str();
}

// The <svg> elements of a page.
std::vector<std::string> charts(const std::string& page) {
  std::vector<std::string> out;
  for (std::size_t at = page.find("<svg"); at != std::string::npos; at = page.find("<svg", at + 1)) {
    const std::size_t end = page.find("</svg>", at);
    if (end == std::string::npos) break;
    out.push_back(page.substr(at, end + 6 - at));
  }
  return out;
}

std::string kind_of(const std::string& svg) {
  std::smatch m;
  return std::regex_search(svg, m, std::regex("data-kind=\"([a-z-]+)\"")) ? m[1].str() : "";
}

TEST(RcostHtml, APageWithTheThreeCharts) {
  Fixture fx;
  two_days(fx, true);
  const std::string page = html_of(fx.data, fx.options(kDay0 + 2 * 86400), ReadStats{120, 3, 0});
  EXPECT_EQ(page.rfind("<!DOCTYPE html>\n<html", 0), 0u);
  EXPECT_EQ(count(page, "<html"), 1);
  EXPECT_EQ(count(page, "</html>"), 1);
  EXPECT_EQ(count(page, "<svg"), count(page, "</svg>"));
  EXPECT_EQ(count(page, "<g>"), count(page, "</g>"));
  EXPECT_EQ(count(page, "<script"), 0);
  EXPECT_EQ(count(page, "src="), 0);
  std::map<std::string, int> kinds;
  for (const std::string& svg : charts(page)) {
    const std::string kind = kind_of(svg);
    ++kinds[kind];
    EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\"", 0), 0u) << kind;
    EXPECT_GT(count(svg, "<rect"), 3) << kind;    // the background and bars
    EXPECT_GE(count(svg, "<title>"), 2) << kind;  // tooltips
  }
  EXPECT_EQ(kinds, (std::map<std::string, int>{{"cost-by-tenant", 1}, {"utilisation", 2}, {"waste", 1}}));
  EXPECT_NE(page.find("acme, inc"), std::string::npos);  // a legend entry and a table row
  EXPECT_NE(page.find("3 bad records were skipped"), std::string::npos);
  EXPECT_NE(page.find("USD"), std::string::npos);
  EXPECT_NE(page.find("2026-11-01T00:00:00Z to 2026-11-03T00:00:00Z"), std::string::npos);
}

TEST(RcostHtml, WithoutSamplesSaysSoInsteadOfDrawing) {
  Fixture fx;
  two_days(fx, false);
  const std::string page = html_of(fx.data, fx.options(kDay0 + 2 * 86400));
  std::map<std::string, int> kinds;
  for (const std::string& svg : charts(page)) ++kinds[kind_of(svg)];
  EXPECT_EQ(kinds, (std::map<std::string, int>{{"cost-by-tenant", 1}}));
  EXPECT_NE(page.find("No utilisation samples were given"), std::string::npos);
}

TEST(RcostHtml, EscapesNamesAndDrawsLongWindowsByMonth) {
  Fixture fx;
  fx.job("1", "<b>&'x\"", "local", "n1", kDay0, kDay0 + 5 * kHour, 1, 1);
  fx.job("2", "beta", "local", "n1", kDay0 + 100 * 86400, kDay0 + 100 * 86400 + kHour, 1, 1);
  const std::string page = html_of(fx.data, fx.options(kDay0 + 120 * 86400));
  EXPECT_EQ(page.find("<b>&"), std::string::npos);
  EXPECT_NE(page.find("&lt;b&gt;&amp;&#39;x&quot;"), std::string::npos);
  EXPECT_NE(page.find("Cost by tenant per month"), std::string::npos);
  EXPECT_NE(page.find(">2027-02</text>"), std::string::npos);
}

}  // namespace
}  // namespace rkit::rcost
