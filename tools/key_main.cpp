// densefs key change STORE|URI [--key-file OLD] [--new-key-file NEW] [--json]:
// seals an encrypted volume's master key under a new secret, one record
// rewritten and no payload touched (docs/encryption.md, "Changing the key").
#include <nlohmann/json.hpp>

#include "store/error.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {

int key_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Manage an encrypted volume's key.", "densefs key"};
  app.require_subcommand(1);
  CLI::App* change = app.add_subcommand(
      "change",
      "Seal the volume's key under a new passphrase or key file; its data is not "
      "re-encrypted. The old secret comes from --key-file, else DENSEFS_PASSPHRASE, else the "
      "terminal; the new one from --new-key-file, else DENSEFS_NEW_PASSPHRASE, else the "
      "terminal (twice). The volume must not be mounted.");
  std::string path;
  std::string key_file;
  std::string new_key_file;
  bool as_json = false;
  change->add_option("STORE", path, "a store directory or a volume's postgresql:// URI")
      ->required();
  change->add_option("--key-file", key_file, "the current key file")->type_name("FILE");
  change->add_option("--new-key-file", new_key_file, "the new key file (mode 0600)")
      ->type_name("FILE");
  change->add_flag("--json", as_json, "print the result as JSON");
  if (auto done = parse_cli(app, args, io)) return *done;
  if (is_volume_uri(path)) path = store_path(path).string();
  const std::filesystem::path dir = absolute_path(path);

  store::store::check(dir);
  // Refused while mounted here; a PostgreSQL volume's writer lock refuses
  // it while mounted for writing anywhere.
  const store_lock lock(dir);
  const std::optional<std::string> old_secret = volume_secret(
      key_file, k_passphrase_env, "Current passphrase of " + dir.string() + ": ", false);
  if (!old_secret)
    throw store::store_error(EINVAL, "no current key: give --key-file FILE or " +
                                         std::string(k_passphrase_env) +
                                         ", or run this at a terminal");
  const std::optional<std::string> new_secret = volume_secret(
      new_key_file, k_new_passphrase_env, "New passphrase of " + dir.string() + ": ", true);
  if (!new_secret)
    throw store::store_error(EINVAL, "no new key: give --new-key-file FILE or " +
                                         std::string(k_new_passphrase_env) +
                                         ", or run this at a terminal");
  store::store::change_key(dir, *old_secret, store::volume_encryption{*new_secret});
  if (as_json) {
    io.out << nlohmann::json{{"store", dir.string()}, {"key_changed", true}}.dump() << "\n";
  } else {
    io.out << "the key of " << dir.string()
           << " is changed; copies made before (dumps, backups of its database) still open with "
              "the old one\n";
  }
  return k_exit_ok;
}

}  // namespace densefs::tools
