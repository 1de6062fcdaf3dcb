#include "rkit/cli.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "rkit/error.hpp"
#include "rkit/version.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

// Swaps std::cout and std::cerr to string buffers for the lifetime of the object.
class CaptureStdio {
 public:
  CaptureStdio() : old_out_(std::cout.rdbuf(out_.rdbuf())), old_err_(std::cerr.rdbuf(err_.rdbuf())) {}
  ~CaptureStdio() {
    std::cout.rdbuf(old_out_);
    std::cerr.rdbuf(old_err_);
  }
  std::string out() const { return out_.str(); }
  std::string err() const { return err_.str(); }

 private:
  std::ostringstream out_, err_;
  std::streambuf* old_out_;
  std::streambuf* old_err_;
};

struct Outcome {
  int code = -1;
  std::string out, err;
  bool body_ran = false;
};

// Runs `tool` on {name, args...} with stdout/stderr captured.
Outcome run_tool(
    Tool& tool, std::vector<std::string> args, const std::function<int()>& body = [] { return 0; }) {
  args.insert(args.begin(), tool.name());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Outcome o;
  CaptureStdio cap;
  o.code = tool.run(static_cast<int>(args.size()), argv.data(), [&] {
    o.body_ran = true;
    return body();
  });
  o.out = cap.out();
  o.err = cap.err();
  return o;
}

std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(Tool, HelpGoesToStdoutAndExitsZero) {
  Tool tool("rtest", "Test the shared command line");
  Outcome o = run_tool(tool, {"--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_FALSE(o.body_ran);
  EXPECT_TRUE(o.err.empty()) << o.err;
  EXPECT_NE(o.out.find("Test the shared command line"), std::string::npos) << o.out;
  for (const char* flag : {"--json", "--csv", "--verbose", "--quiet", "--config", "--version"})
    EXPECT_NE(o.out.find(flag), std::string::npos) << flag << " missing from help:\n" << o.out;
  EXPECT_EQ(o.out.find("--print-completion"), std::string::npos) << "hidden option shown in help";
}

TEST(Tool, ShortHelpFlagWorks) {
  Tool tool("rtest", "Short help");
  Outcome o = run_tool(tool, {"-h"});
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find("Short help"), std::string::npos);
}

TEST(Tool, HelpOfASubcommand) {
  Tool tool("rtest", "Tool");
  int count = 0;
  tool.add_subcommand("place", "Place ranks on cores")->add_option("--count", count, "How many ranks");
  Outcome o = run_tool(tool, {"place", "--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_FALSE(o.body_ran);
  EXPECT_NE(o.out.find("--count"), std::string::npos) << o.out;
}

TEST(Tool, VersionPrintsNameVersionAndRevision) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {"--version"});
  EXPECT_EQ(o.code, 0);
  EXPECT_FALSE(o.body_ran);
  EXPECT_EQ(o.out, std::string("rtest ") + kVersion + " (git " + kGitRevision + ")\n");
  EXPECT_TRUE(std::regex_match(o.out, std::regex(R"(rtest [0-9]+\.[0-9]+\.[0-9]+\S* \(git \S+\)\n)"))) << o.out;
  EXPECT_EQ(tool.version_line() + "\n", o.out);
}

TEST(Tool, UnknownFlagIsAUsageErrorOnOneLine) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {"--bogus"});
  EXPECT_EQ(o.code, 64);
  EXPECT_FALSE(o.body_ran);
  EXPECT_TRUE(o.out.empty()) << o.out;
  EXPECT_EQ(o.err.rfind("rtest: error:", 0), 0u) << o.err;
  EXPECT_EQ(count_lines(o.err), 1u) << o.err;
  EXPECT_NE(o.err.find("--bogus"), std::string::npos) << o.err;
}

TEST(Tool, BadOptionValueIsAUsageError) {
  Tool tool("rtest", "Tool");
  int count = 0;
  tool.app().add_option("--count", count, "How many");
  Outcome o = run_tool(tool, {"--count", "many"});
  EXPECT_EQ(o.code, 64);
  EXPECT_FALSE(o.body_ran);
  EXPECT_EQ(o.err.rfind("rtest: error:", 0), 0u) << o.err;
  EXPECT_EQ(count_lines(o.err), 1u) << o.err;
}

TEST(Tool, BodyReturnValueIsTheExitCode) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {}, [] { return 1; });
  EXPECT_TRUE(o.body_ran);
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(o.err.empty());
}

TEST(Tool, RkitErrorFromTheBodyExitsWithItsCode) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {}, []() -> int { throw Error(Exit::DataErr, "in.json:3: bad record"); });
  EXPECT_EQ(o.code, 65);
  EXPECT_EQ(o.err, "rtest: error: in.json:3: bad record\n");
  EXPECT_TRUE(o.out.empty());
}

TEST(Tool, OtherExceptionsAreInternalErrors) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {}, []() -> int { throw std::runtime_error("boom"); });
  EXPECT_EQ(o.code, 70);
  EXPECT_EQ(o.err, "rtest: error: internal error: boom\n");
}

