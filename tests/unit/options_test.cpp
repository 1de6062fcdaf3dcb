// The option table (rkit/options.hpp): one declaration drives the flags, --help, the
// file's reading and checking, and flags over the file over the defaults.
#include "rkit/options.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace rkit {
namespace {

struct Demo {
  std::uint64_t steps = 10;
  double lr = 0.1;
  double noise = 0.5;
  std::string device = "cpu";
  std::string mode = "fast";
  std::string output;
  bool pack = true;
  int threads = 0;
  std::vector<int> sizes = {1};
};

using DemoOptions = OptionTable<Demo>;

// "1,2,3" → {1, 2, 3}; Error(Usage) for anything else.
std::vector<int> parse_sizes(const std::string& text) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string part = text.substr(start, end - start);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos)
      throw Error(Exit::Usage, "sizes '" + text + "': whole numbers, please");
    out.push_back(std::stoi(part));
    start = end + 1;
  }
  return out;
}

const DemoOptions& demo_options() {
  static const DemoOptions kOptions(
      {"train", "io"},
      {
          DemoOptions::whole("--steps", "train.steps", &Demo::steps, "N", "Optimizer steps (default 10)"),
          DemoOptions::number("--lr", "train.lr", &Demo::lr, "X", "Learning rate (default 0.1)", {0, 1}),
          DemoOptions::number("", "train.noise", &Demo::noise, "X", "Noise, only in the file"),
          DemoOptions::text("--device", "train.device", &Demo::device, "DEV", "cpu or cuda (default cpu)"),
          DemoOptions::choice("--mode", "train.mode", &Demo::mode, "MODE", "How to run", {"fast", "slow"}),
          DemoOptions::whole("--threads", "train.threads", &Demo::threads, "N", "Threads, 0 to 64", {0, 64}),
          DemoOptions::custom(
              "--sizes", "train.sizes", [](Demo& d, const std::string& v) { d.sizes = parse_sizes(v); }, "LIST",
              "Sizes, comma-separated"),
          DemoOptions::boolean("", "io.pack", &Demo::pack, "Pack the output"),
          DemoOptions::boolean("--no-pack", "", &Demo::pack, "Do not pack the output", false),
          DemoOptions::text("--output", "", &Demo::output, "FILE", "Write here"),
      });
  return kOptions;
}

Config config_of(const std::string& text) {
  Config cfg;
  cfg.path = "t.toml";
  cfg.table = parse_toml(text, cfg.path, Exit::Config);
  return cfg;
}

Demo from_file(const std::string& text) {
  Demo d;
  demo_options().apply_file(config_of(text), d);
  return d;
}

Error file_error(const std::string& text) {
  return testing::error_of([&] { from_file(text); });
}

// The flags as parsed from `args`, then applied over `cfg`.
Demo resolve(const std::string& args, const std::string& file = "") {
  CLI::App app("demo");
  OptionFlags flags = demo_options().add_to(app);
  app.parse(args, false);
  return demo_options().resolve(config_of(file), flags);
}

TEST(Options, TheFileSetsWhatItHolds) {
  const Demo d = from_file(
      "[train]\nsteps = 20\nlr = 0.5\nnoise = 2\ndevice = \"cuda\"\nmode = \"slow\"\nthreads = 4.0\nsizes = \"3,4\"\n"
      "[io]\npack = false\n");
  EXPECT_EQ(d.steps, 20u);
  EXPECT_EQ(d.lr, 0.5);
  EXPECT_EQ(d.noise, 2.0);
  EXPECT_EQ(d.device, "cuda");
  EXPECT_EQ(d.mode, "slow");
  EXPECT_EQ(d.threads, 4) << "a float without a fraction is a whole number";
  EXPECT_EQ(d.sizes, (std::vector<int>{3, 4}));
  EXPECT_FALSE(d.pack);
  const Demo none = from_file("");
  EXPECT_EQ(none.steps, 10u);
  EXPECT_EQ(none.device, "cpu");
}

