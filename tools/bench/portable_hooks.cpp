// The standalone harness (DENSEFS_BENCH_ONLY): kinds of file by extension,
// and no densefs-specific figures.
#include <algorithm>
#include <cctype>

#include "tools/bench/bench.h"

namespace densefs::tools::bench {

std::string file_kind(const std::string& path) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "other";
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::pair<const char*, const char*> k_kinds[] = {
      {"jpg", "jpeg"},      {"jpeg", "jpeg"},    {"png", "image"},     {"gif", "image"},
      {"webp", "image"},    {"svg", "document"}, {"html", "document"}, {"xml", "document"},
      {"json", "document"}, {"pdf", "document"}, {"gz", "gzip"},       {"xz", "archive"},
      {"bz2", "archive"},   {"zst", "archive"},  {"zip", "zip"},       {"jar", "zip"},
      {"txt", "text"},      {"md", "text"},      {"py", "text"},       {"pl", "text"},
      {"pm", "text"},       {"sh", "text"},      {"h", "text"},        {"c", "text"},
      {"so", "executable"}, {"a", "executable"}, {"o", "executable"},  {"mo", "other"},
      {"bin", "other"},
  };
  for (const auto& [e, kind] : k_kinds) {
    if (ext == e) return kind;
  }
  return "other";
}

std::optional<std::int64_t> densefs_stored_bytes(const std::string&) {
  return std::nullopt;
}

std::string settle(const std::string&) {
  return "";
}

std::string drop_fs_caches(const std::string&) {
  return "";
}

std::optional<measure> lepton_library_decode(const std::vector<std::string>&, int) {
  return std::nullopt;
}

}  // namespace densefs::tools::bench
