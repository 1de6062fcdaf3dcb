#include "rkit/config.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <limits>
#include <regex>

#include "test_support.hpp"

namespace rkit {
namespace {

using testing::EnvGuard;
using testing::TempDir;

const char* const kSystemConfig = "/etc/rkit/config.toml";

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The environment every config test starts from: none of the variables set, HOME in
// a temporary directory (so that ~/.config of the machine does not leak in).
class ConfigTest : public ::testing::Test {
 protected:
  ConfigTest() : env_({"RKIT_CONFIG", "XDG_CONFIG_HOME", "HOME", "RKIT_STATE_DIR", "XDG_STATE_HOME"}) {
    env_.unset("RKIT_CONFIG");
    env_.unset("XDG_CONFIG_HOME");
    env_.unset("RKIT_STATE_DIR");
    env_.unset("XDG_STATE_HOME");
    env_.set("HOME", dir_.file("home"));
  }

  std::string make_config(const std::string& rel, const std::string& text) {
    std::string path = dir_.file(rel);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    testing::write(path, text);
    return path;
  }

  // What find_config returns when nothing of ours applies.
  static std::optional<std::string> system_fallback() {
    if (::access(kSystemConfig, R_OK) == 0) return std::string(kSystemConfig);
    return std::nullopt;
  }

