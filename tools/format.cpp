#include "tools/format.h"

#include <algorithm>
#include <cstdio>

namespace densefs::tools {

std::string human_size(std::uint64_t bytes) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  // Switch units before printf would round up to "1024.0".
  while (value >= 1023.95 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", value, units[unit]);
  return buf;
}

std::string human_ratio(std::uint64_t stored, std::uint64_t logical) {
  if (logical == 0) return "-";
  const double fraction = static_cast<double>(stored) / static_cast<double>(logical);
  char buf[64];
  if (stored == 0) {
    std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f%% (%.2f x)", fraction * 100.0, 1.0 / fraction);
  }
  return buf;
}

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace densefs::tools
