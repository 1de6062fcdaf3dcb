#include "rkit/jsonl.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include "rkit/error.hpp"
#include "rkit/rng.hpp"
#include "test_support.hpp"

namespace rkit {
namespace {

using testing::TempDir;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(JsonLinesReader, ReadsRecordsSkippingBlankLines) {
  TempDir dir;
  std::string path = dir.file("in.jsonl");
  testing::write(path, "{\"a\":1}\n\n   \n\t\n{\"a\":2,\"b\":[1,2]}\r\n{\"a\":3}");  // no final newline
  JsonLinesReader in(path);
  EXPECT_EQ(in.name(), path);
  EXPECT_EQ(in.where(), path + ":0");
  Json rec;
  ASSERT_TRUE(in.next(rec));
  EXPECT_EQ(rec["a"], 1);
  EXPECT_EQ(in.where(), path + ":1");
  ASSERT_TRUE(in.next(rec));
  EXPECT_EQ(rec["a"], 2);
  EXPECT_EQ(rec["b"], Json::array({1, 2}));
  EXPECT_EQ(in.where(), path + ":5");
  ASSERT_TRUE(in.next(rec));
  EXPECT_EQ(rec["a"], 3);
  EXPECT_EQ(in.where(), path + ":6");
  EXPECT_FALSE(in.next(rec));
  EXPECT_FALSE(in.next(rec));
}

TEST(JsonLinesReader, KeepsKeyOrder) {
  TempDir dir;
  std::string path = dir.file("in.jsonl");
  testing::write(path, "{\"zeta\":1,\"alpha\":2,\"mid\":3}\n");
  JsonLinesReader in(path);
  Json rec;
  ASSERT_TRUE(in.next(rec));
  EXPECT_EQ(to_json_line(rec), "{\"zeta\":1,\"alpha\":2,\"mid\":3}");
}

TEST(JsonLinesReader, EmptyFileHasNoRecords) {
  TempDir dir;
  std::string path = dir.file("empty.jsonl");
  testing::write(path, "\n\n");
  JsonLinesReader in(path);
  Json rec;
  EXPECT_FALSE(in.next(rec));
}

TEST(JsonLinesReader, MalformedLineIsADataErrorNamingFileAndLine) {
  TempDir dir;
  std::string path = dir.file("bad.jsonl");
  testing::write(path, "{\"a\":1}\n\n{\"a\":\n{\"a\":3}\n");
  JsonLinesReader in(path);
  Json rec;
  ASSERT_TRUE(in.next(rec));
  try {
    in.next(rec);
    FAIL() << "malformed line accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::DataErr);
    EXPECT_EQ(std::string(e.what()).rfind(path + ":3: ", 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_FALSE(contains(e.what(), "[json.exception")) << "library internals in a user message: " << e.what();
  }
}

TEST(JsonLinesReader, DirectoryIsAnErrorNotEmptyInput) {
  TempDir dir;
  try {
    JsonLinesReader in(dir.path());
    Json rec;
    in.next(rec);
    FAIL() << "a directory read as empty input";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), dir.path())) << e.what();
  }
}

TEST(JsonLinesReader, MissingFileIsNoInput) {
  TempDir dir;
  std::string path = dir.file("missing.jsonl");
  try {
    JsonLinesReader in(path);
    FAIL() << "missing file opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::NoInput);
    EXPECT_TRUE(contains(e.what(), path)) << e.what();
  }
}

TEST(JsonLinesReader, DashReadsStdin) {
  std::istringstream fake("{\"x\":1}\n\n{\"x\":2}\n");
  std::streambuf* old = std::cin.rdbuf(fake.rdbuf());
  std::vector<int> xs;
  std::string where;
  try {
    JsonLinesReader in("-");
    Json rec;
    while (in.next(rec)) xs.push_back(rec["x"].get<int>());
    where = in.where();
  } catch (...) {
    std::cin.rdbuf(old);
    throw;
  }
  std::cin.rdbuf(old);
  std::cin.clear();
  EXPECT_EQ(xs, (std::vector<int>{1, 2}));
  EXPECT_EQ(where, "<stdin>:3");
}

TEST(CheckSchema, AcceptsKnownVersions) {
  EXPECT_EQ(check_schema(Json{{"schema", "rkit.job.v1"}, {"id", 3}}, "rkit.job", 1, "in:1"), 1);
  EXPECT_EQ(check_schema(Json{{"schema", "rkit.job.v2"}}, "rkit.job", 3, "in:1"), 2);
  EXPECT_EQ(check_schema(Json{{"schema", "rkit.train.event.v1"}, {"unknown_key", 1}}, "rkit.train.event", 1, "x"), 1);
}

Error schema_error(const Json& record, std::string_view family, int max_major) {
  try {
    check_schema(record, family, max_major, "jobs.jsonl:7");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "check_schema accepted " << record.dump();
  return Error(Exit::Ok, "");
}

TEST(CheckSchema, MissingSchemaIsADataError) {
  for (const Json& rec : {Json{{"id", 1}}, Json{{"schema", 1}}, Json::array({1}), Json("rkit.job.v1")}) {
    Error e = schema_error(rec, "rkit.job", 1);
    EXPECT_EQ(e.code(), Exit::DataErr) << rec.dump();
    EXPECT_EQ(std::string(e.what()).rfind("jobs.jsonl:7: ", 0), 0u) << e.what();
  }
}

TEST(CheckSchema, WrongFamilyIsADataError) {
  for (const char* s : {"rkit.topology.v1", "rkit.jobs.v1", "rkit.job", "rkit.job.v", "rkit.job.v0", "rkit.job.vx",
                        "rkit.job.v1x", "rkit.job.v-1", "x", ""}) {
    Error e = schema_error(Json{{"schema", s}}, "rkit.job", 1);
    EXPECT_EQ(e.code(), Exit::DataErr) << s;
    EXPECT_EQ(std::string(e.what()).rfind("jobs.jsonl:7: ", 0), 0u) << e.what();
    EXPECT_TRUE(contains(e.what(), "rkit.job")) << e.what();
  }
}

TEST(CheckSchema, NewerMajorVersionIsADataErrorNamingTheVersion) {
  Error e = schema_error(Json{{"schema", "rkit.job.v2"}}, "rkit.job", 1);
  EXPECT_EQ(e.code(), Exit::DataErr);
  EXPECT_EQ(static_cast<int>(e.code()), 65);
  EXPECT_TRUE(contains(e.what(), "rkit.job.v2")) << e.what();
  EXPECT_TRUE(contains(e.what(), "jobs.jsonl:7")) << e.what();
}

TEST(ToJsonLine, IsOneLineWithNullForNonFiniteNumbers) {
  Json rec{{"schema", "rkit.bench.v1"},
           {"nan", std::nan("")},
           {"inf", std::numeric_limits<double>::infinity()},
           {"ninf", -std::numeric_limits<double>::infinity()},
           {"ok", 1.5},
           {"text", "a\nb"}};
  std::string line = to_json_line(rec);
  EXPECT_EQ(line,
            "{\"schema\":\"rkit.bench.v1\",\"nan\":null,\"inf\":null,\"ninf\":null,\"ok\":1.5,"
            "\"text\":\"a\\nb\"}");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  Json back = Json::parse(line);
  EXPECT_TRUE(back["nan"].is_null());
  EXPECT_TRUE(back["inf"].is_null());
}

TEST(ToJsonLine, InvalidUtf8DoesNotThrow) {
  Json rec{{"name", std::string("ab\xff", 3)}};
  std::string line;
  ASSERT_NO_THROW(line = to_json_line(rec));
  EXPECT_NO_THROW(Json::parse(line));
  EXPECT_TRUE(contains(line, "\xEF\xBF\xBD")) << line;  // U+FFFD replacement character
}

TEST(ParseJson, ParsesADocument) {
  Json doc = parse_json("{\"b\": [1, 2], \"a\": null}", "fixture.json");
  EXPECT_EQ(doc["b"], Json::array({1, 2}));
  EXPECT_TRUE(doc["a"].is_null());
  EXPECT_EQ(doc.begin().key(), "b");
}

TEST(ParseJson, ErrorNamesTheSource) {
  for (const char* text : {"{bad", "", "[1, 2", "{\"a\": 1} trailing"}) {
    try {
      parse_json(text, "fixture.json");
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::DataErr);
      EXPECT_EQ(std::string(e.what()).rfind("fixture.json: invalid JSON: ", 0), 0u) << e.what();
      EXPECT_FALSE(contains(e.what(), "[json.exception")) << e.what();
    }
  }
}

// Bytes that need not be UTF-8 go through JSON whole; is_utf8 agrees with the JSON
// library on what it can write as a string.
TEST(BytesJson, EveryByteStringComesBack) {
  EXPECT_TRUE(is_utf8("plain ascii"));
  EXPECT_TRUE(is_utf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // été € 😀
  for (const char* bad : {"\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc3", "\xe2\x82"})
    EXPECT_FALSE(is_utf8(bad)) << Json(std::string(bad)).dump(-1, ' ', false, Json::error_handler_t::replace);
  EXPECT_EQ(bytes_json("abc"), Json("abc"));
  EXPECT_EQ(bytes_json("a\xff"), (Json{{"hex", "61ff"}}));
  std::uint64_t seed = 7;
  for (int i = 0; i < 5000; ++i) {
    std::string s(mix64(++seed) % 12, '\0');
    for (char& c : s) {  // mostly ASCII, some high bytes, so that both forms occur
      const std::uint64_t r = mix64(++seed);
      c = static_cast<char>(r % 4 == 0 ? 0x80 + (r >> 8) % 0x80 : (r >> 8) % 0x80);
    }
    bool library_takes_it = true;
    try {
      (void)Json(s).dump();
    } catch (const Json::type_error&) {
      library_takes_it = false;
    }
    ASSERT_EQ(is_utf8(s), library_takes_it) << bytes_json(s).dump();
    const Json j = parse_json(bytes_json(s).dump(), "test");
    ASSERT_EQ(bytes_of(j, "test"), s);
  }
}

TEST(BytesJson, OtherValuesAreDataErrors) {
  for (const char* text : {"1", "null", "{}", "{\"hex\": \"f\"}", "{\"hex\": \"FF\"}", "{\"hex\": \"zz\"}",
                           "{\"hex\": 1}", "{\"hex\": \"ff\", \"x\": 1}"})
    try {
      bytes_of(parse_json(text, "test"), "arg");
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Exit::DataErr) << text;
      EXPECT_EQ(std::string(e.what()).rfind("arg: ", 0), 0u) << e.what();
    }
}

// append_json_string writes what to_json_line writes for the same string: the same
// escapes, U+FFFD for bad UTF-8, and text that parses back to the original.
TEST(AppendJsonString, MatchesToJsonLine) {
  for (const std::string& text :
       {std::string("plain"), std::string(""), std::string("q\"b\\s/"), std::string("tab\tnl\ncr\rbs\bff\f"),
        std::string("\x01\x1f\x7f", 3), std::string("caf\xc3\xa9 \xe2\x82\xac"), std::string("bad \xff\xfe utf-8"),
        std::string("nul\0in", 6)}) {
    std::string out = "x";
    append_json_string(out, text);
    EXPECT_EQ(out, "x" + to_json_line(Json(text))) << text;
    if (is_utf8(text)) {
      EXPECT_EQ(Json::parse(out.substr(1)).get<std::string>(), text);
    }
  }
}

}  // namespace
}  // namespace rkit
