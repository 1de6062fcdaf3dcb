// The price sheet: loading, GPU name matching, hourly prices, and errors that name
// file:line.
#include "rkit/prices.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "rkit/config.hpp"
#include "rkit/error.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

using testing::error_of;

const char* const kSheet = R"(currency = "EUR"

[backends.flat]
cpu_hour = 0.5
memory_gib_hour = 0.25
gpu_hour = 2

[backends.models]
cpu_hour = 1
gpu_hour = { default = 1.5, H100 = 3.0, "H100 80GB" = 4.0, a100 = 2.5 }

[backends.nodefault]
gpu_hour = { H100 = 3.0 }
)";

PriceSheet load_text(const testing::TempDir& dir, const std::string& text) {
  const std::string path = dir.file("prices.toml");
  testing::write(path, text);
  return load_prices(path);
}

TEST(Prices, LoadsCurrencyAndBackends) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kSheet);
  EXPECT_EQ(sheet.currency, "EUR");
  EXPECT_EQ(sheet.source, dir.file("prices.toml"));
  ASSERT_EQ(sheet.backends.size(), 3u);
  const ResourcePrices& flat = sheet.at("flat");
  EXPECT_DOUBLE_EQ(flat.cpu_hour, 0.5);
  EXPECT_DOUBLE_EQ(flat.memory_gib_hour, 0.25);
  EXPECT_EQ(flat.gpu_hour, (std::map<std::string, double>{{"default", 2.0}})) << "a number is the default price";
  const ResourcePrices& models = sheet.at("models");
  EXPECT_DOUBLE_EQ(models.cpu_hour, 1.0) << "an integer is a price too";
  EXPECT_DOUBLE_EQ(models.memory_gib_hour, 0.0) << "not given: free";
  EXPECT_EQ(models.gpu_hour.size(), 4u);
}

TEST(Prices, DefaultCurrency) {
  testing::TempDir dir;
  EXPECT_EQ(load_text(dir, "[backends.a]\ncpu_hour = 1\n").currency, "USD");
  EXPECT_TRUE(load_text(dir, "").backends.empty());
}

TEST(Prices, GpuPriceTakesTheLongestCaseInsensitiveMatch) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kSheet);
  const ResourcePrices& models = sheet.at("models");
  EXPECT_DOUBLE_EQ(models.gpu_price("NVIDIA H100 80GB HBM3"), 4.0);
  EXPECT_DOUBLE_EQ(models.gpu_price("nvidia h100 80gb hbm3"), 4.0);
  EXPECT_DOUBLE_EQ(models.gpu_price("NVIDIA H100 PCIe"), 3.0);
  EXPECT_DOUBLE_EQ(models.gpu_price("NVIDIA A100-SXM4-40GB"), 2.5) << "a lower-case key matches too";
  EXPECT_DOUBLE_EQ(models.gpu_price("NVIDIA L4"), 1.5) << "no key matches: default";
  EXPECT_DOUBLE_EQ(models.gpu_price(""), 1.5);
  EXPECT_DOUBLE_EQ(sheet.at("nodefault").gpu_price("NVIDIA L4"), 0.0) << "no default: free";
  EXPECT_DOUBLE_EQ(sheet.at("nodefault").gpu_price("H100"), 3.0);
  EXPECT_DOUBLE_EQ(sheet.at("flat").gpu_price("NVIDIA H100"), 2.0);
}

TEST(Prices, LongestMatchDoesNotDependOnKeyOrder) {
  ResourcePrices p;
  p.gpu_hour = {{"H100 80GB", 4.0}, {"H100", 3.0}, {"100", 1.0}};
  EXPECT_DOUBLE_EQ(p.gpu_price("NVIDIA H100 80GB"), 4.0);
  p.gpu_hour = {{"A", 9.0}, {"H100", 3.0}};  // "A" sorts first and matches "NVIDIA"
  EXPECT_DOUBLE_EQ(p.gpu_price("NVIDIA H100"), 3.0);
}

