// The control socket's "snapshot" request: `densefs snapshot` on a mounted
// volume (docs/backup.md, "Snapshots"). The daemon holds the store, so it
// takes, lists and deletes them.
//
//   {"op":"snapshot","action":"create","name":N} -> header {"ok":true}; end
//     line {"snapshot":{...}} (store/snapshot/registry.h, to_json). Every
//     file written through the mount before the request is in it (the
//     write-behind's data committed first, as `densefs sync` does).
//   {"op":"snapshot","action":"list"} -> end line {"snapshots":[{...},...]}
//   {"op":"snapshot","action":"delete","name":N} -> end line {"deleted":N}
//   {"op":"snapshot","action":"diff","from":A,"to":B} (B "": the live
//     volume) -> a message {"change":"+"|"-"|"M","path":P} per change, end
//     line {"added":N,"removed":N,"modified":N}
#include <cerrno>
#include <cstring>

#include "fs/control_server.h"
#include "fs/filesystem.h"

namespace densefs::fs {

void filesystem::register_snapshot_handler(control_server& server) {
  server.register_handler("snapshot", [this](const nlohmann::json& request,
                                             control_response& response) {
    if (!request.contains("action") || !request["action"].is_string())
      throw control_error(EINVAL, "snapshot: \"action\" must be create, list or delete");
    const std::string action = request["action"].get<std::string>();
    if (action == "diff") {
      for (const char* field : {"from", "to"})
        if (!request.contains(field) || !request[field].is_string())
          throw control_error(EINVAL,
                              std::string("snapshot diff: \"") + field +
                                  "\" must be a snapshot's name, or \"\" for the live volume");
      sync_all(nullptr);  // the live volume as written so far
      response.header();
      const store::tree_diff_summary sum = store_->diff_snapshots(
          request["from"].get<std::string>(), request["to"].get<std::string>(),
          [&](const store::tree_change& c) {
            response.message({{"change", std::string(1, c.kind)}, {"path", c.path}});
          });
      response.summary(
          {{"added", sum.added}, {"removed", sum.removed}, {"modified", sum.modified}});
      return;
    }
    std::string name;
    if (action != "list") {
      if (!request.contains("name") || !request["name"].is_string())
        throw control_error(EINVAL, "snapshot: \"name\" must be a string");
      name = request["name"].get<std::string>();
    }
    if (action == "list") {
      nlohmann::json all = nlohmann::json::array();
      for (const store::snapshot_record& r : store_->snapshots())
        all.push_back(nlohmann::json::parse(store::to_json(r)));
      response.header();
      response.summary({{"snapshots", all}});
      return;
    }
    if (options_.read_only || store_->read_only())
      throw control_error(EROFS, "snapshot: the mount is read-only");
    if (action == "create") {
      if (const int error = sync_all(nullptr); error != 0)
        throw control_error(error, std::string("snapshot: a file's data could not be stored: ") +
                                       std::strerror(error) + "; no snapshot was taken");
      const store::snapshot_record r = store_->create_snapshot(name);
      if (snapshots_) snapshots_->snapshots_changed(session_, name);
      response.header();
      response.summary({{"snapshot", nlohmann::json::parse(store::to_json(r))}});
      return;
    }
    if (action == "delete") {
      // No read of `.snapshots/NAME` may see its pre-images moving.
      if (snapshots_) snapshots_->close_snapshot(name);
      try {
        store_->delete_snapshot(name);
      } catch (...) {
        if (snapshots_) snapshots_->snapshots_changed(session_, name);
        throw;
      }
      if (snapshots_) snapshots_->snapshots_changed(session_, name);
      response.header();
      response.summary({{"deleted", name}});
      return;
    }
    throw control_error(EINVAL, "snapshot: unknown action '" + action + "' (create, list, delete)");
  });
}

}  // namespace densefs::fs
