#include "store/store.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <shared_mutex>
#include <type_traits>
#include <utility>
#include <variant>

#include "codec/lepton_file.h"
#include "store/chunk_cache.h"
#include "store/fault_injection.h"
#include "store/log.h"
#include "store/metadata_engine.h"
#include "store/pack_store.h"
#include "store/postgres_engine.h"
#include "store/records_detail.h"
#include "store/rocksdb_engine.h"
#include "store/rocksdb_payload_store.h"
#include "store/s3_object_store.h"

namespace densefs::store {
namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace fs = std::filesystem;

constexpr const char* k_format_file = "FORMAT";
constexpr const char* k_lock_file = "LOCK.densefs";
// Scale-out volumes: the session id of this directory's last mount, so the
// next one (which holds the directory's lock) knows that session is over.
constexpr const char* k_session_file = "SESSION.densefs";
constexpr std::string_view k_format_magic = "densefs store";

// Inode numbers are reserved this many at a time with one synced write, so
// allocation costs a disk sync once per 1024 creates, and a crash loses at
// most the unused rest of a range (numbers are never reused).
constexpr std::uint64_t k_ino_reserve = 1024;

// gc rewrites a pack once this share of its bytes is dead: each rewrite
// copies at most 4x the space it gives back.
constexpr double k_pack_dead_share = 0.2;
// Free space kept back from file data (see check_space_for): at least two
// payload memtables, so a flush always fits.
constexpr std::uint64_t k_min_space_reserve = 40u << 20;
constexpr std::uint64_t k_max_space_reserve = 256u << 20;

timestamp now() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return {static_cast<std::int64_t>(ts.tv_sec), static_cast<std::uint32_t>(ts.tv_nsec)};
}

// Names in messages: printable ASCII as is, other bytes as \xNN, so one odd
// file name cannot break a log line.
std::string printable(std::string_view name) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : name) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f && c != '"' && c != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += k_digits[b >> 4];
      out += k_digits[b & 0xf];
    }
  }
  out += '"';
  return out;
}

std::string dirent_what(std::uint64_t parent, std::string_view name) {
  return "entry " + printable(name) + " of directory " + std::to_string(parent);
}
std::string extent_what(std::uint64_t ino, std::uint64_t off) {
  return "inode " + std::to_string(ino) + " at offset " + std::to_string(off);
}
std::string xattr_what(std::uint64_t ino, std::string_view name) {
  return "xattr " + printable(name) + " of inode " + std::to_string(ino);
}

std::string new_uuid() {
  std::uint8_t b[16];
  if (RAND_bytes(b, sizeof(b)) != 1)
    throw store_error(EIO, "cannot generate a store UUID: OpenSSL RAND_bytes failed");
  b[6] = static_cast<std::uint8_t>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<std::uint8_t>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += k_digits[b[i] >> 4];
    out += k_digits[b[i] & 0xf];
  }
  return out;
}

void fsync_path(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw store_error(errno, "cannot open " + path.string() + ": " + errno_text(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc != 0) throw store_error(e, "cannot sync " + path.string() + ": " + errno_text(e));
}

// Writes a small file so that it appears complete or not at all.
void write_file_durably(const fs::path& path, std::string_view content) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw store_error(errno, "cannot create " + tmp.string() + ": " + errno_text(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw store_error(e, "cannot write " + tmp.string() + ": " + errno_text(e));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    throw store_error(e, "cannot write " + tmp.string() + ": " + errno_text(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw store_error(errno, "cannot rename " + tmp.string() + ": " + errno_text(errno));
  fsync_path(path.parent_path(), O_RDONLY | O_DIRECTORY);
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

struct format_marker {
  std::uint32_t format_version = 0;
  std::string uuid;
  // Format 5: the connection string of the PostgreSQL database holding the
  // records (no password). Empty: the embedded RocksDB database.
  std::string postgres;
  // Format 6: the s3:// location of the pack objects. Empty: pack files in
  // the store directory.
  std::string data;
};

std::string format_marker_text(const format_marker& m) {
  std::string text = std::string(k_format_magic) +
                     "\nformat_version=" + std::to_string(m.format_version) + "\nuuid=" + m.uuid +
                     "\n";
  if (!m.postgres.empty()) text += "postgresql=" + m.postgres + "\n";
  if (!m.data.empty()) text += "data=" + m.data + "\n";
  return text;
}

// Reads STORE/FORMAT. Errors are one line a user can act on.
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

}  // namespace

// ---------------------------------------------------------------- transaction

namespace {

struct txn_op {
  table cf;
  bool erase;
  std::string key;
  // Inodes, dirents and extents are encoded at commit, in the encoding of
  // the store's format (a transaction is built without the store).
  std::variant<std::string, inode_record, dirent_record, extent_record> value;
};

std::string encode_value(const txn_op& op, record_encoding e) {
  return std::visit(
      [e](const auto& v) -> std::string {
        using type = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<type, std::string>)
          return v;
        else if constexpr (std::is_same_v<type, inode_record>)
          return encode_inode(v, e);
        else if constexpr (std::is_same_v<type, dirent_record>)
          return encode_dirent(v, e);
        else
          return encode_extent(v, e);
      },
      op.value);
}

struct chunk_delta {
  std::int64_t delta = 0;
  std::uint32_t plain_size = 0;
  std::optional<codec::encoded_chunk> encoded;
};

}  // namespace

// The metadata changes are kept as a list and turned into one WriteBatch at
// commit, because the column family handles belong to the store (a
// transaction is built without one) and because a commit that throws
// chunk_missing must leave the transaction intact for the caller's retry.
struct transaction::impl {
  std::vector<txn_op> ops;
  std::map<chunk_hash, chunk_delta> chunks;  // ordered: commits are deterministic
  // Each group applies whole or not at all (replace_payloads).
  std::vector<std::vector<transaction::payload_swap>> replacements;
};

transaction::transaction() : impl_(std::make_unique<impl>()) {}
transaction::~transaction() = default;
transaction::transaction(transaction&&) noexcept = default;
transaction& transaction::operator=(transaction&&) noexcept = default;

namespace {
// A moved-from transaction is reusable. (A template because impl is private.)
template <class pointer>
auto& ensure(pointer& p) {
  if (!p) p = std::make_unique<typename pointer::element_type>();
  return *p;
}
}  // namespace

void transaction::put_inode(const inode_record& r) {
  ensure(impl_).ops.push_back({table::inodes, false, inode_key(r.ino), r});
}
void transaction::delete_inode(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::inodes, true, inode_key(ino), {}});
}
void transaction::put_dirent(std::uint64_t parent, std::string_view name, const dirent_record& r) {
  ensure(impl_).ops.push_back({table::dirents, false, dirent_key(parent, name), r});
}
void transaction::delete_dirent(std::uint64_t parent, std::string_view name) {
  ensure(impl_).ops.push_back({table::dirents, true, dirent_key(parent, name), {}});
}
void transaction::put_extent(std::uint64_t ino, std::uint64_t file_offset, const extent_record& r) {
  ensure(impl_).ops.push_back({table::extents, false, extent_key(ino, file_offset), r});
}
void transaction::delete_extent(std::uint64_t ino, std::uint64_t file_offset) {
  ensure(impl_).ops.push_back({table::extents, true, extent_key(ino, file_offset), {}});
}
void transaction::put_xattr(std::uint64_t ino, std::string_view name, std::string_view value) {
  ensure(impl_).ops.push_back(
      {table::xattrs, false, xattr_key(ino, name), encode_xattr_value(value)});
}
void transaction::delete_xattr(std::uint64_t ino, std::string_view name) {
  ensure(impl_).ops.push_back({table::xattrs, true, xattr_key(ino, name), {}});
}
void transaction::add_orphan(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, false, orphan_key(ino), encode_orphan()});
}
void transaction::remove_orphan(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, true, orphan_key(ino), {}});
}
void transaction::mark_new_file(std::uint64_t ino, std::uint64_t parent, std::string_view name,
                                std::string_view writer) {
  ensure(impl_).ops.push_back(
      {table::meta, false, new_file_key(ino), encode_new_file(parent, name, writer)});
}
void transaction::clear_new_file(std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, true, new_file_key(ino), {}});
}

void transaction::ref_chunk(const prepared_chunk& chunk) {
  chunk_delta& d = ensure(impl_).chunks[chunk.hash];
  d.delta += 1;
  d.plain_size = chunk.plain_size;
  if (chunk.encoded && !d.encoded) d.encoded = chunk.encoded;
}

void transaction::unref_chunk(const chunk_hash& hash) {
  ensure(impl_).chunks[hash].delta -= 1;
}

void transaction::queue_recompress(const chunk_hash& hash, std::uint64_t ino) {
  ensure(impl_).ops.push_back({table::meta, false, recompress_key(hash), encode_recompress(ino)});
}
void transaction::drop_recompress(const chunk_hash& hash) {
  ensure(impl_).ops.push_back({table::meta, true, recompress_key(hash), {}});
}
void transaction::replace_payload(const chunk_hash& hash, std::uint64_t expected_checksum,
                                  codec::encoded_chunk encoded, bool content_checked) {
  std::vector<payload_swap> one;
  one.push_back({hash, expected_checksum, std::move(encoded), content_checked});
  ensure(impl_).replacements.push_back(std::move(one));
}
void transaction::replace_payloads(std::vector<payload_swap> swaps) {
  if (!swaps.empty()) ensure(impl_).replacements.push_back(std::move(swaps));
}

bool transaction::empty() const {
  return !impl_ || (impl_->ops.empty() && impl_->chunks.empty() && impl_->replacements.empty());
}

chunk_missing::chunk_missing(const chunk_hash& h)
    : store_error(EIO, "chunk " + h.hex() +
                           " is referenced but neither stored nor supplied with its payload"),
      hash(h) {}

// ---------------------------------------------------------------- lifecycle

store::store(std::filesystem::path dir, store_open_options options)
    : dir_(std::move(dir)), options_(options) {}

store::~store() {
  unwatch();  // the follower's callback reads through this store
  try {
    end_session();
  } catch (const store_error& e) {
    log_error("closing store " + dir_.string() + ": ending its session: " + e.what());
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
  engine_.reset();
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
                   payload_backend payloads, const std::string& postgres, const std::string& data) {
  std::unique_ptr<s3_object_store> objects;
  if (!data.empty()) {
    // Several machines share the volume's payloads only if they share its
    // records: the embedded database is one machine's.
    if (postgres.empty())
      throw store_error(EINVAL,
                        "--data needs --meta: a volume with its payloads in object storage keeps "
                        "its records in PostgreSQL");
    objects = std::make_unique<s3_object_store>(parse_s3_url(data));
    objects->create_bucket();
    // Another volume's packs there would collide with this one's numbers.
    if (!objects->list("packs/").empty())
      throw store_error(EEXIST, objects->where() +
                                    " already holds pack objects (another volume's?); give "
                                    "--data an empty prefix");
  }
  if (!postgres.empty()) {
    // Blob payloads are values of the payloads table: megabytes of bytea
    // per chunk in the database.
    if (payloads != payload_backend::pack)
      throw store_error(EINVAL,
                        "a store with its records in PostgreSQL keeps its payloads in pack files "
                        "(--payloads pack)");
    // The connection string is written into STORE/FORMAT.
    if (postgres_engine::names_a_password(postgres))
      throw store_error(EINVAL,
                        "the PostgreSQL connection string holds a password; give it in "
                        "PGPASSWORD or ~/.pgpass (mode 0600) instead");
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
  settings.format_version = !data.empty()      ? k_object_format_version
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
                     format_marker_text({settings.format_version, settings.uuid, postgres, data}));
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

namespace {

// A scale-out volume's database, opened read-only by its connection string
// (refused with a password in it: the string goes into FORMAT files), and
// its settings record.
std::pair<std::unique_ptr<metadata_engine>, std::string> open_volume_database(
    const std::string& conninfo) {
  if (postgres_engine::names_a_password(conninfo))
    throw store_error(EINVAL,
                      "the PostgreSQL connection string holds a password; give it in PGPASSWORD "
                      "or ~/.pgpass (mode 0600) instead");
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

}  // namespace

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
  write_file_durably(dir / k_format_file, format_marker_text({settings.format_version,
                                                              settings.uuid, conninfo, *location}));
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
    record_lock_holder(fd, {::getpid(), {}, false});
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
    }
  }
  if (holder.pid <= 0) return std::nullopt;
  if (!has_state) holder.mountpoint.clear();
  return holder;
}

std::unique_ptr<store> store::open(const std::filesystem::path& dir,
                                   const store_open_options& options) {
  check(dir);
  std::unique_ptr<store> self(new store(dir, options));

  const format_marker marker = read_format_marker(dir);
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
    self->follower_ = options.follower;
    if (self->follower_) self->options_.read_only = true;
    po.read_only = options.read_only;
    po.lock_volume = !self->options_.read_only;
    po.share_volume = options.shared_writer;
    // FUSE threads and encoders commit and read at once; each statement
    // holds a connection for one round trip.
    po.connections = 8;
    self->engine_ = postgres_engine::open(po);
    self->postgres_ = marker.postgres;
  }

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
  // A crash between the commit that raised the version and the FORMAT
  // rewrite after it leaves FORMAT behind (harmless: the database refuses
  // older builds too); bring it up to date.
  if (!self->options_.read_only && marker.format_version < self->settings_.format_version) {
    write_file_durably(dir / k_format_file,
                       format_marker_text({self->settings_.format_version, self->settings_.uuid,
                                           marker.postgres, marker.data}));
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
      po.fill_cache = self->follower_ || options.shared_writer;
      self->data_ = marker.data;
    } else if (self->settings_.format_version >= k_object_format_version) {
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
        return s->others_mounted() ? other_clients_grace() : std::chrono::seconds(0);
      });
    self->payloads_ = std::move(packs);
    // Pack bytes durable before a memtable flush makes the index entries
    // naming them durable.
    if (!self->options_.read_only && self->rocksdb_)
      self->rocksdb_->set_before_flush([packs = self->packs_] { packs->sync(); });
  } else {
    self->payloads_ = std::make_unique<rocksdb_payload_store>(*self->engine_);
  }
  self->cache_ = std::make_unique<chunk_cache>(options.chunk_cache_bytes);
  self->damaged_ = std::make_unique<damaged_chunks>(*self->engine_, !self->options_.read_only);
  // A tool that writes (gc) sees the mounts as other clients; a mount
  // counts again without itself (begin_session).
  if (self->keeps_sessions() && !self->options_.read_only)
    self->count_others(self->sessions(), unix_now(), false);
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

// ---------------------------------------------------------------- reads

namespace {

// Keys that start with an 8-byte big-endian number (an inode's dirents,
// extents or xattrs).
key_range u64_prefix(std::uint64_t n) {
  return prefix_range(inode_key(n));
}

}  // namespace

std::optional<inode_record> store::get_inode(std::uint64_t ino) const {
  const auto v = engine_->get(table::inodes, inode_key(ino), "inode " + std::to_string(ino));
  if (!v) return std::nullopt;
  return decode_inode(ino, *v);
}