TEST(Options, UnknownKeysAndTablesNameFileLineAndColumn) {
  Error e1 = file_error("[train]\nsteps = 1\n  stepz = 3\n");
  EXPECT_EQ(e1.code(), Exit::Config);
  EXPECT_STREQ(e1.what(), "t.toml:3:3: unknown key 'train.stepz'");
  Error e2 = file_error("\n[optimizer]\nlr = 1\n");
  EXPECT_EQ(e2.code(), Exit::Config);
  EXPECT_STREQ(e2.what(), "t.toml:2:1: unknown table 'optimizer' (expected [train] or [io])");
  Error e3 = file_error("train = 3\n");
  EXPECT_EQ(e3.code(), Exit::Config) << "a table's name given a value";
  EXPECT_NE(std::string(e3.what()).find("unknown table 'train'"), std::string::npos) << e3.what();
  Error e4 = file_error("[io]\noutput = \"x\"\n");
  EXPECT_STREQ(e4.what(), "t.toml:2:1: unknown key 'io.output'") << "a flag-only option has no key";
  Error e5 = file_error("[train.sub]\nx = 1\n");
  EXPECT_EQ(e5.code(), Exit::Config);
  EXPECT_NE(std::string(e5.what()).find("unknown key 'train.sub'"), std::string::npos) << e5.what();
}

TEST(Options, ValuesOfTheWrongTypeAreConfigErrorsAtTheValue) {
  Error e1 = file_error("[train]\nlr = \"fast\"\n");
  EXPECT_EQ(e1.code(), Exit::Config);
  EXPECT_STREQ(e1.what(), "t.toml:2:6: 'train.lr' must be a number");
  Error e2 = file_error("[train]\nsteps = \"many\"\n");
  EXPECT_STREQ(e2.what(), "t.toml:2:9: 'train.steps' must be a number");
  Error e3 = file_error("[io]\npack = 1\n");
  EXPECT_STREQ(e3.what(), "t.toml:2:8: 'io.pack' must be a boolean");
  Error e4 = file_error("[train]\ndevice = 1\n");
  EXPECT_STREQ(e4.what(), "t.toml:2:10: 'train.device' must be a string");
  Error e5 = file_error("[train]\nsizes = [1, 2]\n");
  EXPECT_STREQ(e5.what(), "t.toml:2:9: 'train.sizes' must be a string") << "a custom option reads a string";
}

TEST(Options, ValuesOutOfRangeAreConfigErrorsAtTheValue) {
  EXPECT_STREQ(file_error("[train]\nsteps = -1\n").what(),
               "t.toml:2:9: 'train.steps' must be a whole number, 0 or more");
  EXPECT_STREQ(file_error("[train]\nsteps = 1.5\n").what(),
               "t.toml:2:9: 'train.steps' must be a whole number, 0 or more");
  EXPECT_STREQ(file_error("[train]\nthreads = 65\n").what(),
               "t.toml:2:11: 'train.threads' must be a whole number from 0 to 64");
  EXPECT_STREQ(file_error("[train]\nlr = 2\n").what(), "t.toml:2:6: 'train.lr' must be between 0 and 1");
  EXPECT_STREQ(file_error("[train]\nlr = nan\n").what(), "t.toml:2:6: 'train.lr' must be between 0 and 1");
  EXPECT_STREQ(file_error("[train]\nmode = \"warp\"\n").what(),
               "t.toml:2:8: train.mode is 'warp': expected \"fast\" or \"slow\"");
  // No range: any number, for the tool's own checks to judge.
  EXPECT_TRUE(std::isnan(from_file("[train]\nnoise = nan\n").noise));
  // The custom parser's error, at the value.
  Error e = file_error("[train]\nsizes = \"1,x\"\n");
  EXPECT_EQ(e.code(), Exit::Config);
  EXPECT_STREQ(e.what(), "t.toml:2:9: sizes '1,x': whole numbers, please");
}

TEST(Options, FlagsOverTheFileOverTheDefaults) {
  const std::string file = "[train]\nsteps = 20\nlr = 0.5\n[io]\npack = false\n";
  const Demo d = resolve("--steps 30 --output w.bin", file);
  EXPECT_EQ(d.steps, 30u) << "the flag";
  EXPECT_EQ(d.lr, 0.5) << "the file";
  EXPECT_EQ(d.device, "cpu") << "the default";
  EXPECT_EQ(d.output, "w.bin");
  EXPECT_FALSE(d.pack) << "the file's; no flag turns it back on";
  EXPECT_EQ(resolve("").steps, 10u);
  EXPECT_TRUE(resolve("").pack);
  EXPECT_FALSE(resolve("--no-pack").pack) << "a flag that sets false";
  EXPECT_EQ(resolve("--sizes 5,6 --mode slow --device cuda --lr 1").sizes, (std::vector<int>{5, 6}));
  EXPECT_EQ(resolve("--steps 0", file).steps, 0u) << "a flag given as 0 is given";
}

