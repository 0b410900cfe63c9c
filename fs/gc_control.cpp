// The control socket's "gc" request: `densefs gc STORE` while STORE is
// mounted. The daemon holds the store, so it collects (or, with dry_run,
// only measures) and reports; docs/gc.md.
//
//   {"op":"gc","dry_run":B} -> header {"ok":true,"dry_run":B}; messages
//   {"phase":"compacting chunks"}; end line with "dry_run", "before" (a
//   store::gc_report) and, unless dry_run, "after", "reclaimed_bytes",
//   "rewrote_payloads", "seconds" (store::to_json(gc_result)).
#include <cerrno>

#include "fs/control_server.h"
#include "fs/filesystem.h"

namespace densefs::fs {

void filesystem::register_gc_handler(control_server& server) {
  server.register_handler("gc", [this](const nlohmann::json& request, control_response& response) {
    bool dry_run = false;
    if (request.contains("dry_run")) {
      if (!request["dry_run"].is_boolean())
        throw control_error(EINVAL, "gc: \"dry_run\" must be true or false");
      dry_run = request["dry_run"].get<bool>();
    }
    // What the store holds once what was written before is in it
    // (write-behind): a measure or a collection right after a copy sees it.
    sync_all(nullptr);
    if (dry_run) {
      response.header({{"dry_run", true}});
      response.summary({{"dry_run", true},
                        {"before", nlohmann::json::parse(store::to_json(store_->garbage()))}});
      return;
    }
    if (options_.read_only || !gc_) throw control_error(EROFS, "gc: the mount is read-only");
    response.header({{"dry_run", false}});
    const store::gc_result r = gc_->collect([&](std::string_view phase) {
      response.message({{"phase", phase}});
    });
    nlohmann::json summary = nlohmann::json::parse(store::to_json(r));
    summary["dry_run"] = false;
    response.summary(summary);
  });
}

}  // namespace densefs::fs