TEST(Prices, HourlyAddsCoresGpusAndMemory) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kSheet);
  const ResourcePrices& flat = sheet.at("flat");
  EXPECT_DOUBLE_EQ(flat.hourly(8, 2, "NVIDIA H100", 64ull << 30), 8 * 0.5 + 2 * 2.0 + 64 * 0.25);
  EXPECT_DOUBLE_EQ(flat.hourly(1, 0, "", 512ull << 20), 0.5 + 0.5 * 0.25) << "memory in fractions of a GiB";
  EXPECT_DOUBLE_EQ(flat.hourly(0, 0, "", 0), 0.0);
  const ResourcePrices& models = sheet.at("models");
  EXPECT_DOUBLE_EQ(models.hourly(4, 8, "NVIDIA H100 80GB HBM3", 1ull << 40), 4 * 1.0 + 8 * 4.0);
}

// The hand-computed cases: 35040 / (4 y × 8760 h) = 1 per hour; 17520 / (5 × 8760) = 0.4.
const char* const kDerived = R"(
[backends.onprem]
electricity_per_kwh = 0.2
pue = 1.5
cpu_hour = { purchase_price = 17520, depreciation_years = 5, power_w = 500, units = 64 }
memory_gib_hour = 0.001
gpu_hour = { default = 1.0, H200 = { purchase_price = 35000, depreciation_years = 4, power_w = 700 }, B200 = { purchase_price = 35040, depreciation_years = 4, power_w = 1000, units = 2 } }

[backends.nopue]
electricity_per_kwh = 0.1
cpu_hour = { purchase_price = 17520, depreciation_years = 5, power_w = 500, units = 64 }
gpu_hour = { purchase_price = 35040, depreciation_years = 4 }

[backends.ondemand]
market = "on_demand"
cpu_hour = 0.05
gpu_hour = { default = 3.0, H100 = 4.5 }

[backends.spot]
market = "spot"
spot_discount = 0.6
cpu_hour = 0.05
memory_gib_hour = 0.01
gpu_hour = { default = 3.0, H100 = 4.5 }
)";

TEST(Prices, DerivedRates) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kDerived);
  const ResourcePrices& p = sheet.at("onprem");
  EXPECT_EQ(p.market, "on_premises") << "the default market";
  EXPECT_DOUBLE_EQ(p.electricity_per_kwh, 0.2);
  EXPECT_DOUBLE_EQ(p.pue, 1.5);
  // (17520 / (5 × 8760) + 0.5 kW × 1.5 × 0.2) / 64 = (0.4 + 0.15) / 64
  EXPECT_DOUBLE_EQ(p.cpu_hour, 0.55 / 64);
  // 35000 / 35040 + 0.7 × 1.5 × 0.2 = 0.998858... + 0.21
  EXPECT_NEAR(p.gpu_price("NVIDIA H200"), 1.208858, 1e-6);
  // (1 + 1 kW × 1.5 × 0.2) / 2 units
  EXPECT_DOUBLE_EQ(p.gpu_price("NVIDIA B200"), 0.65);
  EXPECT_DOUBLE_EQ(p.gpu_price("NVIDIA L4"), 1.0) << "plain numbers beside derived ones";
  EXPECT_DOUBLE_EQ(p.memory_gib_hour, 0.001);
  EXPECT_DOUBLE_EQ(p.hourly(64, 2, "NVIDIA B200", 10ull << 30), 0.55 + 2 * 0.65 + 10 * 0.001);
  EXPECT_EQ(p.derived.size(), 3u);
  ASSERT_EQ(p.derived.count("gpu_hour.H200"), 1u);
  EXPECT_DOUBLE_EQ(p.derived.at("gpu_hour.H200").power_w, 700);
  EXPECT_DOUBLE_EQ(p.derived.at("gpu_hour.H200").units, 1) << "units defaults to 1";
  EXPECT_DOUBLE_EQ(p.derived.at("cpu_hour").units, 64);
}

