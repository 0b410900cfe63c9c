// densefs mkfs STORE [--codec SPEC] [--payloads pack|blob] [--meta postgresql://...]
//                    [--data s3://bucket/prefix?endpoint=...] [--encrypt [--key-file FILE]]
#include <filesystem>

#include "codec/policy.h"
#include "store/store.h"
#include "tools/cli.h"
#include "tools/volume_key_input.h"

namespace densefs::tools {

namespace {

// How to mount what was just made, in the form its kind takes: a volume
// whose packs are in object storage mounts by its URI on any machine
// (docs/scale-out.md), and its credentials never go on the command line.
std::string mount_hint(const std::filesystem::path& dir, const std::string& meta,
                       const std::string& data, bool encrypted) {
  const std::string key = encrypted ? " (the key: -o key_file=FILE or DENSEFS_PASSPHRASE)" : "";
  if (meta.empty())
    return "mount it with: densefs mount " + dir.string() + " MOUNTPOINT" + key + "\n";
  const std::string here =
      "mount it on this machine with: densefs mount " + dir.string() + " MOUNTPOINT" + key + "\n";
  const std::string password = "the database password from PGPASSWORD or ~/.pgpass (mode 0600)";
  if (data.empty())
    return here + "its packs are in " + dir.string() + ", so only this machine mounts it; " +
           password + "\n";
  // A connection string (host=... dbname=...) has no URI form to quote.
  const std::string uri = is_volume_uri(meta) ? meta : "postgresql://USER@HOST:PORT/DATABASE";
  return here + "or on any machine, as one more client: densefs mount " + uri +
         " MOUNTPOINT [-o shared (several writers) | -o ro (a read-only follower)]" + key +
         "\nwith " + password +
         " and the S3 keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (docs/scale-out.md)\n";
}

}  // namespace

int mkfs_main(const std::vector<std::string>& args, const tool_io& io) {
  CLI::App app{"Create a densefs store in STORE (created if missing; must be empty).",
               "densefs mkfs"};
  std::string dir;
  std::string spec = "default";
  app.add_option("STORE", dir, "store directory")->required();
  app.add_option("--codec", spec,
                 "codec policy for new chunks (docs/policy.md): \"default\" (JPEG -> lepton, "
                 "text/documents -> broccoli, compressed media -> raw, else zstd), one codec for "
                 "everything (raw, zstd:level=N, broccoli:quality=Q, lepton), or changes to the "
                 "default such as default/text=zstd:level=9");
  std::string payloads;
  app.add_option("--payloads", payloads,
                 "where payloads of 4 KiB and more live (docs/packs.md): pack (append-only pack "
                 "files) or blob (RocksDB blob files); default: " +
                     std::string(store::payload_backend_name(store::default_payload_backend())));
  std::string meta;
  app.add_option("--meta", meta,
                 "where the store's records live (docs/scale-out.md): a PostgreSQL URI "
                 "(postgresql://user@host:port/database) or connection string of an empty "
                 "database, without a password (PGPASSWORD or ~/.pgpass); default: an embedded "
                 "RocksDB database in STORE");
  std::string data;
  app.add_option(
      "--data", data,
      "where the volume's pack files live (docs/scale-out.md), with --meta: "
      "s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT[&region=R] of any S3-compatible "
      "service, an empty prefix; credentials from AWS_ACCESS_KEY_ID and "
      "AWS_SECRET_ACCESS_KEY (and AWS_CA_BUNDLE: the PEM file of a private CA that signed an "
      "https endpoint's certificate); STORE then holds this machine's cache");
  bool encrypt = false;
  app.add_flag("--encrypt", encrypt,
               "encrypt every payload at rest (AES-256-GCM; docs/encryption.md) under a key "
               "sealed by a passphrase: from --key-file, else DENSEFS_PASSPHRASE, else typed at "
               "the terminal (twice)");
  std::string key_file;
  app.add_option("--key-file", key_file,
                 "with --encrypt: a file (mode 0600) whose bytes are the volume's secret, e.g. "
                 "`head -c 32 /dev/urandom > FILE`")
      ->type_name("FILE");
  if (auto done = parse_cli(app, args, io)) return *done;
  if (!key_file.empty() && !encrypt) {
    print_error(io, "mkfs", "--key-file goes with --encrypt");
    return k_exit_usage;
  }
  if (!data.empty() && meta.empty()) {
    print_error(io, "mkfs",
                "--data needs --meta: a volume with its payloads in object storage keeps its "
                "records in PostgreSQL");
    return k_exit_usage;
  }
  if (!data.empty() && !payloads.empty() && payloads != "pack") {
    print_error(io, "mkfs", "--data keeps payloads in pack objects (--payloads pack)");
    return k_exit_usage;
  }
  if (!meta.empty() && !meta.starts_with("postgresql://") && !meta.starts_with("postgres://") &&
      meta.find('=') == std::string::npos) {
    print_error(io, "mkfs",
                "--meta: \"" + meta +
                    "\" is neither a postgresql:// URI nor a PostgreSQL connection string");
    return k_exit_usage;
  }
  store::payload_backend backend =
      meta.empty() ? store::default_payload_backend() : store::payload_backend::pack;
  if (!payloads.empty()) {
    try {
      backend = store::parse_payload_backend(payloads);
    } catch (const store::store_error& e) {
      print_error(io, "mkfs", std::string("--payloads: ") + e.what());
      return k_exit_usage;
    }
  }

  codec::policy options;
  try {
    options = codec::parse_policy(spec);
  } catch (const codec::codec_error& e) {
    print_error(io, "mkfs", std::string("--codec: ") + e.what());
    return k_exit_usage;
  }
  const std::filesystem::path path = absolute_path(dir);
  std::optional<store::volume_encryption> encryption;
  if (encrypt) {
    std::optional<std::string> secret = volume_secret(
        key_file, k_passphrase_env, "Passphrase for the new volume " + path.string() + ": ", true);
    if (!secret) {
      print_error(io, "mkfs",
                  "--encrypt needs the volume's secret: --key-file FILE, DENSEFS_PASSPHRASE, or a "
                  "terminal to type a passphrase");
      return k_exit_usage;
    }
    encryption = store::volume_encryption{std::move(*secret)};
  }
  store::store::create(path, options, backend, meta, data, encryption);
  io.out << "created densefs store " << path.string() << " (codec policy "
         << codec::format_policy(options) << ", " << store::payload_backend_name(backend)
         << " payloads" << (data.empty() ? "" : " in object storage")
         << (meta.empty() ? "" : ", records in PostgreSQL")
         << (encrypt ? ", encrypted: keep the key safe, without it the data is lost" : "") << ")\n"
         << mount_hint(path, meta, data, encrypt);
  return k_exit_ok;
}

}  // namespace densefs::tools
