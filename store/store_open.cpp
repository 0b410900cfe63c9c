// Creating and opening a store: its FORMAT marker and lock, the engines
// and payload store it opens on, inode numbers.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <variant>

#include "codec/lepton_file.h"
#include "store/cache/chunk_cache.h"
#include "store/cache/entry_cache.h"
#include "store/crypto/payload_sealer.h"
#include "store/crypto/sealed_payload_store.h"
#include "store/durable_file.h"
#include "store/log.h"
#include "store/metadata/fault_injection.h"
#include "store/metadata/metadata_engine.h"
#include "store/metadata/postgres_engine.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/object/s3_object_store.h"
#include "store/payload/pack_store.h"
#include "store/payload/payload_store.h"
#include "store/payload/rocksdb_payload_store.h"
#include "store/snapshot/snapshot_view.h"
#include "store/store_internal.h"
#include "store/text.h"

namespace densefs::store {

using namespace internal;

namespace {
namespace fs = std::filesystem;

constexpr const char* k_lock_file = "LOCK.densefs";
constexpr const char* k_encryption_name = "aes-256-gcm";

// Inode numbers are reserved this many at a time with one synced write, so
// allocation costs a disk sync once per 1024 creates, and a crash loses at
// most the unused rest of a range (numbers are never reused).
constexpr std::uint64_t k_ino_reserve = 1024;

// The master key of an encrypted volume whose wrapped key record is
// `wrapped`, opened with `secret`; EACCES when the secret is not the volume's.
master_key unlock_volume_key(const std::string& wrapped, const std::string& secret,
                             const fs::path& dir) {
  const wrapped_volume_key k = decode_wrapped_key(wrapped);
  std::optional<master_key> key;
  try {
    key = unwrap_master_key(k, secret);
  } catch (const codec::codec_error& e) {
    throw store_error(EIO, "opening the volume key of " + dir.string() + ": " + e.what());
  }
  if (!key)
    throw store_error(EACCES, "wrong key for encrypted volume " + dir.string() +
                                  ": the passphrase or key file given does not open it (nothing "
                                  "was changed)");
  return *key;
}

std::shared_ptr<const payload_sealer> open_volume_key(const std::string& wrapped,
                                                      const std::string& secret,
                                                      const fs::path& dir) {
  return std::make_shared<const payload_sealer>(unlock_volume_key(wrapped, secret, dir));
}

store_error missing_key(const fs::path& dir) {
  return store_error(ENOKEY, "volume " + dir.string() +
                                 " is encrypted: give its key with --key-file FILE or "
                                 "DENSEFS_PASSPHRASE (a terminal asks for it)");
}

store_error missing_volume_key(const fs::path& dir) {
  return store_error(EIO, "store " + dir.string() +
                              " is an encrypted volume whose database holds no volume key "
                              "(the meta row volume_key): restore it from a metadata dump "
                              "(densefs load) or a copy of the store");
}

// The database of the store in `dir`, alone (one connection, a small
// cache): for reading or rewriting a record before or without a store.
std::unique_ptr<metadata_engine> open_volume_engine(const fs::path& dir,
                                                    const format_marker& marker, bool read_only) {
  if (marker.postgres.empty()) {
    rocksdb_engine_options eo;
    eo.read_only = read_only;
    eo.block_cache_bytes = 1u << 20;
    return rocksdb_engine::open(dir, eo);
  }
  if (read_only) return open_volume_database(marker.postgres).first;
  postgres_engine_options po;
  po.conninfo = marker.postgres;
  po.connections = 1;
  return postgres_engine::open(po);
}

// An encrypted volume's master key, checked with its database open
// read-only, so that a wrong key leaves everything as it was: RocksDB's own
// files, a PostgreSQL volume's lock and running rows.
// `required`: a volume without a key record is refused; otherwise (a key
// given for a store whose FORMAT does not say it is encrypted) nullopt.
std::optional<master_key> check_key_read_only(const fs::path& dir, const format_marker& marker,
                                              const std::string& secret, bool required = true) {
  const std::unique_ptr<metadata_engine> engine = open_volume_engine(dir, marker, true);
  const std::optional<std::string> wrapped =
      engine->get(table::meta, k_volume_key_key, "the volume key");
  if (!wrapped) {
    if (required) throw missing_volume_key(dir);
    return std::nullopt;
  }
  return unlock_volume_key(*wrapped, secret, dir);
}

// What follows a scale-out volume's "is in use" error: who has it (the
// writers' sessions, read without the lock), and what to do about it
// (`hint`, the caller's; a tool's when empty). Best effort: a database that
// cannot be read now leaves the error as it was.
std::string in_use_by(const std::string& conninfo, const std::string& hint) {
  std::string holders;
  try {
    const auto engine = open_volume_database(conninfo).first;
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    std::size_t writers = 0;
    for (const session_record& r : volume_membership::sessions_in(*engine)) {
      if (r.read_only || volume_membership::session_expired(r, now)) continue;
      holders += (writers++ == 0 ? "" : ", ") + r.host + " pid " + std::to_string(r.pid) + " on " +
                 r.mountpoint;
    }
    if (writers == 0)
      holders = "no mount has a live session, so a densefs tool (fsck, gc, " +
                std::string("recompress, migrate) or a client cut off holds it");
  } catch (const store_error&) {
    return "; " + (hint.empty() ? "run densefs status on its URI to see its clients" : hint);
  }
  return " (" + holders + "); " +
         (hint.empty() ? "this needs the volume unmounted on every client (densefs umount "
                         "MOUNTPOINT on each; densefs status on its URI lists them)"
                       : hint);
}

}  // namespace

namespace internal {

std::string new_uuid() {
  std::uint8_t b[16];
  if (RAND_bytes(b, sizeof(b)) != 1)
    throw store_error(EIO, "cannot generate a store UUID: OpenSSL RAND_bytes failed");
  b[6] = static_cast<std::uint8_t>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<std::uint8_t>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    append_hex(out, b[i]);
  }
  return out;
}

// Creates `dir` (and its parents) if missing and makes it private to its
// owner: a store holds every file's content, like a home directory, also
// when the user made the directory beforehand. `what` names it in errors.
void make_private_directory(const fs::path& dir, const char* what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw store_error(ec.value(), std::string("cannot create ") + what + " " + dir.string() + ": " +
                                      ec.message());
  if (::chmod(dir.c_str(), 0700) != 0)
    throw store_error(errno, "cannot chmod " + dir.string() + ": " + errno_text(errno));
}

std::string format_marker_text(const format_marker& m) {
  std::string text = std::string(k_format_magic) +
                     "\nformat_version=" + std::to_string(m.format_version) + "\nuuid=" + m.uuid +
                     "\n";
  if (!m.postgres.empty()) text += "postgresql=" + m.postgres + "\n";
  if (!m.data.empty()) text += "data=" + m.data + "\n";
  if (m.encrypted) text += std::string("encryption=") + k_encryption_name + "\n";
  return text;
}

format_marker read_format_marker(const fs::path& dir) {
  const fs::path path = dir / k_format_file;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT)
      throw store_error(EINVAL, dir.string() +
                                    " is not a densefs store (no FORMAT file; create one with "
                                    "`densefs mkfs " +
                                    dir.string() + "`)");
    throw store_error(e, "cannot read " + path.string() + ": " + errno_text(e));
  }
  char buf[4096];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  const int e = errno;
  ::close(fd);
  if (n < 0) throw store_error(e, "cannot read " + path.string() + ": " + errno_text(e));
  std::string_view text(buf, static_cast<std::size_t>(n));

  const auto not_marker = [&](const std::string& why) {
    return store_error(
        EINVAL, dir.string() + " is not a densefs store (" + path.string() + " " + why + ")");
  };
  const std::size_t first_end = text.find('\n');
  if (first_end == std::string_view::npos || text.substr(0, first_end) != k_format_magic)
    throw not_marker("does not start with \"densefs store\"");

  format_marker m;
  bool have_version = false;
  std::size_t pos = first_end + 1;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.starts_with("format_version=")) {
      const std::string_view digits = line.substr(15);
      std::uint64_t v = 0;
      if (digits.empty() || digits.size() > 9 ||
          !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        throw not_marker("has a malformed format_version line");
      for (char c : digits) v = v * 10 + static_cast<std::uint64_t>(c - '0');
      m.format_version = static_cast<std::uint32_t>(v);
      have_version = true;
    } else if (line.starts_with("uuid=")) {
      m.uuid = std::string(line.substr(5));
    } else if (line.starts_with("postgresql=")) {
      m.postgres = std::string(line.substr(11));
    } else if (line.starts_with("data=")) {
      m.data = std::string(line.substr(5));
    } else if (line.starts_with("encryption=")) {
      if (line.substr(11) != k_encryption_name)
        throw store_error(EPROTONOSUPPORT, "store " + dir.string() + " is encrypted with " +
                                               std::string(line.substr(11)) +
                                               ", which this densefs does not know; use a newer "
                                               "densefs");
      m.encrypted = true;
    }
    // Other lines are ignored: a later format may add informational keys.
  }
  if (!have_version || m.format_version == 0) throw not_marker("has no format_version");
  return m;
}

