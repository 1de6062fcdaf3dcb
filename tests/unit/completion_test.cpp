#include "rkit/completion.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "rkit/error.hpp"
#include "rkit/process.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

using testing::TempDir;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A small tool: a FILE option, a hidden option, and a subcommand with a choice
// option, a plain value option, a flag and positional file arguments.
class CompletionTest : public ::testing::Test {
 protected:
  CompletionTest() : app_("Probe the machine", "rt") {
    app_.add_option("--input", input_, "hwloc XML file")->type_name("FILE");
    app_.add_option("--secret", secret_, "Not for users")->group("");
    app_.add_flag("--json", json_, "Print JSON Lines");
    place_ = app_.add_subcommand("place", "Place ranks on cores");
    place_->add_option("-p,--policy", policy_, "Rank's placement policy")->check(CLI::IsMember({"pack", "spread"}));
    place_->add_option("--count", count_, "How many ranks");
    place_->add_flag("--dry-run", dry_run_, "Only print the plan");
    place_->add_option("specs", specs_, "Job spec files");
    app_.add_subcommand("matrix", "Print the GPU link matrix");
    app_.add_subcommand("_internal", "Not for users")->group("");
  }

  CLI::App app_;
  CLI::App* place_;
  std::string input_, secret_, policy_;
  int count_ = 0;
  bool json_ = false, dry_run_ = false;
  std::vector<std::string> specs_;
};

std::string single_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  std::sort(out.begin(), out.end());
  return out;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
  return false;
}

// Sources the bash script, completes `words` (the last one being completed) in
// directory `cwd`, and returns COMPREPLY sorted.
std::vector<std::string> bash_complete(const std::string& script_path, const std::vector<std::string>& words,
                                       const std::string& cwd) {
  std::string cmd = "source " + single_quote(script_path) + "\nCOMP_WORDS=(";
  for (const auto& w : words) cmd += single_quote(w) + " ";
  cmd += ")\nCOMP_CWORD=" + std::to_string(words.size() - 1) +
         "\n_rt_complete\n[ ${#COMPREPLY[@]} -gt 0 ] && printf '%s\\n' \"${COMPREPLY[@]}\"\nexit 0\n";
  SpawnOptions o;
  o.argv = {"bash", "--norc", "--noprofile", "-c", cmd};
  o.out = Redirect::pipe();
  o.err = Redirect::pipe();
  o.cwd = cwd;
  RunResult r = run(o, 10.0);
  EXPECT_TRUE(r.status.success()) << r.status.describe() << ": " << r.err;
  EXPECT_EQ(r.err, "");
  return lines_of(r.out);
}

using Words = std::vector<std::string>;

TEST_F(CompletionTest, BashScriptNamesSubcommandsOptionsAndChoices) {
  std::string s = completion_script(app_, "bash");
  EXPECT_TRUE(contains(s, "complete -F _rt_complete rt")) << s;
  EXPECT_TRUE(contains(s, "place")) << s;
  EXPECT_TRUE(contains(s, "matrix")) << s;
  EXPECT_TRUE(contains(s, "--input")) << s;
  EXPECT_TRUE(contains(s, "--policy|-p)")) << s;
  EXPECT_TRUE(contains(s, "'pack spread'")) << s;
  EXPECT_TRUE(contains(s, "--dry-run")) << s;
  EXPECT_FALSE(contains(s, "--secret")) << "hidden option completed";
  EXPECT_FALSE(contains(s, "_internal")) << "hidden subcommand completed";
}

