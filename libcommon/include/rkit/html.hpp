// File: rkit/html.hpp
//
// The HTML of rkit's report pages (rbench report --html, rcost report --format html):
// escaping, the page's frame and shared style sheet, and one table writer, so that
// every table is declared by its columns and every text in it is escaped here, once.
//
//   rkit::HtmlTable t({{"Host"}, {"Cores", "num"}, {"Check"}});
//   t.row({"node<1>", "64", {"ok", "triad within 1e-6"}});          // text escaped; a tooltip
//   t.row({rkit::HtmlCell::markup("a<wbr>b"), "8", "WRONG"}, "wrong"); // markup as is; a row class
//   std::string html = t.str();   // <table>…</table>, one <tr> a line
//
// Pure functions and plain values: thread-compatible. Charts are rkit/svg.hpp's.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rkit {

// Text made safe for HTML and XML, in element content and in quoted attributes:
// & < > " ' become entities; control characters other than tab and newline, which XML
// forbids even as entities, become U+FFFD. UTF-8 passes through.
std::string html_escape(std::string_view text);

// The style sheet rbench's and rcost's report pages share (each adds its own rules);
// HtmlTable's class "num" right-aligns a column of figures.
inline constexpr const char* kPageStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222;
       background: #fafafa; margin: 0; }
main { max-width: 960px; margin: 0 auto; padding: 16px 24px 48px; background: #fff; }
h1 { font-size: 1.6em; margin: 0.4em 0 0.2em; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.4em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
p.lead { color: #444; margin: 0.2em 0; }
nav a { margin-right: 1em; }
figure { margin: 1em 0 1.6em; }
figcaption { margin-bottom: 0.3em; }
svg.chart { display: block; max-width: 100%; height: auto; border: 1px solid #eee; }
.note { background: #fff8e1; border-left: 4px solid #f2b01e; padding: 0.5em 0.8em; margin: 0.6em 0; }
.key { display: inline-block; width: 1.6em; height: 0.7em; vertical-align: middle; margin: 0 0.35em 0 0.2em; }
table { border-collapse: collapse; font-size: 0.85em; width: 100%; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
)";

// A self-contained page's start, up to and including <main>: the doctype, UTF-8, a
// Content-Security-Policy that lets the page fetch and run nothing (inline style only),
// `title` (plain text, escaped here), and kPageStyle followed by `extra_style` (CSS, as is).
std::string html_page_start(std::string_view title, std::string_view extra_style);
// The page's end: a "Made by TOOL VERSION (git REVISION)." line, then </main>, </body>, </html>.
std::string html_page_end(std::string_view tool);

// One column of an HtmlTable.
struct HtmlColumn {
  std::string header;  // plain text (escaped by the table)
  std::string cls{};   // the class of its <th> and of each of its <td>s ("num"); none when empty
};

// One cell: plain text that the table escapes, or markup that it writes as is.
struct HtmlCell {
  HtmlCell(std::string text, std::string title = {}) : text(std::move(text)), title(std::move(title)) {}
  HtmlCell(const char* text) : text(text) {}
  // Markup written as is: the caller has escaped every text in it (html_escape).
  static HtmlCell markup(std::string html, std::string title = {}) {
    HtmlCell c(std::move(html), std::move(title));
    c.is_markup = true;
    return c;
  }

  std::string text;   // plain text, or markup when is_markup
  std::string title;  // the tooltip (plain text, escaped); no title attribute when empty
  bool is_markup = false;
};

// An HTML table declared by its columns, filled row by row:
//   <table>
//   <thead><tr><th>…</th>…</tr></thead>
//   <tbody>
//   <tr class="ROW"><td class="COLUMN" title="TITLE">TEXT</td>…</tr>
//   </tbody>
//   </table>
// Every header, text and title is escaped, except markup cells'; classes are the
// caller's own words (CSS class names), written as is.
class HtmlTable {
 public:
  explicit HtmlTable(std::vector<HtmlColumn> columns) : columns_(std::move(columns)) {}

  // One row: a cell per column, in the columns' order. `row_class`: the <tr>'s class
  // ("wrong", "over", "total"); none when empty. Throws Error(Software) when the row
  // has more or fewer cells than the table has columns.
  void row(const std::vector<HtmlCell>& cells, std::string_view row_class = {});
  std::size_t rows() const { return rows_; }

  // The table, ending in a newline. An empty table still has its header row.
  std::string str() const;

 private:
  std::vector<HtmlColumn> columns_;
  std::string body_;
  std::size_t rows_ = 0;
};

}  // namespace rkit
