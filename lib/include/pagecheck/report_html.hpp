// The HTML rendering of a RunReport (--html): one self-contained page, no
// network, no scripts, inline SVG and a little inline CSS. Per case: the path
// table; per path and comparison that kept an error map (ErrorStats::map) a
// heat map of error / tolerance over (sequence, head), a strip over the query
// tokens and the worst elements. For the run: a roofline of every timed stage
// (arithmetic intensity against FLOP/s) under the device's measured read,
// copy and BF16 matrix ceilings, or a note saying why there is none.
//
// The page is well-formed XML as well as HTML (every element closed, only
// the XML entities), so that tools and tests can parse it; every string from
// a case (names, descriptions, warnings, reasons) is escaped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "pagecheck/report.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

std::string to_html(const RunReport& report);
// "-" writes to stdout.
Status write_html(const std::string& path, const RunReport& report);

// Pieces for other pages in the same look (compare --html): the inline CSS,
// text from a case made safe for HTML text and attributes, and the heat
// maps' colour of an error / tolerance ratio (blues below 1, yellow to dark
// red from 1 up, black for inf).
std::string_view html_page_style();
std::string html_text(std::string_view text, std::size_t max_bytes = 2000);
std::string error_ratio_colour(double ratio);

}  // namespace pagecheck
