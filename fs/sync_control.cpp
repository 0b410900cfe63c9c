// The control socket's "sync" request: `densefs sync MNT`. Everything
// written through the mount before it is committed and synced to disk
// (write-behind holds closed files' data for up to -o commit=SEC), as an
// fsync would; docs/design.md, "Durability".
//
//   {"op":"sync"} -> header {"ok":true}; end line {"seconds":S} or, when a
//   file's data could not be stored, an error naming the errno.
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "fs/control_server.h"
#include "fs/filesystem.h"

namespace densefs::fs {

void filesystem::register_sync_handler(control_server& server) {
  server.register_handler("sync", [this](const nlohmann::json&, control_response& response) {
    const auto start = std::chrono::steady_clock::now();
    const int error = sync_everything(nullptr);
    if (error != 0) {
      throw control_error(error, std::string("sync: a file's data could not be stored: ") +
                                     std::strerror(error) + " (its next close or fsync says so)");
    }
    response.header();
    response.summary(
        {{"seconds",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}});
  });
}

}  // namespace densefs::fs
