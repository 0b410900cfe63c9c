// Human output of `densefs stats` and `densefs info` from their JSON
// (private to tools/). Throw nlohmann::json::exception when a field of the
// documented schema is missing or has the wrong type.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace densefs::tools {

using nlohmann::json;

// `j` is store::to_json(store_stats).
std::string render_stats(const std::string& source, const json& j);

// `j` is the user.densefs.info schema: {"ino","type","size","stored_bytes",
// "chunks":[{"offset","length","hash","codec","plain_size","stored_size",
// "refcount"}],"pending_bytes"}.
std::string render_info(const std::string& path, const json& j, bool abbreviate_hashes);

}  // namespace densefs::tools