TEST_F(CompletionTest, BashScriptIsValidBash) {
  TempDir dir;
  std::string path = dir.file("rt.bash");
  testing::write(path, completion_script(app_, "bash"));
  SpawnOptions o;
  o.argv = {"bash", "-n", path};
  o.err = Redirect::pipe();
  RunResult r = run(o, 10.0);
  EXPECT_TRUE(r.status.success()) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST_F(CompletionTest, BashCompletesWhatTheAppAccepts) {
  TempDir dir;
  std::string path = dir.file("rt.bash");
  testing::write(path, completion_script(app_, "bash"));
  std::string cwd = dir.file("work");
  std::filesystem::create_directory(cwd);
  testing::write(cwd + "/topo.xml", "");
  testing::write(cwd + "/job.toml", "");

  EXPECT_EQ(bash_complete(path, {"rt", ""}, cwd), (Words{"matrix", "place"}));
  EXPECT_EQ(bash_complete(path, {"rt", "pl"}, cwd), (Words{"place"}));
  EXPECT_EQ(bash_complete(path, {"rt", "place", "--policy", ""}, cwd), (Words{"pack", "spread"}));
  EXPECT_EQ(bash_complete(path, {"rt", "place", "-p", "sp"}, cwd), (Words{"spread"}));
  EXPECT_EQ(bash_complete(path, {"rt", "--input", ""}, cwd), (Words{"job.toml", "topo.xml"}));
  EXPECT_EQ(bash_complete(path, {"rt", "--input", "to"}, cwd), (Words{"topo.xml"}));
  EXPECT_EQ(bash_complete(path, {"rt", "place", "--count", ""}, cwd), Words{}) << "a number has no completion";
  EXPECT_EQ(bash_complete(path, {"rt", "place", ""}, cwd), (Words{"job.toml", "topo.xml"})) << "positional files";

  Words sub_opts = bash_complete(path, {"rt", "place", "--"}, cwd);
  for (const char* o : {"--policy", "--count", "--dry-run", "--input", "--json"})
    EXPECT_NE(std::find(sub_opts.begin(), sub_opts.end(), o), sub_opts.end()) << o << " not offered after 'place'";
  EXPECT_EQ(std::find(sub_opts.begin(), sub_opts.end(), "--secret"), sub_opts.end());

  Words top_opts = bash_complete(path, {"rt", "--"}, cwd);
  EXPECT_NE(std::find(top_opts.begin(), top_opts.end(), "--input"), top_opts.end());
  EXPECT_EQ(std::find(top_opts.begin(), top_opts.end(), "--policy"), top_opts.end())
      << "subcommand option at top level";
}

TEST_F(CompletionTest, ZshScriptNamesSubcommandsOptionsAndChoices) {
  std::string s = completion_script(app_, "zsh");
  EXPECT_EQ(s.rfind("#compdef rt\n", 0), 0u) << s;
  EXPECT_TRUE(contains(s, "'place:Place ranks on cores'")) << s;
  EXPECT_TRUE(contains(s, "'matrix:Print the GPU link matrix'")) << s;
  EXPECT_TRUE(contains(s, "(--policy|-p)")) << s;
  EXPECT_TRUE(contains(s, "compadd -- pack spread")) << s;
  EXPECT_TRUE(contains(s, "(--input)\n      _files")) << s;
  EXPECT_TRUE(contains(s, "'--policy:Rank'\\''s placement policy'")) << "quote not escaped:\n" << s;
  EXPECT_FALSE(contains(s, "--secret"));
}

TEST(Completion, OutputFileOptionsCompleteFileNames) {
  CLI::App app("Draw", "rd");
  std::string out;
  app.add_option("--html", out, "Write the page to OUT")->type_name("OUT");
  EXPECT_TRUE(contains(completion_script(app, "fish"), "complete -c rd -l html -r -F -d"))
      << completion_script(app, "fish");
  EXPECT_TRUE(contains(completion_script(app, "zsh"), "(--html)\n      _files"));
  EXPECT_TRUE(
      contains(completion_script(app, "bash"), "--html)\n      COMPREPLY=($(compgen -f -- \"$cur\")); return ;;"));
}

TEST_F(CompletionTest, ZshScriptIsValidZsh) {
  if (!on_path("zsh")) GTEST_SKIP() << "zsh is not installed: syntax not checked";
  TempDir dir;
  std::string path = dir.file("_rt");
  testing::write(path, completion_script(app_, "zsh"));
  SpawnOptions o;
  o.argv = {"zsh", "-n", path};
  o.err = Redirect::pipe();
  RunResult r = run(o, 10.0);
  EXPECT_TRUE(r.status.success()) << r.err;
}

TEST_F(CompletionTest, FishScriptNamesSubcommandsOptionsAndChoices) {
  std::string s = completion_script(app_, "fish");
  EXPECT_TRUE(contains(s, "complete -c rt -f\n")) << s;
  EXPECT_TRUE(contains(s, "complete -c rt -n '__fish_use_subcommand' -a place -d 'Place ranks on cores'")) << s;
  EXPECT_TRUE(contains(s, "-a matrix")) << s;
  EXPECT_TRUE(contains(s, "complete -c rt -l input -r -F -d 'hwloc XML file'")) << s;
  EXPECT_TRUE(contains(s, "complete -c rt -n '__fish_seen_subcommand_from place' -l policy -s p -x -a 'pack spread'"))
      << s;
  EXPECT_TRUE(contains(s, "-d 'Rank\\'s placement policy'")) << s;
  EXPECT_TRUE(contains(s, "-l dry-run -d 'Only print the plan'")) << s;
  EXPECT_FALSE(contains(s, "secret"));
  // Inherited options are declared once, at the top level.
  std::size_t input_lines = 0;
  for (const auto& line : lines_of(s)) input_lines += contains(line, "-l input ");
  EXPECT_EQ(input_lines, 1u) << s;
}

TEST_F(CompletionTest, FishScriptIsValidFish) {
  if (!on_path("fish")) GTEST_SKIP() << "fish is not installed: syntax not checked";
  TempDir dir;
  std::string path = dir.file("rt.fish");
  testing::write(path, completion_script(app_, "fish"));
  SpawnOptions o;
  o.argv = {"fish", "--no-execute", path};
  o.err = Redirect::pipe();
  RunResult r = run(o, 10.0);
  EXPECT_TRUE(r.status.success()) << r.err;
}

TEST_F(CompletionTest, UnknownShellIsAUsageError) {
  for (const char* shell : {"tcsh", "", "BASH"}) {
    try {
      completion_script(app_, shell);
      ADD_FAILURE() << "accepted shell '" << shell << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::Usage);
      EXPECT_TRUE(contains(e.what(), std::string("'") + shell + "'")) << e.what();
    }
  }
}

TEST(Completion, ScriptsFollowTheOptionTable) {
  // Adding an option changes the script: completions cannot drift from --help.
  CLI::App app("Tool", "rz");
  std::string before = completion_script(app, "bash");
  std::string v;
  app.add_option("--brand-new", v, "New");
  std::string after = completion_script(app, "bash");
  EXPECT_FALSE(contains(before, "--brand-new"));
  EXPECT_TRUE(contains(after, "--brand-new"));
}

}  // namespace
}  // namespace rkit