  TempDir dir_;
  EnvGuard env_;
};

TEST_F(ConfigTest, ExplicitPathWinsOverEverything) {
  std::string env_file = make_config("env.toml", "");
  std::string xdg_file = make_config("xdg/rkit/config.toml", "");
  env_.set("RKIT_CONFIG", env_file);
  env_.set("XDG_CONFIG_HOME", dir_.file("xdg"));
  EXPECT_EQ(find_config("/explicit/c.toml"), "/explicit/c.toml") << "explicit must win even when missing";
}

TEST_F(ConfigTest, RkitConfigWinsOverXdg) {
  std::string env_file = dir_.file("env.toml");  // need not exist: load_config reports it
  make_config("xdg/rkit/config.toml", "");
  env_.set("RKIT_CONFIG", env_file);
  env_.set("XDG_CONFIG_HOME", dir_.file("xdg"));
  EXPECT_EQ(find_config(""), env_file);
}

TEST_F(ConfigTest, EmptyRkitConfigIsIgnored) {
  std::string xdg_file = make_config("xdg/rkit/config.toml", "");
  env_.set("RKIT_CONFIG", "");
  env_.set("XDG_CONFIG_HOME", dir_.file("xdg"));
  EXPECT_EQ(find_config(""), xdg_file);
}

TEST_F(ConfigTest, XdgConfigHomeIsUsedWhenTheFileExists) {
  std::string xdg_file = make_config("xdg/rkit/config.toml", "");
  env_.set("XDG_CONFIG_HOME", dir_.file("xdg"));
  EXPECT_EQ(find_config(""), xdg_file);
}

TEST_F(ConfigTest, MissingXdgFileFallsThroughToEtc) {
  env_.set("XDG_CONFIG_HOME", dir_.file("xdg"));  // no rkit/config.toml there
  EXPECT_EQ(find_config(""), system_fallback());
}

TEST_F(ConfigTest, XdgDefaultsToHomeDotConfig) {
  std::string home_file = make_config("home/.config/rkit/config.toml", "");
  EXPECT_EQ(find_config(""), home_file);
}

TEST_F(ConfigTest, NoConfigAnywhereGivesAnEmptyConfig) {
  EXPECT_EQ(find_config(""), system_fallback());
  if (system_fallback()) GTEST_SKIP() << kSystemConfig << " exists on this machine";
  Config cfg = load_config("");
  EXPECT_TRUE(cfg.path.empty());
  EXPECT_TRUE(cfg.table.empty());
  EXPECT_EQ(cfg.get_string("rtop.policy"), std::nullopt);
}

TEST_F(ConfigTest, MissingExplicitFileIsNoInput) {
  std::string path = dir_.file("nope.toml");
  try {
    load_config(path);
    FAIL() << "missing --config accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_TRUE(contains(e.what(), path)) << e.what();
  }
}

TEST_F(ConfigTest, MissingRkitConfigFileIsNoInput) {
  std::string path = dir_.file("nope.toml");
  env_.set("RKIT_CONFIG", path);
  try {
    load_config("");
    FAIL() << "missing $RKIT_CONFIG accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_TRUE(contains(e.what(), path)) << e.what();
  }
}

TEST_F(ConfigTest, LoadsValuesByDottedPath) {
  std::string path = make_config("c.toml",
                                 "top = \"level\"\n"
                                 "[rtop]\n"
                                 "policy = \"spread\"\n"
                                 "interval_s = 2.5\n"
                                 "ranks = 8\n"
                                 "smt = false\n"
                                 "[rsub.slurm]\n"
                                 "partition = \"gpu\"\n");
  Config cfg = load_config(path);
  EXPECT_EQ(cfg.path, path);
  EXPECT_EQ(cfg.get_string("top"), "level");
  EXPECT_EQ(cfg.get_string("rtop.policy"), "spread");
  EXPECT_EQ(cfg.get_string("rsub.slurm.partition"), "gpu");
  EXPECT_EQ(cfg.get_number("rtop.interval_s"), 2.5);
  EXPECT_EQ(cfg.get_number("rtop.ranks"), 8.0) << "integers are numbers too";
  EXPECT_EQ(cfg.get_bool("rtop.smt"), false);
  EXPECT_EQ(cfg.get_string("rtop.missing"), std::nullopt);
  EXPECT_EQ(cfg.get_number("nothere.at.all"), std::nullopt);
  EXPECT_EQ(cfg.get_bool("rcost.x"), std::nullopt);
}

TEST_F(ConfigTest, LoadsTheFileFromTheEnvironment) {
  std::string path = make_config("xdg/rkit/config.toml", "[rtop]\npolicy = \"pack\"\n");
  env_.set("XDG_CONFIG_HOME", dir_.file("xdg"));
  Config cfg = load_config("");
  EXPECT_EQ(cfg.path, path);
  EXPECT_EQ(cfg.get_string("rtop.policy"), "pack");
}

TEST_F(ConfigTest, TablesAndArraysByDottedPathAndOfTheWrongType) {
  std::string path = make_config("c.toml",
                                 "[rsub]\n"
                                 "admins = [\"alice\"]\n"
                                 "users = \"bob\"\n"
                                 "[rsub.tenants.a]\n"
                                 "shares = 2\n");
  Config cfg = load_config(path);
  ASSERT_NE(cfg.get_table("rsub.tenants"), nullptr);
  EXPECT_TRUE(cfg.get_table("rsub.tenants")->contains("a"));
  ASSERT_NE(cfg.get_array("rsub.admins"), nullptr);
  EXPECT_EQ(cfg.get_array("rsub.admins")->size(), 1u);
  EXPECT_EQ(cfg.get_table("rsub.backends"), nullptr) << "absent";
  EXPECT_EQ(cfg.get_array("rsub.auto.backends"), nullptr) << "absent";
  Error e1 = testing::error_of([&] { cfg.get_table("rsub.users"); });
  EXPECT_EQ(e1.code(), Exit::Config);
  EXPECT_TRUE(contains(e1.what(), path + ":3:")) << e1.what();
  EXPECT_TRUE(contains(e1.what(), "'rsub.users' must be a table")) << e1.what();
  Error e2 = testing::error_of([&] { cfg.get_array("rsub.tenants"); });
  EXPECT_EQ(e2.code(), Exit::Config);
  EXPECT_TRUE(contains(e2.what(), "'rsub.tenants' must be an array")) << e2.what();
}

TEST_F(ConfigTest, WrongTypeIsAConfigErrorNamingFileAndKey) {
  std::string path = make_config("c.toml",
                                 "[rtop]\n"
                                 "policy = 3\n"
                                 "interval_s = \"fast\"\n"
                                 "smt = \"yes\"\n"
                                 "ranks = 1\n"
                                 "enabled = true\n");
  Config cfg = load_config(path);
  Error e1 = testing::error_of([&] { cfg.get_string("rtop.policy"); });
  EXPECT_EQ(e1.code(), Exit::Config);
  EXPECT_TRUE(contains(e1.what(), path + ":2:")) << e1.what();
  EXPECT_TRUE(contains(e1.what(), "rtop.policy")) << e1.what();

  Error e2 = testing::error_of([&] { cfg.get_number("rtop.interval_s"); });
  EXPECT_EQ(e2.code(), Exit::Config);
  EXPECT_TRUE(contains(e2.what(), "rtop.interval_s")) << e2.what();
  EXPECT_TRUE(contains(e2.what(), path + ":3:")) << e2.what();

  Error e3 = testing::error_of([&] { cfg.get_bool("rtop.smt"); });
  EXPECT_EQ(e3.code(), Exit::Config);
  EXPECT_TRUE(contains(e3.what(), "rtop.smt")) << e3.what();

  Error e4 = testing::error_of([&] { cfg.get_bool("rtop.ranks"); });
  EXPECT_EQ(e4.code(), Exit::Config) << "an integer is not a boolean";
  EXPECT_TRUE(contains(e4.what(), "rtop.ranks")) << e4.what();

  Error e5 = testing::error_of([&] { cfg.get_number("rtop.smt"); });
  EXPECT_EQ(e5.code(), Exit::Config) << "a string is not a number";
  EXPECT_TRUE(contains(e5.what(), "rtop.smt")) << e5.what();

  Error e7 = testing::error_of([&] { cfg.get_number("rtop.enabled"); });
  EXPECT_EQ(e7.code(), Exit::Config) << "a boolean is not a number";
  EXPECT_TRUE(contains(e7.what(), path + ":6:")) << e7.what();

  Error e6 = testing::error_of([&] { cfg.get_string("rtop"); });
  EXPECT_EQ(e6.code(), Exit::Config) << "a table is not a string";
}

TEST_F(ConfigTest, WholeNumbersInARange) {
  std::string path = make_config("c.toml",
                                 "[local]\n"
                                 "cpus = 8\n"
                                 "gpus = 2.0\n"
                                 "half = 1.5\n"
                                 "many = 2000\n"
                                 "minus = -1\n"
                                 "word = \"x\"\n"
                                 "huge = 1e300\n");
  Config cfg = load_config(path);
  EXPECT_EQ(cfg.get_whole("local.cpus", 1, 64), 8);
  EXPECT_EQ(cfg.get_whole("local.gpus", 0, 64), 2) << "a float without a fraction";
  EXPECT_EQ(cfg.get_whole("local.absent", 0, 64), std::nullopt);
  EXPECT_EQ(cfg.get_whole("local.many", 0), 2000) << "no upper bound";
  Error e1 = testing::error_of([&] { cfg.get_whole("local.half", 0, 64); });
  EXPECT_EQ(e1.code(), Exit::Config);
  EXPECT_EQ(std::string(e1.what()), path + ":4:8: 'local.half' must be a whole number from 0 to 64");
  Error e2 = testing::error_of([&] { cfg.get_whole("local.many", 1, 1024); });
  EXPECT_EQ(std::string(e2.what()), path + ":5:8: 'local.many' must be a whole number from 1 to 1024");
  Error e3 = testing::error_of([&] { cfg.get_whole("local.minus", 0); });
  EXPECT_EQ(std::string(e3.what()), path + ":6:9: 'local.minus' must be a whole number, 0 or more");
  Error e4 = testing::error_of([&] { cfg.get_whole("local.word", 0); });
  EXPECT_EQ(std::string(e4.what()), path + ":7:8: 'local.word' must be a number") << "the type first";
  Error e5 = testing::error_of([&] { cfg.get_whole("local.huge", 0); });
  EXPECT_EQ(e5.code(), Exit::Config) << "beyond what a double holds exactly";
}

TEST_F(ConfigTest, NumbersInARange) {
  std::string path = make_config("c.toml", "[p]\nw = 0.5\nbig = 2e6\nneg = -1\nbad = nan\n");
  Config cfg = load_config(path);
  EXPECT_EQ(cfg.get_number("p.w", 0, 1), 0.5);
  EXPECT_EQ(cfg.get_number("p.absent", 0, 1), std::nullopt);
  Error e1 = testing::error_of([&] { cfg.get_number("p.big", 0, 1e6); });
  EXPECT_EQ(e1.code(), Exit::Config);
  EXPECT_EQ(std::string(e1.what()), path + ":3:7: 'p.big' must be between 0 and 1000000");
  Error e2 = testing::error_of([&] { cfg.get_number("p.neg", 0, std::numeric_limits<double>::infinity()); });
  EXPECT_EQ(std::string(e2.what()), path + ":4:7: 'p.neg' must be 0 or more");
  Error e3 = testing::error_of([&] { cfg.get_number("p.bad", 0, 1); });
  EXPECT_EQ(e3.code(), Exit::Config) << "NaN is in no range";
  EXPECT_EQ(whole_requirement(1, 64), "a whole number from 1 to 64");
  EXPECT_EQ(number_requirement(-std::numeric_limits<double>::infinity(), 2), "at most 2");
}

TEST_F(ConfigTest, ChoicesAndListsOfStrings) {
  std::string path = make_config("c.toml",
                                 "[rtop]\n"
                                 "policy = \"spread\"\n"
                                 "other = \"sideways\"\n"
                                 "number = 3\n"
                                 "[rsub]\n"
                                 "admins = [\"alice\", \"bob\"]\n"
                                 "mixed = [\"alice\", 3]\n"
                                 "one = \"alice\"\n");
  Config cfg = load_config(path);
  EXPECT_EQ(cfg.get_choice("rtop.policy", {"pack", "spread"}), "spread");
  EXPECT_EQ(cfg.get_choice("rtop.absent", {"pack", "spread"}), std::nullopt);
  Error e1 = testing::error_of([&] { cfg.get_choice("rtop.other", {"pack", "spread"}); });
  EXPECT_EQ(e1.code(), Exit::Config);
  EXPECT_EQ(std::string(e1.what()), path + ":3:9: rtop.other is 'sideways': expected \"pack\" or \"spread\"");
  Error e2 = testing::error_of([&] { cfg.get_choice("rtop.other", {"a", "b", "c"}); });
  EXPECT_TRUE(contains(e2.what(), "expected \"a\", \"b\" or \"c\"")) << e2.what();
  Error e3 = testing::error_of([&] { cfg.get_choice("rtop.number", {"a"}); });
  EXPECT_TRUE(contains(e3.what(), "'rtop.number' must be a string")) << e3.what();

  EXPECT_EQ(cfg.get_strings("rsub.admins"), (std::vector<std::string>{"alice", "bob"}));
  EXPECT_EQ(cfg.get_strings("rsub.absent"), std::nullopt);
  Error e4 = testing::error_of([&] { cfg.get_strings("rsub.mixed"); });
  EXPECT_EQ(e4.code(), Exit::Config);
  EXPECT_EQ(std::string(e4.what()), path + ":7:9: 'rsub.mixed' must be an array of strings");
  Error e5 = testing::error_of([&] { cfg.get_strings("rsub.one"); });
  EXPECT_TRUE(contains(e5.what(), "'rsub.one' must be an array")) << e5.what();
}

TEST(TomlReader, TypedValuesOfInputWithDataErrorsNamingSourceAndLine) {
  const toml::table t =
      parse_toml("a = \"x\"\nb = 3\nc = true\nd = 1.5\ne = inf\nf = [1]\nh = 300\n[g]\n", "in.toml", Exit::DataErr);
  const TomlReader in("in.toml");
  EXPECT_EQ(in.string(*t.get("a"), "a"), "x");
  EXPECT_EQ(in.integer(*t.get("b"), "b"), 3);
  EXPECT_EQ(in.integer<std::int64_t>(*t.get("b"), "b"), 3);
  EXPECT_TRUE(in.boolean(*t.get("c"), "c"));
  EXPECT_EQ(in.number(*t.get("d"), "d"), 1.5);
  EXPECT_EQ(in.number(*t.get("b"), "b"), 3.0) << "an integer is a number";
  EXPECT_EQ(in.array(*t.get("f"), "f").size(), 1u);
  EXPECT_TRUE(in.table(*t.get("g"), "g").empty());
  auto message = [](const std::function<void()>& f) {
    Error e = testing::error_of(f);
    EXPECT_EQ(e.code(), Exit::DataErr);
    return std::string(e.what());
  };
  EXPECT_EQ(message([&] { in.string(*t.get("b"), "b"); }), "in.toml:2: b must be a string");
  EXPECT_EQ(message([&] { in.integer(*t.get("d"), "d"); }), "in.toml:4: d must be an integer");
  EXPECT_EQ(message([&] { in.integer<std::uint8_t>(*t.get("h"), "h"); }), "in.toml:7: h is out of range");
  EXPECT_EQ(message([&] { in.boolean(*t.get("b"), "b"); }), "in.toml:2: b must be a boolean");
  EXPECT_EQ(message([&] { in.number(*t.get("e"), "e"); }), "in.toml:5: e must be a number") << "not inf";
  EXPECT_EQ(message([&] { in.number(*t.get("a"), "a"); }), "in.toml:1: a must be a number");
  EXPECT_EQ(message([&] { in.table(*t.get("f"), "f"); }), "in.toml:6: f must be a table");
  EXPECT_EQ(message([&] { in.array(*t.get("a"), "a"); }), "in.toml:1: a must be an array");
  const TomlReader cfg("c.toml", Exit::Config);
  EXPECT_EQ(testing::error_of([&] { cfg.fail(*t.get("a"), "a", "is wrong"); }).code(), Exit::Config);
}

TEST_F(ConfigTest, ParseErrorNamesFileLineAndColumn) {
  std::string path = make_config("bad.toml", "ok = 1\n[rtop]\npolicy = = \"x\"\n");
  Error e = testing::error_of([&] { load_config(path); });
  EXPECT_EQ(e.code(), Exit::Config);
  EXPECT_EQ(static_cast<int>(e.code()), 78);
  EXPECT_TRUE(std::regex_search(std::string(e.what()), std::regex("^" + path + R"(:3:[0-9]+: \S)"))) << e.what();
}

TEST(ParseToml, ErrorsUseTheRequestedExitCode) {
  try {
    parse_toml("a = 1\nb = [1, 2\n", "spec.toml", Exit::DataErr);
    FAIL() << "bad TOML accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_TRUE(std::regex_search(std::string(e.what()), std::regex(R"(^spec\.toml:[23]:[0-9]+: \S)"))) << e.what();
  }
  try {
    parse_toml("x = \n", "<stdin>", Exit::Config);
    FAIL() << "bad TOML accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Config);
    EXPECT_EQ(std::string(e.what()).rfind("<stdin>:1:", 0), 0u) << e.what();
  }
}

TEST(ParseToml, ParsesValidText) {
  toml::table t = parse_toml("[job]\nname = \"train\"\ngpus = 2\n", "spec.toml", Exit::DataErr);
  EXPECT_EQ(t.at_path("job.name").value<std::string>(), "train");
  EXPECT_EQ(t.at_path("job.gpus").value<int64_t>(), 2);
}

TEST_F(ConfigTest, StateDirPrefersRkitStateDir) {
  env_.set("RKIT_STATE_DIR", "/srv/rkit-state");
  env_.set("XDG_STATE_HOME", "/xdg/state");
  EXPECT_EQ(state_dir(), "/srv/rkit-state");
}

TEST_F(ConfigTest, StateDirUsesXdgStateHome) {
  env_.set("XDG_STATE_HOME", "/xdg/state");
  EXPECT_EQ(state_dir(), "/xdg/state/rkit");
  env_.set("RKIT_STATE_DIR", "");  // empty means unset
  EXPECT_EQ(state_dir(), "/xdg/state/rkit");
}

TEST_F(ConfigTest, StateDirDefaultsUnderHome) {
  EXPECT_EQ(state_dir(), dir_.file("home") + "/.local/state/rkit");
  struct stat st {};
  EXPECT_NE(::stat(state_dir().c_str(), &st), 0) << "state_dir() must not create the directory";
}

}  // namespace
}  // namespace rkit
