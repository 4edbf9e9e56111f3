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

#include <string>

#include "pagecheck/report.hpp"
#include "pagecheck/status.hpp"

namespace pagecheck {

std::string to_html(const RunReport& report);
// "-" writes to stdout.
Status write_html(const std::string& path, const RunReport& report);

}  // namespace pagecheck
