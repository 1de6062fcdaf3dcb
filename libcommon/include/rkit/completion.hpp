// File: rkit/completion.hpp
//
// Shell completion scripts generated from a tool's CLI11 option table, so that the
// completions cannot drift from --help. `make completions` writes them to
// completions/{bash,zsh,fish}/ and a test fails when the committed files differ.
//
//   std::cout << rkit::completion_script(tool.app(), "bash");
//
// What is completed: subcommands, long and short options (a subcommand's own plus
// its parents'), the choices of options with a {a,b} validator, file names for
// options whose value is a file or directory: a type_name containing FILE, PATH or
// DIR, or one that is OUT (a file to write).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>

namespace rkit {

// Throws Error(Usage) for a shell other than bash, zsh or fish.
std::string completion_script(const CLI::App& app, std::string_view shell);

}  // namespace rkit