std::vector<std::optional<inode_record>> store::get_inodes(
    const std::vector<std::uint64_t>& inos) const {
  std::vector<std::optional<inode_record>> out(inos.size());
  if (inos.empty()) return out;
  std::vector<std::string> keys;
  keys.reserve(inos.size());
  for (std::uint64_t ino : inos) keys.push_back(inode_key(ino));
  const std::vector<std::optional<std::string>> values = engine_->get_many(
      table::inodes, keys,
      inos.size() == 1 ? "inode " + std::to_string(inos[0])
                       : std::to_string(inos.size()) + " inodes from " + std::to_string(inos[0]));
  for (std::size_t i = 0; i < inos.size(); ++i)
    if (values[i]) out[i] = decode_inode(inos[i], *values[i]);
  return out;
}

std::optional<dirent_record> store::get_dirent(std::uint64_t parent, std::string_view name) const {
  const std::string what = dirent_what(parent, name);
  const auto v = engine_->get(table::dirents, dirent_key(parent, name), what);
  if (!v) return std::nullopt;
  return detail::decode_dirent(*v, what);
}

void store::list_dir(std::uint64_t parent, std::optional<std::string_view> after,
                     const std::function<bool(std::string_view, const dirent_record&)>& fn) const {
  const std::string start = after ? dirent_key(parent, *after) : std::string();
  scan_options o;
  o.start = start;
  engine_->scan(table::dirents, u64_prefix(parent), o,
                "listing directory " + std::to_string(parent),
                [&](std::string_view key, std::string_view value) {
                  const std::string_view name = key.substr(8);
                  if (after && name == *after) return true;
                  const std::string what = dirent_what(parent, name);
                  if (name.empty())
                    throw store_error(EIO, "corrupt dirent record for " + what + ": empty name");
                  return fn(name, detail::decode_dirent(value, what));
                });
}

bool store::dir_is_empty(std::uint64_t parent) const {
  bool empty = true;
  engine_->scan(table::dirents, u64_prefix(parent), {},
                "listing directory " + std::to_string(parent),
                [&](std::string_view, std::string_view) { return empty = false; });
  return empty;
}

namespace {

std::uint64_t extent_offset(std::uint64_t ino, std::string_view key) {
  if (key.size() != 16)
    throw store_error(EIO, "corrupt extent key of inode " + std::to_string(ino) + ": " +
                               std::to_string(key.size()) + " bytes instead of 16");
  return decode_u64_be(key.substr(8));
}

}  // namespace

std::vector<std::pair<std::uint64_t, extent_record>> store::extents(std::uint64_t ino,
                                                                    std::uint64_t begin,
                                                                    std::uint64_t end,
                                                                    std::size_t limit) const {
  std::vector<std::pair<std::uint64_t, extent_record>> out;
  if (begin >= end || limit == 0) return out;
  // Appends what `all` (sorted, from the floor of `begin` on) has of the answer.
  const auto pick = [&](const extent_list& all) {
    for (const auto& [offset, r] : all) {
      if (offset >= end || out.size() >= limit) break;
      if (offset + r.length > begin) out.emplace_back(offset, r);
    }
  };
  // After pick(w.list) of a window starting at or before `begin`: whether
  // out is the whole answer (every extent the range needs, or `limit`).
  const auto whole_answer = [&](const extent_window& w) {
    return w.to_end || end - 1 <= w.last || out.size() >= limit;
  };
  // Where the ranged scan below starts: the floor of `begin`, or right
  // after a window that holds the start of the answer.
  std::uint64_t scan_from = begin;
  bool from_floor = true;
  if (caches_extents()) {
    std::uint64_t gen = 0;
    bool known_big = false;
    {
      std::lock_guard lock(extent_cache_mutex_);
      if (const auto it = extent_windows_.find(ino); it != extent_windows_.end()) {
        for (const extent_window& w : it->second) {
          if (w.first > begin) continue;
          pick(w.list);
          if (whole_answer(w)) return out;
          out.clear();
        }
        known_big = true;
      }
      if (const auto it = extent_cache_.find(ino); it != extent_cache_.end()) {
        if (!it->second.too_many) {
          pick(it->second.list);
          return out;
        }
        known_big = true;
      }
      gen = extents_gen_;
    }
    if (!known_big) {
      // The whole list in the scan's first page (one round trip) when the
      // file has few extents; a marker sends later reads of a file with
      // more straight to the ranged scan below.
      cached_extents whole;
      scan_options o;
      engine_->scan(table::extents, u64_prefix(ino), o,
                    "reading extents of inode " + std::to_string(ino),
                    [&](std::string_view key, std::string_view value) {
                      return add_cached_extent(whole, ino, key, value);
                    });
      cache_extents(gen, {{ino, whole}});
      if (!whole.too_many) {
        pick(whole.list);
        return out;
      }
    }
    // A window read now starts at the floor of `begin`.
    const extent_window w = read_extent_window(ino, begin, gen);
    pick(w.list);
    if (whole_answer(w)) return out;
    // The window has every extent up to w.last: the rest comes after it
    // (in a snapshot of its own: a commit in between changes extents
    // after w.last only as a scan after it would see them, one extent per
    // offset either way).
    scan_from = w.last + 1;
    from_floor = false;
  }
  const std::string start = extent_key(ino, scan_from);
  // An extent that starts before `begin` may still cover it: start from the
  // last extent at or before `begin`.
  scan_options o;
  o.start = start;
  o.order = from_floor ? scan_order::forward_from_floor : scan_order::forward;
  engine_->scan(table::extents, u64_prefix(ino), o,
                "reading extents of inode " + std::to_string(ino),
                [&](std::string_view key, std::string_view value) {
                  const std::uint64_t offset = extent_offset(ino, key);
                  if (offset >= end) return false;
                  const extent_record r = detail::decode_extent(value, extent_what(ino, offset));
                  if (offset + r.length > begin) out.emplace_back(offset, r);
                  return out.size() < limit;
                });
  return out;
}

store::extent_window store::read_extent_window(std::uint64_t ino, std::uint64_t begin,
                                               std::uint64_t gen) const {
  extent_window w;
  scan_options o;
  const std::string start = extent_key(ino, begin);
  o.start = start;
  o.order = scan_order::forward_from_floor;
  o.expected_rows = k_window_extents;
  bool full = false;
  engine_->scan(
      table::extents, u64_prefix(ino), o, "reading extents of inode " + std::to_string(ino),
      [&](std::string_view key, std::string_view value) {
        const std::uint64_t offset = extent_offset(ino, key);
        w.list.emplace_back(offset, detail::decode_extent(value, extent_what(ino, offset)));
        return !(full = w.list.size() == k_window_extents);
      });
  // The first row is the floor (the last extent at or before `begin`);
  // without one no extent starts at or before `begin`, so none comes before
  // the list at all.
  w.first = !w.list.empty() && w.list.front().first <= begin ? w.list.front().first : 0;
  w.to_end = !full;
  w.last = w.list.empty() ? begin : w.list.back().first;
  std::lock_guard lock(extent_cache_mutex_);
  if (gen != extents_gen_) return w;  // a commit came in between: it may be stale
  if (extent_windows_.size() >= k_extent_windows && !extent_windows_.contains(ino))
    extent_windows_.erase(extent_windows_.begin());  // another file's, any
  std::deque<extent_window>& kept = extent_windows_[ino];
  // Two readers of one file that missed together read the same window.
  for (const extent_window& k : kept)
    if (k.first == w.first && k.last == w.last) return w;
  if (kept.size() == k_windows_per_file) kept.pop_front();
  kept.push_back(w);
  return w;
}

void store::drop_cached_extents(std::span<const std::uint64_t> inodes, bool all) const {
  if (!caches_extents()) return;
  std::lock_guard lock(extent_cache_mutex_);
  ++extents_gen_;
  if (all) {
    extent_cache_.clear();
    extent_windows_.clear();
    return;
  }
  for (const std::uint64_t ino : inodes) {
    extent_cache_.erase(ino);
    extent_windows_.erase(ino);
  }
}

void store::prefetch_extents(std::span<const std::uint64_t> inodes) const {
  if (!caches_extents() || inodes.empty()) return;
  // Inodes made together (cp, tar, rsync) have nearby numbers: one range
  // scan covers a run whose neighbours are at most k_gap apart, up to
  // k_max_rows extents (files outside the list in the range cost a row
  // each; a big file's extents end the run early).
  constexpr std::uint64_t k_gap = 16;
  constexpr std::size_t k_max_rows = 4096;
  constexpr std::size_t k_max_inodes = 1024;
  std::vector<std::uint64_t> wanted;
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(extent_cache_mutex_);
    for (const std::uint64_t ino : inodes.first(std::min(inodes.size(), k_max_inodes)))
      if (!extent_cache_.contains(ino)) wanted.push_back(ino);
    gen = extents_gen_;
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::unordered_map<std::uint64_t, cached_extents> found;
  for (std::size_t i = 0; i < wanted.size();) {
    std::size_t j = i + 1;
    while (j < wanted.size() && wanted[j] - wanted[j - 1] <= k_gap) ++j;
    const std::uint64_t first = wanted[i], last = wanted[j - 1];
    std::set<std::uint64_t> run(wanted.begin() + static_cast<std::ptrdiff_t>(i),
                                wanted.begin() + static_cast<std::ptrdiff_t>(j));
    i = j;
    if (last == std::numeric_limits<std::uint64_t>::max()) continue;
    key_range range{inode_key(first), inode_key(last + 1)};
    std::size_t rows = 0;
    // Every inode of the run below `done` has its whole list (or is marked).
    std::uint64_t done = first;
    std::unordered_map<std::uint64_t, cached_extents> seen;
    try {
      scan_options o;
      engine_->scan(table::extents, range, o, "prefetching extents",
                    [&](std::string_view key, std::string_view value) {
                      const std::uint64_t ino = decode_u64_be(key.substr(0, 8));
                      done = ino;
                      if (++rows > k_max_rows) return false;
                      if (!run.contains(ino)) return true;
                      add_cached_extent(seen[ino], ino, key, value);
                      return true;
                    });
      if (rows <= k_max_rows) done = last + 1;  // the whole range was read
    } catch (const store_error&) {
      continue;  // the reads that need them scan again and say why
    }
    for (const std::uint64_t ino : run)
      if (ino < done) found[ino] = seen.contains(ino) ? std::move(seen[ino]) : cached_extents{};
  }
  cache_extents(gen, std::move(found));
}

bool store::add_cached_extent(cached_extents& c, std::uint64_t ino, std::string_view key,
                              std::string_view value) {
  if (c.too_many) return false;
  if (c.list.size() == k_cached_extents) {
    c.too_many = true;
    c.list.clear();
    return false;
  }
  const std::uint64_t offset = extent_offset(ino, key);
  c.list.emplace_back(offset, detail::decode_extent(value, extent_what(ino, offset)));
  return true;
}

void store::cache_extents(std::uint64_t gen,
                          std::unordered_map<std::uint64_t, cached_extents> found) const {
  std::lock_guard lock(extent_cache_mutex_);
  if (gen != extents_gen_) return;  // a commit came in between: they may be stale
  if (extent_cache_.size() + found.size() > k_extent_cache_files) extent_cache_.clear();
  for (auto& [ino, c] : found) extent_cache_.insert_or_assign(ino, std::move(c));
}

void store::forget_extents(std::uint64_t ino) const {
  drop_cached_extents(std::span(&ino, 1), false);
}

std::vector<std::pair<std::uint64_t, extent_record>> store::last_extents(std::uint64_t ino,
                                                                         std::uint64_t begin,
                                                                         std::size_t limit) const {
  std::vector<std::pair<std::uint64_t, extent_record>> out;
  if (limit == 0) return out;
  scan_options o;
  o.order = scan_order::backward;
  engine_->scan(table::extents, u64_prefix(ino), o,
                "reading extents of inode " + std::to_string(ino),
                [&](std::string_view key, std::string_view value) {
                  const std::uint64_t offset = extent_offset(ino, key);
                  if (offset < begin) return false;
                  out.emplace_back(offset, detail::decode_extent(value, extent_what(ino, offset)));
                  return out.size() < limit;
                });
  std::reverse(out.begin(), out.end());
  return out;
}

std::optional<std::string> store::get_xattr(std::uint64_t ino, std::string_view name) const {
  const std::string what = xattr_what(ino, name);
  const auto v = engine_->get(table::xattrs, xattr_key(ino, name), what);
  if (!v) return std::nullopt;
  return detail::decode_xattr_value(*v, what);
}

std::vector<std::string> store::list_xattrs(std::uint64_t ino) const {
  std::vector<std::string> names;
  engine_->scan(table::xattrs, u64_prefix(ino), {},
                "listing xattrs of inode " + std::to_string(ino),
                [&](std::string_view key, std::string_view) {
                  names.emplace_back(key.substr(8));
                  return true;
                });
  return names;
}

std::optional<chunk_record> store::get_chunk(const chunk_hash& hash) const {
  const std::string what = "chunk " + hash.hex();
  const auto v = engine_->get(table::chunks, hash.view(), what);
  if (!v) return std::nullopt;
  return detail::decode_chunk(*v, what);
}

void store::scan_prefix(
    table t, std::string_view prefix, std::string_view start, const char* what,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) const {
  scan_options o;
  o.start = start;
  o.fill_cache = false;  // scans pass once over records nobody reads again soon
  engine_->scan(t, prefix_range(prefix), o, what, fn);
}

std::vector<new_file_record> store::new_files() const {
  std::vector<new_file_record> out;
  scan_prefix(table::meta, k_new_file_prefix, k_new_file_prefix, "listing new files",
              [&](std::string_view key, std::string_view value) {
                // A damaged row must not stop a mount: it is left alone (and
                // its file, if any, kept).
                try {
                  out.push_back(decode_new_file(key, value));
                } catch (const store_error& e) {
                  log_error("store " + dir_.string() + ": " + e.what() + "; ignored");
                }
                return true;
              });
  return out;
}

std::vector<std::uint64_t> store::orphans() const {
  std::vector<std::uint64_t> out;
  scan_prefix(table::meta, k_orphan_prefix, k_orphan_prefix, "listing orphans",
              [&](std::string_view key, std::string_view value) {
                if (key.size() != k_orphan_prefix.size() + 8)
                  throw store_error(EIO, "corrupt orphan key in store " + dir_.string());
                const std::uint64_t ino = decode_u64_be(key.substr(k_orphan_prefix.size()));
                check_orphan(ino, value);
                out.push_back(ino);
                return true;
              });
  return out;
}

std::vector<recompress_item> store::pending_recompress(
    std::size_t limit, const std::optional<chunk_hash>& after) const {
  std::vector<recompress_item> out;
  std::string start(k_recompress_prefix);
  if (after) start.append(after->view());
  scan_prefix(table::meta, k_recompress_prefix, start, "listing queued re-encodings",
              [&](std::string_view key, std::string_view value) {
                if (key.size() != k_recompress_prefix.size() + chunk_hash::k_size)
                  throw store_error(EIO, "corrupt recompress key in store " + dir_.string());
                const chunk_hash hash =
                    chunk_hash::from_bytes(key.substr(k_recompress_prefix.size()));
                if (!after || hash != *after) out.push_back({hash, decode_recompress(hash, value)});
                return out.size() < limit;
              });
  return out;
}

