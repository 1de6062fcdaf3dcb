// The price sheet: loading, GPU name matching, hourly prices, and errors that name
// file:line.
#include "rkit/prices.hpp"

#include <gtest/gtest.h>

#include <string>

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

TEST(Prices, ErrorsNameFileAndLine) {
  testing::TempDir dir;
  const std::string path = dir.file("prices.toml");
  const std::pair<const char*, std::string> cases[] = {
      {"currency = \"USD\"\n[backends.a]\ncpu_hour = -1\n", ":3: backends.a.cpu_hour must not be negative"},
      {"[backends.a]\n\nmemory_gib_hour = \"cheap\"\n", ":3: backends.a.memory_gib_hour must be a number"},
      {"[backends.a]\ncpu_hour = true\n", ":2: backends.a.cpu_hour must be a number"},
      {"[backends.a]\ncpu_hour = 1\ncpu_hours = 2\n",
       ":3: backends.a.cpu_hours is not a price sheet key (cpu_hour, memory_gib_hour, gpu_hour)"},
      {"[backends.a]\ngpu_hour = { H100 = -2.0 }\n", ":2: backends.a.gpu_hour.H100 must not be negative"},
      {"[backends.a]\ngpu_hour = { H100 = \"x\" }\n", ":2: backends.a.gpu_hour.H100 must be a number"},
      {"[backends.a]\ngpu_hour = \"2\"\n",
       ":2: backends.a.gpu_hour must be a number or a table of GPU names and prices"},
      {"curency = \"USD\"\n", ":1: curency is not a price sheet key (currency, backends)"},
      {"currency = 3\n", ":1: currency must be a string"},
      {"backends = 3\n", ":1: backends must be a table"},
      {"[backends]\na = 3\n", ":2: backends.a must be a table"},
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
  for (const char* name : {"local", "slurm", "cloud"}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(sheet.backends.count(name), 1u);
    const ResourcePrices& p = sheet.at(name);
    EXPECT_GT(p.cpu_hour, 0);
    EXPECT_GT(p.memory_gib_hour, 0);
    EXPECT_GT(p.gpu_price("NVIDIA H100 80GB HBM3"), p.gpu_price("NVIDIA L4")) << "H100 above the default";
    EXPECT_GT(p.gpu_price("NVIDIA L4"), 0) << "a default";
  }
  EXPECT_EQ(sheet.backends.size(), 3u);
}

}  // namespace
}  // namespace rkit
