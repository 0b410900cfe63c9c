// Where the CLI gets an encrypted volume's secret (docs/encryption.md): a
// key file (`--key-file FILE`, `-o key_file=FILE`), else an environment
// variable (DENSEFS_PASSPHRASE), else a passphrase typed at the terminal.
// Never from the command line itself, where other users could read it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "store/store.h"

namespace densefs::tools {

inline constexpr const char* k_passphrase_env = "DENSEFS_PASSPHRASE";
inline constexpr const char* k_new_passphrase_env = "DENSEFS_NEW_PASSPHRASE";

// The secret a key file holds (store::parse_key_file). Refuses a file other
// users can read or write (chmod 600 names the fix), and one that is not a
// regular file. Throws store::store_error.
std::string read_key_file(const std::string& path);

// The secret from `key_file` if given, else from the environment variable
// `env`, else typed at the terminal after `prompt` (twice when `confirm`);
// nullopt when none of these is there (no terminal).
std::optional<std::string> volume_secret(const std::string& key_file, const char* env,
                                         const std::string& prompt, bool confirm);

// For a tool about to open `store_dir`: when its volume is encrypted, its
// secret into `options` (as volume_secret gets it). A store that is not
// encrypted asks for nothing.
void add_volume_secret(const std::filesystem::path& store_dir, const std::string& key_file,
                       store::store_open_options& options);

}  // namespace densefs::tools