void store::for_each_inode(const std::function<bool(const inode_record&)>& fn) const {
  scan_prefix(table::inodes, {}, {}, "scanning inodes",
              [&](std::string_view key, std::string_view value) {
                return fn(decode_inode(decode_u64_be(key), value));
              });
}

std::uint64_t store::payload_file_bytes() const {
  if (packs_) return packs_->file_bytes();
  return rocksdb_ ? rocksdb_->blob_file_bytes() : 0;
}

// ---------------------------------------------------------------- gc

namespace {

// What RocksDB adds to every value it puts in a blob file: the record
// header (key and value sizes, expiration, two CRCs) and the key (our 32-byte
// chunk hash). Used only to estimate the garbage in blob files.
constexpr std::uint64_t k_blob_record_overhead = 32 + chunk_hash::k_size;

// Adds the store directory's files to `r`, by kind (RocksDB's file names),
// except those under `skip` (a scale-out volume's cache, whose packs are
// copies).
void add_file_sizes(const fs::path& dir, const fs::path& skip, gc_report& r) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!skip.empty() && it->path() == skip) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) != 0 || S_ISDIR(sb.st_mode)) continue;
    // Apparent sizes (du -sb): while the store is open RocksDB preallocates
    // its write-ahead log and MANIFEST (fallocate, up to ~18 and 4 MiB) and
    // gives the rest back at close, so allocated blocks would make the same
    // store look bigger while mounted.
    const auto bytes = static_cast<std::uint64_t>(sb.st_size);
    const std::string name = it->path().filename().string();
    r.disk_bytes += bytes;
    if (name.ends_with(".blob") || name.ends_with(".pack")) {
      r.payload_file_bytes += bytes;
    } else if (name.ends_with(".sst")) {
      r.table_file_bytes += bytes;
    } else if (name.ends_with(".log")) {
      r.wal_bytes += bytes;
    } else if (name == "LOG") {
      r.info_log_bytes += bytes;
    } else if (name.starts_with("LOG.old.")) {
      r.old_info_log_bytes += bytes;
    } else {
      r.other_file_bytes += bytes;
    }
  }
}

}  // namespace

gc_report store::garbage() const {
  gc_report r;
  r.payload_backend = payload_backend_name(settings_.payloads);
  r.garbage_since_collect = garbage_bytes_.load();
  scan_prefix(table::chunks, {}, {}, "scanning chunks",
              [&](std::string_view key, std::string_view value) {
                if (gc_canceled_.load(std::memory_order_relaxed))
                  throw store_error(ECANCELED, "scanning the chunks of store " + dir_.string() +
                                                   ": canceled (the store is closing)");
                const chunk_record c =
                    detail::decode_chunk(value, "chunk " + chunk_hash::from_bytes(key).hex());
                ++r.chunks;
                r.live_payload_bytes += c.stored_size;
                if (!packs_ && c.stored_size >= k_min_blob_size)
                  r.live_blob_payload_bytes += c.stored_size + k_blob_record_overhead;
                return true;
              });
  add_file_sizes(dir_, packs_ && packs_->remote() ? packs_->cache_dir() : fs::path(), r);
  if (packs_ && packs_->remote()) {
    const std::uint64_t objects = packs_->file_bytes();
    r.payload_file_bytes += objects;
    r.disk_bytes += objects;
  }
  if (packs_) {
    // Exact: the index says which pack bytes are live. Everything else in
    // the pack files is garbage; the write-ahead log holds no pack payloads.
    std::uint64_t live_and_headers = 0;
    for (const pack_store::pack_usage& u : packs_->usage(&gc_canceled_)) {
      r.live_blob_payload_bytes += u.live_bytes;
      if (u.file_bytes > 0) {
        ++r.pack_files;
        live_and_headers += u.live_bytes + k_pack_header_size;
      }
    }
    r.payload_garbage_bytes =
        r.payload_file_bytes > live_and_headers ? r.payload_file_bytes - live_and_headers : 0;
    r.reclaimable_bytes = r.payload_garbage_bytes + r.old_info_log_bytes;
    return r;
  }
  // Every payload is in the write-ahead log until a flush moves it to a
  // blob file (a log file goes once every column family has flushed past
  // it, so it often holds payloads that are in blob files already): after
  // collect_garbage's flush, blob files hold the live payloads and the log
  // nothing.
  const std::uint64_t payload_bytes = r.payload_file_bytes + r.wal_bytes;
  if (payload_bytes > r.live_blob_payload_bytes)
    r.payload_garbage_bytes = payload_bytes - r.live_blob_payload_bytes;
  r.reclaimable_bytes = r.payload_garbage_bytes + r.old_info_log_bytes;
  return r;
}

gc_result store::collect_garbage(const std::function<void(std::string_view phase)>& progress) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  std::lock_guard lock(gc_mutex_);
  // Beside other writers one collects at a time.
  if (!take_lease(k_lease_gc))
    throw store_error(EBUSY, "collecting garbage in " + engine_->where() +
                                 ": another writer of the volume is collecting it");
  const auto started = std::chrono::steady_clock::now();
  const auto throw_if_canceled = [&] {
    if (gc_canceled_)
      throw store_error(ECANCELED, "collecting garbage in store " + dir_.string() +
                                       ": canceled (the store is closing)");
  };
  const auto phase = [&](std::string_view what) {
    throw_if_canceled();
    if (progress) progress(what);
  };
  gc_result result;
  std::uint64_t packs_deleted = 0;
  std::uint64_t packs_deferred = 0;
  phase("measuring");
  result.before = garbage();

  // Copying the live payloads needs their size in free space (the old blob
  // files go only at the end), on top of the reserve RocksDB needs for its
  // flushes (check_space_for). Without that room a compaction would hit
  // ENOSPC, which stops every write until Resume(); so then only what needs
  // no copy is done: tombstones dropped, and blob files holding nothing
  // live deleted.
  bool rewrite_payloads = true;
  bool compact = true;
  try {
    check_space_for(result.before.live_blob_payload_bytes + result.before.table_file_bytes);
  } catch (const store_error& e) {
    log_info("gc: " + std::string(e.what()) + "; collecting only blob files without live payloads");
    rewrite_payloads = false;
    // Even without blob GC, a forced compaction rewrites the table files.
    try {
      check_space_for(result.before.table_file_bytes);
    } catch (const store_error&) {
      compact = false;
    }
  }
  result.rewrote_payloads = rewrite_payloads;

  // 0. Pack stores: packs with enough dead bytes rewritten (their live
  //    records copied to the current pack, the index moved in one synced
  //    commit, the old pack deleted). Needs room for the copies only.
  //    Not while writing beside other writers of the volume: another
  //    writer's packs are uploaded before the commit that names them (its
  //    staged payloads), so a pack this process sees without a live record
  //    may be about to get some. That waits for one gc at a time across
  //    the writers (a lease; docs/scale-out.md, "Several writers").
  if (packs_ && writes_beside_others())
    log_info("gc: not compacting packs beside other writers of the volume");
  if (packs_ && !writes_beside_others()) {
    std::uint64_t to_move = 0;
    for (const pack_store::pack_usage& u : packs_->usage(&gc_canceled_))
      if (u.file_bytes > 0 && static_cast<double>(u.dead_bytes()) >=
                                  k_pack_dead_share * static_cast<double>(u.file_bytes))
        to_move += u.live_bytes;
    // The copies may use the space reserve (check_space_for) but not all of
    // it: compaction is how a full pack store gets space back (each rewritten
    // pack frees more than its copies take), while RocksDB still needs room
    // for the index commit and its flushes.
    bool room = true;
    struct ::statvfs sv {};
    if (::statvfs(dir_.c_str(), &sv) == 0) {
      const std::uint64_t block = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
      const std::uint64_t free = static_cast<std::uint64_t>(sv.f_bavail) * block;
      if (free < to_move + k_min_space_reserve / 4) {
        log_info("gc: " + std::to_string(free) + " bytes free, too few to copy " +
                 std::to_string(to_move) +
                 " live pack bytes; deleting only packs without live records");
        room = false;
      }
    }
    phase("compacting packs");
    // Without room, a threshold above 1 selects only packs with nothing live.
    const pack_store::compaction c = packs_->compact(room ? k_pack_dead_share : 2.0, ahead_gate_,
                                                     commit_mutex_, gc_canceled_, progress);
    packs_deleted = c.packs_deleted;
    packs_deferred = c.packs_deferred;
    if (!room) result.rewrote_payloads = rewrite_payloads = false;
  }

  // 1. Memtables to table and blob files. A write-ahead log file is deleted
  //    once every column family has flushed past it, so this is what frees
  //    the log (which holds every payload written since the last flush).
  phase("flushing");
  if (rocksdb_) rocksdb_->flush();

  // 2. Every column family compacted to its bottommost level: only there do
  //    tombstones (deleted chunks, extents, inodes, dirents) and the values
  //    they hide go away. For the payloads, blob GC forced over every blob
  //    file (age cutoff 1.0): the live payloads of a file that holds any
  //    garbage are copied to a new blob file, and a file whose payloads are
  //    all garbage is deleted. RocksDB's own blob GC (enable_blob_garbage_
  //    collection) only looks at the oldest files, and only when a
  //    compaction happens to touch them.
  //    (PostgreSQL's autovacuum does this for its tables.)
  if (compact && rocksdb_)
    rocksdb_->compact_all(rewrite_payloads, gc_canceled_,
                          [&](const std::string& what) { phase(what); });

  // 3. Info logs of earlier opens: RocksDB keeps a few (keep_log_file_num)
  //    for diagnostics only; nothing reads them.
  phase("removing old info logs");
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->path().filename().string().starts_with("LOG.old.")) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
    if (rm) log_error("gc: cannot remove " + it->path().string() + ": " + rm.message());
  }

  // Garbage made since the measurement above is left for the next
  // collection (the compactions may or may not have seen it). A partial or
  // failed collection (an exception above) subtracts nothing, so the
  // collector tries again. Only collections subtract, one at a time, so
  // this cannot wrap.
  if (rewrite_payloads && compact) garbage_bytes_ -= result.before.garbage_since_collect;

  phase("measuring");
  result.after = garbage();
  result.after.packs_deleted = packs_deleted;
  result.after.packs_deferred = packs_deferred;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

void store::cancel_garbage_collection() {
  gc_canceled_ = true;
}

std::string to_json(const gc_report& r) {
  nlohmann::json j;
  j["payload_backend"] = r.payload_backend;
  j["disk_bytes"] = r.disk_bytes;
  j["payload_file_bytes"] = r.payload_file_bytes;
  j["pack_files"] = r.pack_files;
  j["packs_deleted"] = r.packs_deleted;
  j["packs_deferred"] = r.packs_deferred;
  j["table_file_bytes"] = r.table_file_bytes;
  j["wal_bytes"] = r.wal_bytes;
  j["info_log_bytes"] = r.info_log_bytes;
  j["old_info_log_bytes"] = r.old_info_log_bytes;
  j["other_file_bytes"] = r.other_file_bytes;
  j["chunks"] = r.chunks;
  j["live_payload_bytes"] = r.live_payload_bytes;
  j["live_blob_payload_bytes"] = r.live_blob_payload_bytes;
  j["payload_garbage_bytes"] = r.payload_garbage_bytes;
  j["garbage_since_collect"] = r.garbage_since_collect;
  j["reclaimable_bytes"] = r.reclaimable_bytes;
  return j.dump();
}

std::string to_json(const gc_result& r) {
  nlohmann::json j;
  j["before"] = nlohmann::json::parse(to_json(r.before));
  j["after"] = nlohmann::json::parse(to_json(r.after));
  j["reclaimed_bytes"] = r.reclaimed_bytes();
  j["rewrote_payloads"] = r.rewrote_payloads;
  j["seconds"] = r.seconds;
  return j.dump();
}

bool store::is_queued_for_recompress(const chunk_hash& hash) const {
  return engine_->get(table::meta, recompress_key(hash), "the re-encoding queue").has_value();
}

// ---------------------------------------------------------------- chunks

prepared_chunk store::prepare_chunk(std::string_view plain, bool force_encode) const {
  return prepare_chunk(plain, policy_.for_type(codec::file_type::other), force_encode);
}

prepared_chunk store::prepare_chunk(std::string_view plain, const codec::codec_options& options,
                                    bool force_encode) const {
  if (plain.size() > k_chunk_size)
    throw store_error(EINVAL, "chunk of " + std::to_string(plain.size()) +
                                  " bytes exceeds the chunk size " + std::to_string(k_chunk_size));
  prepared_chunk p;
  p.hash = sha256_of(plain);
  p.plain_size = static_cast<std::uint32_t>(plain.size());
  // Dedup before encoding: a chunk the store already has costs a hash and a
  // lookup instead of a compression.
  if (!force_encode && get_chunk(p.hash)) return p;
  try {
    p.encoded = codec::encode_chunk(plain, options);
  } catch (const codec::codec_error& e) {
    throw store_error(EIO, "encoding chunk " + p.hash.hex() + ": " + e.what());
  }
  return p;
}

namespace {
[[noreturn]] void chunk_failure(const std::string& message) {
  log_error(message);
  throw store_error(EIO, message);
}
}  // namespace

store::reencoding store::reencode_chunk(const chunk_hash& hash, const chunk_record& current,
                                        const codec::codec_options& target,
                                        bool same_codec_too) const {
  reencoding out;
  if (current.codec == target.preferred && !same_codec_too) return out;
  // A Lepton file's chunks are re-encoded per file, never one by one: its
  // members depend on the first chunk's payload.
  if (codec::is_lepton_file_codec(current.codec)) return out;
  const std::shared_ptr<const std::string> plain = read_chunk(hash);
  codec::encoded_chunk encoded = codec::encode_chunk(*plain, target);
  out.fell_back_from = encoded.fell_back_from;
  out.fallback_reason = std::move(encoded.fallback_reason);
  if (encoded.codec == target.preferred && encoded.bytes.size() < current.stored_size)
    out.smaller = std::move(encoded);
  return out;
}

namespace {
// The shape a Lepton file needs, from the extents alone: whole chunks in
// order on the chunk grid covering the whole file, no chunk twice.
std::string lepton_file_shape_problem(const extent_list& file, std::uint64_t file_size) {
  if (file.size() < 2) return "fewer than two chunks";
  if (file_size > codec::k_lepton_file_max_bytes) return "larger than a Lepton file may be";
  std::set<chunk_hash> seen;
  for (std::size_t i = 0; i < file.size(); ++i) {
    const auto& [off, e] = file[i];
    const std::uint64_t want = std::min<std::uint64_t>(k_chunk_size, file_size - off);
    if (off != std::uint64_t{i} * k_chunk_size || e.chunk_offset != 0 || e.length != want)
      return "not whole chunks on the chunk grid";
    if (!seen.insert(e.hash).second) return "a chunk appears twice";
  }
  if (file.back().first + file.back().second.length != file_size) return "holes or a short tail";
  return {};
}
}  // namespace

