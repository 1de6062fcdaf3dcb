// File: libcommon/src/html.cpp — escaping, the page frame and the table writer of rkit's
// HTML report pages (rkit/html.hpp).
#include "rkit/html.hpp"

#include <fmt/format.h>

#include "rkit/error.hpp"
#include "rkit/version.hpp"

namespace rkit {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
          out += "\uFFFD";
        else
          out += c;
    }
  }
  return out;
}

std::string html_page_start(std::string_view title, std::string_view extra_style) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // Nothing may be fetched: the page is all there is.
  h += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<title>" + html_escape(title) + "</title>\n";
  h += "<style>" + std::string(kPageStyle) + std::string(extra_style) + "</style>\n</head>\n<body>\n<main>\n";
  return h;
}

std::string html_page_end(std::string_view tool) {
  return "<p class=\"lead\">Made by " + html_escape(fmt::format("{} {} (git {})", tool, kVersion, kGitRevision)) +
         ".</p>\n</main>\n</body>\n</html>\n";
}

namespace {

// ` class="CLS"`, or nothing for no class.
std::string class_attribute(std::string_view cls) {
  return cls.empty() ? std::string() : fmt::format(" class=\"{}\"", cls);
}

}  // namespace

void HtmlTable::row(const std::vector<HtmlCell>& cells, std::string_view row_class) {
  if (cells.size() != columns_.size())
    throw Error(Exit::Software,
                fmt::format("an HTML table row of {} cells in a table of {} columns", cells.size(), columns_.size()));
  body_ += "<tr" + class_attribute(row_class) + ">";
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const HtmlCell& c = cells[i];
    body_ += "<td" + class_attribute(columns_[i].cls);
    if (!c.title.empty()) body_ += " title=\"" + html_escape(c.title) + "\"";
    body_ += ">" + (c.is_markup ? c.text : html_escape(c.text)) + "</td>";
  }
  body_ += "</tr>\n";
  ++rows_;
}

std::string HtmlTable::str() const {
  std::string h = "<table>\n<thead><tr>";
  for (const HtmlColumn& c : columns_) h += "<th" + class_attribute(c.cls) + ">" + html_escape(c.header) + "</th>";
  return h + "</tr></thead>\n<tbody>\n" + body_ + "</tbody>\n</table>\n";
}

}  // namespace rkit
