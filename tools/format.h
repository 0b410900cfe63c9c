// Human-readable numbers for CLI output (private to tools/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace densefs::tools {

// 0 B, 1023 B, 1.0 KiB, 12.3 MiB, 4.0 GiB ...
std::string human_size(std::uint64_t bytes);

// stored/logical as "25.0% (4.00 x)"; "-" when logical is 0.
std::string human_ratio(std::uint64_t stored, std::uint64_t logical);

// Left-aligned columns separated by two spaces; the first row is the header.
std::string format_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace densefs::tools
