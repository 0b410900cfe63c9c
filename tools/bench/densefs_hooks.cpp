// The harness inside the densefs CLI: the project's classifier names the
// kinds of file, and a densefs target reports its stored bytes.
#include <sys/xattr.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "codec/classify.h"
#include "fs/mount.h"
#include "tools/bench/bench.h"

namespace densefs::tools::bench {

std::string file_kind(const std::string& path) {
  std::string head(codec::k_classify_head_bytes, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  const auto slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return std::string(codec::file_type_name(codec::classify(head, name)));
}

std::optional<std::int64_t> densefs_stored_bytes(const std::string& dir) {
  std::string value(64 * 1024, '\0');
  const ssize_t n = ::getxattr(dir.c_str(), fs::k_xattr_stats, value.data(), value.size());
  if (n < 0) return std::nullopt;  // not a densefs mount
  value.resize(static_cast<std::size_t>(n));
  const auto j = nlohmann::json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("stored_bytes")) return std::nullopt;
  return j["stored_bytes"].get<std::int64_t>();
}

}  // namespace densefs::tools::bench
