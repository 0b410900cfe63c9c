// `densefs mount` and `densefs STORE MNT -o ...` argument parsing, kept pure
// (no I/O, no mounting) so every option form is unit-tested.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "fs/mount.h"

namespace densefs::tools {

// Parses "STORE MNT [-f] [-d] [-s] [-o opt[,opt...]]..." (options may come
// before, between or after the two paths; "-oopt" and "-o opt" both work).
// Throws usage_error naming the offending word or option.
fs::mount_options parse_mount_args(const std::vector<std::string>& args);

// "256M", "1G", "4096" -> bytes; K/M/G/T suffixes are powers of 1024.
// Throws usage_error naming `option` on anything else or on overflow.
std::size_t parse_size(std::string_view option, std::string_view text);

extern const char* const k_mount_usage;

}  // namespace densefs::tools
