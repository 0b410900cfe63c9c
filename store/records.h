// The persisted records of a densefs store and their key layouts.
// Every value starts with a one-byte record version; the byte layouts are
// specified in docs/format.md and pinned by golden tests in tests/store/.
// Keys use big-endian integers so that RocksDB's bytewise order is numeric
// order (directory listings and extent scans are prefix/range scans).
//
// Decoders treat bytes as untrusted: a short, over-long or unknown-version
// value throws store_error(EIO) naming the record kind and key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/classify.h"
#include "codec/codec.h"
#include "store/hash.h"

namespace densefs::store {

// Column families (names are part of the format).
inline constexpr const char* k_cf_meta = "default";  // store metadata, orphans
inline constexpr const char* k_cf_inodes = "inodes";
inline constexpr const char* k_cf_dirents = "dirents";
inline constexpr const char* k_cf_extents = "extents";
inline constexpr const char* k_cf_chunks = "chunks";
inline constexpr const char* k_cf_payloads = "payloads";  // chunk bytes (blob files)
inline constexpr const char* k_cf_xattrs = "xattrs";

// The newest store format this build reads. Version 1 is a blob store and
// version 2 a pack store, both with fixed-width records; version 3 (what mkfs
// writes now, either backend) has compact records (docs/format.md). Each bump
// makes an older build refuse the store up front, with the one-line "newer
// format" message, instead of failing on a record it cannot read.
inline constexpr std::uint32_t k_format_version = 8;
inline constexpr std::uint32_t k_blob_format_version = 1;
inline constexpr std::uint32_t k_pack_format_version = 2;
inline constexpr std::uint32_t k_compact_format_version = 3;
// Format 4: a store that may hold Lepton file chunks (codec ids 5 and 6,
// codec/lepton_file.h). mkfs still makes format 3; a store becomes format 4
// in the commit that swaps in its first Lepton file, so that older builds
// refuse it up front instead of failing on those chunks.
inline constexpr std::uint32_t k_lepton_file_format_version = 4;
// Format 5: a store whose records live in a PostgreSQL database (STORE/FORMAT
// names it; docs/scale-out.md) and whose payloads are in its pack files.
// Records as in format 4; the version makes older builds, which know only
// the embedded database, refuse the store up front.
inline constexpr std::uint32_t k_postgres_format_version = 5;
// Format 6: a scale-out volume, records in PostgreSQL and pack files as
// objects in S3-compatible storage (STORE/FORMAT names both; the store
// directory is only the client's cache). Older builds would look for the
// packs in the directory: the version makes them refuse the store instead.
inline constexpr std::uint32_t k_object_format_version = 6;
// Format 7: an encrypted volume, of any of the kinds above (FORMAT's
// `encryption=` line, the meta row `volume_key`; docs/encryption.md). Its
// payloads are sealed and its chunks named by keyed hashes in storage;
// older builds would hand sealed bytes to decoders: the version makes
// them refuse the volume instead.
inline constexpr std::uint32_t k_encrypted_format_version = 7;
// Format 8: a volume that has had a snapshot (docs/backup.md, "Snapshots"),
// of any kind above, encrypted or not (from 8 on, only FORMAT's
// `encryption=` line and the `volume_key` row say so). Its commits keep
// pre-images of records for the snapshots; an older build would write
// without them and silently change every snapshot: the version makes it
// refuse the volume instead.
inline constexpr std::uint32_t k_snapshot_format_version = 8;

// How a store writes inode, dirent, extent and chunk values. Readers accept
// both in any store; a store writes only the one its format version allows,
// so that formats 1 and 2 stay readable by the builds that made them.
enum class record_encoding : std::uint8_t {
  fixed,    // formats 1 and 2: fixed-width little-endian fields
  compact,  // format 3: varints, times stored once when equal
};
record_encoding record_encoding_for(std::uint32_t format_version);

// Largest plain size of one chunk: the fixed grid files are cut into.
inline constexpr std::uint64_t k_chunk_size = 4 * 1024 * 1024;

inline constexpr std::uint64_t k_root_ino = 1;

struct timestamp {
  std::int64_t sec = 0;
  std::uint32_t nsec = 0;
  auto operator<=>(const timestamp&) const = default;
};

// One file, directory, symlink or special file.
struct inode_record {
  std::uint64_t ino = 0;   // from the key, not stored in the value
  std::uint32_t mode = 0;  // st_mode: type and permission bits
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::uint32_t nlink = 0;
  std::uint64_t size = 0;          // logical size in bytes
  std::uint64_t stored_bytes = 0;  // sum of stored sizes of referenced chunks
  std::uint64_t rdev = 0;
  std::uint64_t parent = 0;  // directories only: the parent directory (for "..")
  timestamp atime, mtime, ctime, btime;
  std::string symlink_target;  // symlinks only
  // Regular files (record version 2): what the classifier made of the file
  // (codec::file_type, picks the codec policy) and inode_flags bits.
  codec::file_type type = codec::file_type::unknown;
  std::uint8_t flags = 0;