bool store::could_be_lepton_file(const extent_list& file, std::uint64_t file_size) const {
  return lepton_file_shape_problem(file, file_size).empty();
}

store::lepton_file_reencoding store::reencode_lepton_file(const extent_list& file,
                                                          std::uint64_t file_size,
                                                          double min_savings) const {
  lepton_file_reencoding out;
  out.refusal = lepton_file_shape_problem(file, file_size);
  if (!out.refusal.empty()) return out;
  // Records first: their checksums are what the commit compares with.
  std::vector<chunk_record> records;
  for (const auto& [off, e] : file) {
    std::optional<chunk_record> rec = get_chunk(e.hash);
    if (!rec) {
      out.refusal = "chunk " + e.hash.hex() + " is gone";
      return out;
    }
    if (codec::is_lepton_file_codec(rec->codec)) {
      out.refusal = "already part of a Lepton file";
      return out;
    }
    out.stored_before += rec->stored_size;
    records.push_back(*rec);
  }
  std::string jpeg;
  jpeg.reserve(file_size);
  std::vector<std::string> names;
  for (const auto& [off, e] : file) {
    jpeg += *read_chunk(e.hash);
    names.emplace_back(e.hash.view());
  }
  if (jpeg.size() != file_size) {
    out.refusal = "the chunks hold " + std::to_string(jpeg.size()) + " bytes";
    return out;
  }
  codec::lepton_file_encoding enc;
  try {
    enc = codec::encode_lepton_file(jpeg, k_chunk_size, names, min_savings);
  } catch (const codec::codec_error& e) {
    out.refusal = e.what();
    return out;
  }
  if (!enc.payload) {
    out.refusal = enc.refusal;
    return out;
  }
  for (std::size_t i = 0; i < file.size(); ++i) {
    codec::encoded_chunk c;
    if (i == 0) {
      c.codec = codec::codec_id::lepton_file;
      c.bytes = std::move(*enc.payload);
    } else {
      c.codec = codec::codec_id::lepton_member;
      c.bytes = codec::encode_lepton_member(
          {names[0], static_cast<std::uint32_t>(i), file[i].second.length});
    }
    out.stored_after += c.bytes.size();
    out.swaps.push_back({file[i].second.hash, records[i].checksum, std::move(c)});
  }
  if (out.stored_after >= out.stored_before) {
    out.swaps.clear();
    out.refusal = "no smaller than the chunks as they are";
  }
  return out;
}

void store::drop_caches() const {
  cache_->clear();
  engine_->drop_caches();
}

std::shared_ptr<const std::string> store::cached_chunk(const chunk_hash& hash) const {
  return cache_->find(hash);
}

store::stored_chunk store::read_stored_chunk(const chunk_hash& hash) const {
  return read_stored_chunk_once(hash, true);
}

store::stored_chunk store::read_stored_chunk_once(const chunk_hash& hash,
                                                  bool retry_on_swap) const {
  std::optional<chunk_record> rec;
  try {
    rec = get_chunk(hash);
  } catch (const store_error& e) {
    chunk_failure(e.what());
  }
  if (!rec) chunk_failure("chunk " + hash.hex() + " is missing");
  std::string stored;
  try {
    stored = payloads_->get(hash);
  } catch (const store_error& e) {
    chunk_failure(e.what());
  }
  const std::uint64_t sum = stored_checksum(stored);
  if (stored.size() != rec->stored_size || sum != rec->checksum) {
    // The record and the payload are read one after the other: a background
    // re-encoding may have swapped both in between. If the record changed,
    // read again; if it did not, the payload is damaged.
    if (retry_on_swap) {
      std::optional<chunk_record> now;
      try {
        now = get_chunk(hash);
      } catch (const store_error&) {
      }
      if (now && *now != *rec) return read_stored_chunk_once(hash, false);
    }
  }
  if (stored.size() != rec->stored_size) {
    mark_damaged(hash, "payload size");
    chunk_failure("chunk " + hash.hex() + ": payload is " + std::to_string(stored.size()) +
                  " bytes, its record says " + std::to_string(rec->stored_size));
  }
  if (sum != rec->checksum) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), " (XXH3 %016llx, expected %016llx)",
                  static_cast<unsigned long long>(sum),
                  static_cast<unsigned long long>(rec->checksum));
    mark_damaged(hash, "payload checksum");
    chunk_failure("chunk " + hash.hex() + ": checksum mismatch" + buf);
  }
  return {*rec, std::move(stored)};
}

// Whether `stored` is the payload `rec` describes (its size and XXH3).
static bool payload_matches(const chunk_record& rec, std::string_view stored) {
  return stored.size() == rec.stored_size && stored_checksum(stored) == rec.checksum;
}

// The plain content of a chunk from its checked stored bytes: decoded, size
// checked, and for codecs without a checksum of their own, the SHA-256.
static std::shared_ptr<const std::string> decode_checked(const chunk_hash& hash,
                                                         const chunk_record& rec,
                                                         std::string_view stored) {
  std::string plain;
  try {
    plain = codec::decode_chunk(rec.codec, stored, rec.plain_size);
  } catch (const codec::codec_error& e) {
    chunk_failure("chunk " + hash.hex() + ": cannot decode " + codec::codec_name(rec.codec) +
                  " payload: " + e.what());
  }
  if (plain.size() != rec.plain_size)
    chunk_failure("chunk " + hash.hex() + ": decoded to " + std::to_string(plain.size()) +
                  " bytes, expected " + std::to_string(rec.plain_size));
  // Lepton, Deflate and Brotli streams carry no checksum of their own, and a
  // different lepton_jpeg or preflate-rs version could decode an old payload
  // differently: the chunk's name is the SHA-256 of its content, so check
  // it. (~1 GB/s, a few percent of a Lepton decode; zstd chunks skip it.)
  if (rec.codec == codec::codec_id::lepton || rec.codec == codec::codec_id::broccoli ||
      rec.codec == codec::codec_id::deflate) {
    if (sha256_of(plain) != hash)
      chunk_failure("chunk " + hash.hex() + ": decoded " + codec::codec_name(rec.codec) +
                    " content does not match the chunk's SHA-256");
  }
  return std::make_shared<const std::string>(std::move(plain));
}

std::shared_ptr<const std::string> store::decode_lepton_file_chunk(const chunk_hash& hash,
                                                                   std::uint32_t plain_size,
                                                                   const chunk_hash& first,
                                                                   std::string_view payload,
                                                                   std::uint32_t index) const {
  const std::string what = "chunk " + hash.hex() + " (chunk " + std::to_string(index) +
                           " of the Lepton file in chunk " + first.hex() + ")";
  codec::lepton_file_view file;
  std::string jpeg;
  try {
    file = codec::parse_lepton_file(payload);
    if (file.chunk_size > k_chunk_size || file.name_size != chunk_hash::k_size ||
        file.chunk_names[0] != first.view())
      chunk_failure(what + ": the Lepton file does not name its own chunk first");
    if (index >= file.chunk_count() || file.chunk_names[index] != hash.view() ||
        file.chunk_plain_size(index) != plain_size)
      chunk_failure(what + ": the Lepton file has no such chunk of " + std::to_string(plain_size) +
                    " bytes");
    jpeg = codec::decode_lepton_file(file);
  } catch (const codec::codec_error& e) {
    chunk_failure(what + ": cannot decode: " + e.what());
  }
  // Every chunk is checked against its name before any is served: a file
  // whose checksum matched but whose names do not is damaged as a whole.
  std::vector<std::shared_ptr<const std::string>> chunks;
  chunks.reserve(file.chunk_count());
  for (std::size_t i = 0; i < file.chunk_count(); ++i) {
    const std::string_view piece = codec::lepton_file_chunk(file, jpeg, i);
    if (sha256_of(piece).view() != file.chunk_names[i])
      chunk_failure(what + ": decoded chunk " + std::to_string(i) + " does not match its name");
    chunks.push_back(std::make_shared<const std::string>(piece));
  }
  // One decode serves the whole photo: the other chunks go to the cache
  // (and to any reader waiting for one of them).
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (i != index) cache_->fulfil(chunk_hash::from_bytes(file.chunk_names[i]), chunks[i]);
  }
  return chunks[index];
}

std::shared_ptr<const std::string> store::decode_stored_chunk(const chunk_hash& hash,
                                                              const stored_chunk& stored) const {
  const chunk_record& rec = stored.record;
  if (!codec::is_lepton_file_codec(rec.codec)) {
    // Stored bytes that pass their checksum but do not decode to the
    // chunk's content were damaged before the checksum was taken, or by a
    // codec: stored afresh by the next write of the content too.
    try {
      return decode_checked(hash, rec, stored.bytes);
    } catch (const store_error&) {
      mark_damaged(hash, "does not decode to its content");
      throw;
    }
  }

  // One of a bounded number of whole-file decodes (lepton_file_decodes_).
  // A decode of the same photo that ran while this one waited has put this
  // chunk in the cache: no second decode.
  lepton_file_decodes_.acquire();
  struct release_on_exit {
    std::counting_semaphore<k_parallel_lepton_file_decodes>& s;
    ~release_on_exit() { s.release(); }
  } release{lepton_file_decodes_};
  if (caches_chunks()) {
    if (auto cached = cache_->find(hash)) return cached;
  }
  if (rec.codec == codec::codec_id::lepton_file)
    return decode_lepton_file_chunk(hash, rec.plain_size, hash, stored.bytes, 0);

  codec::lepton_member member;
  try {
    member = codec::parse_lepton_member(stored.bytes);
  } catch (const codec::codec_error& e) {
    chunk_failure("chunk " + hash.hex() + ": " + e.what());
  }
  if (member.plain_size != rec.plain_size || member.first_chunk.size() != chunk_hash::k_size)
    chunk_failure("chunk " + hash.hex() + ": its lepton member payload does not match its record");
  const chunk_hash first = chunk_hash::from_bytes(member.first_chunk);
  if (first == hash) chunk_failure("chunk " + hash.hex() + ": a lepton member naming itself");
  const stored_chunk file = read_stored_chunk(first);
  if (file.record.codec != codec::codec_id::lepton_file)
    chunk_failure("chunk " + hash.hex() + ": its first chunk " + first.hex() + " holds " +
                  codec::codec_name(file.record.codec) + ", not a Lepton file");
  return decode_lepton_file_chunk(hash, rec.plain_size, first, file.bytes, member.index);
}

std::vector<chunk_hash> store::damaged_chunk_list() const {
  return damaged_->list();
}

bool store::is_damaged(const chunk_hash& hash) const {
  return damaged_->contains(hash);
}

void store::mark_damaged(const chunk_hash& hash, std::string_view why) const {
  damaged_->mark(hash, why);
}

std::shared_ptr<const std::string> store::read_chunk(const chunk_hash& hash) const {
  return cache_->get_or_load(hash, [&]() -> std::shared_ptr<const std::string> {
    return decode_stored_chunk(hash, read_stored_chunk(hash));
  });
}

std::size_t store::load_chunks(std::span<const chunk_hash> hashes,
                               const std::function<bool()>& keep_going) const {
  if (!caches_chunks()) return 0;
  // Claim the chunks nobody has or is loading; the rest are someone else's.
  std::vector<chunk_hash> mine;
  for (const chunk_hash& h : hashes) {
    if (std::find(mine.begin(), mine.end(), h) != mine.end()) continue;  // dedup in the batch
    if (cache_->claim(h).mine) mine.push_back(h);
  }
  if (mine.empty()) return 0;

  // Every claim ends in fulfil or fail, whatever happens below: readers of
  // these chunks are waiting for them.
  std::size_t settled = 0;
  std::size_t loaded = 0;
  const auto settle_one = [&](std::size_t i, const std::function<chunk_cache::value()>& load) {
    try {
      cache_->fulfil(mine[i], load());
      ++loaded;
    } catch (...) {
      // Whoever waits for this chunk loads it again itself and gets its own
      // error: ours may be a chunk deleted since (a prefetch racing an
      // overwrite) and created again by the time the reader needs it.
      cache_->fail(mine[i], std::make_exception_ptr(chunk_cache::load_abandoned()));
    }
  };
  const auto release_rest = [&] {
    // Abandoned (stopped, or the batch lookup itself failed): the waiters
    // get an error and retry with read_chunk on their own.
    for (; settled < mine.size(); ++settled)
      cache_->fail(mine[settled], std::make_exception_ptr(chunk_cache::load_abandoned()));
  };

  try {
    // One MultiGet for the records, one for the payloads.
    std::vector<std::string> keys;
    keys.reserve(mine.size());
    for (const auto& h : mine) keys.emplace_back(h.view());
    // A failed lookup abandons the batch (below): the single path says why.
    const std::vector<std::optional<std::string>> record_values =
        engine_->get_many(table::chunks, keys, "chunk records");
    std::vector<std::optional<chunk_record>> records(mine.size());
    std::vector<chunk_hash> present;
    std::vector<bool> missing(mine.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      // Missing: deleted since the caller read the extents naming it (not an
      // error to log here; a read that still needs it will say so).
      missing[i] = !record_values[i];
      if (missing[i]) continue;
      try {
        records[i] = detail::decode_chunk(*record_values[i], "chunk " + mine[i].hex());
        present.push_back(mine[i]);
      } catch (const store_error&) {
      }
    }
    std::vector<std::string> payloads;
    try {
      payloads = payloads_->get_many(present);
    } catch (const store_error&) {
      payloads.clear();  // one is missing: every chunk takes the single path
    }
    std::size_t p = 0;
    for (; settled < mine.size(); ++settled) {
      if (keep_going && !keep_going()) break;
      const std::size_t i = settled;
      const chunk_hash& h = mine[i];
      const std::string* stored = nullptr;
      if (records[i]) {
        if (p < payloads.size()) stored = &payloads[p];
        ++p;
      }
      settle_one(i, [&]() -> chunk_cache::value {
        if (missing[i]) throw chunk_cache::load_abandoned();
        // An earlier chunk of this batch was a Lepton file (or a member of
        // one) and published this one with it.
        if (chunk_cache::value v = cache_->find(h)) return v;
        if (stored && payload_matches(*records[i], *stored))
          return decode_stored_chunk(h, {*records[i], *stored});
        // Missing, damaged, or swapped by a re-encoding between the two
        // lookups: the single path retries once and reports.
        return decode_stored_chunk(h, read_stored_chunk(h));
      });
    }
  } catch (...) {
  }
  release_rest();
  return loaded;
}

// ---------------------------------------------------------------- commit

namespace {
// New file data may not eat into a reserve kept for metadata (unlink and
// rename must work on a full disk) and for RocksDB's own flushes (a
// memtable full of payloads becomes a blob file before its WAL goes). If
// RocksDB itself hits ENOSPC it stops writing until Resume() can flush,
// which on a full disk is never.
std::uint64_t space_reserve(const struct ::statvfs& sv) {
  const std::uint64_t block = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
  const std::uint64_t total = static_cast<std::uint64_t>(sv.f_blocks) * block;
  return std::clamp<std::uint64_t>(total / 50, k_min_space_reserve, k_max_space_reserve);
}
}  // namespace

