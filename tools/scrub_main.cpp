// densefs scrub STORE [--json]: reads every chunk of the store and checks
// that it decodes to its content; damaged chunks are marked so that the
// next copy of the same content heals every file using them, and those
// files are named by path (store/check/scrub.h, docs/fsck.md "Scrub"). While
// STORE is mounted its daemon scrubs, at low priority; an unmounted store
// is scrubbed here, at low priority too.
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <optional>

#include "fs/control_server.h"
#include "fs/recompressor.h"
#include "store/check/scrub.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {
namespace {

using nlohmann::json;

// The progress line: "scrub: 1234/5678 chunks, 1.2 GiB read".
void show_progress(const tool_io& io, std::uint64_t done, std::uint64_t total,
                   std::uint64_t bytes) {
  io.err << "\rscrub: " << done << "/" << total << " chunks, " << human_size(bytes) << " read"
         << "          " << std::flush;
}

// STORE is mounted: its daemon scrubs.
json scrub_live(const std::string& store_dir, bool progress, const tool_io& io) {
  try {
    fs::control_client client(store_dir);
    client.request({{"op", "scrub"}});
    bool shown = false;
    json summary = client.read_body({}, [&](const json& m) {
      if (!progress) return;
      shown = true;
      show_progress(io, m.value("done", std::uint64_t{0}), m.value("total", std::uint64_t{0}),
                    m.value("bytes", std::uint64_t{0}));
    });
    if (shown) io.err << "\n";
    summary.erase("ok");  // the control protocol's end-line marker
    return summary;
  } catch (const fs::control_error& e) {
    if (e.error_number() == ENOENT || e.error_number() == ECONNREFUSED)
      throw store::store_error(e.error_number(), store_dir +
                                                     " is in use but no densefs daemon answers "
                                                     "on its control socket: " +
                                                     e.what());
    throw store::store_error(e.error_number(), store_dir + ": " + e.what());
  }
}

json scrub_here(const std::string& store_dir, const std::string& key_file, bool progress,
                const tool_io& io) {
  store::store_open_options options;
  options.chunk_cache_bytes = 0;  // every chunk is read once
  add_volume_secret(store_dir, key_file, options);
  const auto s = store::store::open(store_dir, options);
  fs::nice_own_thread();
  store::scrub_options so;
  auto last = std::chrono::steady_clock::now();
  bool shown = false;
  if (progress) {
    so.progress = [&](std::uint64_t done, std::uint64_t total, std::uint64_t bytes) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(200) && done < total) return;
      last = now;
      shown = true;
      show_progress(io, done, total, bytes);
    };
  }
  json report = json::parse(store::to_json(store::scrub(*s, so)));
  if (shown) io.err << "\n";
  return report;
}

}  // namespace

int scrub_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Read every chunk of a store and check that it decodes to its content. Damaged chunks "
      "are marked (the next copy of the same content stores them afresh) and the files using "
      "them are named. Exit status 0 when nothing is damaged, 1 otherwise. On a mounted store "
      "the daemon does it, at low priority.",
      "densefs scrub"};
  std::string path;
  bool as_json = false;
  app.add_option("STORE", path, "a store directory, mounted or not")->required();
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
  const bool live = !lock;
  json report = live ? scrub_live(path, progress, io) : scrub_here(path, key_file, progress, io);
  const bool clean = report.value("damaged", std::uint64_t{0}) == 0;
  if (as_json) {
    report["store"] = path;
    report["mounted"] = live;
    io.out << report.dump(2) << '\n';
  } else {
    io.out << path << ": " << store::to_text(store::scrub_report_from_json(report.dump()));
  }
  return clean ? k_exit_ok : k_exit_failure;
}

}  // namespace densefs::tools
