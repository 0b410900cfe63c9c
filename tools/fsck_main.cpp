// densefs fsck STORE [--repair] [--deep] [--json]: checks an unmounted
// store (refcounts, leaked chunks, payload checksums, links) and with
// --repair fixes what needs no guessing. docs/fsck.md.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "store/fsck.h"
#include "store/store.h"
#include "tools/cli.h"

namespace densefs::tools {

int fsck_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Check an unmounted store: chunk refcounts against extents, leaked chunks, payload "
      "checksums, directory links. Exit status 0 when no errors remain, 1 otherwise.",
      "densefs fsck"};
  std::string path;
  bool repair = false;
  bool deep = false;
  bool as_json = false;
  app.add_option("STORE", path, "an unmounted store directory")->required();
  app.add_flag("--repair", repair,
               "fix refcounts, leaked chunks, link counts, stale queue entries and stored_bytes "
               "(damaged file data is only reported)");
  app.add_flag("--deep", deep, "also decode every chunk and check its SHA-256 (slow)");
  bool rebuild_index = false;
  app.add_flag("--rebuild-index", rebuild_index,
               "pack stores: first rebuild the payload index from the pack files (writes to the "
               "store; --repair rebuilds only the entries of damaged payloads)");
  app.add_flag("--json", as_json, "print the report as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;
  if (is_volume_uri(path)) path = store_path(path).string();

  store::store::check(path);
  const store_lock lock(path);
  store::store_open_options options;
  options.chunk_cache_bytes = 0;  // every chunk is read once
  // A damaged table, log or manifest file: the database does not open, or
  // a table fails its checksums. --repair salvages what RocksDB can read and
  // checks the rest (docs/fsck.md, "Damaged metadata").
  std::unique_ptr<store::store> s;
  std::string damage;
  bool salvaged = false;
  try {
    s = store::store::open(path, options);
    damage = s->verify_metadata_checksums();
  } catch (const store::store_error& e) {
    if (e.error_number() != EUCLEAN) throw;
    damage = e.what();
  }
  if (!damage.empty()) {
    if (!repair)
      throw store::store_error(EUCLEAN, "the database of store " + path + " is damaged (" + damage +
                                            "); `densefs fsck --repair " + path +
                                            "` salvages what can be read (docs/fsck.md)");
    s.reset();
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const std::filesystem::path keep =
        std::filesystem::path(path) / ("metadata-before-salvage-" + std::to_string(now));
    const std::vector<std::string> lost = store::store::salvage_metadata(path, keep);
    io.err << "fsck: the database is damaged: " << damage
           << "\nfsck: salvaged it (the damaged originals are in " << keep.string() << "); "
           << lost.size() << " file(s) could not be read and were set aside with their records"
           << (lost.empty() ? "" : ":") << "\n";
    for (const std::string& f : lost) io.err << "fsck:   " << f << "\n";
    if (!lost.empty())
      io.err << "fsck: a table set aside may have held the newest version of some records: a "
                "file changed shortly before the damage may read as it was before; compare "
                "recently changed files with their source\n";
    s = store::store::open(path, options);
    rebuild_index = true;  // index entries of lost tables come back from the packs
    // Only a table file set aside can have taken extents with it.
    for (const std::string& f : lost) salvaged = salvaged || f.ends_with(".sst");
  }

  store::fsck_options fo;
  fo.repair = repair;
  fo.deep = deep;
  fo.rebuild_index = rebuild_index;
  fo.after_salvage = salvaged;
  const bool progress = !as_json && progress_wanted(io);
  auto last = std::chrono::steady_clock::now();
  bool shown = false;
  if (progress) {
    fo.progress = [&](std::string_view phase, std::uint64_t done, std::uint64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(200)) return;
      last = now;
      shown = true;
      io.err << "\rfsck: " << phase << " " << done;
      if (total > 0) io.err << "/" << total;
      io.err << "          " << std::flush;
    };
  }
  const store::fsck_report report = store::fsck(*s, fo);
  if (shown) io.err << "\n";

  if (as_json) {
    io.out << store::to_json(report) << '\n';
  } else {
    io.out << path << ": " << store::to_text(report);
  }
  return report.clean() ? k_exit_ok : k_exit_failure;
}

}  // namespace densefs::tools
