// densefs stats STORE|MNT [--json]: how much a store saves. A store
// directory is opened read-only; a mount is asked through its stats xattr.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <system_error>

#include "fs/mount.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/render.h"

namespace densefs::tools {

int stats_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Show logical and stored size, ratio, chunks and dedup savings of a store.",
               "densefs stats"};
  std::string path;
  bool as_json = false;
  app.add_option("PATH", path, "a store directory or any path inside a densefs mount")->required();
  app.add_flag("--json", as_json, "print the statistics as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;
  if (is_volume_uri(path)) path = store_path(path).string();

  std::string text;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) &&
      std::filesystem::exists(std::filesystem::path(path) / "FORMAT", ec)) {
    store::store_open_options options;
    options.read_only = true;
    // One walk over the metadata: a big cache would only cost start-up time.
    options.chunk_cache_bytes = 0;
    const auto s = store::store::open(path, options);
    text = store::to_json(s->stats());
  } else {
    std::optional<std::string> xattr;
    try {
      xattr = read_xattr(path, fs::k_xattr_stats);
    } catch (const std::system_error& e) {
      print_error(io, "stats", path + ": " + e.code().message());
      return k_exit_failure;
    }
    if (!xattr) {
      print_error(io, "stats", path + " is neither a densefs store nor a densefs mount");
      return k_exit_failure;
    }
    text = std::move(*xattr);
  }

  json j;
  try {
    j = json::parse(text);
    if (as_json) {
      io.out << j.dump(2) << '\n';
    } else {
      io.out << render_stats(absolute_path(path).string(), j);
    }
  } catch (const json::exception& e) {
    print_error(io, "stats", path + ": unexpected statistics from densefs: " + e.what());
    return k_exit_failure;
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
