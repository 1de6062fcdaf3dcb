#include "rkit/printer.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "rkit/error.hpp"
#include "rkit/units.hpp"

namespace rkit {
namespace {

std::vector<Json> sample_records() {
  return {
      Json{{"rank", 0}, {"name", "alpha"}, {"bytes", 1536}},
      Json{{"rank", 10}, {"name", "b"}, {"bytes", 2048}},
  };
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Printer, TableAlignsColumnsWithTwoSpaces) {
  std::ostringstream out;
  {
    Printer p(out, Format::Table, {{"RANK", "rank"}, {"NAME", "name"}, {"BYTES", "bytes"}});
    for (const auto& r : sample_records()) p.print(r);
    EXPECT_TRUE(out.str().empty()) << "table rows are buffered until finish()";
    p.finish();
  }
  EXPECT_EQ(out.str(),
            "RANK  NAME   BYTES\n"
            "0     alpha  1536\n"
            "10    b      2048\n");
}

TEST(Printer, CellsGivenWholeAlignAsRecordsDo) {
  std::ostringstream out;
  Printer p(out, Format::Table, {{"RANK", "rank"}, {"NAME", "name"}});
  p.print(Json{{"rank", 0}, {"name", "alpha"}});
  p.print_cells({"10", "b"});
  EXPECT_THROW(p.print_cells({"only one"}), Error);
  p.finish();
  EXPECT_EQ(out.str(),
            "RANK  NAME\n"
            "0     alpha\n"
            "10    b\n");
  std::ostringstream json;
  Printer j(json, Format::Json, {{"RANK", "rank"}});
  EXPECT_THROW(j.print_cells({"1"}), Error) << "a JSON line needs the record";
}

TEST(Printer, DestructorFinishesTheTable) {
  std::ostringstream out;
  {
    Printer p(out, Format::Table, {{"N", "rank"}});
    p.print(Json{{"rank", 7}});
  }
  EXPECT_EQ(out.str(), "N\n7\n");
}

TEST(Printer, FinishTwiceDoesNotRepeatTheTable) {
  std::ostringstream out;
  Printer p(out, Format::Table, {{"N", "rank"}});
  p.print(Json{{"rank", 7}});
  p.finish();
  p.finish();
  EXPECT_EQ(out.str(), "N\n7\n");
}

TEST(Printer, JsonLinesCarryTheWholeRecord) {
  std::ostringstream out;
  auto records = sample_records();
  records[1]["extra"] = Json{{"nested", true}};
  {
    Printer p(out, Format::Json, {{"RANK", "rank"}});  // columns do not limit JSON
    for (const auto& r : records) p.print(r);
    p.finish();
  }
  auto lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), records.size()) << out.str();
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(lines[i], to_json_line(records[i]));
    EXPECT_EQ(Json::parse(lines[i]), records[i]);
  }
  EXPECT_NE(lines[1].find("\"extra\":{\"nested\":true}"), std::string::npos) << lines[1];
}

TEST(Printer, CsvHasAHeaderAndQuotesPerRfc4180) {
  std::ostringstream out;
  {
    Printer p(out, Format::Csv, {{"NAME", "name"}, {"NOTE, QUOTED", "note"}});
    p.print(Json{{"name", "plain"}, {"note", "a,b"}});
    p.print(Json{{"name", "say \"hi\""}, {"note", "two\nlines"}});
    p.finish();
  }
  EXPECT_EQ(out.str(),
            "NAME,\"NOTE, QUOTED\"\n"
            "plain,\"a,b\"\n"
            "\"say \"\"hi\"\"\",\"two\nlines\"\n");
}

TEST(Printer, CsvQuote) {
  EXPECT_EQ(Printer::csv_quote("plain"), "plain");
  EXPECT_EQ(Printer::csv_quote(""), "");
  EXPECT_EQ(Printer::csv_quote("a,b"), "\"a,b\"");
  EXPECT_EQ(Printer::csv_quote("a\"b"), "\"a\"\"b\"");
  EXPECT_EQ(Printer::csv_quote("a\rb"), "\"a\rb\"");
  EXPECT_EQ(Printer::csv_quote("a\nb"), "\"a\nb\"");
}

TEST(Printer, CsvHeaderIsWrittenOnce) {
  std::ostringstream out;
  Printer p(out, Format::Csv, {{"N", "n"}});
  for (int i = 0; i < 3; ++i) p.print(Json{{"n", i}});
  p.finish();
  EXPECT_EQ(out.str(), "N\n0\n1\n2\n");
}

TEST(Printer, ArraysAreCommaJoinedAndNullIsDashOrEmpty) {
  Json rec{{"cpus", Json::array({0, 1, 2})}, {"gpu", nullptr}, {"tags", Json::array({"a", "b"})}};
  std::vector<Column> cols{{"CPUS", "cpus"}, {"GPU", "gpu"}, {"MISSING", "nope"}, {"TAGS", "tags"}};

  std::ostringstream table;
  {
    Printer p(table, Format::Table, cols);
    p.print(rec);
  }
  EXPECT_EQ(table.str(),
            "CPUS   GPU  MISSING  TAGS\n"
            "0,1,2  -    -        a,b\n");

  std::ostringstream csv;
  {
    Printer p(csv, Format::Csv, cols);
    p.print(rec);
  }
  EXPECT_EQ(csv.str(), "CPUS,GPU,MISSING,TAGS\n\"0,1,2\",,,\"a,b\"\n");
}