void refuse_newer(const fs::path& dir, std::uint32_t found) {
  if (found > k_format_version)
    throw store_error(EPROTONOSUPPORT,
                      "store " + dir.string() + " has format version " + std::to_string(found) +
                          ", but this densefs reads format versions up to " +
                          std::to_string(k_format_version) + "; use a newer densefs");
}

}  // namespace internal

store::store(std::filesystem::path dir, store_open_options options)
    : dir_(std::move(dir)), options_(options) {}

store::~store() {
  unwatch();  // the follower's callback reads through this store
  // The pack gathered into is uploaded and its entries moved, so that no
  // payload stays in the metadata engine for good (pack_store.h).
  if (packs_ && !options_.read_only) {
    try {
      packs_->seal_gathered();
      packs_->sync();
      std::lock_guard lock(commit_mutex_);
      packs_->move_gathered(true);
    } catch (const store_error& e) {
      log_error(
          "closing store " + dir_.string() +
          ": uploading the last gathered pack (its payloads stay in the database): " + e.what());
    }
  }
  // The session ends first (its heartbeat thread stops); the membership
  // itself stays until the members go: the store's role is its.
  if (membership_) {
    try {
      membership_->end();
    } catch (const store_error& e) {
      log_error("closing store " + dir_.string() + ": ending its session: " + e.what());
    }
  }
  cache_.reset();
  if (payloads_ && !options_.read_only) {
    try {
      payloads_->sync();  // before the engine's flush at close makes index entries durable
    } catch (const store_error& e) {
      log_error("closing store " + dir_.string() + ": " + e.what());
    }
  }
  if (rocksdb_) rocksdb_->set_before_flush({});
  packs_ = nullptr;
  payloads_.reset();
  rocksdb_ = nullptr;
  membership_.reset();  // it borrows the engine
  engine_.reset();
  snapshot_base_.reset();  // below a snapshot's view
}