TEST(Tool, VerboseShowsTheErrorDetail) {
  Tool quiet_tool("rtest", "Tool");
  auto body = []() -> int { throw Error(Exit::IoErr, "write x: failed", "", "errno 5"); };
  Outcome q = run_tool(quiet_tool, {}, body);
  EXPECT_EQ(q.code, 74);
  EXPECT_EQ(count_lines(q.err), 1u) << q.err;

  Tool verbose_tool("rtest", "Tool");
  Outcome v = run_tool(verbose_tool, {"-v"}, body);
  EXPECT_EQ(v.code, 74);
  EXPECT_EQ(v.err, "rtest: error: write x: failed\nrtest: detail: errno 5\n");
}

TEST(Tool, UsageErrorHelperExits64) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {}, []() -> int { usage_error("--count must be at least 1"); });
  EXPECT_EQ(o.code, 64);
  EXPECT_EQ(o.err, "rtest: error: --count must be at least 1\n");
  EXPECT_THROW(usage_error("x"), Error);
}

TEST(Tool, FormatFlags) {
  {
    Tool tool("rtest", "Tool");
    Outcome o = run_tool(tool, {}, [&] { return tool.options().format() == Format::Table ? 0 : 1; });
    EXPECT_EQ(o.code, 0);
  }
  {
    Tool tool("rtest", "Tool");
    Outcome o = run_tool(tool, {"--json"}, [&] { return tool.options().format() == Format::Json ? 0 : 1; });
    EXPECT_EQ(o.code, 0);
    EXPECT_TRUE(tool.options().json);
  }
  {
    Tool tool("rtest", "Tool");
    Outcome o = run_tool(tool, {"--csv"}, [&] { return tool.options().format() == Format::Csv ? 0 : 1; });
    EXPECT_EQ(o.code, 0);
    EXPECT_TRUE(tool.options().csv);
  }
}

TEST(Tool, JsonAndCsvTogetherIsAUsageError) {
  for (auto args : {std::vector<std::string>{"--json", "--csv"}, std::vector<std::string>{"--csv", "--json"}}) {
    Tool tool("rtest", "Tool");
    Outcome o = run_tool(tool, args);
    EXPECT_EQ(o.code, 64) << args[0];
    EXPECT_FALSE(o.body_ran);
    EXPECT_EQ(o.err.rfind("rtest: error:", 0), 0u) << o.err;
    EXPECT_EQ(count_lines(o.err), 1u) << o.err;
  }
}

TEST(Tool, CommonFlagsWorkAfterASubcommand) {
  Tool tool("rtest", "Tool");
  int count = 0;
  CLI::App* place = tool.add_subcommand("place", "Place ranks");
  place->add_option("--count", count, "How many ranks");
  rkit::testing::TempDir dir;
  const std::string config = dir.file("c.toml");
  rkit::testing::write(config, "[rtest]\n");
  Outcome o = run_tool(tool, {"place", "--count", "4", "--json", "-v", "-q", "--config", config},
                       [&] { return place->parsed() ? 0 : 1; });
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(o.body_ran);
  EXPECT_EQ(count, 4);
  EXPECT_TRUE(tool.options().json);
  EXPECT_TRUE(tool.options().verbose);
  EXPECT_TRUE(tool.options().quiet);
  EXPECT_EQ(tool.options().config, config);
}

TEST(Tool, TheConfigurationIsReadBeforeTheBody) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {"--config", "/nonexistent/c.toml"});
  EXPECT_EQ(o.code, 66) << o.err;
  EXPECT_FALSE(o.body_ran);
  EXPECT_EQ(count_lines(o.err), 1u) << o.err;
}

TEST(Tool, UnknownFlagAfterASubcommandIsStillAnError) {
  Tool tool("rtest", "Tool");
  tool.add_subcommand("place", "Place ranks");
  Outcome o = run_tool(tool, {"place", "--nope"});
  EXPECT_EQ(o.code, 64);
  EXPECT_EQ(count_lines(o.err), 1u) << o.err;
}

TEST(Tool, ConfigIsLoadedFromTheConfigFlag) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {"--config", "/nonexistent/rkit-test/config.toml"}, [&] {
    tool.config();
    return 0;
  });
  EXPECT_EQ(o.code, 66);
  EXPECT_NE(o.err.find("/nonexistent/rkit-test/config.toml"), std::string::npos) << o.err;
}

TEST(Tool, PrintCompletionPrintsAScript) {
  Tool tool("rtest", "Tool");
  tool.add_subcommand("place", "Place ranks");
  Outcome o = run_tool(tool, {"--print-completion", "bash"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_FALSE(o.body_ran);
  EXPECT_NE(o.out.find("complete -F _rtest_complete rtest"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("place"), std::string::npos);
  EXPECT_NE(o.out.find("--json"), std::string::npos);
}

TEST(Tool, PrintCompletionRejectsAnUnknownShell) {
  Tool tool("rtest", "Tool");
  Outcome o = run_tool(tool, {"--print-completion", "tcsh"});
  EXPECT_EQ(o.code, 64);
  EXPECT_FALSE(o.body_ran);
  EXPECT_TRUE(o.out.empty()) << o.out;
  EXPECT_EQ(o.err.rfind("rtest: error:", 0), 0u) << o.err;
  EXPECT_NE(o.err.find("tcsh"), std::string::npos) << o.err;
  EXPECT_EQ(count_lines(o.err), 1u) << o.err;
}

}  // namespace
}  // namespace rkit
