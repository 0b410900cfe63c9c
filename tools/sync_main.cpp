// densefs sync PATH [--json]: makes everything written through the mount
// that holds PATH durable, as fsync(2) would, and returns. Write-behind
// keeps closed files' data in memory for up to -o commit=SEC; sync(1)
// cannot reach it (libfuse 3.14 has no SYNCFS), so this asks the daemon
// through its control socket (STORE/control.sock). docs/design.md,
// "Durability".
#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <iomanip>
#include <optional>
#include <sstream>

#include "fs/control_server.h"
#include "fs/mount.h"
#include "tools/cli.h"

namespace densefs::tools {

int sync_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{
      "Make everything written through a densefs mount durable (as fsync does), "
      "including closed files whose data is still being committed.",
      "densefs sync"};
  std::string path;
  bool as_json = false;
  app.add_option("PATH", path, "the mount point or any path inside the mount")->required();
  app.add_flag("--json", as_json, "print the result as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;

  std::string store_dir;
  {
    fd_guard file;
    file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (file.fd < 0) {
      print_error(io, "sync", path + ": " + std::strerror(errno));
      return k_exit_failure;
    }
    std::optional<std::string> info;
    try {
      info = read_xattr(file.fd, path, fs::k_xattr_info);
      if (info) store_dir = mount_store_dir(*info, path);
    } catch (const std::exception& e) {
      print_error(io, "sync", e.what());
      return k_exit_failure;
    }
    if (!info) {
      print_error(io, "sync", path + " is not inside a densefs mount");
      return k_exit_failure;
    }
  }
  nlohmann::json summary;
  try {
    fs::control_client client(store_dir);
    client.request({{"op", "sync"}});
    summary = client.read_body({});
  } catch (const std::exception& e) {
    print_error(io, "sync", path + ": " + e.what());
    return k_exit_failure;
  }
  const double seconds = summary.value("seconds", 0.0);
  if (as_json) {
    io.out << nlohmann::json{{"path", path}, {"store", store_dir}, {"seconds", seconds}}.dump(2)
           << '\n';
  } else {
    std::ostringstream s;
    s << std::fixed << std::setprecision(2) << seconds;
    io.out << path << ": synced (" << s.str() << " s)\n";
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