payload_backend parse_payload_backend(std::string_view name) {
  if (name == "pack") return payload_backend::pack;
  if (name == "blob") return payload_backend::blob;
  throw store_error(
      EINVAL, "unknown payload backend \"" + std::string(name) + "\" (expected pack or blob)");
}

payload_backend default_payload_backend() {
  if (const char* env = std::getenv("DENSEFS_DEFAULT_PAYLOADS"); env && *env)
    return parse_payload_backend(env);
  return k_default_payload_backend;
}

void store::create(const std::filesystem::path& dir, const codec::policy& policy,
                   payload_backend payloads, const std::string& postgres, const std::string& data,
                   const std::optional<volume_encryption>& encryption) {
  check_volume_target(postgres, data, payloads);
  // Derived before anything is made: a cost out of bounds fails here.
  std::optional<std::string> wrapped_key;
  if (encryption) {
    if (encryption->secret.size() < k_min_secret_size)
      throw store_error(EINVAL, "the volume's passphrase or key file needs at least " +
                                    std::to_string(k_min_secret_size) + " bytes");
    try {
      wrapped_key = encode_wrapped_key(
          wrap_master_key(new_master_key(), encryption->secret, encryption->cost));
    } catch (const codec::codec_error& e) {
      throw store_error(EIO, std::string("sealing the new volume's key: ") + e.what());
    }
  }
  std::unique_ptr<s3_object_store> objects;
  if (!data.empty()) {
    objects = std::make_unique<s3_object_store>(parse_s3_url(data));
    objects->create_bucket();
    // Another volume's packs there would collide with this one's numbers.
    if (!objects->list("packs/").empty())
      throw store_error(EEXIST, objects->where() +
                                    " already holds pack objects (another volume's?); give "
                                    "--data an empty prefix");
  }
  std::error_code ec;
  const auto status = fs::symlink_status(dir, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(fs::status(dir, ec)))
      throw store_error(ENOTDIR, dir.string() + " exists and is not a directory");
    if (!fs::is_empty(dir, ec) || ec)
      throw store_error(EEXIST,
                        dir.string() + " is not empty; mkfs needs a new or empty directory");
  }
  make_private_directory(dir, "store directory");

  std::unique_ptr<metadata_engine> engine;
  if (postgres.empty()) {
    rocksdb_engine_options eo;
    eo.create = true;
    eo.block_cache_bytes = 8u << 20;
    eo.blob_payloads = payloads == payload_backend::blob;
    engine = rocksdb_engine::open(dir, eo);
  } else {
    postgres_engine_options po;
    po.conninfo = postgres;
    po.connections = 1;
    postgres_engine::create(po);
    engine = postgres_engine::open(po);
  }

  store_settings settings;
  settings.uuid = new_uuid();
  settings.codec_spec = codec::format_policy(policy);
  settings.created = now();
  settings.payloads = payloads;
  // Both backends get compact records; formats 1 and 2 are only read and
  // extended (in their own encodings) now.
  settings.format_version = encryption         ? k_encrypted_format_version
                            : !data.empty()    ? k_object_format_version
                            : postgres.empty() ? k_compact_format_version
                                               : k_postgres_format_version;

  inode_record root;
  root.ino = k_root_ino;
  root.mode = S_IFDIR | 0755;
  root.uid = ::geteuid();
  root.gid = ::getegid();
  root.nlink = 2;
  root.parent = k_root_ino;  // ".." of the root is the root
  root.atime = root.mtime = root.ctime = root.btime = settings.created;

  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  batch->put(table::meta, k_settings_key, encode_settings(settings));
  batch->put(table::meta, k_next_ino_key, encode_next_ino(k_root_ino + 1));
  if (!data.empty()) batch->put(table::meta, k_payload_location_key, data);
  if (wrapped_key) batch->put(table::meta, k_volume_key_key, *wrapped_key);
  batch->put(table::inodes, inode_key(k_root_ino),
             encode_inode(root, record_encoding_for(settings.format_version)));
  try {
    engine->write(*batch, true);
  } catch (const store_error& e) {
    throw store_error(e.error_number(),
                      "cannot initialise the store in " + dir.string() + ": " + e.what());
  }
  engine.reset();

  // FORMAT comes last: a store whose mkfs was interrupted has none, so it is
  // refused as "not a store" instead of being half used.
  write_file_durably(dir / k_format_file,
                     format_marker_text({settings.format_version, settings.uuid, postgres, data,
                                         encryption.has_value()}));
}

