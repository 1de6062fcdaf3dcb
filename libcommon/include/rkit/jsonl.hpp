// File: rkit/jsonl.hpp
//
// JSON Lines in and out, and the schema contract every record keeps:
// each record has "schema": "rkit.<noun>.v<N>"; readers ignore unknown keys and
// reject an unknown major version with exit 65.
//
//   rkit::JsonLinesReader in(path);                 // a file, or "-" for stdin
//   rkit::Json rec;
//   while (in.next(rec)) {
//     rkit::check_schema(rec, "rkit.topology", 1, in.where());
//   }
//
// Malformed lines throw Error(DataErr) naming "file:line"; a missing file throws
// Error(NoInput). Blank lines are skipped.
#pragma once

#include <cstdint>
#include <fstream>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace rkit {

// Records keep their keys in insertion order so that output reads naturally.
using Json = nlohmann::ordered_json;

class JsonLinesReader {
 public:
  explicit JsonLinesReader(const std::string& path);  // "-" reads stdin
  // Reads the next non-blank line into `out`; false at end of input.
  bool next(Json& out);
  // "file:line" of the record last read, for error messages.
  std::string where() const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<std::ifstream> file_;
  std::istream* in_;
  std::uint64_t line_ = 0;
};

// Parses a whole JSON document (a fixture or config-like input). Errors name the
// source and the byte offset: Error(DataErr).
Json parse_json(std::string_view text, std::string_view source);

// Checks that `record` is an object whose "schema" is "<family>.v<major>" with a
// major version this reader knows (<= max_major). Returns the major version.
// Throws Error(DataErr) otherwise; `where` prefixes the message.
int check_schema(const Json& record, std::string_view family, int max_major, std::string_view where);

// The record as one JSON line (no trailing newline). NaN and infinities become null;
// a string that is not UTF-8 gets U+FFFD for its bad bytes (carry such bytes with
// bytes_json instead, where they must come back).
std::string to_json_line(const Json& record);

// Appends `text` as a JSON string, quoted and escaped as to_json_line writes it (bad
// UTF-8 bytes become U+FFFD): for records spliced together from text, many at a time.
void append_json_string(std::string& out, std::string_view text);

// `record[key]` when `record` is an object and that is a string, else `fallback` (for
// reading optional fields that may be null, absent or of another type without throwing).
std::string json_text(const Json& record, std::string_view key, std::string_view fallback = "");

// Bytes a user may pass that need not be UTF-8 (a command's arguments, environment
// values, paths), losslessly in JSON (rkit(7), BYTES IN RECORDS): a string when they are
// UTF-8, else {"hex": "<each byte as two lowercase hex digits>"}.
bool is_utf8(std::string_view bytes);
Json bytes_json(std::string_view bytes);
// The bytes back from either form. Error(DataErr) "<what>: ..." for any other value.
std::string bytes_of(const Json& value, std::string_view what);

}  // namespace rkit
