// densefs snapshot create|list|delete|forget|diff PATH ...: a volume's snapshots
// (docs/backup.md, "Snapshots"). PATH is a mount point (or any path in the
// mount), a store directory or a scale-out volume's URI. A mounted volume's
// daemon does the work, asked through its control socket; an unmounted one
// is locked and changed here.
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cerrno>
#include <ctime>
#include <optional>
#include <sstream>

#include "fs/control_server.h"
#include "fs/mount.h"
#include "store/snapshot/retention.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/format.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {
namespace {

using nlohmann::json;

// The volume PATH names, and whether a daemon serves it.
class volume_access {
 public:
  volume_access(const std::string& path, const std::string& key_file, bool write)
      : key_file_(key_file), write_(write) {
    if (is_volume_uri(path)) {
      store_dir_ = store_path(path).string();
    } else if (const std::optional<std::string> info = read_xattr(path, fs::k_xattr_info)) {
      store_dir_ = mount_store_dir(*info, path);
    } else {
      store_dir_ = path;
    }
    store::store::check(store_dir_);
    if (write_) {
      if (std::optional<store_lock> l = lock_unless_mounted(store_dir_))
        lock_.emplace(std::move(*l));
      else
        served_ = true;
    } else {
      served_ = mounted();
    }
  }

  // The daemon's answer to {"op":"snapshot",...}; nullopt when unmounted.
  // `message` gets each message before the end line.
  std::optional<json> ask_daemon_streaming(const json& request,
                                           const std::function<void(const json&)>& message) {
    if (!served_) return std::nullopt;
    try {
      fs::control_client client(store_dir_);
      json r = request;
      r["op"] = "snapshot";
      client.request(r);
      return client.read_body({}, message);
    } catch (const fs::control_error& e) {
      throw store::store_error(e.error_number(), store_dir_ + ": " + e.what());
    }
  }
  std::optional<json> ask_daemon(const json& request) {
    return ask_daemon_streaming(request, [](const json&) {});
  }

  store::store& open() {
    if (!store_) {
      store::store_open_options options;
      options.chunk_cache_bytes = 0;
      options.read_only = !write_;
      add_volume_secret(store_dir_, key_file_, options);
      store_ = store::store::open(store_dir_, options);
    }
    return *store_;
  }

  const std::string& store_dir() const { return store_dir_; }

 private:
  bool mounted() const {
    const auto holder = store::store::read_lock_holder(store_dir_);
    return holder && !holder->mountpoint.empty() && !holder->exiting &&
           ::access((std::filesystem::path(store_dir_) / fs::k_control_socket_name).c_str(),
                    F_OK) == 0;
  }

  std::string store_dir_;
  std::string key_file_;
  bool write_;
  bool served_ = false;  // a daemon has it mounted: it is asked
  std::optional<store_lock> lock_;
  std::unique_ptr<store::store> store_;
};

// `seconds` since the epoch in local time, as strftime's `format` writes it.
std::string local_time(std::int64_t seconds, const char* format) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::vector<store::snapshot_record> list_of(volume_access& v) {
  if (const std::optional<json> answer = v.ask_daemon({{"action", "list"}}))
    return store::snapshots_from_json(answer->at("snapshots").dump());
  return v.open().snapshots();
}

void delete_one(volume_access& v, const std::string& name) {
  if (!v.ask_daemon({{"action", "delete"}, {"name", name}})) v.open().delete_snapshot(name);
}

std::string reasons_text(const std::vector<std::string>& reasons) {
  std::string out;
  for (const std::string& r : reasons) out += (out.empty() ? "" : ", ") + r;
  return out;
}

}  // namespace