TEST(Prices, DerivedRatesDefaultToPue1AndNumberIsDefaultGpu) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kDerived);
  const ResourcePrices& p = sheet.at("nopue");
  EXPECT_DOUBLE_EQ(p.pue, 1.0);
  EXPECT_DOUBLE_EQ(p.cpu_hour, (0.4 + 0.5 * 1.0 * 0.1) / 64);
  EXPECT_EQ(p.gpu_hour, (std::map<std::string, double>{{"default", 1.0}})) << "a derived table is the default price";
  EXPECT_EQ(p.derivation("gpu_hour.default"), "35040 / (4 y × 8760 h)") << "no power draw: no power term";
  EXPECT_DOUBLE_EQ(
      load_text(dir, "[backends.a]\ncpu_hour = { purchase_price = 8760, depreciation_years = 1, power_w = 1000 }\n")
          .at("a")
          .cpu_hour,
      1.0)
      << "no electricity price: power is free";
}

TEST(Prices, DerivationText) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kDerived);
  const ResourcePrices& p = sheet.at("onprem");
  EXPECT_EQ(p.derivation("gpu_hour.H200"), "35000 / (4 y × 8760 h) + 0.7 kW × 1.5 PUE × 0.2/kWh");
  EXPECT_EQ(p.derivation("cpu_hour"), "(17520 / (5 y × 8760 h) + 0.5 kW × 1.5 PUE × 0.2/kWh) / 64 units");
  EXPECT_EQ(p.derivation("memory_gib_hour"), "as given");
  EXPECT_EQ(p.derivation("gpu_hour.default"), "as given");
  const DerivedPrice d{35000, 4, 700, 1};
  EXPECT_EQ(d.text(0.12, 1.4), "35000 / (4 y × 8760 h) + 0.7 kW × 1.4 PUE × 0.12/kWh");
  EXPECT_NEAR(d.hourly(0.12, 1.4), 35000.0 / 35040 + 0.7 * 1.4 * 0.12, 1e-12);
}

TEST(Prices, SpotBillsTheDiscountedListPrice) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kDerived);
  const ResourcePrices& spot = sheet.at("spot");
  const ResourcePrices& ondemand = sheet.at("ondemand");
  EXPECT_EQ(spot.market, "spot");
  EXPECT_DOUBLE_EQ(spot.spot_discount, 0.6);
  EXPECT_DOUBLE_EQ(spot.effective_factor(), 0.4);
  EXPECT_DOUBLE_EQ(spot.cpu_hour, 0.05) << "the sheet's numbers stay list prices";
  EXPECT_DOUBLE_EQ(spot.list_gpu_price("NVIDIA H100"), 4.5);
  EXPECT_DOUBLE_EQ(spot.gpu_price("NVIDIA H100"), 4.5 * 0.4);
  EXPECT_DOUBLE_EQ(spot.list_hourly(8, 2, "NVIDIA H100", 16ull << 30), 8 * 0.05 + 2 * 4.5 + 16 * 0.01);
  EXPECT_DOUBLE_EQ(spot.hourly(8, 2, "NVIDIA H100", 16ull << 30), (8 * 0.05 + 2 * 4.5 + 16 * 0.01) * 0.4);
  EXPECT_EQ(ondemand.market, "on_demand");
  EXPECT_DOUBLE_EQ(ondemand.effective_factor(), 1.0);
  EXPECT_DOUBLE_EQ(ondemand.hourly(8, 2, "NVIDIA H100", 0), ondemand.list_hourly(8, 2, "NVIDIA H100", 0));
  EXPECT_DOUBLE_EQ(ondemand.gpu_price("NVIDIA H100"), 4.5);
  ResourcePrices p;
  EXPECT_EQ(p.market, "on_premises");
  p.spot_discount = 0.5;  // ignored off the spot market
  EXPECT_DOUBLE_EQ(p.effective_factor(), 1.0);
}

