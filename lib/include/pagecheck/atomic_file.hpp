// Files replaced whole: what pagecheck writes as results (reports, case files,
// the tuning file, bundles) goes to a temporary file beside the target and is
// renamed into place, so a reader, or a run killed while writing, sees the
// old file or the complete new one, never a half-written one.
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

#include "pagecheck/status.hpp"

namespace pagecheck {

// The temporary file replace_file writes for `target`: ".NAME.tmpPID" in the
// target's folder (hidden, so a glob over the results does not pick it up).
std::filesystem::path temporary_beside(const std::filesystem::path& target);

// Calls `write(temporary)` to fill the temporary file, then renames it over
// `target`. A failure of `write` or of the rename removes the temporary file
// and leaves `target` as it was. A symbolic link is followed (the file it
// names is replaced, the link stays); a target that exists and is not a
// regular file (/dev/stdout, a FIFO) is handed to `write` itself, since
// renaming over it would replace the device or pipe, not feed it.
Status replace_file(const std::filesystem::path& target,
                    const std::function<Status(const std::filesystem::path& file)>& write);

// replace_file with `text` as the whole content. `what` names the file in
// errors ("cannot open the JSON file for writing").
Status replace_file_with_text(const std::filesystem::path& target, std::string_view text, std::string_view what);

}  // namespace pagecheck
