// densefs gc STORE [--dry-run] [--json]: gives back the disk space of deleted
// and replaced chunk payloads and of deleted metadata (docs/gc.md). An
// unmounted store is locked and collected here; while STORE is mounted its
// daemon does the work, asked through STORE/control.sock.
#include <nlohmann/json.hpp>

#include <cerrno>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "fs/control_server.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {
namespace {

using nlohmann::json;

// One row per kind of file, then the live payloads: `columns` are reports
// (JSON objects, as store::to_json(gc_report) writes them) side by side.
std::string report_table(const std::vector<std::string>& headers,
                         const std::vector<const json*>& columns) {
  static constexpr const char* k_rows[][2] = {
      {"on disk", "disk_bytes"},
      {"  payload files (*.blob, *.pack)", "payload_file_bytes"},
      {"  table files (*.sst)", "table_file_bytes"},
      {"  write-ahead log (*.log)", "wal_bytes"},
      {"  info log (LOG)", "info_log_bytes"},
      {"  old info logs (LOG.old.*)", "old_info_log_bytes"},
      {"  other (MANIFEST, ...)", "other_file_bytes"},
      {"live payloads", "live_payload_bytes"},
      {"payload garbage (estimate)", "payload_garbage_bytes"},
  };
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{""};
  header.insert(header.end(), headers.begin(), headers.end());
  rows.push_back(header);
  for (const auto& [label, field] : k_rows) {
    std::vector<std::string> row{label};
    for (const json* c : columns) row.push_back(human_size(c->value(field, std::uint64_t{0})));
    rows.push_back(row);
  }
  return format_table(rows);
}

void print_result(const std::string& store, bool live, const json& result, bool as_json,
                  const tool_io& io) {
  const bool dry_run = result.value("dry_run", false);
  if (as_json) {
    json j = result;
    j.erase("ok");  // the control protocol's end-line marker
    j["store"] = store;
    j["mounted"] = live;
    io.out << j.dump(2) << '\n';
    return;
  }
  const json& before = result.at("before");
  if (dry_run) {
    io.out << store << ": " << human_size(before.value("disk_bytes", std::uint64_t{0}))
           << " on disk, about " << human_size(before.value("reclaimable_bytes", std::uint64_t{0}))
           << " reclaimable by densefs gc" << (live ? " (mounted)" : "") << "\n"
           << report_table({"now"}, {&before});
    return;
  }
  const json& after = result.at("after");
  std::ostringstream seconds;
  seconds << std::fixed << std::setprecision(result.value("seconds", 0.0) < 10 ? 2 : 0)
          << result.value("seconds", 0.0);
  io.out << store << ": reclaimed " << human_size(result.value("reclaimed_bytes", std::uint64_t{0}))
         << " in " << seconds.str() << " s" << (live ? " (by the mounted daemon)" : "") << "\n"
         << report_table({"before", "after"}, {&before, &after});
  if (!result.value("rewrote_payloads", true))
    io.out << "low on free space: payload files with live payloads were kept "
              "(free some space and run densefs gc again)\n";
}

// STORE is mounted: its daemon collects.
json collect_live(const std::string& store_dir, bool dry_run, bool progress, const tool_io& io) {
  try {
    fs::control_client client(store_dir);
    client.request({{"op", "gc"}, {"dry_run", dry_run}});
    bool shown = false;
    json summary = client.read_body({}, [&](const json& m) {
      if (!progress) return;
      shown = true;
      io.err << "\rgc: " << m.value("phase", std::string()) << "                    " << std::flush;
    });
    if (shown) io.err << "\n";
    return summary;
  } catch (const fs::control_error& e) {
    if (e.error_number() == ENOENT || e.error_number() == ECONNREFUSED)
      throw store::store_error(e.error_number(),
                               store_dir +
                                   " is in use but no densefs daemon answers on its "
                                   "control socket: " +
                                   e.what());
    throw store::store_error(e.error_number(), store_dir + ": " + e.what());
  }
}

}  // namespace

int gc_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Give back the disk space of deleted and replaced chunk payloads and of deleted "
      "metadata. On a mounted store the daemon does it.",
      "densefs gc"};
  std::string path;
  bool dry_run = false;
  bool as_json = false;
  app.add_option("STORE", path, "a store directory, mounted or not")->required();
  app.add_flag("--dry-run", dry_run,
               "only report what the store holds and what gc would give back");
  app.add_flag("--json", as_json, "print the report as JSON");
  std::string key_file;
  app.add_option("--key-file", key_file,
                 "an encrypted volume's key file (else DENSEFS_PASSPHRASE, else a terminal asks)")
      ->type_name("FILE");
  if (auto done = parse_cli(app, args, io)) return *done;
  if (is_volume_uri(path)) path = store_path(path).string();

  store::store::check(path);
  const bool progress = !as_json && progress_wanted(io);
  const std::optional<store_lock> lock = lock_unless_mounted(path);
  if (!lock) {
    print_result(path, true, collect_live(path, dry_run, progress, io), as_json, io);
    return k_exit_ok;
  }

  store::store_open_options options;
  options.chunk_cache_bytes = 0;
  add_volume_secret(path, key_file, options);
  const auto s = store::store::open(path, options);
  json result;
  if (dry_run) {
    result["dry_run"] = true;
    result["before"] = json::parse(store::to_json(s->garbage()));
  } else {
    bool shown = false;
    const store::gc_result r = s->collect_garbage([&](std::string_view phase) {
      if (!progress) return;
      shown = true;
      io.err << "\rgc: " << phase << "                    " << std::flush;
    });
    if (shown) io.err << "\n";
    result = json::parse(store::to_json(r));
    result["dry_run"] = false;
  }
  print_result(path, false, result, as_json, io);
  return k_exit_ok;
}

}  // namespace densefs::tools
