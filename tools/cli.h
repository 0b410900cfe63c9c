// Shared plumbing for subcommands (private to tools/): CLI11 parsing that
// reports errors as one line, and JSON/xattr helpers.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tools/tool_main.h"

namespace densefs::tools {

// Parses `args` into `app`. Returns an exit status when the command is done
// (help printed: 0; usage error printed as "densefs: NAME: why": 2), or
// nothing when the caller should go on.
std::optional<int> parse_cli(CLI::App& app, const std::vector<std::string>& args,
                             const tool_io& io);

// Prints "densefs: <what>: <why>" on io.err.
void print_error(const tool_io& io, const std::string& what, const std::string& why);

// The value of a virtual xattr, or nothing when the file has no such xattr
// or the file system has no xattrs (ENODATA, ENOTSUP). Other failures throw
// std::system_error naming the path.
std::optional<std::string> read_xattr(const std::string& path, const char* name);

// `text` made absolute and normal, without a trailing '/': the daemon runs
// in /, and mount tables list paths without one.
std::filesystem::path absolute_path(const std::string& text);

}  // namespace densefs::tools