void store::check_space_for(std::uint64_t bytes) const {
  struct ::statvfs sv {};
  if (::statvfs(dir_.c_str(), &sv) != 0) return;  // cannot tell: let RocksDB decide
  const std::uint64_t block = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
  const std::uint64_t free = static_cast<std::uint64_t>(sv.f_bavail) * block;
  const std::uint64_t reserve = space_reserve(sv);
  if (free < bytes + reserve) {
    throw store_error(ENOSPC, "store " + dir_.string() + " is full: " + std::to_string(free) +
                                  " bytes free, " + std::to_string(bytes) +
                                  " needed plus a reserve of " + std::to_string(reserve));
  }
}

// A commit's payloads put into the payload store ahead of its locked
// transaction (store::commit beside other writers, or written ahead by
// write_payloads_ahead): the index entries (or inline payloads) each put
// left in its batch, to be written by the commit if the chunk is still new
// then. Keyed by chunk; used only for the same bytes.
struct store::staged_payload {
  payload_meta meta;
  std::uint64_t size = 0;
  std::uint64_t checksum = 0;                                     // stored_checksum of the bytes
  std::vector<std::pair<std::string, std::string>> payload_rows;  // payloads table: key, value
  bool same_as(std::uint64_t bytes_size, std::uint64_t bytes_checksum,
               const payload_meta& m) const {
    return meta.codec == m.codec && meta.plain_size == m.plain_size && size == bytes_size &&
           checksum == bytes_checksum;
  }
  bool same_as(std::string_view bytes, const payload_meta& m) const {
    return same_as(bytes.size(), stored_checksum(bytes), m);
  }
};

struct payloads_ahead::impl {
  std::shared_lock<std::shared_mutex> gate;  // store::ahead_gate_
  store::staged_payloads payloads;
};

payloads_ahead::payloads_ahead() = default;
payloads_ahead::~payloads_ahead() = default;
payloads_ahead::payloads_ahead(payloads_ahead&&) noexcept = default;
payloads_ahead& payloads_ahead::operator=(payloads_ahead&&) noexcept = default;
bool payloads_ahead::empty() const {
  return !impl_ || impl_->payloads.empty();
}

namespace {

// The rows payload_store::put writes, kept for later (staged payloads).
class payload_rows_batch final : public metadata_batch {
 public:
  explicit payload_rows_batch(std::vector<std::pair<std::string, std::string>>& rows)
      : rows_(rows) {}
  void put(table t, std::string_view key, std::string_view value) override {
    if (t != table::payloads)
      throw store_error(EIO, "staging a payload: a write outside the payloads table");
    rows_.emplace_back(key, value);
  }
  void erase(table, std::string_view) override {
    throw store_error(EIO, "staging a payload: an erase");
  }
  bool empty() const override { return rows_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>>& rows_;
};

// Thrown out of a commit's locked transaction when it needs a payload that
// was not staged (a chunk another writer deleted since the staging, one
// encoded again after it, one a payloads_ahead lacks): the commit stages it
// and tries again.
struct payload_not_staged {
  chunk_hash hash;
  const std::string* bytes;
  payload_meta meta;
};

}  // namespace

void store::stage_payload(staged_payloads& staged, const chunk_hash& hash, const std::string& bytes,
                          const payload_meta& meta) {
  staged_payload& p = staged[hash];
  p.meta = meta;
  p.size = bytes.size();
  p.checksum = stored_checksum(bytes);
  p.payload_rows.clear();
  payload_rows_batch rows(p.payload_rows);
  payloads_->put(rows, hash, bytes, meta);
}

void store::stage_payloads(const transaction::impl& t, staged_payloads& staged, bool every_chunk) {
  // The chunks that look new now (or all that come with their bytes), and
  // every swap's bytes; none staged already.
  std::vector<std::string> keys;
  std::vector<const std::pair<const chunk_hash, chunk_delta>*> candidates;
  for (const auto& c : t.chunks) {
    if (c.second.delta <= 0 || !c.second.encoded) continue;
    keys.emplace_back(c.first.view());
    candidates.push_back(&c);
  }
  for (const auto& group : t.replacements)
    for (const transaction::payload_swap& r : group) keys.emplace_back(r.hash.view());
  const std::vector<std::optional<std::string>> records =
      engine_->get_many(table::chunks, keys, "the chunks of a commit");
  std::uint64_t bytes = 0;
  std::vector<std::function<void()>> puts;
  std::size_t i = 0;
  const auto is_staged = [&](const chunk_hash& hash, const std::string& bytes,
                             const payload_meta& meta) {
    const auto it = staged.find(hash);
    return it != staged.end() && it->second.same_as(bytes, meta);
  };
  for (; i < candidates.size(); ++i) {
    const auto& [hash, d] = *candidates[i];
    if ((records[i] && !every_chunk) ||
        is_staged(hash, d.encoded->bytes, {d.encoded->codec, d.plain_size}))
      continue;
    bytes += d.encoded->bytes.size();
    puts.push_back([&, h = &hash, dl = &d] {
      stage_payload(staged, *h, dl->encoded->bytes, {dl->encoded->codec, dl->plain_size});
    });
  }
  for (const auto& group : t.replacements)
    for (const transaction::payload_swap& r : group) {
      const std::optional<std::string>& raw = records[i++];
      if (!raw) continue;  // gone: the swap will not apply
      const chunk_record rec = detail::decode_chunk(*raw, "chunk " + r.hash.hex());
      if (is_staged(r.hash, r.encoded.bytes, {r.encoded.codec, rec.plain_size})) continue;
      bytes += r.encoded.bytes.size();
      puts.push_back([&, sw = &r, plain = rec.plain_size] {
        stage_payload(staged, sw->hash, sw->encoded.bytes, {sw->encoded.codec, plain});
      });
    }
  if (puts.empty()) return;
  check_space_for(bytes);
  for (const auto& put : puts) put();
  // Durable (uploaded, for a scale-out volume) before a commit names them.
  payloads_->sync();
}

payloads_ahead store::write_payloads_ahead(std::span<const prepared_chunk* const> chunks) {
  payloads_ahead ahead;
  if (options_.read_only || !payloads_->writes_at_put()) return ahead;
  // The chunks that come with their bytes and are new (or damaged: the
  // commit stores them afresh), each once.
  std::map<chunk_hash, const prepared_chunk*> candidates;
  for (const prepared_chunk* c : chunks)
    if (c && c->encoded) candidates.try_emplace(c->hash, c);
  if (candidates.empty()) return ahead;
  std::vector<std::string> keys;
  keys.reserve(candidates.size());
  for (const auto& [hash, c] : candidates) keys.emplace_back(hash.view());
  const std::vector<std::optional<std::string>> records =
      engine_->get_many(table::chunks, keys, "the chunks of a commit");
  std::vector<const prepared_chunk*> puts;
  std::uint64_t bytes = 0;
  std::size_t i = 0;
  for (const auto& [hash, c] : candidates) {
    if (records[i++] && !damaged_->contains(hash)) continue;
    puts.push_back(c);
    bytes += c->encoded->bytes.size();
  }
  if (puts.empty()) return ahead;
  ahead.impl_ = std::make_unique<payloads_ahead::impl>();
  ahead.impl_->gate = std::shared_lock(ahead_gate_);
  check_space_for(bytes);
  for (const prepared_chunk* c : puts)
    stage_payload(ahead.impl_->payloads, c->hash, c->encoded->bytes,
                  {c->encoded->codec, c->plain_size});
  // Durable before a commit names them durably (an engine whose every
  // write is, or the shared database other writers read at once); else
  // the commit syncs them when it syncs its log.
  if (writes_beside_others() || engine_->writes_are_durable()) payloads_->sync();
  return ahead;
}

void store::commit(transaction& txn, bool sync, const std::function<void(transaction&)>& fill,
                   payloads_ahead* ahead) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  transaction::impl& t = ensure(txn.impl_);

  // (Pack compaction plans under commit_mutex_ too: the payloads this
  // writes are named by its index entries before compaction looks.)
  std::lock_guard lock(commit_mutex_);
  // One writer: nothing can change between fill's reads and the write.
  const bool fill_locked = fill && writes_beside_others();
  if (fill && !fill_locked) fill(txn);
  if (!fill_locked && txn.empty()) return;

  // Inodes whose cached extent lists this commit makes stale, and the
  // notice that tells other clients what it changes (set by changes_of).
  std::vector<std::uint64_t> extents_changed;
  std::string notice;
  const auto changes_of = [&] {
    extents_changed.clear();
    notice.clear();
    if (caches_extents())
      for (const txn_op& op : t.ops)
        if ((op.cf == table::extents || op.cf == table::inodes) && op.key.size() >= 8)
          extents_changed.push_back(decode_u64_be(std::string_view(op.key).substr(0, 8)));
    if (!keeps_sessions()) return;
    change_notice changed;
    for (const txn_op& op : t.ops) {
      if (op.key.size() < 8) continue;
      const std::uint64_t ino = decode_u64_be(std::string_view(op.key).substr(0, 8));
      if (op.cf == table::dirents)
        changed.entries.emplace_back(ino, op.key.substr(8));
      else if (op.cf == table::inodes || op.cf == table::extents || op.cf == table::xattrs)
        changed.inodes.push_back(ino);
    }
    if (changed.inodes.empty() && changed.entries.empty()) return;
    if (writes_beside_others()) changed.writer = session_id_;
    notice = encode_change_notice(changed);
  };
  // What `fill` starts from on each run: the transaction as passed.
  const std::size_t base_ops = t.ops.size();
  std::map<chunk_hash, std::int64_t> base_deltas;
  if (fill_locked)
    for (const auto& [hash, d] : t.chunks) base_deltas[hash] = d.delta;
  const auto run_fill = [&] {
    t.ops.resize(base_ops);
    for (auto it = t.chunks.begin(); it != t.chunks.end();) {
      const auto base = base_deltas.find(it->first);
      if (base == base_deltas.end()) {
        it = t.chunks.erase(it);
      } else {
        it->second.delta = base->second;
        ++it;
      }
    }
    fill(txn);
    changes_of();
  };
  if (!fill_locked) changes_of();

  // A writer beside others on one volume reads the chunk records and
  // writes the batch in one locked transaction (write_locked), which must
  // not hold the others off for a pack upload: the payloads that may be new
  // go to the payload store first, and the transaction writes the index
  // entries of those still new then. (A payload found to exist by then is
  // left in its pack as dead bytes, for gc.)
  // Payloads written ahead (write_payloads_ahead) are used the same way;
  // what they lack is staged on the first try that needs it.
  std::optional<staged_payloads> own_staged;
  staged_payloads* staged = nullptr;
  if (ahead && ahead->impl_)
    staged = &ahead->impl_->payloads;
  else if (writes_beside_others())
    staged = &own_staged.emplace();
  if (staged && writes_beside_others()) stage_payloads(t, *staged, false);

  // What the commit did, for after it (set by each try of `build`).
  std::vector<chunk_hash> deleted;
  // Damaged chunks stored afresh (damaged_chunks.h).
  std::vector<chunk_hash> healed;
  std::uint64_t garbage = 0;  // payload bytes this commit deletes or replaces
  bool raise_format = false;  // the store's first Lepton file
  store_settings raised;

