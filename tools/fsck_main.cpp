// densefs fsck STORE [--repair] [--deep] [--repair-from DIR] [--json]:
// checks an unmounted store (refcounts, leaked chunks, payload checksums,
// links), with --repair fixes what needs no guessing, and with
// --repair-from heals damaged chunks from a source tree. docs/fsck.md.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/check/fsck.h"
#include "store/check/repair_from.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/volume_key_input.h"

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
  std::string repair_from;
  app.add_option("--repair-from", repair_from,
                 "with --repair implied: heal damaged chunks from the files under DIR (a "
                 "source or backup of the data), matched by content, not by name")
      ->type_name("DIR");
  app.add_flag("--json", as_json, "print the report as JSON");
  std::string key_file;
  app.add_option("--key-file", key_file,
                 "an encrypted volume's key file (else DENSEFS_PASSPHRASE, else a terminal asks)")
      ->type_name("FILE");
  if (auto done = parse_cli(app, args, io)) return *done;
  if (is_volume_uri(path)) path = store_path(path).string();
  if (!repair_from.empty()) {
    repair = true;
    if (!std::filesystem::is_directory(repair_from) &&
        !std::filesystem::is_regular_file(repair_from))
      throw store::store_error(ENOENT, "--repair-from " + repair_from +
                                           ": no such directory or file (name the source tree "
                                           "the damaged files were copied from)");
  }

  store::store::check(path);
  const store_lock lock(path);
  store::store_open_options options;
  options.chunk_cache_bytes = 0;  // every chunk is read once
  add_volume_secret(path, key_file, options);
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
    const store::store::metadata_salvage salvage = store::store::salvage_metadata(path, keep);
    const std::vector<std::string>& lost = salvage.lost;
    io.err << "fsck: the database is damaged: " << damage
           << "\nfsck: salvaged it (the damaged originals are in " << keep.string() << ")\n";
    for (const std::string& f : salvage.restored)
      io.err << "fsck:   restored from the metadata backup: " << f << "\n";
    io.err << "fsck: " << lost.size()
           << " file(s) could not be read nor restored and were set aside with their records"
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
  store::fsck_report report = store::fsck(*s, fo);
  // Chunk records made again from the packs bring references of their own
  // (a Lepton member's on its first chunk): checked and counted again.
  if (report.chunk_records_rebuilt > 0) {
    store::fsck_report again = store::fsck(*s, fo);
    store::add_earlier_repairs(again, report);
    report = std::move(again);
  }
  if (shown) io.err << "\n";
  std::optional<store::repair_from_report> healed;
  if (!repair_from.empty()) {
    store::repair_from_options ro;
    if (progress) {
      ro.progress = [&](std::uint64_t files, std::uint64_t bytes) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last < std::chrono::milliseconds(200)) return;
        last = now;
        io.err << "\rfsck: reading " << repair_from << ": " << files << " files, "
               << human_size(bytes) << "          " << std::flush;
      };
    }
    healed = store::repair_from(*s, repair_from, ro);
    if (progress) io.err << "\n";
    // Checked again: what is healed no longer counts as damage.
    if (healed->healed > 0) {
      store::fsck_report again = store::fsck(*s, fo);
      store::add_earlier_repairs(again, report);
      report = std::move(again);
    }
  }

  if (as_json) {
    nlohmann::json j = nlohmann::json::parse(store::to_json(report));
    if (healed)
      j["repair_from"] = {{"source", repair_from},
                          {"damaged", healed->damaged},
                          {"healed", healed->healed},
                          {"files_read", healed->files_read},
                          {"bytes_read", healed->bytes_read},
                          {"healed_from", healed->healed_from},
                          {"not_found", healed->not_found}};
    io.out << j.dump(2) << '\n';
  } else {
    if (healed) {
      io.out << path << ": healed " << healed->healed << " of " << healed->damaged
             << " damaged chunk(s) from " << repair_from << " (" << healed->files_read << " files, "
             << human_size(healed->bytes_read) << " read)\n";
      for (const std::string& h : healed->healed_from) io.out << "  " << h << "\n";
      if (!healed->not_found.empty())
        io.out << "not in " << repair_from << " (copy the files using them in again, or "
               << "restore them from a backup):\n";
      for (const std::string& n : healed->not_found) io.out << "  " << n << "\n";
    }
    io.out << path << ": " << store::to_text(report);
  }
  return report.clean() ? k_exit_ok : k_exit_failure;
}

}  // namespace densefs::tools
