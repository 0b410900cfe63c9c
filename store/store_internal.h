// What the parts of store::store share. The class (store/store.h) is one
// facade; its methods are split across store_*.cpp by concern, as RocksDB
// splits DBImpl across db_impl_open.cc, db_impl_write.cc, ...:
//   store_open.cpp         create, the FORMAT marker and lock, open, inode numbers
//   store_read.cpp         records, directory listings, extents and their cache
//   store_chunks.cpp       chunk preparation, re-encoding, reading chunks back
//   store_commit.cpp       free space, staged payloads, the commit, sync, statvfs
//   store_gc.cpp           garbage: what is dead, and collecting it
//   store_volume.cpp       change notices and the caches they drop, status
//   store_stats.cpp        `densefs stats`
//   store_fsck.cpp         what fsck and its repairs change through the store
//   store_transaction.cpp  the transaction a commit applies
// Private to those files: nothing else includes this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "store/hash.h"
#include "store/metadata/metadata_engine.h"
#include "store/records.h"
#include "store/store.h"

namespace densefs::store::internal {

inline timestamp now() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return {static_cast<std::int64_t>(ts.tv_sec), static_cast<std::uint32_t>(ts.tv_nsec)};
}

constexpr const char* k_format_file = "FORMAT";
constexpr std::string_view k_format_magic = "densefs store";

// Free space kept back from file data (see check_space_for): at least two
// payload memtables, so a flush always fits.
constexpr std::uint64_t k_min_space_reserve = 40u << 20;
constexpr std::uint64_t k_max_space_reserve = 256u << 20;

struct format_marker {
  std::uint32_t format_version = 0;
  std::string uuid;
  // Format 5: the connection string of the PostgreSQL database holding the
  // records (no password). Empty: the embedded RocksDB database.
  std::string postgres;
  // Format 6: the s3:// location of the pack objects. Empty: pack files in
  // the store directory.
  std::string data;
  // Format 7: the volume is encrypted (an `encryption=aes-256-gcm` line),
  // so tools ask for its key before opening it. The meta row `volume_key`
  // is the authority.
  bool encrypted = false;
};

// A new store UUID (RFC 4122 version 4, lower-case text).
std::string new_uuid();
// Creates `dir` (and its parents) if missing and makes it private (0700);
// `what` names it in errors.
void make_private_directory(const std::filesystem::path& dir, const char* what);

std::string format_marker_text(const format_marker& m);
// Reads STORE/FORMAT. Errors are one line a user can act on.
format_marker read_format_marker(const std::filesystem::path& dir);
// Refuses a store whose format is newer than this densefs reads.
void refuse_newer(const std::filesystem::path& dir, std::uint32_t found);

// Refuses a PostgreSQL connection string with a password in it (it goes
// into STORE/FORMAT): store_error(EINVAL) naming PGPASSWORD and ~/.pgpass.
void refuse_password(const std::string& conninfo);
// The checks of where a new volume goes (mkfs, load, migrate) that need no
// I/O: --data needs --meta, records in PostgreSQL need pack payloads, no
// password in the connection string. Throws store_error(EINVAL).
void check_volume_target(const std::string& postgres, const std::string& data,
                         payload_backend payloads);

// A scale-out volume's database, opened read-only by its connection string
// (refused with a password in it: the string goes into FORMAT files), and
// its settings record.
std::pair<std::unique_ptr<metadata_engine>, std::string> open_volume_database(
    const std::string& conninfo);

// A transaction's parts (store_transaction.cpp builds them, store_commit.cpp
// applies them).
struct txn_op {
  table cf;
  bool erase;
  std::string key;
  // Inodes, dirents and extents are encoded at commit, in the encoding of
  // the store's format (a transaction is built without the store).
  std::variant<std::string, inode_record, dirent_record, extent_record> value;
};

inline std::string encode_value(const txn_op& op, record_encoding e) {
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

// A moved-from transaction is reusable. (A template because impl is private.)
template <class pointer>
auto& ensure(pointer& p) {
  if (!p) p = std::make_unique<typename pointer::element_type>();
  return *p;
}

// Whether `stored` is the payload `rec` describes (its size and XXH3).
inline bool payload_matches(const chunk_record& rec, std::string_view stored) {
  return stored.size() == rec.stored_size && stored_checksum(stored) == rec.checksum;
}

}  // namespace densefs::store::internal

namespace densefs::store {

// The metadata changes are kept as a list and turned into one WriteBatch at
// commit, because the column family handles belong to the store (a
// transaction is built without one) and because a commit that throws
// chunk_missing must leave the transaction intact for the caller's retry.
struct transaction::impl {
  std::vector<internal::txn_op> ops;
  std::map<chunk_hash, internal::chunk_delta> chunks;  // ordered: commits are deterministic
  // Each group applies whole or not at all (replace_payloads).
  std::vector<std::vector<transaction::payload_swap>> replacements;
  std::vector<std::uint64_t> new_inodes;       // made_inode of a file (not a directory)
  std::vector<std::uint64_t> new_directories;  // made_inode of a directory
};

}  // namespace densefs::store
