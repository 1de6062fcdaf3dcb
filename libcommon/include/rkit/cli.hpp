// File: rkit/cli.hpp
//
// The command line every rkit tool shares, on CLI11. A tool's main builds a Tool,
// declares its own options and subcommands on tool.app(), and hands its body to
// tool.run(), which parses, maps every error to one stderr line and a sysexits code,
// and returns the code for main to return.
//
//   int main(int argc, char** argv) {
//     rkit::Tool tool("rtop", "Probe the machine's topology");
//     std::string input;
//     tool.app().add_option("--input", input, "hwloc XML file")->type_name("FILE");
//     auto* place = tool.add_subcommand("place", "Place ranks on cores and GPUs");
//     return tool.run(argc, argv, [&] { ...; return 0; });
//   }
//
// Common flags on every tool: -h/--help, --version (tool, version, git revision),
// --json, --csv, -v/--verbose, -q/--quiet, --config FILE. They also work after a
// subcommand. A hidden --print-completion bash|zsh|fish prints the shell completion
// script generated from the same option table (see completion.hpp).
// Usage errors exit 64; rkit::Error exits with its code; anything else 70. The
// configuration is loaded before the body runs, so a bad file is always reported
// (78), and output that could not be written (closed pipe, full disk) exits 74: run()
// ignores SIGPIPE, so that a closed pipe is an error like the others.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "rkit/config.hpp"
#include "rkit/printer.hpp"

namespace rkit {

struct CommonOptions {
  bool json = false;
  bool csv = false;
  bool verbose = false;
  bool quiet = false;
  std::string config;
  Format format() const { return json ? Format::Json : csv ? Format::Csv : Format::Table; }
};

class Tool {
 public:
  Tool(std::string name, std::string description);
  CLI::App& app() { return app_; }
  const std::string& name() const { return name_; }
  const CommonOptions& options() const { return opts_; }

  // A subcommand that accepts the common flags too (CLI11 fallthrough).
  CLI::App* add_subcommand(const std::string& name, const std::string& description);

  // Parses argv, then calls `body` (which returns the exit code). Returns the exit
  // code: 0 after --help/--version, 64 on usage errors, the Error's code when the
  // body throws rkit::Error, 70 for other exceptions, 74 when stdout lost output.
  int run(int argc, char** argv, const std::function<int()>& body);

  // The configuration (search order in config.hpp), loaded on first use.
  const Config& config();

  // "rtop 0.1.0 (git 0123abcd)".
  std::string version_line() const;

 private:
  int finish_output(int code);
  std::string name_;
  CLI::App app_;
  CommonOptions opts_;
  std::string completion_shell_;
  std::optional<Config> config_;
};

// Prints a usage error (exit 64) the way parse errors are printed. For checks CLI11
// cannot express (e.g. "--count must be at least 1").
[[noreturn]] void usage_error(const std::string& message);

// Flushes std::cout and throws Error(IoErr) "write stdout: ..." if anything written
// to it was lost (a closed pipe, a full disk). Tool::run calls it after the body;
// streaming loops call it after each record so that they stop at once.
void check_stdout();

}  // namespace rkit