  bool operator==(const inode_record&) const = default;
};

// inode_record::flags bits.
enum inode_flags : std::uint8_t {
  // The policy's codec could not take at least one chunk of this file
  // (Lepton rejected the JPEG, or an encoding failed its verification) and a
  // fallback codec stored it instead.
  k_inode_fell_back = 1,
};

struct dirent_record {
  std::uint64_t ino = 0;
  std::uint32_t type = 0;  // S_IFMT bits of the child's mode
  bool operator==(const dirent_record&) const = default;
};

// A run of file bytes [file_offset, file_offset + length) taken from a chunk's
// plain content starting at chunk_offset. Missing extents are holes (zeros).
struct extent_record {
  chunk_hash hash;
  std::uint32_t chunk_offset = 0;
  std::uint32_t length = 0;
  bool operator==(const extent_record&) const = default;
};
// A file's extents as (file_offset, extent), in offset order.
using extent_list = std::vector<std::pair<std::uint64_t, extent_record>>;

enum class payload_location : std::uint8_t {
  rocksdb = 0,  // payloads column family, key = chunk hash
};

struct chunk_record {
  codec::codec_id codec = codec::codec_id::raw;
  std::uint32_t plain_size = 0;
  std::uint32_t stored_size = 0;
  std::uint64_t refcount = 0;
  std::uint64_t checksum = 0;  // stored_checksum() of the payload
  payload_location location = payload_location::rocksdb;
  bool operator==(const chunk_record&) const = default;
};

// Where payloads of 4 KiB and more live, chosen at mkfs (docs/packs.md).
enum class payload_backend : std::uint8_t {
  blob = 0,  // RocksDB blob files (every store made before the choice existed)
  pack = 1,  // append-only pack files under STORE/packs (store/payload/pack_store.h)
};
std::string_view payload_backend_name(payload_backend b);

// Store-wide settings, fixed at mkfs (mount options may override codec ones).
struct store_settings {
  std::uint32_t format_version = k_format_version;
  std::string uuid;  // 36-char RFC 4122 text form
  std::string codec_spec = "zstd:level=3";
  timestamp created;
  // Settings record version 2; version 1 records (older stores) are blob.
  payload_backend payloads = payload_backend::blob;
  bool operator==(const store_settings&) const = default;
};

// Keys.
std::string inode_key(std::uint64_t ino);
std::string dirent_key(std::uint64_t parent, std::string_view name);
std::string dirent_prefix(std::uint64_t parent);
std::string extent_key(std::uint64_t ino, std::uint64_t file_offset);
std::string extent_prefix(std::uint64_t ino);
std::string xattr_key(std::uint64_t ino, std::string_view name);
std::string xattr_prefix(std::uint64_t ino);
std::string orphan_key(std::uint64_t ino);  // in k_cf_meta
inline constexpr std::string_view k_orphan_prefix = "orphan/";
// A regular file created through a mount whose data, as of its last close,
// is not all committed yet: "new_file/" + ino BE, in k_cf_meta. After a
// crash the next mount removes such a file, so that a name is found absent
// or whole, never empty or cut short (docs/design.md, "Durability").
std::string new_file_key(std::uint64_t ino);
inline constexpr std::string_view k_new_file_prefix = "new_file/";
// Chunks stored with a fast codec and waiting for background re-encoding
// (Lepton): "recompress/" + 32-byte hash, in k_cf_meta.
std::string recompress_key(const chunk_hash& hash);
inline constexpr std::string_view k_recompress_prefix = "recompress/";
// A chunk whose payload failed its check, to be stored afresh by the next
// commit of its content (store/check/damaged_chunks.h): "damaged/" + 32-byte
// hash, in k_cf_meta; the value is the version byte and when it was found
// (unix seconds, u64).
std::string damaged_key(const chunk_hash& hash);
inline constexpr std::string_view k_damaged_prefix = "damaged/";
std::string encode_damaged(std::uint64_t found_unix);
inline constexpr std::string_view k_settings_key = "settings";
inline constexpr std::string_view k_next_ino_key = "next_ino";
// Format 6: where the volume's pack objects are (the s3:// location as mkfs
// was given it, no credentials), and the next pack number to hand out (8
// bytes; pack numbers come from the database so that no two
// clients, and no client after a crash, upload two packs of one name).
// Both are kept by store/payload/pack_store.cpp; next_pack is 8 bytes little-endian.
inline constexpr std::string_view k_payload_location_key = "payload_location";
// Formats 5 and 6: the mounts of the volume, "session/" + 16 hex digits, in
// k_cf_meta (docs/scale-out.md, "Sessions").
inline constexpr std::string_view k_session_prefix = "session/";
inline constexpr std::string_view k_next_pack_key = "next_pack";
// Formats 5 and 6 (PostgreSQL only): a writer's commit outcome rows,
// "commit_outcome/" + 16 hex digits + "/" + a connection number, in
// k_cf_meta; kept by store/metadata/postgres_engine.cpp.
inline constexpr std::string_view k_commit_outcome_prefix = "commit_outcome/";
// Formats 5 and 6: an unlinked file a follower still has open, so the
// writer keeps its data (docs/scale-out.md, "Unlinked while open
// elsewhere"): "hold/" + the follower's session id (16 hex digits) + "/" +
// ino BE, in k_cf_meta; the value is the version byte alone.
inline constexpr std::string_view k_hold_prefix = "hold/";
std::string hold_key(std::string_view session_id, std::uint64_t ino);
std::string hold_prefix(std::string_view session_id);  // one session's holds
struct hold_record {
  std::string session_id;
  std::uint64_t ino = 0;
};
std::string encode_hold();
// `key` is the whole key; throws store_error(EIO) on corruption.
hold_record decode_hold(std::string_view key, std::string_view value);

// Format 6: background work one writer of a volume does at a time (the
// re-encoder, gc; docs/scale-out.md, "Several writers"): "lease/" + the
// work's name, in k_cf_meta; the value names the holding session (16 hex
// digits, as a string) and when the lease ends (unix seconds, u64). Taken
// and renewed in a locked transaction (write_locked, "counters").
inline constexpr std::string_view k_lease_prefix = "lease/";
struct lease_record {
  std::string session_id;
  std::int64_t expires = 0;
};
std::string encode_lease(const lease_record& r);
// Throws store_error(EIO) on corruption.
lease_record decode_lease(std::string_view key, std::string_view value);

// Formats 5 and later (PostgreSQL only): a file lock a client of the volume
// holds, so every client sees it (docs/scale-out.md, "Locks across
// clients"): "lock/" + ino BE + the kind ('f' flock, 'p' POSIX record
// lock) + the holder's session id (16 hex digits) + the kernel's lock
// owner BE + the first byte BE, in k_cf_meta. The value: the version byte,
// the type (1 read, 2 write), the last byte (u64, inclusive;
// k_lock_to_end: to the end of the file) and the holding process's pid
// (u32). One prefix scan lists a file's locks in the order of their owners.
inline constexpr std::string_view k_lock_prefix = "lock/";
inline constexpr std::uint64_t k_lock_to_end = 0x7fffffffffffffffULL;  // OFFSET_MAX
enum class lock_kind : char { flock = 'f', posix = 'p' };
enum class lock_type : std::uint8_t { read = 1, write = 2 };
struct lock_record {
  std::uint64_t ino = 0;
  lock_kind kind = lock_kind::posix;
  std::string session_id;
  std::uint64_t owner = 0;
  std::uint64_t start = 0;
  std::uint64_t end = k_lock_to_end;
  lock_type type = lock_type::read;
  std::uint32_t pid = 0;
  bool operator==(const lock_record&) const = default;
};
std::string lock_key(const lock_record& r);
std::string lock_inode_prefix(std::uint64_t ino);  // one file's locks
std::string encode_lock(const lock_record& r);
// `key` is the whole key; throws store_error(EIO) on corruption (a first
// byte after the last, an unknown kind or type).
lock_record decode_lock(std::string_view key, std::string_view value);

std::uint64_t decode_u64_be(std::string_view eight_bytes);

// An entry name (arbitrary bytes) for one line of a report: printable
// ASCII as is, every other byte and '\\' as \xNN (valid UTF-8 for JSON).
std::string printable_name(std::string_view name);

// Values.
// The decoders read both encodings. The fixed encoding is the default so
// that the golden bytes of formats 1 and 2 keep their one-argument spelling.
std::string encode_inode(const inode_record& r, record_encoding e = record_encoding::fixed);
inode_record decode_inode(std::uint64_t ino, std::string_view value);
std::string encode_dirent(const dirent_record& r, record_encoding e = record_encoding::fixed);
dirent_record decode_dirent(std::string_view value);
std::string encode_extent(const extent_record& r, record_encoding e = record_encoding::fixed);
extent_record decode_extent(std::string_view value);
std::string encode_chunk(const chunk_record& r, record_encoding e = record_encoding::fixed);
chunk_record decode_chunk(std::string_view value);
std::string encode_settings(const store_settings& s);
store_settings decode_settings(std::string_view value);
std::string encode_xattr_value(std::string_view bytes);
std::string decode_xattr_value(std::string_view value);

// Values in k_cf_meta besides the settings (added with the store
// implementation; see docs/format.md).
std::string encode_next_ino(std::uint64_t next_ino);
std::uint64_t decode_next_ino(std::string_view value);
std::string encode_orphan();
// A new-file row: where the file was created (the directory and the name),
// and by which writer beside others (its session id; "" for a writer
// alone).
struct new_file_record {
  std::uint64_t ino = 0;
  std::uint64_t parent = 0;
  std::string name;
  std::string writer;
};
std::string encode_new_file(std::uint64_t parent, std::string_view name,
                            std::string_view writer = {});
new_file_record decode_new_file(std::string_view key, std::string_view value);  // throws EIO

// A mount of a volume kept in a shared database: who, where, and when it
// last said it is alive (unix seconds).
struct session_record {
  std::string id;  // 16 lower-case hex digits, the key's suffix
  std::string host;
  std::uint32_t pid = 0;
  std::string mountpoint;
  std::int64_t started = 0;
  std::int64_t heartbeat = 0;
  // A follower: a read-only mount beside the volume's writer (a trailing
  // flags byte, bit 0; absent in a writer's row).
  bool read_only = false;
  bool operator==(const session_record&) const = default;
};
std::string session_key(std::string_view id);
std::string encode_session(const session_record& r);
// `key` is the whole key; throws store_error(EIO) on corruption.
session_record decode_session(std::string_view key, std::string_view value);
// Value of a recompress entry: the inode that wrote the chunk (whose
// stored_bytes the swap adjusts).
std::string encode_recompress(std::uint64_t ino);
std::uint64_t decode_recompress(const chunk_hash& hash, std::string_view value);
void check_orphan(std::uint64_t ino, std::string_view value);  // throws on corruption

}  // namespace densefs::store
