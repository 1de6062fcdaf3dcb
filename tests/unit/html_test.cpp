// rkit/html.hpp: escaping, the page frame, and HtmlTable: every header, text and title
// escaped, classes where declared, markup cells as given, one row a line.
#include "rkit/html.hpp"

#include <gtest/gtest.h>

#include "rkit/error.hpp"

namespace rkit {
namespace {

constexpr const char* kEvil = R"(<b x="1">&'</b>)";
constexpr const char* kEvilEscaped = "&lt;b x=&quot;1&quot;&gt;&amp;&#39;&lt;/b&gt;";

TEST(HtmlEscape, EscapesMarkupQuotesAndControlCharacters) {
  EXPECT_EQ(html_escape(R"(<a href="x">&'</a>)"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(html_escape("a\x01z"), "a\uFFFDz");  // XML forbids it even as an entity
  EXPECT_EQ(html_escape("tab\tline\n"), "tab\tline\n");
  EXPECT_EQ(html_escape("\u00b5s \u2014 \u65e5"), "\u00b5s \u2014 \u65e5");  // UTF-8 untouched
  EXPECT_EQ(html_escape(""), "");
}

TEST(HtmlTable, WritesHeaderAndRowsOneALineWithColumnClassesOnHeaderAndCells) {
  HtmlTable t({{"Host"}, {"Cores", "num"}});
  t.row({"n1", "64"});
  t.row({"n2", "8"}, "wrong");
  EXPECT_EQ(t.rows(), 2u);
  EXPECT_EQ(t.str(),
            "<table>\n<thead><tr><th>Host</th><th class=\"num\">Cores</th></tr></thead>\n<tbody>\n"
            "<tr><td>n1</td><td class=\"num\">64</td></tr>\n"
            "<tr class=\"wrong\"><td>n2</td><td class=\"num\">8</td></tr>\n"
            "</tbody>\n</table>\n");
}

TEST(HtmlTable, EmptyTableKeepsItsHeader) {
  HtmlTable t({{"a"}, {"b"}});
  EXPECT_EQ(t.rows(), 0u);
  EXPECT_EQ(t.str(), "<table>\n<thead><tr><th>a</th><th>b</th></tr></thead>\n<tbody>\n</tbody>\n</table>\n");
}

TEST(HtmlTable, EscapesEveryHeaderTextAndTitle) {
  HtmlTable t({{kEvil}, {"t&t", "num"}});
  t.row({kEvil, {"1 < 2", kEvil}});
  t.row({std::string("a\x01z"), {"x", "tip \"quoted\" & 'single'"}});
  const std::string h = t.str();
  EXPECT_EQ(h.find("<b"), std::string::npos) << h;
  EXPECT_EQ(h.find("\x01"), std::string::npos) << h;
  EXPECT_NE(h.find(std::string("<th>") + kEvilEscaped + "</th><th class=\"num\">t&amp;t</th>"), std::string::npos) << h;
  EXPECT_NE(h.find(std::string("<tr><td>") + kEvilEscaped + "</td><td class=\"num\" title=\"" + kEvilEscaped +
                   "\">1 &lt; 2</td></tr>\n"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("<td>a\uFFFDz</td>"), std::string::npos) << h;
  EXPECT_NE(h.find("title=\"tip &quot;quoted&quot; &amp; &#39;single&#39;\""), std::string::npos) << h;
}

TEST(HtmlTable, NoTitleAttributeForAnEmptyTitle) {
  HtmlTable t({{"Check"}});
  t.row({{"ok", ""}});
  t.row({{"WRONG", "triad off by 3%"}});
  const std::string h = t.str();
  EXPECT_NE(h.find("<tr><td>ok</td></tr>\n"), std::string::npos) << h;
  EXPECT_NE(h.find("<tr><td title=\"triad off by 3%\">WRONG</td></tr>\n"), std::string::npos) << h;
}

TEST(HtmlTable, MarkupCellsAreWrittenAsGivenTheirTitlesStillEscaped) {
  HtmlTable t({{"Metric"}, {"Params", "params"}});
  t.row({HtmlCell::markup("own_<wbr>sgemm"), HtmlCell::markup("<span class=\"kv\">n=1</span>", "a<b")});
  const std::string h = t.str();
  EXPECT_NE(h.find("<tr><td>own_<wbr>sgemm</td><td class=\"params\" title=\"a&lt;b\"><span class=\"kv\">n=1</span>"
                   "</td></tr>\n"),
            std::string::npos)
      << h;
  // The same text as a plain cell is escaped.
  HtmlTable plain({{"Metric"}});
  plain.row({"own_<wbr>sgemm"});
  EXPECT_NE(plain.str().find("<td>own_&lt;wbr&gt;sgemm</td>"), std::string::npos);
}

TEST(HtmlTable, ARowOfTheWrongWidthIsAnInternalError) {
  HtmlTable t({{"a"}, {"b"}});
  try {
    t.row({"only one"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::Software);
  }
  EXPECT_THROW(t.row({"1", "2", "3"}), Error);
  EXPECT_EQ(t.rows(), 0u);
}

TEST(HtmlPage, FrameIsSelfContainedWithAnEscapedTitle) {
  const std::string start = html_page_start("report: <a&b>", "td.x { color: red; }\n");
  EXPECT_EQ(start.rfind("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", 0), 0u);
  EXPECT_NE(start.find("default-src 'none'; style-src 'unsafe-inline'"), std::string::npos);
  EXPECT_NE(start.find("<title>report: &lt;a&amp;b&gt;</title>\n"), std::string::npos);
  EXPECT_NE(start.find(std::string("<style>") + kPageStyle + "td.x { color: red; }\n</style>"), std::string::npos);
  EXPECT_TRUE(start.size() > 7 && start.compare(start.size() - 7, 7, "<main>\n") == 0);
  const std::string end = html_page_end("rtool");
  EXPECT_EQ(end.rfind("<p class=\"lead\">Made by rtool ", 0), 0u);
  EXPECT_TRUE(end.size() > 30 && end.compare(end.size() - 30, 30, ".</p>\n</main>\n</body>\n</html>\n") == 0) << end;
}

}  // namespace
}  // namespace rkit
