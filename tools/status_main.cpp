// densefs status STORE [--json]: who has the volume mounted. A volume in a
// shared database lists its sessions (one row per mount, on any machine,
// with its last heartbeat; docs/scale-out.md "Sessions"); an embedded store
// names the one daemon its lock file records.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "store/store.h"
#include "tools/cli.h"

namespace densefs::tools {

using json = nlohmann::json;

namespace {

std::string utc_time(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

int status_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Show which clients have a volume mounted.", "densefs status"};
  std::string dir;
  bool as_json = false;
  app.add_option("STORE", dir, "a store directory, or a scale-out volume's postgresql:// URI")
      ->required();
  app.add_flag("--json", as_json, "print the sessions as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;

  // Read after the database answered: the time it took to connect must
  // not make a late heartbeat look on time.
  const auto unix_now = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  json j;
  json sessions = json::array();
  // A scale-out volume: its database alone says who has it mounted (no
  // client directory is made for a URI, no S3 credential is needed).
  const bool uri = is_volume_uri(dir);
  if (const auto volume = store::store::read_volume_status(dir, uri)) {
    const std::int64_t now = unix_now();
    for (const store::session_record& r : volume->sessions) {
      sessions.push_back({{"id", r.id},
                          {"host", r.host},
                          {"pid", r.pid},
                          {"mountpoint", r.mountpoint},
                          {"read_only", r.read_only},
                          {"started", r.started},
                          {"heartbeat", r.heartbeat},
                          {"heartbeat_age_seconds", now - r.heartbeat},
                          {"alive", !store::volume_membership::session_late(r, now)}});
    }
    j = {{"store", dir},
         {"metadata_engine", "postgresql"},
         {"metadata_location", volume->metadata_location},
         {"sessions", sessions}};
    if (!volume->payload_location.empty()) j["payload_location"] = volume->payload_location;
  } else {
    // The embedded store is one machine's: its lock file names the daemon.
    const std::filesystem::path path = dir;
    store::store_open_options options;
    options.read_only = true;
    options.chunk_cache_bytes = 0;
    const auto s = store::store::open(path, options);
    if (const auto holder = store::store::read_lock_holder(path);
        holder && !holder->mountpoint.empty()) {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      const bool alive = ::kill(holder->pid, 0) == 0 || errno == EPERM;
      sessions.push_back({{"host", std::string(host)},
                          {"pid", holder->pid},
                          {"mountpoint", holder->mountpoint},
                          {"alive", alive && !holder->exiting}});
    }
    j = {{"store", path.string()},
         {"metadata_engine", std::string(s->metadata_engine_kind())},
         {"metadata_location", s->metadata_location()},
         {"sessions", sessions}};
  }
  if (as_json) {
    io.out << j.dump(2) << '\n';
    return k_exit_ok;
  }
  io.out << j["store"].get<std::string>() << ": records in "
         << j["metadata_location"].get<std::string>();
  if (j.contains("payload_location"))
    io.out << ", packs in " << j["payload_location"].get<std::string>();
  io.out << "\n";
  if (sessions.empty()) {
    io.out << "not mounted\n";
    return k_exit_ok;
  }
  io.out << sessions.size() << (sessions.size() == 1 ? " mount:\n" : " mounts:\n");
  for (const json& m : sessions) {
    io.out << "  " << m["host"].get<std::string>() << " pid " << m["pid"].get<std::int64_t>()
           << " on " << m["mountpoint"].get<std::string>();
    if (m.value("read_only", false)) io.out << " (read-only)";
    if (m.contains("started")) {
      io.out << ", since " << utc_time(m["started"].get<std::int64_t>()) << ", last heartbeat "
             << m["heartbeat_age_seconds"].get<std::int64_t>() << " s ago";
    }
    if (m["alive"].get<bool>()) {
      io.out << "\n";
    } else if (m.contains("heartbeat_age_seconds")) {
      io.out << " (not alive: no heartbeat for " << m["heartbeat_age_seconds"].get<std::int64_t>()
             << " s, killed or cut off; a writer beside it, or the next mount, drops it)\n";
    } else {
      io.out << " (not alive: its daemon is gone or exiting)\n";
    }
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