  const auto build = [&](locked_reads& reads, metadata_batch& batch) {
    if (fill_locked) run_fill();
    deleted.clear();
    healed.clear();
    garbage = 0;
    raise_format = false;
    for (const txn_op& op : t.ops) {
      if (op.erase)
        batch.erase(op.cf, op.key);
      else
        batch.put(op.cf, op.key, encode_value(op, encoding_));
    }
    if (!notice.empty()) batch.set_notice(notice);
    // The chunk records this commit changes, read in one go.
    std::map<chunk_hash, std::optional<std::string>> read;
    {
      std::vector<chunk_hash> hashes;
      for (const auto& [hash, d] : t.chunks)
        if (d.delta != 0) hashes.push_back(hash);
      for (const auto& group : t.replacements)
        for (const transaction::payload_swap& r : group) hashes.push_back(r.hash);
      std::vector<std::string> keys;
      keys.reserve(hashes.size());
      for (const chunk_hash& h : hashes) keys.emplace_back(h.view());
      std::vector<std::optional<std::string>> values =
          reads.get_many(table::chunks, keys, "the chunks of a commit");
      for (std::size_t i = 0; i < hashes.size(); ++i) read[hashes[i]] = std::move(values[i]);
    }

    // Payloads are put after the space check: a pack store writes them out
    // at once.
    struct new_payload {
      const chunk_hash* hash;
      const std::string* bytes;
      payload_meta meta;
      std::uint64_t checksum;  // stored_checksum(*bytes), as its record has it
    };
    std::vector<new_payload> new_payloads;
    std::uint64_t new_payload_bytes = 0;

    // Chunk records as this commit leaves them (nullopt: deleted), written to
    // the batch at the end: a Lepton member deleted or swapped here gives its
    // reference on its first chunk back, and that chunk may change in this
    // commit too.
    std::map<chunk_hash, std::optional<chunk_record>> touched;
    const auto current = [&](const chunk_hash& h) -> std::optional<chunk_record> {
      if (const auto it = touched.find(h); it != touched.end()) return it->second;
      const std::string what = "chunk " + h.hex();
      std::optional<std::string> raw;
      if (const auto it = read.find(h); it != read.end())
        raw = it->second;
      else
        raw = reads.get(table::chunks, h.view(), what);
      if (!raw) return std::nullopt;
      return detail::decode_chunk(*raw, what);
    };
    // First chunks whose members left them, one entry per reference. Only a
    // member fsck would count gives a reference back (fsck.cpp,
    // count_member_references): its payload matches its record's checksum and
    // names a chunk that is a Lepton file (checked in apply_releases). A
    // damaged member must not take a reference from a chunk others still use.
    std::vector<chunk_hash> releases;
    const auto release_member = [&](const chunk_hash& member, const chunk_record& rec) {
      try {
        const std::string stored = payloads_->get(member);
        if (!payload_matches(rec, stored))
          throw store_error(EIO, "payload does not match its record's checksum");
        const codec::lepton_member m = codec::parse_lepton_member(stored);
        if (m.first_chunk.size() == chunk_hash::k_size)
          releases.push_back(chunk_hash::from_bytes(m.first_chunk));
      } catch (const std::exception& e) {
        // Its first chunk keeps one reference too many (fsck reports it as a
        // wrong refcount); no bytes are at risk.
        log_error("chunk " + member.hex() +
                  ": cannot read the Lepton member being dropped: " + e.what());
      }
    };
    const auto apply_delta = [&](const chunk_hash& hash, chunk_record rec, std::int64_t delta) {
      std::uint64_t count = rec.refcount;
      if (delta > 0) {
        count += static_cast<std::uint64_t>(delta);
      } else if (static_cast<std::uint64_t>(-delta) > count) {
        // A bug elsewhere; a negative count would wrap around and keep the
        // chunk forever, so clamp and say so.
        log_error("chunk " + hash.hex() + ": refcount " + std::to_string(count) + " minus " +
                  std::to_string(-delta) + " would go below zero; treating it as 0");
        count = 0;
      } else {
        count -= static_cast<std::uint64_t>(-delta);
      }
      if (count == 0) {
        if (rec.codec == codec::codec_id::lepton_member) release_member(hash, rec);
        touched[hash] = std::nullopt;
        deleted.push_back(hash);
        garbage += rec.stored_size;
      } else {
        rec.refcount = count;
        touched[hash] = rec;
      }
    };
    const auto apply_releases = [&] {
      while (!releases.empty()) {
        const chunk_hash first = releases.back();
        releases.pop_back();
        if (std::optional<chunk_record> rec = current(first);
            rec && rec->codec == codec::codec_id::lepton_file) {
          apply_delta(first, *rec, -1);
        } else if (rec) {
          log_error("chunk " + first.hex() +
                    ": a Lepton member named it as its Lepton file, but it is not one; "
                    "its references are left as they are");
        } else {
          log_error("chunk " + first.hex() +
                    ": a Lepton member gave back a reference to it, but it "
                    "does not exist");
        }
      }
    };

    for (const auto& [hash, d] : t.chunks) {
      if (d.delta == 0) continue;
      std::optional<chunk_record> rec = current(hash);
      if (!rec) {
        if (d.delta < 0) {
          log_error("chunk " + hash.hex() + ": dropping " + std::to_string(-d.delta) +
                    " reference(s) to a chunk that does not exist");
          continue;
        }
        if (!d.encoded) throw chunk_missing(hash);
        const std::string& bytes = d.encoded->bytes;
        if (bytes.size() > std::numeric_limits<std::uint32_t>::max())
          throw store_error(EIO, "chunk " + hash.hex() + ": stored size too large");
        chunk_record r;
        r.codec = d.encoded->codec;
        r.plain_size = d.plain_size;
        r.stored_size = static_cast<std::uint32_t>(bytes.size());
        r.refcount = static_cast<std::uint64_t>(d.delta);
        r.checksum = stored_checksum(bytes);
        r.location = payload_location::rocksdb;
        touched[hash] = r;
        new_payloads.push_back({&hash, &bytes, {r.codec, r.plain_size}, r.checksum});
        new_payload_bytes += bytes.size();
        continue;
      }
      if (d.delta > 0 && damaged_->contains(hash)) {
        // Its payload failed a check, and this commit brings the content
        // again (a re-copy, the next backup): a fresh payload under the same
        // record instead of one more reference to the damaged one, so every
        // file using the chunk is whole again. Not a Lepton file or member:
        // others depend on their payloads.
        if (!codec::is_lepton_file_codec(rec->codec) &&
            !(d.encoded && codec::is_lepton_file_codec(d.encoded->codec))) {
          if (!d.encoded) throw chunk_missing(hash);  // the caller encodes it and retries
          const std::string& bytes = d.encoded->bytes;
          if (bytes.size() > std::numeric_limits<std::uint32_t>::max())
            throw store_error(EIO, "chunk " + hash.hex() + ": stored size too large");
          chunk_record r = *rec;
          r.codec = d.encoded->codec;
          r.stored_size = static_cast<std::uint32_t>(bytes.size());
          r.checksum = stored_checksum(bytes);
          r.refcount += static_cast<std::uint64_t>(d.delta);
          garbage += rec->stored_size;
          touched[hash] = r;
          new_payloads.push_back({&hash, &bytes, {r.codec, r.plain_size}, r.checksum});
          new_payload_bytes += bytes.size();
          damaged_chunks::clear_in(batch, hash);
          healed.push_back(hash);
          continue;
        }
      }
      apply_delta(hash, *rec, d.delta);
    }
    // After every chunk's own references: a first chunk that gains one in
    // this commit is not deleted by its member's release first.
    apply_releases();

    std::set<chunk_hash> swapped;  // one swap per chunk and commit
    for (std::vector<transaction::payload_swap>& group : t.replacements) {
      // All of the group or none of it.
      std::vector<chunk_record> recs;
      bool ok = true;
      for (const transaction::payload_swap& r : group) {
        std::optional<chunk_record> rec = current(r.hash);
        // Deleted or swapped meanwhile, never mixed with reference changes,
        // never a Lepton file (its members depend on it).
        // A damaged chunk only from checked content: a re-encoding of its
        // damaged payload would make the damage permanent.
        if (!rec || rec->checksum != r.expected_checksum || t.chunks.count(r.hash) ||
            swapped.count(r.hash) || rec->codec == codec::codec_id::lepton_file ||
            r.encoded.bytes.size() > std::numeric_limits<std::uint32_t>::max() ||
            (!r.content_checked && damaged_->contains(r.hash))) {
          ok = false;
          break;
        }
        recs.push_back(*rec);
      }
      // Each new member names a chunk that is a Lepton file after the swap.
      std::vector<chunk_hash> takes;
      for (std::size_t i = 0; ok && i < group.size(); ++i) {
        if (group[i].encoded.codec != codec::codec_id::lepton_member) continue;
        codec::lepton_member m;
        try {
          m = codec::parse_lepton_member(group[i].encoded.bytes);
        } catch (const codec::codec_error&) {
          ok = false;
          break;
        }
        if (m.first_chunk.size() != chunk_hash::k_size || m.plain_size != recs[i].plain_size) {
          ok = false;
          break;
        }
        const chunk_hash first = chunk_hash::from_bytes(m.first_chunk);
        const auto in_group = std::find_if(group.begin(), group.end(),
                                           [&](const auto& g) { return g.hash == first; });
        std::optional<chunk_record> first_rec = current(first);
        const bool is_file = in_group != group.end()
                                 ? in_group->encoded.codec == codec::codec_id::lepton_file
                                 : first_rec && first_rec->codec == codec::codec_id::lepton_file;
        if (!is_file || first == group[i].hash) {
          ok = false;
          break;
        }
        takes.push_back(first);
      }
      if (!ok) continue;
      for (std::size_t i = 0; i < group.size(); ++i) {
        const std::string& bytes = group[i].encoded.bytes;
        chunk_record rec = recs[i];
        if (rec.codec == codec::codec_id::lepton_member) release_member(group[i].hash, rec);
        garbage += rec.stored_size;
        rec.codec = group[i].encoded.codec;
        rec.stored_size = static_cast<std::uint32_t>(bytes.size());
        rec.checksum = stored_checksum(bytes);
        touched[group[i].hash] = rec;
        swapped.insert(group[i].hash);
        if (group[i].content_checked && damaged_->contains(group[i].hash)) {
          // A fresh payload for a damaged chunk (densefs fsck --repair-from).
          damaged_chunks::clear_in(batch, group[i].hash);
          healed.push_back(group[i].hash);
        }
        new_payloads.push_back({&group[i].hash, &bytes, {rec.codec, rec.plain_size}, rec.checksum});
        new_payload_bytes += bytes.size();
      }
      for (const transaction::payload_swap& r : group)
        raise_format = raise_format ||
                       (r.encoded.codec == codec::codec_id::lepton_file && !holds_lepton_files_);
      for (const chunk_hash& first : takes) {
        chunk_record rec = *current(first);  // present: checked above
        ++rec.refcount;
        touched[first] = rec;
      }
      apply_releases();
    }

    raised = settings_;
    if (raise_format) {
      raised.format_version = k_lepton_file_format_version;
      batch.put(table::meta, k_settings_key, encode_settings(raised));
    }
    // Queue entries this transaction puts (a deleted chunk's entry goes too);
    // gathered once, and only for a commit that deletes a chunk.
    std::optional<std::set<std::string_view>> queued_here;
    for (const auto& [hash, rec] : touched) {
      if (rec) {
        batch.put(table::chunks, hash.view(), encode_chunk(*rec, encoding_));
      } else {
        // No other commit of this store runs now: its queue cannot change
        // meanwhile.
        if (!queued_here) {
          queued_here.emplace();
          for (const txn_op& op : t.ops)
            if (op.cf == table::meta && !op.erase && op.key.starts_with(k_recompress_prefix))
              queued_here->insert(op.key);
        }
        const bool queued =
            queued_here->contains(recompress_key(hash)) || is_queued_for_recompress(hash);
        delete_chunk(batch, hash, queued);
        if (damaged_->contains(hash)) damaged_chunks::clear_in(batch, hash);
      }
    }

    if (staged) {
      // Staged before the transaction, or not yet: then stage and try again.
      for (const new_payload& p : new_payloads) {
        const auto it = staged->find(*p.hash);
        if (it == staged->end() || !it->second.same_as(p.bytes->size(), p.checksum, p.meta))
          throw payload_not_staged{*p.hash, p.bytes, p.meta};
        for (const auto& [key, value] : it->second.payload_rows)
          batch.put(table::payloads, key, value);
      }
      // Pack bytes durable before the log that names them (payloads written
      // ahead on an engine that is not durable at once were not synced, nor
      // were those of earlier commits this synced log makes durable).
      // Beside other writers every staged payload was uploaded already, and
      // an upload must not hold the others' lock.
      if (sync && !writes_beside_others()) payloads_->sync();
      return;
    }
    if (new_payload_bytes > 0) check_space_for(new_payload_bytes);
    for (const new_payload& p : new_payloads) payloads_->put(batch, *p.hash, *p.bytes, p.meta);
    // Pack bytes durable before the log that names them.
    // (Also those of earlier commits, which the synced log includes.) An
    // engine whose every write is durable at once (PostgreSQL) names them
    // durably with this write: a power loss after it must not leave an index
    // entry naming bytes the page cache lost.
    if (sync || (engine_->writes_are_durable() && !new_payloads.empty())) payloads_->sync();
  };

  for (int attempt = 1;; ++attempt) {
    try {
      engine_->write_locked(k_commit_section, build, sync);
      break;
    } catch (const payload_not_staged& missing) {
      // Nothing was applied. A chunk that existed at the staging was
      // deleted by another writer since: stage every chunk that came with
      // its bytes, so that this cannot happen again.
      if (attempt >= 3)
        throw store_error(EIO, "chunk " + missing.hash.hex() +
                                   ": its payload was not staged for the commit that makes it");
      stage_payloads(t, *staged, true);
      if (const auto it = staged->find(missing.hash);
          it == staged->end() || !it->second.same_as(*missing.bytes, missing.meta)) {
        check_space_for(missing.bytes->size());
        stage_payload(*staged, missing.hash, *missing.bytes, missing.meta);
        payloads_->sync();
      }
    } catch (...) {
      // Applied or not (a lost connection leaves it unknown): nothing cached
      // of these inodes may stay.
      drop_cached_extents(extents_changed, false);
      throw;
    }
  }
  drop_cached_extents(extents_changed, false);
  garbage_bytes_ += garbage;
  for (const auto& h : deleted) {
    cache_->erase(h);
    damaged_->forget(h);
  }
  for (const auto& h : healed) {
    damaged_->forget(h);
    log_info("chunk " + h.hex() + " stored afresh: the files using it are whole again");
  }
  if (raise_format) {
    holds_lepton_files_ = true;
    // After the database, which is the authority: FORMAT lets older builds
    // refuse the store before starting RocksDB (open() repairs it if a
    // crash comes in between).
    try {
      write_file_durably(dir_ / k_format_file, format_marker_text({raised.format_version,
                                                                   raised.uuid, postgres_, data_}));
    } catch (const store_error& e) {
      log_error(std::string("raising the FORMAT file's version: ") + e.what());
    }
  }
}

void store::sync() {
  if (options_.read_only) return;
  payloads_->sync();  // pack bytes durable before the log that names them
  engine_->sync();
}

struct statvfs store::statvfs() const {
  struct statvfs out {};
  if (::statvfs(dir_.c_str(), &out) != 0)
    throw store_error(errno, "statvfs " + dir_.string() + ": " + errno_text(errno));
  // What file data may still use: the reserve is to it what ext4's blocks
  // reserved for root are to users (in f_bfree, not in f_bavail), so that
  // a program that fills what df says is free is not refused (fallocate
  // of f_bavail bytes succeeds; xfstests generic/103).
  const std::uint64_t block = out.f_frsize ? out.f_frsize : out.f_bsize;
  const std::uint64_t reserved_blocks = block ? (space_reserve(out) + block - 1) / block : 0;
  out.f_bavail = out.f_bavail > reserved_blocks ? out.f_bavail - reserved_blocks : 0;
  return out;
}

// ---------------------------------------------------------------- sessions

namespace {
// How long a follower's mount waits for the writer's answer.
constexpr std::chrono::milliseconds k_writer_answer_timeout{30000};
}  // namespace