TEST(Printer, CellRendersValues) {
  EXPECT_EQ(Printer::cell(Json("text"), "-"), "text");
  EXPECT_EQ(Printer::cell(Json(3), "-"), "3");
  EXPECT_EQ(Printer::cell(Json(1.5), "-"), "1.5");
  EXPECT_EQ(Printer::cell(Json(0.1), "-"), "0.1");
  EXPECT_EQ(Printer::cell(Json(-2), "-"), "-2");
  EXPECT_EQ(Printer::cell(Json(true), "-"), "true");
  EXPECT_EQ(Printer::cell(Json(nullptr), "-"), "-");
  EXPECT_EQ(Printer::cell(Json(nullptr), "NA"), "NA");
  EXPECT_EQ(Printer::cell(Json::array({1, "x", 2.5}), "-"), "1,x,2.5");
}

TEST(Printer, HumanFormatterIsUsedOnlyInTables) {
  std::vector<Column> cols{{"NAME", "name"},
                           {"SIZE", "bytes", [](const Json& v) { return format_bytes(v.get<std::uint64_t>()); }}};
  auto records = sample_records();

  std::ostringstream table;
  {
    Printer p(table, Format::Table, cols);
    for (const auto& r : records) p.print(r);
  }
  EXPECT_EQ(table.str(),
            "NAME   SIZE\n"
            "alpha  1.5 KiB\n"
            "b      2 KiB\n");

  std::ostringstream csv;
  {
    Printer p(csv, Format::Csv, cols);
    for (const auto& r : records) p.print(r);
  }
  EXPECT_EQ(csv.str(), "NAME,SIZE\nalpha,1536\nb,2048\n");

  std::ostringstream json;
  {
    Printer p(json, Format::Json, cols);
    for (const auto& r : records) p.print(r);
  }
  EXPECT_EQ(json.str(), to_json_line(records[0]) + "\n" + to_json_line(records[1]) + "\n");
}

TEST(Printer, HumanFormatterIsNotCalledForNull) {
  int calls = 0;
  std::vector<Column> cols{{"SIZE", "bytes", [&](const Json&) {
                              ++calls;
                              return std::string("formatted");
                            }}};
  std::ostringstream out;
  {
    Printer p(out, Format::Table, cols);
    p.print(Json{{"bytes", nullptr}});
    p.print(Json::object());
  }
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(out.str(), "SIZE\n-\n-\n");
}

TEST(Printer, StreamingPrintsTheHeaderOnceAndRowsImmediately) {
  std::ostringstream out;
  Printer p(out, Format::Table, {{"TIME", "t"}, {"LOAD", "load"}}, /*streaming=*/true);
  p.print(Json{{"t", 1}, {"load", 0.5}});
  EXPECT_EQ(out.str(), "TIME  LOAD\n1     0.5\n");
  p.print(Json{{"t", 2}, {"load", 0.75}});
  EXPECT_EQ(out.str(), "TIME  LOAD\n1     0.5\n2     0.75\n");
  p.finish();
  EXPECT_EQ(out.str(), "TIME  LOAD\n1     0.5\n2     0.75\n") << "finish() must not repeat streamed rows";
}

TEST(Printer, StreamingWidthsAreFixedByTheFirstRow) {
  // A long cell pushes its own row only; later rows stay aligned with the header.
  std::ostringstream out;
  {
    Printer p(out, Format::Table, {{"HOST", "host"}, {"LOAD", "load"}}, /*streaming=*/true);
    p.print(Json{{"host", "n1"}, {"load", 1}});
    p.print(Json{{"host", "a-very-long-host"}, {"load", 2}});
    p.print(Json{{"host", "n3"}, {"load", 3}});
  }
  EXPECT_EQ(out.str(),
            "HOST  LOAD\n"
            "n1    1\n"
            "a-very-long-host  2\n"
            "n3    3\n");
}

TEST(Printer, StreamingColumnsKeepTheirMinimumWidth) {
  // A column the first row leaves empty still has room for the values later rows give it.
  std::ostringstream out;
  {
    Printer p(out, Format::Table, {{"STEP", "step"}, {"EVAL", "eval", nullptr, 8}, {"LR", "lr"}}, /*streaming=*/true);
    p.print(Json{{"step", 1}, {"lr", 0.1}});
    p.print(Json{{"step", 2}, {"eval", 0.218798}});
  }
  EXPECT_EQ(out.str(),
            "STEP  EVAL      LR\n"
            "1     -         0.1\n"
            "2     0.218798  -\n");
}

TEST(Printer, StreamingJsonWritesEachRecordAtOnce) {
  std::ostringstream out;
  Printer p(out, Format::Json, {{"T", "t"}}, /*streaming=*/true);
  p.print(Json{{"t", 1}});
  EXPECT_EQ(out.str(), "{\"t\":1}\n");
}

TEST(Printer, JsonPointerKeysReachNestedValues) {
  Json rec{{"a", {{"b", 5}}}, {"gpus", Json::array({Json{{"name", "H100"}}, Json{{"name", "A100"}}})}};
  std::ostringstream out;
  {
    Printer p(out, Format::Csv, {{"AB", "/a/b"}, {"GPU1", "/gpus/1/name"}, {"GPU5", "/gpus/5/name"}, {"NOPE", "/a/x"}});
    p.print(rec);
  }
  EXPECT_EQ(out.str(), "AB,GPU1,GPU5,NOPE\n5,A100,,\n");

  std::ostringstream table;
  {
    Printer p(table, Format::Table, {{"AB", "/a/b"}, {"NOPE", "/a/b/c"}});
    p.print(rec);
  }
  EXPECT_EQ(table.str(), "AB  NOPE\n5   -\n");
}

}  // namespace
}  // namespace rkit