bool store::is_encrypted(const std::filesystem::path& dir) {
  return read_format_marker(dir).encrypted;
}

void store::change_key(const std::filesystem::path& dir, const std::string& old_secret,
                       const volume_encryption& new_key) {
  check(dir);
  const format_marker m = read_format_marker(dir);
  if (new_key.secret.size() < k_min_secret_size)
    throw store_error(EINVAL, "the new passphrase or key file needs at least " +
                                  std::to_string(k_min_secret_size) + " bytes");
  // The old secret first, with the database open read-only: a wrong one
  // changes nothing.
  const std::optional<master_key> key = check_key_read_only(dir, m, old_secret, false);
  if (!key)
    throw store_error(EINVAL, "volume " + dir.string() +
                                  " is not encrypted (only `densefs mkfs --encrypt` makes an "
                                  "encrypted volume)");
  std::string fresh;
  try {
    fresh = encode_wrapped_key(wrap_master_key(*key, new_key.secret, new_key.cost));
  } catch (const codec::codec_error& e) {
    throw store_error(EIO, "sealing the volume key of " + dir.string() + ": " + e.what());
  }
  const std::unique_ptr<metadata_engine> engine = open_volume_engine(dir, m, false);
  const std::unique_ptr<metadata_batch> batch = engine->new_batch();
  batch->put(table::meta, k_volume_key_key, fresh);
  try {
    engine->write(*batch, true);
  } catch (const store_error& e) {
    throw store_error(e.error_number(),
                      "writing the new volume key of " + dir.string() + ": " + e.what());
  }
}

std::filesystem::path store::default_client_base() {
  if (const char* env = std::getenv("DENSEFS_CACHE_HOME"); env && *env) return env;
  if (::geteuid() == 0) return "/var/cache/densefs";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return fs::path(xdg) / "densefs";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "densefs";
  throw store_error(ENOENT, "no place for the volume's cache: set HOME or -o cache_dir=");
}

namespace internal {

void refuse_password(const std::string& conninfo) {
  if (postgres_engine::names_a_password(conninfo))
    throw store_error(EINVAL,
                      "the PostgreSQL connection string holds a password; give it in PGPASSWORD "
                      "or ~/.pgpass (mode 0600) instead");
}

void check_volume_target(const std::string& postgres, const std::string& data,
                         payload_backend payloads) {
  // Several machines share the volume's payloads only if they share its
  // records: the embedded database is one machine's.
  if (!data.empty() && postgres.empty())
    throw store_error(EINVAL,
                      "--data needs --meta: a volume with its payloads in object storage keeps "
                      "its records in PostgreSQL");
  if (postgres.empty()) return;
  // Blob payloads are values of the payloads table: megabytes of bytea per
  // chunk in the database.
  if (payloads != payload_backend::pack)
    throw store_error(EINVAL,
                      "a store with its records in PostgreSQL keeps its payloads in pack files "
                      "(--payloads pack)");
  refuse_password(postgres);
}

std::pair<std::unique_ptr<metadata_engine>, std::string> open_volume_database(
    const std::string& conninfo) {
  refuse_password(conninfo);
  postgres_engine_options po;
  po.conninfo = conninfo;
  po.read_only = true;
  po.connections = 1;
  std::unique_ptr<metadata_engine> engine = postgres_engine::open(po);
  std::optional<std::string> value = engine->get(table::meta, k_settings_key, "the settings");
  if (!value)
    throw store_error(EINVAL, engine->where() + " holds no densefs volume (no settings record)");
  return {std::move(engine), std::move(*value)};
}

}  // namespace internal

