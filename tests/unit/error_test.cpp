#include "rkit/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace rkit {
namespace {

std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(ExitName, NamesEveryCodeAsTheManPageDoes) {
  EXPECT_EQ(exit_name(Exit::Ok), "ok");
  EXPECT_EQ(exit_name(Exit::Failure), "failure");
  EXPECT_EQ(exit_name(Exit::Usage), "usage");
  EXPECT_EQ(exit_name(Exit::DataErr), "data error");
  EXPECT_EQ(exit_name(Exit::NoInput), "no input");
  EXPECT_EQ(exit_name(Exit::Unavailable), "unavailable");
  EXPECT_EQ(exit_name(Exit::Software), "internal error");
  EXPECT_EQ(exit_name(Exit::IoErr), "I/O error");
  EXPECT_EQ(exit_name(Exit::TempFail), "temporary failure");
  EXPECT_EQ(exit_name(Exit::NoPerm), "permission denied");
  EXPECT_EQ(exit_name(Exit::Config), "configuration error");
  EXPECT_EQ(exit_name(static_cast<Exit>(42)), "unknown");
}

TEST(ExitCodes, AreTheSysexitsValues) {
  EXPECT_EQ(static_cast<int>(Exit::Usage), 64);
  EXPECT_EQ(static_cast<int>(Exit::DataErr), 65);
  EXPECT_EQ(static_cast<int>(Exit::NoInput), 66);
  EXPECT_EQ(static_cast<int>(Exit::Unavailable), 69);
  EXPECT_EQ(static_cast<int>(Exit::Software), 70);
  EXPECT_EQ(static_cast<int>(Exit::IoErr), 74);
  EXPECT_EQ(static_cast<int>(Exit::TempFail), 75);
  EXPECT_EQ(static_cast<int>(Exit::NoPerm), 77);
  EXPECT_EQ(static_cast<int>(Exit::Config), 78);
}

TEST(Error, CarriesCodeMessageHintAndDetail) {
  Error e(Exit::DataErr, "topo.json: line 3: expected an object", "check the file", "byte 17");
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_STREQ(e.what(), "topo.json: line 3: expected an object");
  EXPECT_EQ(e.hint(), "check the file");
  EXPECT_EQ(e.detail(), "byte 17");
  Error bare(Exit::IoErr, "x");
  EXPECT_TRUE(bare.hint().empty());
  EXPECT_TRUE(bare.detail().empty());
}

TEST(SystemError, MapsErrnoToExitCodes) {
  EXPECT_EQ(system_error("open /x", ENOENT).code(), Exit::NoInput);
  EXPECT_EQ(system_error("open /x", ENOTDIR).code(), Exit::NoInput);
  EXPECT_EQ(system_error("open /x", EACCES).code(), Exit::NoPerm);
  EXPECT_EQ(system_error("open /x", EPERM).code(), Exit::NoPerm);
  EXPECT_EQ(system_error("open /x", EROFS).code(), Exit::NoPerm);
  EXPECT_EQ(system_error("read /x", EIO).code(), Exit::IoErr);
  EXPECT_EQ(system_error("write /x", ENOSPC).code(), Exit::IoErr);
  EXPECT_EQ(static_cast<int>(system_error("a", ENOENT).code()), 66);
  EXPECT_EQ(static_cast<int>(system_error("a", EACCES).code()), 77);
  EXPECT_EQ(static_cast<int>(system_error("a", EIO).code()), 74);
}

TEST(SystemError, MessageIsWhatColonStrerror) {
  Error e = system_error("open /tmp/x", ENOENT);
  EXPECT_EQ(std::string(e.what()), std::string("open /tmp/x: ") + std::strerror(ENOENT));
}

TEST(ReportError, WritesOneLineAndReturnsTheCode) {
  std::ostringstream err;
  int code = report_error("rtop", Error(Exit::NoInput, "topo.xml: not found"), err);
  EXPECT_EQ(code, 66);
  EXPECT_EQ(err.str(), "rtop: error: topo.xml: not found\n");
}

TEST(ReportError, AppendsTheHint) {
  std::ostringstream err;
  int code = report_error("rsub", Error(Exit::Unavailable, "slurm: unreachable", "is slurmctld running?"), err);
  EXPECT_EQ(code, 69);
  EXPECT_EQ(err.str(), "rsub: error: slurm: unreachable (hint: is slurmctld running?)\n");
}

TEST(ReportError, PlainExceptionIsAnInternalError) {
  std::ostringstream err;
  int code = report_error("rckpt", std::runtime_error("vector::at"), err);
  EXPECT_EQ(code, 70);
  EXPECT_EQ(err.str(), "rckpt: error: internal error: vector::at\n");
}

TEST(ReportError, FlattensNewlinesIntoOneLine) {
  std::ostringstream err;
  report_error("rtop", Error(Exit::DataErr, "first\nsecond\r\nthird\n", "a\nb"), err);
  EXPECT_EQ(count_lines(err.str()), 1u) << err.str();
  EXPECT_EQ(err.str().find('\r'), std::string::npos);
  EXPECT_NE(err.str().find("first second"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("(hint: a b)"), std::string::npos) << err.str();

  std::ostringstream err2;
  report_error("rtop", std::logic_error("one\ntwo"), err2);
  EXPECT_EQ(err2.str(), "rtop: error: internal error: one two\n");
}

TEST(ReportError, VerboseAddsTheDetailLine) {
  Error e(Exit::IoErr, "write out.json: No space left", "", "wrote 4096 of 8192\nbytes");
  std::ostringstream quiet, verbose;
  EXPECT_EQ(report_error("rckpt", e, quiet, false), 74);
  EXPECT_EQ(quiet.str(), "rckpt: error: write out.json: No space left\n");
  EXPECT_EQ(report_error("rckpt", e, verbose, true), 74);
  EXPECT_EQ(verbose.str(),
            "rckpt: error: write out.json: No space left\n"
            "rckpt: detail: wrote 4096 of 8192 bytes\n");
}

TEST(ReportError, VerboseWithoutDetailStaysOneLine) {
  std::ostringstream err;
  report_error("rtop", Error(Exit::Usage, "bad flag"), err, true);
  EXPECT_EQ(err.str(), "rtop: error: bad flag\n");
}

}  // namespace
}  // namespace rkit
