// densefs mount STORE MNT [-f] [-d] [-s] [-o ...], also reached as
// `densefs STORE MNT -o ...` (mount.fuse3, fstab). STORE may be a scale-out
// volume's postgresql:// URI (docs/scale-out.md).
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "fs/mount.h"
#include "tools/cli.h"
#include "tools/mount_args.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {

int mount_main(const std::vector<std::string>& args, const tool_io& io) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      io.out << k_mount_usage;
      return k_exit_ok;
    }
    if (a == "--") break;
  }
  fs::mount_options options;
  try {
    options = parse_mount_args(args);
  } catch (const usage_error& e) {
    print_error(io, "mount", e.what());
    return k_exit_usage;
  }
  // A scale-out volume by its database: its directory (FORMAT, lock,
  // cache) under cache_dir, made on first use.
  if (is_volume_uri(options.store_dir.string())) {
    options.volume_uri = options.store_dir.string();
    options.store_dir = store_path(options.store_dir.string(), options.cache_dir);
    options.cache_dir.clear();  // the cache is in that directory
  }
  // The daemon changes its directory to /, so relative paths must be
  // resolved here.
  options.store_dir = absolute_path(options.store_dir);
  options.mountpoint = absolute_path(options.mountpoint);
  // An encrypted volume's secret, here where a terminal can still ask for
  // it: the daemon that opens the store has none.
  if (!options.remount) {
    store::store::check(options.store_dir);
    if (store::store::is_encrypted(options.store_dir)) {
      options.key_secret = volume_secret(
          options.key_file, k_passphrase_env,
          "Passphrase of encrypted volume " + options.store_dir.string() + ": ", false);
      if (!options.key_secret)
        throw store::store_error(ENOKEY, "volume " + options.store_dir.string() +
                                             " is encrypted: give its key with -o key_file=FILE "
                                             "or DENSEFS_PASSPHRASE");
      // Not left in the daemon's environment: /proc/PID/environ shows the
      // strings the process started with, so overwrite them, then unset.
      if (char* value = std::getenv(k_passphrase_env)) ::explicit_bzero(value, std::strlen(value));
      ::unsetenv(k_passphrase_env);
    }
  }
  return fs::mount(options);
}

}  // namespace densefs::tools