std::chrono::seconds store::heartbeat_interval() {
  if (const char* env = std::getenv("DENSEFS_HEARTBEAT_SECONDS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 1 && v <= 3600) return std::chrono::seconds(v);
  }
  return std::chrono::seconds(10);
}

bool store::session_expired(const session_record& r, std::int64_t now_unix) {
  return now_unix - r.heartbeat > 3 * heartbeat_interval().count();
}

void store::write_meta_row(std::string_view key, std::optional<std::string_view> value) {
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  if (value)
    batch->put(table::meta, key, *value);
  else
    batch->erase(table::meta, key);
  engine_->write(*batch, false);
}

void store::write_session(const session_record& r) {
  write_meta_row(session_key(r.id), encode_session(r));
}

std::string store::payload_location() const {
  return packs_ && packs_->remote() ? packs_->remote()->where() : std::string();
}

namespace {

// The session rows of a volume's database.
std::vector<session_record> sessions_in(const metadata_engine& engine) {
  std::vector<session_record> out;
  scan_options o;
  o.fill_cache = false;
  engine.scan(table::meta, prefix_range(k_session_prefix), o, "listing sessions",
              [&](std::string_view key, std::string_view value) {
                out.push_back(decode_session(key, value));
                return true;
              });
  return out;
}

}  // namespace

std::vector<session_record> store::sessions() const {
  if (!keeps_sessions()) return {};
  return sessions_in(*engine_);
}

std::optional<store::volume_status> store::read_volume_status(const std::string& store_or_uri,
                                                              bool is_uri) {
  std::string conninfo = store_or_uri;
  if (!is_uri) {
    check(store_or_uri);
    conninfo = read_format_marker(store_or_uri).postgres;
    if (conninfo.empty()) return std::nullopt;
  }
  const auto [engine, settings_record] = open_volume_database(conninfo);
  volume_status out;
  out.metadata_location = engine->where();
  if (const std::optional<std::string> location =
          engine->get(table::meta, k_payload_location_key, "the payload location"))
    out.payload_location = describe_s3(parse_s3_url(*location));
  out.sessions = sessions_in(*engine);
  return out;
}

void store::begin_session(const std::string& mountpoint) {
  if (!keeps_sessions() || (options_.read_only && !follower_)) return;
  session_record r;
  r.id = random_hex_id("a random session id");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  r.host = host;
  r.pid = static_cast<std::uint32_t>(::getpid());
  r.mountpoint = mountpoint;
  r.started = r.heartbeat = unix_now();
  r.read_only = follower_;
  // Rows of sessions that stopped without ending (kill -9, a lost machine):
  // this mount holds the volume's lock, so none of them is writing. A
  // writer's row is dead even before it expires (a writer killed and
  // mounted again at once): counted as another client, it would make this
  // one commit at every close and keep unlinked files for followers that
  // are not there. (A follower leaves them to the writer.)
  // Writers beside others keep each other's rows (the heartbeat erases a
  // row once session_alive finds it dead: by the clock alone, a mount just
  // after a database outage would take every live writer for dead), but
  // for the last session of this directory (a writer killed and mounted
  // again at once): this mount holds the directory's lock, so that one is
  // over.
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  std::vector<session_record> all = sessions();
  const bool shares = writes_beside_others();
  std::string previous;
  if (std::ifstream in(dir_ / k_session_file); in) std::getline(in, previous);
  if (!follower_) {
    std::erase_if(all, [&](const session_record& old) {
      const bool dead = (!shares && (!old.read_only || session_expired(old, r.started))) ||
                        (!previous.empty() && old.id == previous);
      if (dead) batch->erase(table::meta, session_key(old.id));
      return dead;
    });
  }
  batch->put(table::meta, session_key(r.id), encode_session(r));
  // The live writers, each of which must answer (one writer alone answers
  // without naming itself).
  std::set<std::string> writers_alive;
  for (const session_record& s : all)
    if (!s.read_only && !session_expired(s, r.started)) writers_alive.insert(s.id);
  // A follower's directory too (its holds end with its session).
  try {
    write_file_durably(dir_ / k_session_file, r.id + "\n");
  } catch (const store_error& e) {
    log_error(std::string("recording the session: ") + e.what() +
              " (after a crash, the next mount here waits for this session to expire)");
  }
  if ((follower_ || shares) && !writers_alive.empty()) {
    // Close-to-open from the first open: the writer commits at close only
    // once it knows of another client, and files it closed before that may
    // still be staged in its memory. So the follower asks, in the batch
    // that makes its session, and waits until the writer has committed
    // them and answers (fs::filesystem::answer_new_clients). A writer that
    // does not answer in time is logged, not fatal: it learns of this
    // session at its next heartbeat anyway.
    change_notice ask;
    ask.sessions_started.push_back(r.id);
    batch->set_notice(encode_change_notice(ask));
    std::set<std::string> answered_by;
    const bool answered = engine_->write_and_await(
        *batch,
        [&](std::string_view text) {
          const std::optional<change_notice> c = decode_change_notice(text);
          if (!c || std::find(c->sessions_answered.begin(), c->sessions_answered.end(), r.id) ==
                        c->sessions_answered.end())
            return false;
          if (c->writer.empty()) return true;  // a writer alone
          answered_by.insert(c->writer);
          return std::includes(answered_by.begin(), answered_by.end(), writers_alive.begin(),
                               writers_alive.end());
        },
        k_writer_answer_timeout);
    if (!answered)
      log_warning("the writer did not answer within " +
                  std::to_string(k_writer_answer_timeout.count() / 1000) +
                  " s; files it closed just before this mount may be seen only once it "
                  "commits them");
  } else {
    engine_->write(*batch, false);
  }
  std::lock_guard lock(session_mutex_);
  session_ = r;
  session_id_ = r.id;
  count_others(all, r.started, false);
  observe_sessions(all);
  {
    std::lock_guard observed(observed_mutex_);
    observing_ = true;
  }
  session_stop_ = false;
  heartbeat_thread_ = std::thread([this] {
    std::unique_lock lock(session_mutex_);
    while (!session_wake_.wait_for(lock, heartbeat_interval(), [&] { return session_stop_; })) {
      session_record beat = *session_;
      beat.heartbeat = unix_now();
      lock.unlock();
      try {
        write_session(beat);
        const std::vector<session_record> all = sessions();
        count_others(all, beat.heartbeat, true);
        observe_sessions(all);
        if (writes_beside_others()) erase_dead_sessions(all);
        std::vector<std::string> held;
        {
          std::lock_guard leases(lease_mutex_);
          held.assign(leases_.begin(), leases_.end());
        }
        for (const std::string& name : held)
          if (!take_lease(name)) log_info("another writer took the lease of " + name);
      } catch (const store_error& e) {
        // The next beat tries again; status shows the session as expired
        // meanwhile, which is the truth as others can see it. Others'
        // standing still counts again from the next beat that goes through.
        log_error(std::string("session heartbeat: ") + e.what());
        std::lock_guard observed(observed_mutex_);
        observed_.clear();
      }
      {
        std::lock_guard hook(heartbeat_hook_mutex_);
        if (heartbeat_hook_) heartbeat_hook_();
      }
      lock.lock();
      session_->heartbeat = beat.heartbeat;
    }
  });
}

bool store::take_lease(std::string_view name) {
  if (!writes_beside_others()) return true;
  const std::string key = std::string(k_lease_prefix) + std::string(name);
  const std::int64_t now = unix_now();
  bool held = false;
  engine_->write_locked(
      k_counters_section,
      [&](locked_reads& reads, metadata_batch& batch) {
        held = false;
        if (const std::optional<std::string> v = reads.get(table::meta, key, "a lease")) {
          const lease_record current = decode_lease(key, *v);
          if (current.session_id != session_id_ && current.expires >= now) return;
        }
        lease_record mine{session_id_, now + 3 * heartbeat_interval().count()};
        batch.put(table::meta, key, encode_lease(mine));
        held = true;
      },
      false);
  std::lock_guard lock(lease_mutex_);
  if (held)
    leases_.emplace(name);
  else if (const auto it = leases_.find(name); it != leases_.end())
    leases_.erase(it);
  return held;
}

bool store::holds_lease(std::string_view name) const {
  if (!writes_beside_others()) return true;
  std::lock_guard lock(lease_mutex_);
  return leases_.find(name) != leases_.end();
}

bool store::other_writers_alive() const {
  if (!keeps_sessions()) return false;
  const std::int64_t now = unix_now();
  for (const session_record& r : sessions())
    if (r.id != session_id_ && !r.read_only && !session_expired(r, now)) return true;
  return false;
}

void store::observe_sessions(const std::vector<session_record>& all) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(observed_mutex_);
  // A heartbeat of this store that came late (blocked while the database
  // was unreachable, then through) is a gap too: what stood still across
  // it proves nothing.
  if (now - last_observed_ > 2 * heartbeat_interval()) observed_.clear();
  last_observed_ = now;
  std::map<std::string, observed_beat> next;
  for (const session_record& r : all) {
    if (r.id == session_id_) continue;
    const auto before = observed_.find(r.id);
    next.emplace(r.id, before != observed_.end() && before->second.heartbeat == r.heartbeat
                           ? before->second
                           : observed_beat{r.heartbeat, now});
  }
  observed_ = std::move(next);
}

void store::erase_dead_sessions(const std::vector<session_record>& all) {
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  bool any = false;
  for (const session_record& s : all) {
    if (s.id == session_id_ || session_alive(s)) continue;
    batch->erase(table::meta, session_key(s.id));
    any = true;
    log_info("session " + s.id + " (" + s.host + " pid " + std::to_string(s.pid) + " on " +
             s.mountpoint + "): no heartbeat since " + std::to_string(unix_now() - s.heartbeat) +
             " s ago; taken for gone");
  }
  if (any) engine_->write(*batch, false);
}

bool store::session_alive(const session_record& r) const {
  if (!session_expired(r, unix_now())) return true;
  std::lock_guard lock(observed_mutex_);
  if (!observing_) return false;
  const auto now = std::chrono::steady_clock::now();
  // This store's own last heartbeat is late (the database unreachable, a
  // reader blocked until it came back): nothing can be judged now.
  if (now - last_observed_ > 2 * heartbeat_interval()) return true;
  const auto seen = observed_.find(r.id);
  if (seen == observed_.end() || seen->second.heartbeat != r.heartbeat) return true;
  return now - seen->second.since <= 3 * heartbeat_interval();
}

void store::count_others(const std::vector<session_record>& all, std::int64_t now_unix,
                         bool announce) {
  bool others = false;
  for (const session_record& r : all)
    if (r.id != session_id_ && !session_expired(r, now_unix)) others = true;
  if (others != others_mounted_.exchange(others) && announce)
    log_info(others ? "another client has the volume mounted: close now waits for the commit"
                    : "no other client has the volume mounted");
}

void store::end_session() {
  std::optional<session_record> ended;
  {
    std::lock_guard lock(session_mutex_);
    if (!session_) return;
    session_stop_ = true;
  }
  session_wake_.notify_all();
  heartbeat_thread_.join();
  {
    std::lock_guard lock(session_mutex_);
    ended = std::exchange(session_, std::nullopt);
  }
  {
    std::lock_guard observed(observed_mutex_);
    observing_ = false;
    observed_.clear();
  }
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  batch->erase(table::meta, session_key(ended->id));
  {
    // Leases held go with the session (another writer takes them at once),
    // each only if it is still this session's: one renewed late may have
    // been taken over.
    std::lock_guard lock(lease_mutex_);
    for (const std::string& name : leases_) {
      const std::string key = std::string(k_lease_prefix) + name;
      try {
        engine_->write_locked(
            k_counters_section,
            [&](locked_reads& reads, metadata_batch& lease_batch) {
              if (const std::optional<std::string> v = reads.get(table::meta, key, "a lease");
                  v && decode_lease(key, *v).session_id == ended->id)
                lease_batch.erase(table::meta, key);
            },
            false);
      } catch (const store_error& e) {
        // It ends by itself three heartbeats after its last renewal.
        log_error("letting the lease of " + name + " go: " + e.what());
      }
    }
    leases_.clear();
  }
  // A follower's holds end with it (so do a shared writer's): the writer
  // may release those files.
  if (follower_ || writes_beside_others()) {
    const std::string prefix = hold_prefix(ended->id);
    scan_prefix(table::meta, prefix, prefix, "listing holds",
                [&](std::string_view key, std::string_view) {
                  batch->erase(table::meta, key);
                  return true;
                });
  }
  engine_->write(*batch, false);
}

void store::on_heartbeat(std::function<void()> fn) {
  std::lock_guard hook(heartbeat_hook_mutex_);
  heartbeat_hook_ = std::move(fn);
}

void store::hold_inode(std::uint64_t ino) {
  write_meta_row(hold_key(session_id_, ino), encode_hold());
}

void store::release_inode_hold(std::uint64_t ino) {
  write_meta_row(hold_key(session_id_, ino), std::nullopt);
}

std::set<std::uint64_t> store::held_inodes() {
  std::set<std::uint64_t> held;
  if (!keeps_sessions()) return held;
  // The rows first, then the sessions: a follower that mounts in between
  // and holds a file is then seen with its session.
  std::vector<std::pair<std::string, hold_record>> rows;
  scan_prefix(table::meta, k_hold_prefix, k_hold_prefix, "listing holds",
              [&](std::string_view key, std::string_view value) {
                rows.emplace_back(std::string(key), decode_hold(key, value));
                return true;
              });
  if (rows.empty()) return held;
  std::map<std::string, bool> alive;  // by session id
  for (const session_record& r : sessions()) alive.emplace(r.id, session_alive(r));
  const std::unique_ptr<metadata_batch> stale = engine_->new_batch();
  bool any_stale = false;
  for (const auto& [key, h] : rows) {
    const auto session = alive.find(h.session_id);
    if (session == alive.end()) {
      // An ended session's row (its end erases them; a crash in between).
      stale->erase(table::meta, key);
      any_stale = true;
    } else if (session->second) {
      held.insert(h.ino);
    }
    // Not alive: counted as gone (three heartbeats missed while this store
    // beat: killed, or cut off, as far as anyone can tell; session_alive);
    // the row goes with its session's.
  }
  if (any_stale) engine_->write(*stale, false);
  return held;
}

// ---------------------------------------------------------------- change notices

namespace {
constexpr std::string_view k_notice_version = "1";
// PostgreSQL refuses NOTIFY payloads of 8,000 bytes or more.
constexpr std::size_t k_max_notice_bytes = 7000;
constexpr char k_hex_digits[] = "0123456789abcdef";

void append_hex_u64(std::string& out, std::uint64_t v) {
  char buf[16];
  int n = 0;
  do {
    buf[n++] = k_hex_digits[v & 15];
    v >>= 4;
  } while (v != 0);
  while (n > 0) out += buf[--n];
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::uint64_t> parse_hex_u64(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    const int d = hex_value(c);
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<std::uint64_t>(d);
  }
  return v;
}
}  // namespace

std::string encode_change_notice(const change_notice& c) {
  std::string out(k_notice_version);
  // The writer's token survives a notice cut to `*`: a shared writer must
  // still know its own.
  const std::string writer = c.writer.empty() ? std::string() : " w" + c.writer;
  if (c.everything) return out + " *" + writer;
  std::set<std::uint64_t> inodes(c.inodes.begin(), c.inodes.end());
  std::set<std::pair<std::uint64_t, std::string>> entries(c.entries.begin(), c.entries.end());
  for (const std::uint64_t ino : inodes) {
    out += " i";
    append_hex_u64(out, ino);
  }
  for (const auto& [parent, name] : entries) {
    out += " e";
    append_hex_u64(out, parent);
    out += ':';
    for (const char ch : name) {
      out += k_hex_digits[static_cast<unsigned char>(ch) >> 4];
      out += k_hex_digits[static_cast<unsigned char>(ch) & 15];
    }
    if (out.size() > k_max_notice_bytes) break;
  }
  for (const std::string& id : c.sessions_started) out += " s" + id;
  for (const std::string& id : c.sessions_answered) out += " a" + id;
  out += writer;
  if (out.size() > k_max_notice_bytes) return std::string(k_notice_version) + " *" + writer;
  return out;
}

std::optional<change_notice> decode_change_notice(std::string_view text) {
  change_notice c;
  std::size_t at = 0;
  bool first = true;
  while (at <= text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view token = text.substr(at, end - at);
    at = end + 1;
    if (first) {
      if (token != k_notice_version) return std::nullopt;
      first = false;
    } else if (token == "*") {
      c.everything = true;
    } else if (token.size() > 1 && token[0] == 'i') {
      const auto ino = parse_hex_u64(token.substr(1));
      if (!ino) return std::nullopt;
      c.inodes.push_back(*ino);
    } else if (token.size() > 1 && token[0] == 'e') {
      const std::size_t colon = token.find(':');
      if (colon == std::string_view::npos) return std::nullopt;
      const auto parent = parse_hex_u64(token.substr(1, colon - 1));
      const std::string_view hex = token.substr(colon + 1);
      if (!parent || hex.empty() || hex.size() % 2 != 0 || hex.size() > 2 * 255)  // NAME_MAX
        return std::nullopt;
      std::string name;
      for (std::size_t i = 0; i < hex.size(); i += 2) {
        const int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        name += static_cast<char>(hi << 4 | lo);
      }
      c.entries.emplace_back(*parent, std::move(name));
    } else if (token.size() == 17 && (token[0] == 's' || token[0] == 'a' || token[0] == 'w')) {
      // A session id: 16 lower-case hex digits (random_hex_id).
      const std::string_view id = token.substr(1);
      if (!std::all_of(id.begin(), id.end(), [](char ch) { return hex_value(ch) >= 0; }))
        return std::nullopt;
      if (token[0] == 'w')
        c.writer = id;
      else
        (token[0] == 's' ? c.sessions_started : c.sessions_answered).emplace_back(id);
    } else {
      return std::nullopt;
    }
  }
  if (first) return std::nullopt;
  return c;
}