TEST(Prices, PriceLinesListEveryRate) {
  testing::TempDir dir;
  const std::vector<PriceLine> lines = price_lines(load_text(dir, kDerived));
  // onprem: cpu, memory, 3 GPUs; nopue: cpu, memory, 1 GPU; ondemand: 2 + 2; spot: 2 + 2
  ASSERT_EQ(lines.size(), 5u + 3u + 4u + 4u);
  std::vector<std::string> backends;
  for (const PriceLine& l : lines)
    if (backends.empty() || backends.back() != l.backend) backends.push_back(l.backend);
  EXPECT_EQ(backends, (std::vector<std::string>{"nopue", "ondemand", "onprem", "spot"})) << "by name";

  // nopue 0-2, ondemand 3-6, onprem 7-11, spot 12-15; GPU keys in byte order ("H100" < "default").
  const PriceLine& cpu = lines[7];
  EXPECT_EQ(cpu.backend, "onprem");
  EXPECT_EQ(cpu.resource, "cpu_hour");
  EXPECT_EQ(cpu.gpu, "");
  EXPECT_EQ(cpu.unit, "core-hour");
  EXPECT_EQ(cpu.market, "on_premises");
  EXPECT_DOUBLE_EQ(cpu.list, 0.55 / 64);
  EXPECT_DOUBLE_EQ(cpu.effective, 0.55 / 64);
  EXPECT_EQ(cpu.derivation, "(17520 / (5 y × 8760 h) + 0.5 kW × 1.5 PUE × 0.2/kWh) / 64 units");
  EXPECT_EQ(lines[8].resource, "memory_gib_hour");
  EXPECT_EQ(lines[8].unit, "GiB-hour");
  EXPECT_EQ(lines[8].derivation, "as given");
  EXPECT_EQ(lines[9].gpu, "B200");
  EXPECT_EQ(lines[9].unit, "GPU-hour");
  EXPECT_DOUBLE_EQ(lines[9].list, 0.65);
  EXPECT_EQ(lines[10].gpu, "H200");
  EXPECT_EQ(lines[10].derivation, "35000 / (4 y × 8760 h) + 0.7 kW × 1.5 PUE × 0.2/kWh");
  EXPECT_EQ(lines[11].gpu, "default");
  EXPECT_EQ(lines[11].derivation, "as given");

  const PriceLine& h100 = lines[14];
  EXPECT_EQ(h100.backend, "spot");
  EXPECT_EQ(h100.resource, "gpu_hour");
  EXPECT_EQ(h100.gpu, "H100");
  EXPECT_EQ(h100.market, "spot");
  EXPECT_DOUBLE_EQ(h100.list, 4.5);
  EXPECT_DOUBLE_EQ(h100.effective, 4.5 * 0.4);
  EXPECT_EQ(h100.derivation, "as given");
  EXPECT_TRUE(price_lines(PriceSheet{}).empty());
}

