// File: rkit/error.hpp
//
// The one error type of rkit libraries, and the mapping from an error to the
// one-line stderr message and the sysexits(3) exit code that every tool uses.
//
//   throw rkit::Error(rkit::Exit::DataErr, "topo.json: line 3: expected an object");
//   ...
//   catch (const std::exception& e) { return rkit::report_error("rtop", e, std::cerr); }
//
// Library code throws; only a tool's main prints and exits.
#pragma once

#include <iosfwd>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rkit {

// Exit codes (sysexits). A stable, documented contract: man/rkit.7 lists them.
enum class Exit : int {
  Ok = 0,
  Failure = 1,       // the work ran and its verdict is negative
  Usage = 64,        // bad command line
  DataErr = 65,      // bad input data (including an unknown schema major version)
  NoInput = 66,      // an input file is missing or unreadable
  Unavailable = 69,  // a service or device is unavailable
  Software = 70,     // internal error
  IoErr = 74,        // I/O error
  TempFail = 75,     // temporary failure, retry
  NoPerm = 77,       // permission denied
  Config = 78,       // bad configuration file
};

// The name of an exit code as man/rkit.7 spells it ("usage", "data error", ...).
std::string_view exit_name(Exit code);

// An error a user can act on. `what()` is the message ("what: why"); `hint()` is
// optional advice printed after the message; `detail()` is extra context shown with -v.
class Error : public std::runtime_error {
 public:
  Error(Exit code, std::string message, std::string hint = {}, std::string detail = {});
  Exit code() const noexcept { return code_; }
  const std::string& hint() const noexcept { return hint_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  Exit code_;
  std::string hint_;
  std::string detail_;
};

// Builds an Error for a failed system call from errno: ENOENT → NoInput,
// EACCES/EPERM → NoPerm, anything else → IoErr. `what` names the object ("open
// /tmp/x"); the message is "what: strerror(errnum)".
Error system_error(std::string_view what, int errnum);

// Writes one line, "tool: error: message (hint: ...)", to `err` (plus a second line
// "tool: detail: ..." only when verbose) and returns the exit code to use.
// A std::exception that is not an rkit::Error is an internal error (70). Newlines in
// messages are flattened so that the error is one line.
int report_error(std::string_view tool, const std::exception& e, std::ostream& err, bool verbose = false);

// Writes one line, "tool: warning: message", to `err` and flushes it: what went wrong
// without ending the command (a bad record skipped, a backend that did not answer).
void warn(std::string_view tool, std::string_view message, std::ostream& err);

}  // namespace rkit