std::filesystem::path store::client_directory(const std::string& conninfo,
                                              const std::filesystem::path& base) {
  const auto [engine, settings_record] = open_volume_database(conninfo);
  const store_settings settings = decode_settings(settings_record);
  if (settings.format_version > k_format_version)
    throw store_error(EPROTONOSUPPORT, engine->where() + " holds a volume of format version " +
                                           std::to_string(settings.format_version) +
                                           ", but this densefs reads format versions up to " +
                                           std::to_string(k_format_version) +
                                           "; use a newer densefs");
  const std::optional<std::string> location =
      engine->get(table::meta, k_payload_location_key, "the payload location");
  if (!location)
    throw store_error(EINVAL, engine->where() +
                                  " holds a volume whose packs are in the store directory of the "
                                  "machine that made it (mkfs without --data): mount that "
                                  "directory there");
  const fs::path dir = (base.empty() ? default_client_base() : base) / settings.uuid;
  std::error_code ec;
  if (fs::exists(dir / k_format_file, ec)) {
    const format_marker m = read_format_marker(dir);
    if (m.uuid != settings.uuid || m.postgres.empty())
      throw store_error(EINVAL, dir.string() + " belongs to another store (" + m.uuid + ")");
    return dir;
  }
  make_private_directory(dir, "the volume's directory");
  const bool encrypted = engine->get(table::meta, k_volume_key_key, "the volume key").has_value();
  write_file_durably(
      dir / k_format_file,
      format_marker_text({settings.format_version, settings.uuid, conninfo, *location, encrypted}));
  return dir;
}

void store::check(const std::filesystem::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT)
      throw store_error(ENOENT, "store directory " + dir.string() + " does not exist");
    throw store_error(e, "cannot access store directory " + dir.string() + ": " + errno_text(e));
  }
  if (!S_ISDIR(st.st_mode))
    throw store_error(ENOTDIR, "store " + dir.string() + " is not a directory");
  const format_marker m = read_format_marker(dir);
  refuse_newer(dir, m.format_version);
}

store::metadata_salvage store::salvage_metadata(const std::filesystem::path& dir,
                                                const std::filesystem::path& keep) {
  check(dir);
  const format_marker m = read_format_marker(dir);
  if (!m.postgres.empty())
    throw store_error(EINVAL, "store " + dir.string() +
                                  " keeps its records in PostgreSQL: restore its database "
                                  "from PostgreSQL's own backups");
  // Blob stores (made before packs) keep payloads in RocksDB blob files,
  // which RocksDB's repair does not carry over.
  std::error_code ec;
  if (!fs::is_directory(dir / "packs", ec))
    throw store_error(EINVAL, "store " + dir.string() +
                                  " keeps its payloads in RocksDB blob files, which a salvage "
                                  "would lose; copy it aside and ask for help (docs/fsck.md)");
  rocksdb_engine::salvage_result salvaged = rocksdb_engine::salvage(dir, keep);
  metadata_salvage out{std::move(salvaged.set_aside), std::move(salvaged.restored)};
  std::vector<std::string>& lost = out.lost;
  // The settings record lives in the small meta table; when that table was
  // lost, FORMAT still names the format and uuid, and the packs directory
  // the backend. The codec spec is not kept elsewhere: new writes use the
  // default one (stored chunks name their own codec). The inode counter
  // is rebuilt at open from the inodes that exist.
  rocksdb_engine_options eo;
  eo.blob_payloads = false;
  const auto engine = rocksdb_engine::open(dir, eo);
  if (!engine->get(table::meta, k_settings_key, "the settings")) {
    store_settings rebuilt;
    rebuilt.format_version = m.format_version;
    rebuilt.uuid = m.uuid;
    rebuilt.created = now();
    rebuilt.payloads = payload_backend::pack;
    const std::unique_ptr<metadata_batch> batch = engine->new_batch();
    batch->put(table::meta, k_settings_key, encode_settings(rebuilt));
    engine->write(*batch, true);
    lost.push_back("the settings record, rebuilt from FORMAT (codec spec reset to " +
                   rebuilt.codec_spec + ")");
  }
  return out;
}