TEST(Prices, ErrorsNameFileAndLine) {
  testing::TempDir dir;
  const std::string path = dir.file("prices.toml");
  const std::pair<const char*, std::string> cases[] = {
      {"currency = \"USD\"\n[backends.a]\ncpu_hour = -1\n", ":3: backends.a.cpu_hour must not be negative"},
      {"[backends.a]\n\nmemory_gib_hour = \"cheap\"\n", ":3: backends.a.memory_gib_hour must be a number"},
      {"[backends.a]\ncpu_hour = true\n", ":2: backends.a.cpu_hour must be a number"},
      {"[backends.a]\ncpu_hour = 1\ncpu_hours = 2\n",
       ":3: backends.a.cpu_hours is not a price sheet key (cpu_hour, memory_gib_hour, gpu_hour, market, "
       "spot_discount, electricity_per_kwh, pue)"},
      {"[backends.a]\ngpu_hour = { H100 = -2.0 }\n", ":2: backends.a.gpu_hour.H100 must not be negative"},
      {"[backends.a]\ngpu_hour = { H100 = \"x\" }\n", ":2: backends.a.gpu_hour.H100 must be a number"},
      {"[backends.a]\ngpu_hour = \"2\"\n",
       ":2: backends.a.gpu_hour must be a number or a table of GPU names and prices"},
      {"curency = \"USD\"\n", ":1: curency is not a price sheet key (currency, backends)"},
      {"currency = 3\n", ":1: currency must be a string"},
      {"backends = 3\n", ":1: backends must be a table"},
      {"[backends]\na = 3\n", ":2: backends.a must be a table"},
      // Derived prices.
      {"[backends.a]\ncpu_hour = { purchase_price = -1, depreciation_years = 4 }\n",
       ":2: backends.a.cpu_hour.purchase_price must not be negative"},
      {"[backends.a]\n\ngpu_hour = { H200 = { purchase_price = 35000, depreciation_years = 0 } }\n",
       ":3: backends.a.gpu_hour.H200.depreciation_years must be more than 0"},
      {"[backends.a]\ncpu_hour = { purchase_price = 1, depreciation_years = 4, units = 0 }\n",
       ":2: backends.a.cpu_hour.units must be more than 0"},
      {"[backends.a]\nmemory_gib_hour = { purchase_price = 1, depreciation_years = 4, power_w = -5 }\n",
       ":2: backends.a.memory_gib_hour.power_w must not be negative"},
      {"[backends.a]\ncpu_hour = { purchase_price = 1, depreciation_years = \"4\" }\n",
       ":2: backends.a.cpu_hour.depreciation_years must be a number"},
      {"[backends.a]\ngpu_hour = { H200 = { purchase_price = 1, depreciation_years = 4, watts = 700 } }\n",
       ":2: backends.a.gpu_hour.H200.watts is not a derived price key (purchase_price, depreciation_years, power_w, "
       "units)"},
      {"[backends.a]\ncpu_hour = { purchase_price = 1 }\n", ":2: backends.a.cpu_hour needs depreciation_years"},
      {"[backends.a]\ngpu_hour = { depreciation_years = 4, power_w = 700 }\n",
       ":2: backends.a.gpu_hour needs purchase_price"},
      {"[backends.a]\nelectricity_per_kwh = -0.1\n", ":2: backends.a.electricity_per_kwh must not be negative"},
      {"[backends.a]\nelectricity_per_kwh = \"0.1\"\n", ":2: backends.a.electricity_per_kwh must be a number"},
      {"[backends.a]\npue = 0.9\n", ":2: backends.a.pue must be at least 1"},
      {"[backends.a]\ncpu_hour = nan\n", ":2: backends.a.cpu_hour must be a number"},
      {"[backends.a]\ngpu_hour = { H100 = inf }\n", ":2: backends.a.gpu_hour.H100 must be a number"},
      // Markets.
      {"[backends.a]\ncpu_hour = 1\nspot_discount = 0.5\n",
       ":3: backends.a.spot_discount is only for market = \"spot\""},
      {"[backends.a]\nmarket = \"on_demand\"\nspot_discount = 0.5\n",
       ":3: backends.a.spot_discount is only for market = \"spot\""},
      {"[backends.a]\ncpu_hour = 1\nmarket = \"spot\"\n",
       ":3: backends.a.market is \"spot\" but spot_discount is not given"},
      {"[backends.a]\nmarket = \"spot\"\nspot_discount = 1\n",
       ":3: backends.a.spot_discount must be at least 0 and less than 1"},
      {"[backends.a]\nmarket = \"spot\"\nspot_discount = -0.2\n",
       ":3: backends.a.spot_discount must be at least 0 and less than 1"},
      {"[backends.a]\nmarket = \"spot\"\nspot_discount = \"60%\"\n", ":3: backends.a.spot_discount must be a number"},
      {"[backends.a]\nmarket = \"reserved\"\n",
       ":2: backends.a.market must be \"on_premises\", \"on_demand\" or \"spot\""},
      {"[backends.a]\nmarket = 3\n", ":2: backends.a.market must be \"on_premises\", \"on_demand\" or \"spot\""},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    testing::write(path, text);
    const Error e = error_of([&] { load_prices(path); });
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_EQ(std::string(e.what()), path + message);
  }
}

