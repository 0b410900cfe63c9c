// densefs info PATH [--json]: how one file is stored, from the
// user.densefs.info xattr that fs/ serves on every inode.
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "fs/control_server.h"
#include "fs/mount.h"
#include "tools/cli.h"
#include "tools/render.h"

namespace densefs::tools {

int info_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Show how a file in a densefs mount is stored: size, stored size, chunks, codecs.",
               "densefs info"};
  std::string path;
  bool as_json = false;
  app.add_option("PATH", path, "a path inside a densefs mount")->required();
  app.add_flag("--json", as_json, "print the information as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;

  std::optional<std::string> text;
  try {
    text = read_xattr(path, fs::k_xattr_info);
  } catch (const std::system_error& e) {
    print_error(io, "info", path + ": " + e.code().message());
    return k_exit_failure;
  }
  if (!text) {
    print_error(io, "info", path + " is not inside a densefs mount");
    return k_exit_failure;
  }
  try {
    json j = json::parse(*text);
    if (j.value("chunks_truncated", false)) {
      // The xattr lists the first chunks only (64 KiB): the daemon sends
      // all of them to the mount owner, for a file held open (only regular
      // files have chunks). Others keep the partial list.
      fd_guard file;
      file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
      struct stat st {};
      if (file.fd >= 0 && ::fstat(file.fd, &st) == 0 && S_ISREG(st.st_mode) &&
          st.st_ino == j.at("ino").get<std::uint64_t>()) {
        try {
          fs::control_client client(mount_store_dir(*text, path));
          client.request({{"op", "info"}, {"ino", j.at("ino")}});
          std::string whole;
          client.read_body([&](std::string_view bytes) { whole += bytes; });
          j = json::parse(whole);
        } catch (const fs::control_error&) {
        }
      }
    }
    if (as_json) {
      io.out << j.dump(2) << '\n';
    } else {
      io.out << render_info(path, j, io.out_is_terminal);
    }
  } catch (const json::exception& e) {
    print_error(io, "info", path + ": unexpected information from densefs: " + e.what());
    return k_exit_failure;
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