std::string store::verify_metadata_checksums() const {
  return rocksdb_ ? rocksdb_->verify_checksums() : std::string();
}

int store::lock(const std::filesystem::path& dir) {
  const fs::path path = dir / k_lock_file;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    throw store_error(errno, "cannot open lock file " + path.string() + ": " + errno_text(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK)
      throw store_error(EBUSY, "store " + dir.string() + " is in use (already mounted?)");
    throw store_error(e, "cannot lock " + path.string() + ": " + errno_text(e));
  }
  // A record that cannot be written only costs a later mount its wait for
  // this holder: not a reason to refuse the lock.
  try {
    record_lock_holder(fd, {::getpid(), {}, false, {}});
  } catch (const store_error&) {
  }
  return fd;
}

void store::record_lock_holder(int fd, const lock_holder& holder) {
  // One line per field; the mount point is the rest of its line (a mount
  // point with a newline in its name reads back as not mounted, which
  // only makes a new mount wait for this one instead of failing at once).
  std::string text = "pid " + std::to_string(holder.pid) + "\n";
  if (!holder.mountpoint.empty()) {
    text += "mountpoint " + holder.mountpoint + "\n";
    text += std::string("state ") + (holder.exiting ? "exiting" : "mounted") + "\n";
    if (!holder.snapshot.empty()) text += "snapshot " + holder.snapshot + "\n";
  }
  // Emptied, then written in one piece: a reader sees at worst an empty or
  // cut-off record, which reads as "not a mount" (the mount's wait gives
  // such a holder a moment before failing).
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw store_error(errno, std::string("cannot write the lock file: ") + errno_text(errno));
}

std::optional<store::lock_holder> store::read_lock_holder(const std::filesystem::path& dir) {
  const fs::path path = dir / k_lock_file;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[8192];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  lock_holder holder;
  std::string_view rest(buf, static_cast<std::size_t>(n));
  bool has_state = false;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    if (end == std::string_view::npos) break;  // cut off while being written
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 1);
    if (line.starts_with("pid ")) {
      holder.pid = std::strtol(std::string(line.substr(4)).c_str(), nullptr, 10);
    } else if (line.starts_with("mountpoint ")) {
      holder.mountpoint = std::string(line.substr(11));
    } else if (line.starts_with("state ")) {
      holder.exiting = line.substr(6) == "exiting";
      has_state = true;
    } else if (line.starts_with("snapshot ")) {
      holder.snapshot = std::string(line.substr(9));
    }
  }
  if (holder.pid <= 0) return std::nullopt;
  if (!has_state) holder.mountpoint.clear();
  return holder;
}