TEST(Options, GivenSaysWhichFlagsTheCommandLineHad) {
  CLI::App app("demo");
  OptionFlags flags = demo_options().add_to(app);
  app.parse("--steps 3 --no-pack", false);
  EXPECT_TRUE(flags.given("--steps"));
  EXPECT_TRUE(flags.given("--no-pack"));
  EXPECT_FALSE(flags.given("--lr"));
  EXPECT_FALSE(flags.given("--nonsense"));
  EXPECT_FALSE(flags.given(""));
  OptionFlags moved = std::move(flags);  // CLI11's pointers follow the slots
  EXPECT_TRUE(moved.given("--steps"));
}

TEST(Options, FlagsOutOfRangeAreUsageErrors) {
  Error e1 = testing::error_of([] { resolve("--threads 65"); });
  EXPECT_EQ(e1.code(), Exit::Usage);
  EXPECT_STREQ(e1.what(), "--threads must be a whole number from 0 to 64");
  Error e2 = testing::error_of([] { resolve("--steps -1"); });
  EXPECT_EQ(e2.code(), Exit::Usage);
  EXPECT_STREQ(e2.what(), "--steps must be a whole number, 0 or more");
  Error e3 = testing::error_of([] { resolve("--lr 1.5"); });
  EXPECT_STREQ(e3.what(), "--lr must be between 0 and 1");
  Error e4 = testing::error_of([] { resolve("--sizes 1,,2"); });
  EXPECT_EQ(e4.code(), Exit::Usage) << "a custom parser's error stays as it is for a flag";
  EXPECT_STREQ(e4.what(), "sizes '1,,2': whole numbers, please");
  EXPECT_THROW(resolve("--steps 1.5"), CLI::ConversionError);
  EXPECT_THROW(resolve("--mode warp"), CLI::ValidationError);
}

TEST(Options, HelpListsEveryFlagWithItsValueAndSentence) {
  CLI::App app("demo");
  OptionFlags flags = demo_options().add_to(app);
  const std::string help = app.help();
  for (const OptionSpec& s : demo_options().specs()) {
    if (s.flag.empty()) {
      EXPECT_EQ(help.find(s.help), std::string::npos) << s.key << " is only in the file";
      continue;
    }
    EXPECT_NE(help.find(s.flag + (s.type_name.empty() ? "" : " " + s.type_name)), std::string::npos) << s.flag;
    EXPECT_NE(help.find(s.help), std::string::npos) << s.flag;
  }
  EXPECT_NE(help.find("--mode MODE:{fast,slow}"), std::string::npos) << "choices, for the completions\n" << help;
}

TEST(Options, ATableThatCannotWorkIsABug) {
  using T = DemoOptions;
  EXPECT_THROW(T({"train"}, {T::text("", "", &Demo::device, "", "neither")}), std::logic_error);
  EXPECT_THROW(T({"train"}, {T::text("--x", "other.x", &Demo::device, "", "table not named")}), std::logic_error);
  EXPECT_THROW(T({"train"}, {T::text("x", "", &Demo::device, "", "not a flag")}), std::logic_error);
  EXPECT_THROW(T({"train"}, {T::choice("--x", "", &Demo::device, "", "no choices", {})}), std::logic_error);
  EXPECT_THROW(T({"train"}, {T::whole("--x", "", &Demo::steps, "", "empty", {5, 1})}), std::logic_error);
  EXPECT_NO_THROW(T({}, {T::text("", "top", &Demo::device, "", "a key at the top")}));
}

TEST(Options, KeysAtTheTopOfTheFile) {
  using T = DemoOptions;
  const T table({"train"}, {T::text("", "device", &Demo::device, "", "at the top"),
                            T::whole("", "train.steps", &Demo::steps, "N", "in a table")});
  Demo d;
  table.apply_file(config_of("device = \"cuda\"\n[train]\nsteps = 2\n"), d);
  EXPECT_EQ(d.device, "cuda");
  EXPECT_EQ(d.steps, 2u);
  Error e = testing::error_of([&] { table.apply_file(config_of("devise = 1\n"), d); });
  EXPECT_STREQ(e.what(), "t.toml:1:1: unknown key 'devise'");
}

}  // namespace
}  // namespace rkit