TEST(Prices, SyntaxErrorIsADataError) {
  testing::TempDir dir;
  const std::string path = dir.file("prices.toml");
  testing::write(path, "[backends.a\ncpu_hour = 1\n");
  const Error e = error_of([&] { load_prices(path); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(std::string(e.what()).rfind(path + ":1", 0), 0u) << e.what();
}

TEST(Prices, MissingFileIsNoInput) {
  const Error e = error_of([] { load_prices("/nonexistent/prices.toml"); });
  EXPECT_EQ(e.code(), Exit::NoInput);
  EXPECT_NE(std::string(e.what()).find("/nonexistent/prices.toml"), std::string::npos) << e.what();
}

TEST(Prices, UnknownBackendIsADataErrorNamingIt) {
  testing::TempDir dir;
  const PriceSheet sheet = load_text(dir, kSheet);
  const Error e = error_of([&] { sheet.at("gke"); });
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_NE(std::string(e.what()).find("\"gke\""), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(dir.file("prices.toml")), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("[backends.gke]"), std::string::npos) << e.hint();
}

TEST(Prices, ExampleSheetParses) {
  const PriceSheet sheet = load_prices(RKIT_FIXTURES "/../../examples/prices.toml");
  EXPECT_EQ(sheet.currency, "USD");
  for (const char* name : {"local", "slurm", "cloud", "onprem", "cloud-spot"}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(sheet.backends.count(name), 1u);
    const ResourcePrices& p = sheet.at(name);
    EXPECT_GT(p.cpu_hour, 0);
    EXPECT_GT(p.memory_gib_hour, 0);
    EXPECT_GT(p.gpu_price("NVIDIA H100 80GB HBM3"), p.gpu_price("NVIDIA L4")) << "H100 above the default";
    EXPECT_GT(p.gpu_price("NVIDIA L4"), 0) << "a default";
  }
  EXPECT_EQ(sheet.backends.size(), 5u);
  EXPECT_EQ(sheet.at("local").market, "on_premises");
  EXPECT_EQ(sheet.at("slurm").market, "on_premises");
  EXPECT_DOUBLE_EQ(sheet.at("local").gpu_price("NVIDIA H200"), 2.30) << "rsub's tests price with it";
  EXPECT_DOUBLE_EQ(sheet.at("slurm").gpu_price("NVIDIA H200"), 2.60);

  const ResourcePrices& onprem = sheet.at("onprem");
  EXPECT_EQ(onprem.market, "on_premises");
  EXPECT_GT(onprem.electricity_per_kwh, 0);
  EXPECT_GT(onprem.pue, 1);
  EXPECT_EQ(onprem.derived.count("cpu_hour"), 1u) << "a per-core rate from a server's price";
  EXPECT_EQ(onprem.derived.count("gpu_hour.H200"), 1u);
  EXPECT_NE(onprem.derivation("gpu_hour.H200"), "as given");

  const ResourcePrices& cloud = sheet.at("cloud");
  const ResourcePrices& spot = sheet.at("cloud-spot");
  EXPECT_EQ(cloud.market, "on_demand");
  EXPECT_EQ(spot.market, "spot");
  EXPECT_DOUBLE_EQ(spot.spot_discount, 0.6);
  EXPECT_DOUBLE_EQ(spot.list_hourly(8, 2, "NVIDIA H200", 64ull << 30), cloud.hourly(8, 2, "NVIDIA H200", 64ull << 30))
      << "the same list prices";
  EXPECT_NEAR(spot.hourly(8, 2, "NVIDIA H200", 64ull << 30), 0.4 * cloud.hourly(8, 2, "NVIDIA H200", 64ull << 30),
              1e-12);
}

TEST(PricesConfigured, RcostPricesThenRsubAutoPricesRelativeToTheConfigFile) {
  testing::TempDir dir;
  testing::write(dir.file("a.toml"), "[rcost]\nprices = \"sheets/p.toml\"\n[rsub.auto]\nprices = \"/x/q.toml\"\n");
  testing::write(dir.file("b.toml"), "[rsub.auto]\nprices = \"q.toml\"\n");
  testing::write(dir.file("c.toml"), "[rtop]\npolicy = \"pack\"\n");
  EXPECT_EQ(configured_price_sheet(load_config(dir.file("a.toml"))), dir.file("sheets/p.toml"));
  EXPECT_EQ(configured_price_sheet(load_config(dir.file("b.toml"))), dir.file("q.toml"));
  EXPECT_EQ(configured_price_sheet(load_config(dir.file("c.toml"))), std::nullopt);
}

}  // namespace
}  // namespace rkit
