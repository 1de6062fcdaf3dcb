#include "rkit/error.hpp"

#include <cerrno>
#include <cstring>
#include <ostream>

namespace rkit {

std::string_view exit_name(Exit code) {
  switch (code) {
    case Exit::Ok: return "ok";
    case Exit::Failure: return "failure";
    case Exit::Usage: return "usage";
    case Exit::DataErr: return "data error";
    case Exit::NoInput: return "no input";
    case Exit::Unavailable: return "unavailable";
    case Exit::Software: return "internal error";
    case Exit::IoErr: return "I/O error";
    case Exit::TempFail: return "temporary failure";
    case Exit::NoPerm: return "permission denied";
    case Exit::Config: return "configuration error";
  }
  return "unknown";
}

Error::Error(Exit code, std::string message, std::string hint, std::string detail)
    : std::runtime_error(std::move(message)), code_(code), hint_(std::move(hint)), detail_(std::move(detail)) {}

Error system_error(std::string_view what, int errnum) {
  Exit code = Exit::IoErr;
  if (errnum == ENOENT || errnum == ENOTDIR) code = Exit::NoInput;
  if (errnum == EACCES || errnum == EPERM || errnum == EROFS) code = Exit::NoPerm;
  return Error(code, std::string(what) + ": " + std::strerror(errnum));
}

namespace {
std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) out.push_back(c == '\n' || c == '\r' ? ' ' : c);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}
}  // namespace

int report_error(std::string_view tool, const std::exception& e, std::ostream& err, bool verbose) {
  if (const auto* re = dynamic_cast<const Error*>(&e)) {
    err << tool << ": error: " << one_line(re->what());
    if (!re->hint().empty()) err << " (hint: " << one_line(re->hint()) << ')';
    err << '\n';
    if (verbose && !re->detail().empty()) err << tool << ": detail: " << one_line(re->detail()) << '\n';
    return static_cast<int>(re->code());
  }
  err << tool << ": error: internal error: " << one_line(e.what()) << '\n';
  return static_cast<int>(Exit::Software);
}

void warn(std::string_view tool, std::string_view message, std::ostream& err) {
  err << tool << ": warning: " << one_line(message) << '\n' << std::flush;
}

}  // namespace rkit