std::unique_ptr<store> store::open(const std::filesystem::path& dir,
                                   const store_open_options& asked) {
  check(dir);
  // A snapshot is read-only, however it is opened.
  store_open_options options = asked;
  if (options.snapshot) options.read_only = true;
  std::unique_ptr<store> self(new store(dir, options));

  const format_marker marker = read_format_marker(dir);
  // An encrypted volume's key before anything opens for writing: a wrong
  // or missing one leaves even RocksDB's own files as they were.
  if (!options.read_only && (marker.encrypted || options.key_secret)) {
    if (!options.key_secret) throw missing_key(dir);
    if (const std::optional<master_key> key =
            check_key_read_only(dir, marker, *options.key_secret, marker.encrypted))
      self->sealer_ = std::make_shared<const payload_sealer>(*key);
  }
  // The volume's role: set here once, kept by the membership.
  volume_role role = volume_role::alone;
  if (marker.postgres.empty()) {
    rocksdb_engine_options eo;
    eo.read_only = options.read_only;
    eo.block_cache_bytes = options.block_cache_bytes;
    std::unique_ptr<rocksdb_engine> engine = rocksdb_engine::open(dir, eo);
    self->rocksdb_ = engine.get();
    self->engine_ = std::move(engine);
  } else {
    postgres_engine_options po;
    po.conninfo = marker.postgres;
    // A follower writes its session row and its hold rows (so not a
    // read-only engine) and nothing else (the store refuses every other
    // write), beside the writer that holds the volume's lock.
    if (options.follower)
      role = volume_role::follower;
    else if (options.shared_writer)
      role = volume_role::writer_beside_others;
    if (role == volume_role::follower) self->options_.read_only = true;
    po.read_only = options.read_only;
    po.lock_volume = !self->options_.read_only;
    po.share_volume = options.shared_writer;
    // FUSE threads and encoders commit and read at once; each statement
    // holds a connection for one round trip.
    po.connections = 8;
    try {
      self->engine_ = postgres_engine::open(po);
    } catch (const store_error& e) {
      if (e.error_number() != EBUSY) throw;
      throw store_error(EBUSY, e.what() + in_use_by(marker.postgres, options.in_use_hint));
    }
    self->postgres_ = marker.postgres;
  }
  // An encrypted volume's key, checked before this open writes anything
  // (the session row, FORMAT): a wrong key changes nothing.
  if (const std::optional<std::string> wrapped =
          self->engine_->get(table::meta, k_volume_key_key, "the volume key")) {
    self->encrypted_ = true;
    if (!self->sealer_ && options.key_secret)
      self->sealer_ = open_volume_key(*wrapped, *options.key_secret, dir);
    else if (!options.key_secret && !self->options_.read_only)
      throw missing_key(dir);
  }
  if (!self->encrypted_ && marker.encrypted) throw missing_volume_key(dir);
  self->membership_ = std::make_unique<volume_membership>(
      *self->engine_, dir, role, !marker.postgres.empty(), self->options_.read_only);

  const std::optional<std::string> value =
      self->engine_->get(table::meta, k_settings_key, "the settings");
  if (!value)
    throw store_error(EIO, "store " + dir.string() + " has no settings record (damaged store)");
  self->settings_ = decode_settings(*value);
  // The directory (packs, FORMAT) and the database belong together.
  if (!marker.postgres.empty() && self->settings_.uuid != marker.uuid)
    throw store_error(EINVAL, "store " + dir.string() + " names a database (" +
                                  self->engine_->where() + ") that holds store " +
                                  self->settings_.uuid + ", not this one (" + marker.uuid + ")");
  self->encoding_ = record_encoding_for(self->settings_.format_version);
  // FORMAT was checked already; the database is checked too because it is
  // the authority (FORMAT could have been copied from another store).
  refuse_newer(dir, self->settings_.format_version);
  self->holds_lepton_files_ = self->settings_.format_version >= k_lepton_file_format_version;
  self->may_have_snapshots_ = self->settings_.format_version >= k_snapshot_format_version;
  // Format 7 is an encrypted volume: without its key record it must not
  // open as a plain one and write plain payloads beside sealed ones.
  if (self->settings_.format_version == k_encrypted_format_version && !self->encrypted_)
    throw missing_volume_key(dir);
  // A crash between the commit that raised the version and the FORMAT
  // rewrite after it leaves FORMAT behind (harmless: the database refuses
  // older builds too); bring it up to date.
  if (!self->options_.read_only && (marker.format_version < self->settings_.format_version ||
                                    marker.encrypted != self->encrypted_)) {
    write_file_durably(dir / k_format_file,
                       format_marker_text({self->settings_.format_version, self->settings_.uuid,
                                           marker.postgres, marker.data, self->encrypted_}));
  }
  if (options.snapshot) {
    const std::optional<snapshot_record> r = find_snapshot(*self->engine_, *options.snapshot);
    if (!r || r->state != snapshot_state::live)
      throw store_error(ENOENT, "store " + dir.string() + " has no snapshot named '" +
                                    *options.snapshot + "' (densefs snapshot list)");
    self->opened_snapshot_ = r;
    self->snapshot_base_ = std::move(self->engine_);
    self->engine_ = std::make_unique<snapshot_view>(*self->snapshot_base_, r->id);
  }
  try {
    // Stores made before per-type policies hold a single codec spec, which
    // parse_policy reads as "every type uses this codec".
    self->policy_ = codec::parse_policy(self->settings_.codec_spec);
  } catch (const codec::codec_error& e) {
    throw store_error(EINVAL, "store " + dir.string() + " names codec \"" +
                                  self->settings_.codec_spec +
                                  "\" that this densefs cannot use: " + e.what());
  }

  // Where inode allocation resumes: the persisted high-water mark, and never
  // below an inode that exists (belt and braces against a damaged counter).
  std::uint64_t next = k_root_ino + 1;
  if (const std::optional<std::string> counter =
          self->engine_->get(table::meta, k_next_ino_key, "the inode counter"))
    next = std::max(next, decode_next_ino(*counter));
  scan_options last;
  last.order = scan_order::backward;
  self->engine_->scan(table::inodes, {}, last, "scanning inodes",
                      [&](std::string_view key, std::string_view) {
                        if (key.size() == 8) next = std::max(next, decode_u64_be(key) + 1);
                        return false;
                      });
  self->next_ino_ = self->ino_reserved_ = next;

  if (self->settings_.payloads == payload_backend::pack) {
    if (!self->options_.read_only && self->rocksdb_) self->rocksdb_->set_blob_payloads(false);
    pack_store::options po;
    po.io = options.io;
    po.read_only = self->options_.read_only;
    if (!marker.data.empty()) {
      // The database is the authority on where the volume's packs are.
      const std::optional<std::string> location =
          self->engine_->get(table::meta, k_payload_location_key, "the payload location");
      if (!location || *location != marker.data)
        throw store_error(EINVAL, "store " + dir.string() + " names pack objects in " +
                                      marker.data + ", but its database " +
                                      (location ? "names " + *location : "names none"));
      po.remote = std::make_shared<s3_object_store>(parse_s3_url(marker.data));
      po.cache_dir = options.cache_dir;
      po.cache_bytes = options.cache_bytes;
      // Its own client directory; a writer beside others reads theirs too.
      po.fill_cache = role != volume_role::alone;
      self->data_ = marker.data;
    } else if (self->settings_.format_version == k_object_format_version ||
               (self->settings_.format_version > k_object_format_version &&
                self->engine_->get(table::meta, k_payload_location_key, "the payload location"))) {
      throw store_error(EINVAL, "store " + dir.string() +
                                    " is a volume with its packs in object storage, but its "
                                    "FORMAT file names none (a data= line)");
    }
    auto packs = std::make_unique<pack_store>(*self->engine_, dir, po);
    self->packs_ = packs.get();
    // A live follower may be between an index lookup and its GET: emptied
    // objects outlive the heartbeat expiry (3 intervals) by one more.
    if (po.remote)
      packs->set_delete_grace([s = self.get()] {
        return s->membership().others_mounted() ? volume_membership::other_clients_grace()
                                                : std::chrono::seconds(0);
      });
    self->payloads_ = std::move(packs);
    // Pack bytes durable before a memtable flush makes the index entries
    // naming them durable.
    if (!self->options_.read_only && self->rocksdb_)
      self->rocksdb_->set_before_flush([packs = self->packs_] { packs->sync(); });
  } else {
    self->payloads_ = std::make_unique<rocksdb_payload_store>(*self->engine_);
  }
  if (self->encrypted_)
    self->payloads_ = std::make_unique<sealed_payload_store>(std::move(self->payloads_),
                                                             self->sealer_, dir.string());
  self->cache_ = std::make_unique<chunk_cache>(options.chunk_cache_bytes);
  // A writer alone: every change of an entry is its own commit. (A
  // follower would hear the writer's only through notices it may not be
  // listening to yet.)
  if (self->caches_extents() && !self->options_.read_only && !self->follows())
    self->entry_cache_ = std::make_unique<entry_cache>(k_entry_cache_names);
  self->damaged_ = std::make_unique<damaged_chunks>(*self->engine_, !self->options_.read_only);
  // A tool that writes (gc) sees the mounts as other clients; a mount
  // counts again without itself (volume_membership::begin).
  self->membership_->count_others_now();
  // A snapshot deletion a crash cut short: finished before anything else
  // (its merge assumes it is the only one). A failure leaves it for the
  // next open.
  if (self->may_have_snapshots_ && !self->options_.read_only) {
    try {
      if (const std::size_t n = self->finish_snapshot_deletions())
        log_info("finished " + std::to_string(n) + " snapshot deletion(s) cut short");
    } catch (const store_error& e) {
      log_error("store " + dir.string() + ": finishing a snapshot deletion: " + e.what());
    }
  }
  return self;
}

std::uint64_t store::allocate_ino() {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  std::lock_guard lock(ino_mutex_);
  if (next_ino_ >= ino_reserved_) {
    // The next block of numbers, from the counter as stored: other writers
    // of a shared volume reserve blocks of their own from it.
    std::uint64_t from = 0, mark = 0;
    try {
      // The mark must be durable before any number below it is used.
      engine_->write_locked(
          k_counters_section,
          [&](locked_reads& reads, metadata_batch& batch) {
            const std::optional<std::string> stored =
                reads.get(table::meta, k_next_ino_key, "the inode counter");
            from = std::max(next_ino_, stored ? decode_next_ino(*stored) : 0);
            mark = from + k_ino_reserve;
            batch.put(table::meta, k_next_ino_key, encode_next_ino(mark));
          },
          true);
    } catch (const store_error& e) {
      throw store_error(e.error_number(), "reserving inode numbers: " + std::string(e.what()));
    }
    next_ino_ = from;
    ino_reserved_ = mark;
  }
  return next_ino_++;
}

}  // namespace densefs::store