int snapshot_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "A volume's snapshots: instant, read-only states of the whole volume. Browse one "
      "with densefs mount -o snapshot=NAME.",
      "densefs snapshot"};
  app.require_subcommand(1);
  std::string path, key_file, name, other;
  std::vector<std::string> names;
  bool as_json = false, dry_run = false;
  store::retention_rule rule;
  const auto common = [&](CLI::App* sub) {
    sub->add_option("PATH", path, "a mount point, a store directory or a volume's URI")->required();
    sub->add_option("--key-file", key_file,
                    "an unmounted encrypted volume's key file (else DENSEFS_PASSPHRASE, else a "
                    "terminal asks)")
        ->type_name("FILE");
    sub->add_flag("--json", as_json, "print the result as JSON");
  };
  CLI::App* create = app.add_subcommand("create", "take a snapshot now");
  common(create);
  create->add_option("NAME", name, "its name (default: the local time, 2026-12-01T02:00:00)");
  CLI::App* list = app.add_subcommand("list", "list the snapshots, oldest first");
  common(list);
  CLI::App* remove = app.add_subcommand(
      "delete", "delete snapshots (the chunks only they held are given back to gc)");
  common(remove);
  remove->add_option("NAME", names, "the snapshots to delete")->required();
  CLI::App* forget = app.add_subcommand(
      "forget", "delete the snapshots a retention rule does not keep (as restic forget)");
  common(forget);
  forget->add_option("--keep-last", rule.last, "keep the N newest")->type_name("N");
  forget->add_option("--keep-daily", rule.daily, "keep the newest of each of the N newest days")
      ->type_name("N");
  forget
      ->add_option("--keep-weekly", rule.weekly,
                   "keep the newest of each of the N newest ISO weeks")
      ->type_name("N");
  forget
      ->add_option("--keep-monthly", rule.monthly, "keep the newest of each of the N newest months")
      ->type_name("N");
  forget->add_flag("--dry-run", dry_run, "only print what would be deleted");
  CLI::App* diff = app.add_subcommand(
      "diff", "what changed from snapshot FROM to snapshot TO (or to the live volume)");
  common(diff);
  diff->add_option("FROM", name, "the older snapshot")->required();
  diff->add_option("TO", other, "the newer snapshot (default: the volume as it is now)");
  if (auto done = parse_cli(app, args, io)) return *done;

  try {
    if (create->parsed()) {
      if (name.empty()) name = local_time(std::time(nullptr), "%Y-%m-%dT%H:%M:%S");
      store::check_snapshot_name(name);
      volume_access v(path, key_file, true);
      json r;
      if (const std::optional<json> answer = v.ask_daemon({{"action", "create"}, {"name", name}}))
        r = answer->at("snapshot");
      else
        r = json::parse(store::to_json(v.open().create_snapshot(name)));
      if (as_json)
        io.out << r.dump(2) << '\n';
      else
        io.out << "snapshot " << name << " of " << v.store_dir() << " taken\n";
      return k_exit_ok;
    }
    if (list->parsed()) {
      volume_access v(path, key_file, false);
      const std::vector<store::snapshot_record> all = list_of(v);
      if (as_json) {
        json out = json::array();
        for (const auto& r : all) out.push_back(json::parse(store::to_json(r)));
        io.out << out.dump(2) << '\n';
        return k_exit_ok;
      }
      std::vector<std::vector<std::string>> rows{{"name", "taken", "state"}};
      for (const auto& r : all)
        rows.push_back({r.name, local_time(r.created, "%Y-%m-%d %H:%M:%S"),
                        r.state == store::snapshot_state::live ? "" : "being deleted"});
      if (all.empty())
        io.out << v.store_dir() << " has no snapshots\n";
      else
        io.out << format_table(rows);
      return k_exit_ok;
    }
    if (remove->parsed()) {
      volume_access v(path, key_file, true);
      for (const std::string& n : names) {
        delete_one(v, n);
        if (!as_json) io.out << "snapshot " << n << " deleted\n";
      }
      if (as_json) io.out << json{{"deleted", names}}.dump(2) << '\n';
      return k_exit_ok;
    }
    if (forget->parsed()) {
      if (rule.empty()) {
        print_error(io, "snapshot forget",
                    "give a rule (--keep-last, --keep-daily, --keep-weekly, --keep-monthly); "
                    "without one nothing would be kept");
        return k_exit_usage;
      }
      volume_access v(path, key_file, !dry_run);
      const std::vector<store::retention_decision> decisions =
          store::apply_retention(list_of(v), rule);
      json out = json::array();
      for (const store::retention_decision& d : decisions) {
        if (!d.keep && !dry_run) delete_one(v, d.snapshot.name);
        out.push_back({{"name", d.snapshot.name}, {"keep", d.keep}, {"reasons", d.reasons}});
        if (!as_json)
          io.out << (d.keep    ? "keep   "
                     : dry_run ? "would delete "
                               : "delete ")
                 << d.snapshot.name
                 << (d.keep ? "  (" + reasons_text(d.reasons) + ")" : std::string()) << '\n';
      }
      if (as_json) io.out << json{{"dry_run", dry_run}, {"snapshots", out}}.dump(2) << '\n';
      return k_exit_ok;
    }
    if (diff->parsed()) {
      volume_access v(path, key_file, false);
      json changes = json::array();
      const auto show = [&](char kind, const std::string& p) {
        if (as_json)
          changes.push_back({{"change", std::string(1, kind)}, {"path", p}});
        else
          io.out << kind << "    " << p << '\n';
      };
      json sum;
      if (const std::optional<json> answer = v.ask_daemon_streaming(
              {{"action", "diff"}, {"from", name}, {"to", other}}, [&](const json& m) {
                show(m.at("change").get<std::string>().at(0), m.at("path").get<std::string>());
              })) {
        sum = *answer;
      } else {
        const store::tree_diff_summary s = v.open().diff_snapshots(
            name, other, [&](const store::tree_change& c) { show(c.kind, c.path); });
        sum = {{"added", s.added}, {"removed", s.removed}, {"modified", s.modified}};
      }
      if (as_json) {
        sum.erase("ok");
        sum["changes"] = changes;
        io.out << sum.dump(2) << '\n';
      } else {
        io.out << sum.value("added", 0) << " added, " << sum.value("removed", 0) << " removed, "
               << sum.value("modified", 0) << " modified\n";
      }
      return k_exit_ok;
    }
  } catch (const std::exception& e) {
    print_error(io, "snapshot", e.what());
    return k_exit_failure;
  }
  return k_exit_usage;
}

}  // namespace densefs::tools
