// densefs info PATH [--json]: how one file is stored, from the
// user.densefs.info xattr that fs/ serves on every inode.
#include <nlohmann/json.hpp>

#include <system_error>

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
    const json j = json::parse(*text);
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