bool store::watch(std::function<void(const change_notice&)> fn) {
  if (!keeps_sessions()) return false;
  if (!follower_ && !writes_beside_others()) {
    if (options_.read_only) return false;
    // The writer hears its own commits' notices too: only followers that
    // mounted matter to it.
    return engine_->watch([fn = std::move(fn)](std::string_view text) {
      // Most notices are its own commits' (inodes and entries): not decoded.
      // Only a session token begins with " s".
      if (text.find(" s") == std::string_view::npos) return;
      const std::optional<change_notice> c = decode_change_notice(text);
      if (c && !c->sessions_started.empty()) {
        change_notice started;
        started.sessions_started = c->sessions_started;
        fn(started);
      }
    });
  }
  // A follower, or one of several writers: every commit of the others.
  return engine_->watch([this, fn = std::move(fn)](std::string_view text) {
    std::optional<change_notice> c;
    if (!text.empty()) c = decode_change_notice(text);
    if (!c) {
      // Missed notices (text ""), or a notice this build cannot read (a
      // newer writer): anything may have changed.
      if (!text.empty()) log_error("a change notice this densefs cannot read; dropping caches");
      c.emplace();
      c->everything = true;
    }
    // A writer's own commits (its session in their `w` token): only the
    // sessions that started matter.
    if (!c->writer.empty() && c->writer == session_id_) {
      if (c->sessions_started.empty()) return;
      c->everything = false;
      c->inodes.clear();
      c->entries.clear();
    }
    drop_cached_extents(c->inodes, c->everything);
    fn(*c);
  });
}

void store::unwatch() {
  if (engine_) engine_->unwatch();
}

void store::answer_sessions(const std::vector<std::string>& ids) {
  std::optional<session_record> own;
  {
    std::lock_guard lock(session_mutex_);
    own = session_;
  }
  if (!own || ids.empty()) return;
  // Its own session row again (a batch must write something), carrying the
  // answer.
  own->heartbeat = unix_now();
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  batch->put(table::meta, session_key(own->id), encode_session(*own));
  change_notice answer;
  answer.sessions_answered = ids;
  // Beside other writers, a new client waits for each of them by name.
  if (writes_beside_others()) answer.writer = own->id;
  batch->set_notice(encode_change_notice(answer));
  engine_->write(*batch, false);
}

// ---------------------------------------------------------------- stats

store_stats store::stats() const {
  store_stats st;
  st.policy = codec::format_policy(policy_);
  st.payload_backend = payload_backend_name(settings_.payloads);
  st.metadata_engine = engine_->kind();
  st.metadata_location = engine_->where();
  if (packs_ && packs_->remote()) {
    st.payload_location = packs_->remote()->where();
    st.payload_object_bytes = packs_->file_bytes();
    st.cache_bytes = packs_->cache_bytes();
    st.cache_capacity = options_.cache_bytes;
  }
  if (packs_) {
    st.pack_reader = packs_->reader_kind();
    // A directory listing: the index walk of usage() is not needed to count.
    for (const std::uint64_t size : packs_->file_sizes())
      if (size > 0) ++st.pack_files;
  }
  // scan_prefix: one pass over everything without filling the engine's cache.
  scan_prefix(table::inodes, {}, {}, "scanning inodes",
              [&](std::string_view key, std::string_view value) {
                const inode_record r = decode_inode(decode_u64_be(key), value);
                if (S_ISREG(r.mode)) {
                  ++st.files;
                  st.logical_bytes += r.size;
                  store_stats::type_stats& t = st.by_type[static_cast<std::size_t>(r.type)];
                  ++t.files;
                  t.logical_bytes += r.size;
                  t.stored_bytes += r.stored_bytes;
                  if (r.flags & k_inode_fell_back) ++t.fallbacks;
                } else if (S_ISDIR(r.mode)) {
                  ++st.directories;
                }
                return true;
              });
  scan_prefix(table::extents, {}, {}, "scanning extents",
              [&](std::string_view, std::string_view value) {
                st.referenced_bytes += detail::decode_extent(value, "scan").length;
                return true;
              });
  scan_prefix(table::chunks, {}, {}, "scanning chunks",
              [&](std::string_view key, std::string_view value) {
                const chunk_record r =
                    detail::decode_chunk(value, "chunk " + chunk_hash::from_bytes(key).hex());
                ++st.chunks;
                st.unique_plain_bytes += r.plain_size;
                st.stored_bytes += r.stored_size;
                const auto id = static_cast<std::size_t>(r.codec);
                if (id < std::size(st.chunks_by_codec)) {
                  ++st.chunks_by_codec[id];
                  st.stored_by_codec[id] += r.stored_size;
                  st.plain_by_codec[id] += r.plain_size;
                }
                return true;
              });
  scan_prefix(table::meta, k_recompress_prefix, k_recompress_prefix, "counting queued re-encodings",
              [&](std::string_view, std::string_view) {
                ++st.pending_recompress;
                return true;
              });
  st.dedup_saved_bytes =
      st.referenced_bytes > st.unique_plain_bytes ? st.referenced_bytes - st.unique_plain_bytes : 0;

  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat sb {};
    if (::lstat(it->path().c_str(), &sb) == 0 && !S_ISDIR(sb.st_mode))
      st.disk_bytes += static_cast<std::uint64_t>(sb.st_blocks) * 512;
  }
  return st;
}

namespace {
// Fraction of `plain` saved (0 when nothing is stored, negative when the
// stored form is larger).
double savings(std::uint64_t plain, std::uint64_t stored) {
  return plain == 0 ? 0.0 : 1.0 - static_cast<double>(stored) / static_cast<double>(plain);
}
}  // namespace

std::string to_json(const store_stats& s) {
  nlohmann::json j;
  j["files"] = s.files;
  j["directories"] = s.directories;
  j["logical_bytes"] = s.logical_bytes;
  j["referenced_bytes"] = s.referenced_bytes;
  j["chunks"] = s.chunks;
  j["unique_plain_bytes"] = s.unique_plain_bytes;
  j["stored_bytes"] = s.stored_bytes;
  j["dedup_saved_bytes"] = s.dedup_saved_bytes;
  j["disk_bytes"] = s.disk_bytes;
  j["chunks_by_codec"] = s.chunks_by_codec;
  j["stored_by_codec"] = s.stored_by_codec;
  j["plain_by_codec"] = s.plain_by_codec;
  j["pending_recompress"] = s.pending_recompress;
  j["policy"] = s.policy;
  j["payload_backend"] = s.payload_backend;
  j["metadata_engine"] = s.metadata_engine;
  j["metadata_location"] = s.metadata_location;
  if (!s.payload_location.empty()) {
    j["payload_location"] = s.payload_location;
    j["payload_object_bytes"] = s.payload_object_bytes;
    j["cache_bytes"] = s.cache_bytes;
    j["cache_capacity"] = s.cache_capacity;
  }
  if (s.payload_backend == "pack") {
    j["pack_files"] = s.pack_files;
    j["pack_reader"] = s.pack_reader;
  }
  j["ratio"] = s.logical_bytes == 0
                   ? 0.0
                   : static_cast<double>(s.stored_bytes) / static_cast<double>(s.logical_bytes);
  nlohmann::json codecs = nlohmann::json::object();
  for (std::size_t i = 0; i < std::size(s.chunks_by_codec); ++i) {
    // raw and zstd always appear, so scripts can rely on them.
    if (s.chunks_by_codec[i] == 0 && i > static_cast<std::size_t>(codec::codec_id::zstd)) continue;
    codecs[codec::codec_name(static_cast<codec::codec_id>(i))] = {
        {"chunks", s.chunks_by_codec[i]},
        {"plain_bytes", s.plain_by_codec[i]},
        {"stored_bytes", s.stored_by_codec[i]},
        {"savings", savings(s.plain_by_codec[i], s.stored_by_codec[i])}};
  }
  j["codecs"] = codecs;
  // A Lepton file's first chunk holds the whole JPEG and its members hold
  // 48 bytes each, so the two codec rows alone say little: together, what
  // those JPEGs save.
  const auto file = static_cast<std::size_t>(codec::codec_id::lepton_file);
  const auto member = static_cast<std::size_t>(codec::codec_id::lepton_member);
  if (s.chunks_by_codec[file] != 0) {
    const std::uint64_t plain = s.plain_by_codec[file] + s.plain_by_codec[member];
    const std::uint64_t stored = s.stored_by_codec[file] + s.stored_by_codec[member];
    j["lepton_files"] = {{"files", s.chunks_by_codec[file]},
                         {"chunks", s.chunks_by_codec[file] + s.chunks_by_codec[member]},
                         {"plain_bytes", plain},
                         {"stored_bytes", stored},
                         {"savings", savings(plain, stored)}};
  }
  nlohmann::json types = nlohmann::json::object();
  for (std::size_t i = 0; i < codec::k_file_type_count; ++i) {
    const store_stats::type_stats& t = s.by_type[i];
    if (t.files == 0) continue;
    types[std::string(codec::file_type_name(static_cast<codec::file_type>(i)))] = {
        {"files", t.files},
        {"logical_bytes", t.logical_bytes},
        {"stored_bytes", t.stored_bytes},
        {"savings", savings(t.logical_bytes, t.stored_bytes)},
        {"fallbacks", t.fallbacks}};
  }
  j["types"] = types;
  return j.dump();
}

// ---------------------------------------------------------------- fsck

void store::scan_records(
    std::string_view column_family, std::string_view prefix,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) const {
  std::optional<table> t;
  for (std::size_t i = 0; i < k_table_count; ++i)
    if (column_family == table_name(static_cast<table>(i))) t = static_cast<table>(i);
  if (!t) throw store_error(EINVAL, "no column family " + std::string(column_family));
  const std::string what = "scanning " + std::string(column_family);
  scan_prefix(*t, prefix, prefix, what.c_str(), fn);
}

void store::delete_chunk(metadata_batch& batch, const chunk_hash& hash, bool queued) {
  batch.erase(table::chunks, hash.view());
  if (queued) batch.erase(table::meta, recompress_key(hash));
  payloads_->remove(batch, hash);
}

void store::set_chunk_refcount(const chunk_hash& hash, std::uint64_t refcount) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  std::lock_guard lock(commit_mutex_);
  std::optional<chunk_record> rec = get_chunk(hash);
  if (!rec) return;
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  if (refcount == 0) {
    delete_chunk(*batch, hash, is_queued_for_recompress(hash));
  } else {
    rec->refcount = refcount;
    batch->put(table::chunks, hash.view(), encode_chunk(*rec, encoding_));
  }
  try {
    engine_->write(*batch, false);
  } catch (const store_error& e) {
    throw store_error(e.error_number(),
                      "setting the refcount of chunk " + hash.hex() + ": " + e.what());
  }
  if (refcount == 0) {
    garbage_bytes_ += rec->stored_size;
    cache_->erase(hash);
  }
}

}  // namespace densefs::store

namespace densefs::store {

std::uint64_t store::rebuild_pack_index(const std::vector<chunk_hash>* only) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  if (!packs_) return 0;
  std::lock_guard lock(commit_mutex_);
  struct wanted {
    std::uint32_t stored_size;
    std::uint64_t checksum;
    std::optional<pack_ref> found;
  };
  std::unordered_map<chunk_hash, wanted, chunk_hash_hasher> chunks;
  const auto want = [&](const chunk_hash& hash, const chunk_record& c) {
    if (c.stored_size >= k_min_pack_payload) chunks[hash] = {c.stored_size, c.checksum, {}};
  };
  if (only) {
    for (const chunk_hash& h : *only)
      if (const std::optional<chunk_record> c = get_chunk(h)) want(h, *c);
  } else {
    scan_prefix(table::chunks, {}, {}, "scanning chunks",
                [&](std::string_view key, std::string_view value) {
                  if (key.size() != chunk_hash::k_size) return true;
                  const chunk_hash hash = chunk_hash::from_bytes(key);
                  try {
                    want(hash, detail::decode_chunk(value, "chunk " + hash.hex()));
                  } catch (const store_error&) {
                    // fsck reports the record
                  }
                  return true;
                });
  }
  // The scan is in (pack, offset) order, so the last match is the newest.
  packs_->scan_packs(
      [&](const pack_record_info& r) {
        auto it = chunks.find(r.hash);
        if (it == chunks.end() || !r.payload_ok || r.stored_size != it->second.stored_size ||
            r.checksum != it->second.checksum)
          return;
        it->second.found = r.where;
      },
      [&](const std::string& why) { log_info("rebuilding the pack index: skipped " + why); });
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  std::uint64_t written = 0;
  for (const auto& [hash, w] : chunks) {
    if (!w.found) continue;
    const std::string value = encode_pack_ref(*w.found);
    // An entry that cannot be read (a damaged block) is rewritten: that is
    // what the rebuild is for.
    std::optional<std::string> now;
    try {
      now = engine_->get(table::payloads, hash.view(), "the payload index");
    } catch (const store_error&) {
    }
    if (now == value) continue;
    batch->put(table::payloads, hash.view(), value);
    ++written;
  }
  try {
    engine_->write(*batch, true);
  } catch (const store_error& e) {
    throw store_error(e.error_number(), "rebuilding the pack index: " + std::string(e.what()));
  }
  for (const auto& [hash, w] : chunks)
    if (w.found) cache_->erase(hash);
  return written;
}

std::vector<chunk_hash> store::rebuild_chunk_records(
    const std::map<chunk_hash, std::uint64_t>& refs) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  if (!packs_ || refs.empty()) return {};
  std::lock_guard lock(commit_mutex_);
  // The scan is in (pack, offset) order, so the last good record is the newest.
  std::map<chunk_hash, pack_record_info> found;
  packs_->scan_packs(
      [&](const pack_record_info& r) {
        if (r.payload_ok && refs.contains(r.hash)) found[r.hash] = r;
      },
      [&](const std::string& why) { log_info("rebuilding chunk records: skipped " + why); });
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  std::vector<chunk_hash> rebuilt;
  for (const auto& [hash, r] : found) {
    if (get_chunk(hash)) continue;
    chunk_record c;
    c.codec = r.codec;
    c.plain_size = r.plain_size;
    c.stored_size = r.stored_size;
    c.checksum = r.checksum;
    c.refcount = refs.at(hash);
    batch->put(table::chunks, hash.view(), encode_chunk(c, encoding_));
    batch->put(table::payloads, hash.view(), encode_pack_ref(r.where));
    rebuilt.push_back(hash);
  }
  if (rebuilt.empty()) return rebuilt;
  try {
    engine_->write(*batch, true);
  } catch (const store_error& e) {
    throw store_error(e.error_number(), "rebuilding chunk records: " + std::string(e.what()));
  }
  for (const chunk_hash& h : rebuilt) cache_->erase(h);
  return rebuilt;
}

}  // namespace densefs::store
