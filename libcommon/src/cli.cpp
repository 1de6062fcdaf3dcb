#include "rkit/cli.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <iostream>

#include "rkit/completion.hpp"
#include "rkit/error.hpp"
#include "rkit/version.hpp"

namespace rkit {

Tool::Tool(std::string name, std::string description) : name_(std::move(name)), app_(std::move(description), name_) {
  app_.set_version_flag("--version", version_line(), "Print the tool, version and git revision");
  app_.add_flag("--json", opts_.json, "Print JSON Lines (one record per line) instead of a table");
  app_.add_flag("--csv", opts_.csv, "Print CSV instead of a table")->excludes("--json");
  app_.add_flag("-v,--verbose", opts_.verbose, "Explain more (errors gain a detail line)");
  app_.add_flag("-q,--quiet", opts_.quiet, "Print nothing but results and errors");
  app_.add_option("--config", opts_.config, "Configuration file (TOML); see rkit(7)")->type_name("FILE");
  app_.add_option("--print-completion", completion_shell_, "Print a shell completion script")
      ->group("");  // hidden: used by `make completions`
  app_.fallthrough();
}

CLI::App* Tool::add_subcommand(const std::string& name, const std::string& description) {
  CLI::App* sub = app_.add_subcommand(name, description);
  sub->fallthrough();
  return sub;
}

std::string Tool::version_line() const { return fmt::format("{} {} (git {})", name_, kVersion, kGitRevision); }

const Config& Tool::config() {
  if (!config_) config_ = load_config(opts_.config);
  return *config_;
}

void usage_error(const std::string& message) { throw Error(Exit::Usage, message); }

void check_stdout() {
  errno = 0;
  try {
    std::cout.flush();
  } catch (const std::ios_base::failure&) {  // when the stream throws on errors
  }
  if (std::cout) return;
  int err = errno ? errno : EIO;
  std::cout.clear();
  throw system_error("write stdout", err);  // EPIPE, ENOSPC (a full disk), EIO → 74
}

int Tool::finish_output(int code) {
  try {
    check_stdout();
  } catch (const Error& e) {
    return report_error(name_, e, std::cerr);
  }
  return code;
}

int Tool::run(int argc, char** argv, const std::function<int()>& body) {
  // A reader that goes away (rtop --json | head -1) makes a write fail with EPIPE, which
  // is reported and exits 74, as any lost output does, in every tool alike: no tool dies
  // of SIGPIPE. Children get the default back (rkit::spawn, the rsub supervisor).
  std::signal(SIGPIPE, SIG_IGN);
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return finish_output(app_.exit(e, std::cout, std::cerr));
  } catch (const CLI::CallForAllHelp& e) {
    return finish_output(app_.exit(e, std::cout, std::cerr));
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << '\n';
    return finish_output(0);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::cerr << fmt::format("{}: error: {} (hint: see '{} --help')\n", name_, msg, name_);
    return static_cast<int>(Exit::Usage);
  }
  try {
    if (!completion_shell_.empty()) {
      std::cout << completion_script(app_, completion_shell_);
      return finish_output(0);
    }
    if (opts_.json && opts_.csv) usage_error("--json and --csv exclude each other");
    if (app_.count("--config") && opts_.config.empty()) usage_error("--config needs a file name");
    config();  // a broken or missing configuration file is reported whatever the command
    // A failed write to stdout throws at once, while errno still says why.
    std::cout.exceptions(std::ios::badbit);
    int code = 0;
    try {
      code = body();
      check_stdout();
    } catch (const std::ios_base::failure&) {
      int err = errno ? errno : EIO;
      std::cout.exceptions(std::ios::goodbit);
      std::cout.clear();
      throw system_error("write stdout", err);
    }
    return code;
  } catch (const std::exception& e) {
    return report_error(name_, e, std::cerr, opts_.verbose);
  }
}

}  // namespace rkit
