// Byte layouts of every persisted record. docs/format.md is the prose spec of
// exactly this file; tests/store/records_test.cpp pins the bytes.
#include "store/records.h"

#include <cerrno>
#include <cstring>

#include <sys/stat.h>

#include "store/error.h"
#include "store/records_detail.h"
#include "store/text.h"

namespace densefs::store {
namespace {

// Every value starts with this byte. A reader refuses other versions rather
// than guessing at a layout it does not know.
constexpr std::uint8_t k_record_version = 1;
// Inode values gained the file type and flags in version 2; version 1 values
// (stores written before per-type codecs) still decode, as file_type unknown.
constexpr std::uint8_t k_inode_record_version = 2;
// Compact encodings (store format 3, docs/format.md): a new record version
// per kind, so a value says which layout it has whatever store it is in.
constexpr std::uint8_t k_inode_compact_version = 3;
constexpr std::uint8_t k_dirent_compact_version = 2;
constexpr std::uint8_t k_extent_compact_version = 2;
constexpr std::uint8_t k_chunk_compact_version = 2;

// Compact inode time_flags bits: a time equal to the one named is not
// stored again (a file's last write sets ctime == mtime; `touch -d` sets
// atime == mtime; a new empty file has all four equal). Times are stored
// whole, not as differences: whole times of files made together compress
// better in RocksDB's zstd blocks (docs/format.md).
constexpr std::uint8_t k_atime_is_mtime = 1;
constexpr std::uint8_t k_ctime_is_mtime = 2;
constexpr std::uint8_t k_btime_is_ctime = 4;
constexpr std::uint8_t k_time_flag_bits = 7;

constexpr std::uint32_t k_max_nsec = 999'999'999;

void put_be64(std::string& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u8(std::string& out, std::uint8_t v) {
  out += static_cast<char>(v);
}
void put_u32(std::string& out, std::uint32_t v) {
  put_le(out, v, 4);
}
void put_u64(std::string& out, std::uint64_t v) {
  put_le(out, v, 8);
}
// LEB128: seven bits a byte, low bits first, high bit set on all but the
// last byte. A u64 takes 1 to 10 bytes.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
// Seconds may be negative (before 1970): zigzag keeps small magnitudes short.
std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
std::int64_t unzigzag(std::uint64_t v) {
  return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}
void put_compact_time(std::string& out, const timestamp& t) {
  put_varint(out, zigzag(t.sec));
  put_varint(out, t.nsec);
}
void put_time(std::string& out, const timestamp& t) {
  put_u64(out, static_cast<std::uint64_t>(t.sec));
  put_u32(out, t.nsec);
}
void put_string(std::string& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

[[noreturn]] void corrupt(std::string_view kind, std::string_view key, std::string_view why) {
  std::string m = "corrupt ";
  m += kind;
  m += " record";
  if (!key.empty()) {
    m += " for ";
    m += key;
  }
  m += ": ";
  m += why;
  throw store_error(EIO, m);
}

// Reads little-endian fields from an untrusted value; every read is bounds
// checked and a short value is reported as corruption naming the record.
class reader {
 public:
  reader(std::string_view data, std::string_view kind, std::string key)
      : data_(data), kind_(kind), key_(std::move(key)) {}

  [[noreturn]] void fail(std::string_view why) const { corrupt(kind_, key_, why); }

  void expect_version() { expect_version_up_to(k_record_version); }

  // Returns the version; accepts 1..newest.
  std::uint8_t expect_version_up_to(std::uint8_t newest) {
    if (data_.empty()) fail("empty value");
    const std::uint8_t v = u8();
    if (v < 1 || v > newest)
      fail("unknown record version " + std::to_string(v) + " (this build reads versions 1 to " +
           std::to_string(newest) + ")");
    return v;
  }

  std::uint64_t le(int bytes) {
    need(bytes);
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += bytes;
    return v;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(le(1)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(le(4)); }
  std::uint64_t u64() { return le(8); }
  timestamp time(std::string_view what) {
    timestamp t;
    t.sec = static_cast<std::int64_t>(u64());
    t.nsec = u32();
    if (t.nsec > k_max_nsec) fail(std::string(what) + " nanoseconds out of range");
    return t;
  }
  // One LEB128 number. Over-long forms (a last byte of 0 after others, or
  // bits past 64) are refused, so every number has one encoding and
  // re-encoding a decoded value gives back its bytes.
  std::uint64_t varint(std::string_view what) {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (remaining() == 0)
        fail("value is truncated in " + std::string(what) + " (" + std::to_string(data_.size()) +
             " bytes)");
      const std::uint8_t b = static_cast<std::uint8_t>(data_[pos_++]);
      if (shift == 63 && b > 1) fail(std::string(what) + " does not fit in 64 bits");
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        if (b == 0 && shift > 0) fail(std::string(what) + " has an over-long encoding");
        return v;
      }
    }
  }
  std::uint32_t varint32(std::string_view what) {
    const std::uint64_t v = varint(what);
    if (v > UINT32_MAX) fail(std::string(what) + " " + std::to_string(v) + " exceeds 32 bits");
    return static_cast<std::uint32_t>(v);
  }
  timestamp compact_time(std::string_view what) {
    timestamp t;
    t.sec = unzigzag(varint(what));
    const std::uint64_t nsec = varint(what);
    if (nsec > k_max_nsec) fail(std::string(what) + " nanoseconds out of range");
    t.nsec = static_cast<std::uint32_t>(nsec);
    return t;
  }
  std::string_view bytes(std::size_t n) {
    need(n);
    const std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string string(std::string_view what) {
    const std::uint32_t n = u32();
    if (n > remaining())
      fail(std::string(what) + " length " + std::to_string(n) + " exceeds the " +
           std::to_string(remaining()) + " bytes left");
    return std::string(bytes(n));
  }
  std::size_t remaining() const { return data_.size() - pos_; }
  void expect_end() {
    if (remaining() != 0) fail(std::to_string(remaining()) + " unexpected trailing bytes");
  }

 private:
  void need(std::size_t n) {
    if (remaining() < n) fail("value is truncated (" + std::to_string(data_.size()) + " bytes)");
  }

  std::string_view data_;
  std::string_view kind_;
  std::string key_;
  std::size_t pos_ = 0;
};

std::string start_value() {
  std::string out;
  put_u8(out, k_record_version);
  return out;
}

}  // namespace

// ---- keys ----

std::string inode_key(std::uint64_t ino) {
  std::string k;
  put_be64(k, ino);
  return k;
}

std::string dirent_key(std::uint64_t parent, std::string_view name) {
  std::string k = dirent_prefix(parent);
  k.append(name);
  return k;
}

std::string dirent_prefix(std::uint64_t parent) {
  return inode_key(parent);
}

std::string extent_key(std::uint64_t ino, std::uint64_t file_offset) {
  std::string k = extent_prefix(ino);
  put_be64(k, file_offset);
  return k;
}

std::string extent_prefix(std::uint64_t ino) {
  return inode_key(ino);
}

std::string xattr_key(std::uint64_t ino, std::string_view name) {
  std::string k = xattr_prefix(ino);
  k.append(name);
  return k;
}

std::string xattr_prefix(std::uint64_t ino) {
  return inode_key(ino);
}

std::string recompress_key(const chunk_hash& hash) {
  std::string k(k_recompress_prefix);
  k.append(hash.view());
  return k;
}

std::string damaged_key(const chunk_hash& hash) {
  std::string k(k_damaged_prefix);
  k.append(hash.view());
  return k;
}

std::string encode_damaged(std::uint64_t found_unix) {
  std::string out = start_value();
  put_u64(out, found_unix);
  return out;
}

std::string orphan_key(std::uint64_t ino) {
  std::string k(k_orphan_prefix);
  put_be64(k, ino);
  return k;
}

std::string new_file_key(std::uint64_t ino) {
  std::string k(k_new_file_prefix);
  put_be64(k, ino);
  return k;
}

std::string printable_name(std::string_view name) {
  return escape_bytes(name);
}

std::uint64_t decode_u64_be(std::string_view eight_bytes) {
  // Exactly 8: every caller passes a whole key or key part, so trailing
  // bytes are corruption, not something to ignore (tests/fuzz, record_meta).
  if (eight_bytes.size() != 8)
    throw store_error(EIO, "corrupt key: " + std::to_string(eight_bytes.size()) +
                               " bytes where an 8-byte number was expected");
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<std::uint8_t>(eight_bytes[i]);
  return v;
}

// ---- inode ----
// version u8 | mode u32 | uid u32 | gid u32 | nlink u32 | size u64 |
// stored_bytes u64 | rdev u64 | parent u64 | atime | mtime | ctime | btime |
// symlink_target (u32 length + bytes)

namespace {

// ---- compact inode (record version 3) ----
// version u8 | mode | uid | gid | nlink | size | stored_bytes | rdev | parent
// (varints) | type u8 | flags u8 | time_flags u8 | mtime | atime unless
// k_atime_is_mtime | ctime unless k_ctime_is_mtime | btime unless
// k_btime_is_ctime (each time: zigzag varint sec, varint nsec) |
// symlink_target (varint length + bytes)

std::string encode_inode_compact(const inode_record& r) {
  std::string out;
  out.reserve(40 + r.symlink_target.size());
  put_u8(out, k_inode_compact_version);
  for (const std::uint64_t v : {std::uint64_t{r.mode}, std::uint64_t{r.uid}, std::uint64_t{r.gid},
                                std::uint64_t{r.nlink}, r.size, r.stored_bytes, r.rdev, r.parent})
    put_varint(out, v);
  put_u8(out, static_cast<std::uint8_t>(r.type));
  put_u8(out, r.flags);
  std::uint8_t time_flags = 0;
  if (r.atime == r.mtime) time_flags |= k_atime_is_mtime;
  if (r.ctime == r.mtime) time_flags |= k_ctime_is_mtime;
  if (r.btime == r.ctime) time_flags |= k_btime_is_ctime;
  put_u8(out, time_flags);
  put_compact_time(out, r.mtime);
  if (!(time_flags & k_atime_is_mtime)) put_compact_time(out, r.atime);
  if (!(time_flags & k_ctime_is_mtime)) put_compact_time(out, r.ctime);
  if (!(time_flags & k_btime_is_ctime)) put_compact_time(out, r.btime);
  put_varint(out, r.symlink_target.size());
  out.append(r.symlink_target);
  return out;
}

void decode_type_and_flags(reader& in, inode_record& r) {
  const std::uint8_t type = in.u8();
  if (!codec::is_known_file_type(type)) in.fail("unknown file type " + std::to_string(type));
  r.type = static_cast<codec::file_type>(type);
  r.flags = in.u8();
  if (r.flags & ~k_inode_fell_back) in.fail("unknown flag bits " + std::to_string(r.flags));
}

void decode_inode_compact(reader& in, inode_record& r) {
  r.mode = in.varint32("mode");
  r.uid = in.varint32("uid");
  r.gid = in.varint32("gid");
  r.nlink = in.varint32("nlink");
  r.size = in.varint("size");
  r.stored_bytes = in.varint("stored bytes");
  r.rdev = in.varint("rdev");
  r.parent = in.varint("parent");
  decode_type_and_flags(in, r);
  const std::uint8_t time_flags = in.u8();
  if (time_flags & ~k_time_flag_bits)
    in.fail("unknown time flag bits " + std::to_string(time_flags));
  // A time equal to the one it could refer to must be stored as the flag:
  // one encoding per record, as for the varints.
  const auto explicit_time = [&](std::string_view what, const timestamp& same) {
    const timestamp t = in.compact_time(what);
    if (t == same) in.fail(std::string(what) + " is stored although it repeats another time");
    return t;
  };
  r.mtime = in.compact_time("mtime");
  r.atime = time_flags & k_atime_is_mtime ? r.mtime : explicit_time("atime", r.mtime);
  r.ctime = time_flags & k_ctime_is_mtime ? r.mtime : explicit_time("ctime", r.mtime);
  r.btime = time_flags & k_btime_is_ctime ? r.ctime : explicit_time("btime", r.ctime);
  const std::uint64_t n = in.varint("symlink target length");
  if (n > in.remaining())
    in.fail("symlink target length " + std::to_string(n) + " exceeds the " +
            std::to_string(in.remaining()) + " bytes left");
  r.symlink_target = std::string(in.bytes(n));
}

}  // namespace

record_encoding record_encoding_for(std::uint32_t format_version) {
  return format_version >= k_compact_format_version ? record_encoding::compact
                                                    : record_encoding::fixed;
}

std::string encode_inode(const inode_record& r, record_encoding e) {
  if (e == record_encoding::compact) return encode_inode_compact(r);
  std::string out;
  out.reserve(103 + r.symlink_target.size());
  put_u8(out, k_inode_record_version);
  put_u32(out, r.mode);
  put_u32(out, r.uid);
  put_u32(out, r.gid);
  put_u32(out, r.nlink);
  put_u64(out, r.size);
  put_u64(out, r.stored_bytes);
  put_u64(out, r.rdev);
  put_u64(out, r.parent);
  put_time(out, r.atime);
  put_time(out, r.mtime);
  put_time(out, r.ctime);
  put_time(out, r.btime);
  put_string(out, r.symlink_target);
  put_u8(out, static_cast<std::uint8_t>(r.type));
  put_u8(out, r.flags);
  return out;
}

inode_record decode_inode(std::uint64_t ino, std::string_view value) {
  reader in(value, "inode", "inode " + std::to_string(ino));
  const std::uint8_t version = in.expect_version_up_to(k_inode_compact_version);
  inode_record r;
  r.ino = ino;
  if (version == k_inode_compact_version) {
    decode_inode_compact(in, r);
    in.expect_end();
    return r;
  }
  r.mode = in.u32();
  r.uid = in.u32();
  r.gid = in.u32();
  r.nlink = in.u32();
  r.size = in.u64();
  r.stored_bytes = in.u64();
  r.rdev = in.u64();
  r.parent = in.u64();
  r.atime = in.time("atime");
  r.mtime = in.time("mtime");
  r.ctime = in.time("ctime");
  r.btime = in.time("btime");
  r.symlink_target = in.string("symlink target");
  if (version >= 2) decode_type_and_flags(in, r);
  in.expect_end();
  return r;
}

// ---- dirent ----
// version u8 | ino u64 | type u32

// Compact (record version 2): version u8 | ino varint | type >> 12 u8.
// The type is S_IFMT bits only (the low 12 bits are zero), so its top four
// bits are all there is to store.
constexpr std::uint32_t k_type_shift = 12;

std::string encode_dirent(const dirent_record& r, record_encoding e) {
  std::string out;
  if (e == record_encoding::compact && (r.type & ~static_cast<std::uint32_t>(S_IFMT)) == 0) {
    put_u8(out, k_dirent_compact_version);
    put_varint(out, r.ino);
    put_u8(out, static_cast<std::uint8_t>(r.type >> k_type_shift));
    return out;
  }
  // Not S_IFMT bits only (never written by the file system): kept whole.
  out = start_value();
  put_u64(out, r.ino);
  put_u32(out, r.type);
  return out;
}

dirent_record detail::decode_dirent(std::string_view value, std::string_view key_description) {
  reader in(value, "dirent", std::string(key_description));
  const std::uint8_t version = in.expect_version_up_to(k_dirent_compact_version);
  dirent_record r;
  if (version == k_dirent_compact_version) {
    r.ino = in.varint("inode number");
    const std::uint8_t type = in.u8();
    if (type > (S_IFMT >> k_type_shift))
      in.fail("file type " + std::to_string(type) + " out of range");
    r.type = static_cast<std::uint32_t>(type) << k_type_shift;
  } else {
    r.ino = in.u64();
    r.type = in.u32();
  }
  in.expect_end();
  if (r.ino == 0) in.fail("inode number 0");
  return r;
}

// ---- extent ----
// version u8 | hash 32 bytes | chunk_offset u32 | length u32

// Compact (record version 2): version u8 | hash 32 bytes | chunk_offset
// varint | length varint.

std::string encode_extent(const extent_record& r, record_encoding e) {
  std::string out;
  const bool compact = e == record_encoding::compact;
  put_u8(out, compact ? k_extent_compact_version : k_record_version);
  out.append(r.hash.view());
  if (compact) {
    put_varint(out, r.chunk_offset);
    put_varint(out, r.length);
  } else {
    put_u32(out, r.chunk_offset);
    put_u32(out, r.length);
  }
  return out;
}

extent_record detail::decode_extent(std::string_view value, std::string_view key_description) {
  reader in(value, "extent", std::string(key_description));
  const std::uint8_t version = in.expect_version_up_to(k_extent_compact_version);
  extent_record r;
  r.hash = chunk_hash::from_bytes(in.bytes(chunk_hash::k_size));
  const bool compact = version == k_extent_compact_version;
  r.chunk_offset = compact ? in.varint32("chunk offset") : in.u32();
  r.length = compact ? in.varint32("length") : in.u32();
  in.expect_end();
  // A run can never reach past the end of a chunk; catching it here keeps a
  // corrupt extent from turning into an out-of-range read later.
  if (static_cast<std::uint64_t>(r.chunk_offset) + r.length > k_chunk_size)
    in.fail("run [" + std::to_string(r.chunk_offset) + ", +" + std::to_string(r.length) +
            ") exceeds the chunk size");
  return r;
}

// ---- chunk ----
// version u8 | codec u8 | plain_size u32 | stored_size u32 | refcount u64 |
// checksum u64 | location u8

// Compact (record version 2): version u8 | codec u8 | location u8 |
// plain_size varint | stored_size varint | refcount varint | checksum u64.
// The checksum is a hash: as a varint it would only grow.

std::string encode_chunk(const chunk_record& r, record_encoding e) {
  std::string out;
  if (e == record_encoding::compact) {
    put_u8(out, k_chunk_compact_version);
    put_u8(out, static_cast<std::uint8_t>(r.codec));
    put_u8(out, static_cast<std::uint8_t>(r.location));
    put_varint(out, r.plain_size);
    put_varint(out, r.stored_size);
    put_varint(out, r.refcount);
    put_u64(out, r.checksum);
    return out;
  }
  out = start_value();
  put_u8(out, static_cast<std::uint8_t>(r.codec));
  put_u32(out, r.plain_size);
  put_u32(out, r.stored_size);
  put_u64(out, r.refcount);
  put_u64(out, r.checksum);
  put_u8(out, static_cast<std::uint8_t>(r.location));
  return out;
}

chunk_record detail::decode_chunk(std::string_view value, std::string_view key_description) {
  reader in(value, "chunk", std::string(key_description));
  const std::uint8_t version = in.expect_version_up_to(k_chunk_compact_version);
  chunk_record r;
  std::uint8_t codec = 0;
  std::uint8_t location = 0;
  if (version == k_chunk_compact_version) {
    codec = in.u8();
    location = in.u8();
    r.plain_size = in.varint32("plain size");
    r.stored_size = in.varint32("stored size");
    r.refcount = in.varint("refcount");
    r.checksum = in.u64();
  } else {
    codec = in.u8();
    r.plain_size = in.u32();
    r.stored_size = in.u32();
    r.refcount = in.u64();
    r.checksum = in.u64();
    location = in.u8();
  }
  in.expect_end();
  if (!codec::is_known_codec(codec)) in.fail("unknown codec id " + std::to_string(codec));
  r.codec = static_cast<codec::codec_id>(codec);
  if (location != static_cast<std::uint8_t>(payload_location::rocksdb))
    in.fail("unknown payload location " + std::to_string(location));
  r.location = static_cast<payload_location>(location);
  if (r.plain_size > k_chunk_size)
    in.fail("plain size " + std::to_string(r.plain_size) + " exceeds the chunk size");
  return r;
}

// ---- settings ----
// version u8 | format_version u32 | created (i64 sec, u32 nsec) |
// uuid (u32 length + bytes) | codec_spec (u32 length + bytes)

std::string_view payload_backend_name(payload_backend b) {
  return b == payload_backend::pack ? "pack" : "blob";
}

// Version 2 appends the payload backend (one byte). Blob stores keep writing
// version 1, byte for byte what earlier builds wrote, so a blob store made by
// this build still opens with an older one; an older build refuses a pack
// store with "unknown record version 2" instead of losing its payloads.
constexpr std::uint8_t k_settings_record_version = 2;

std::string encode_settings(const store_settings& s) {
  std::string out;
  put_u8(out, s.payloads == payload_backend::blob ? 1 : k_settings_record_version);
  put_u32(out, s.format_version);
  put_time(out, s.created);
  put_string(out, s.uuid);
  put_string(out, s.codec_spec);
  if (s.payloads != payload_backend::blob) put_u8(out, static_cast<std::uint8_t>(s.payloads));
  return out;
}

store_settings decode_settings(std::string_view value) {
  reader in(value, "settings", std::string(k_settings_key));
  const std::uint8_t version = in.expect_version_up_to(k_settings_record_version);
  store_settings s;
  s.format_version = in.u32();
  s.created = in.time("created");
  s.uuid = in.string("uuid");
  s.codec_spec = in.string("codec spec");
  if (version >= 2) {
    // Blob stores are written as version 1 only: a version 2 record naming
    // blob would be a second encoding of the same settings.
    const std::uint8_t backend = in.u8();
    if (backend != static_cast<std::uint8_t>(payload_backend::pack))
      in.fail(backend == static_cast<std::uint8_t>(payload_backend::blob)
                  ? std::string("a version 2 record names the blob backend")
                  : "unknown payload backend " + std::to_string(backend));
    s.payloads = payload_backend::pack;
  }
  in.expect_end();
  return s;
}

// ---- xattr ----
// version u8 | value bytes (the rest)

std::string encode_xattr_value(std::string_view bytes) {
  std::string out = start_value();
  out.append(bytes);
  return out;
}

std::string detail::decode_xattr_value(std::string_view value, std::string_view key_description) {
  reader in(value, "xattr", std::string(key_description));
  in.expect_version();
  return std::string(value.substr(1));
}

// ---- meta: next_ino, orphans ----

std::string encode_next_ino(std::uint64_t next_ino) {
  std::string out = start_value();
  put_u64(out, next_ino);
  return out;
}

std::uint64_t decode_next_ino(std::string_view value) {
  reader in(value, "next_ino", std::string(k_next_ino_key));
  in.expect_version();
  const std::uint64_t v = in.u64();
  in.expect_end();
  return v;
}

std::string session_key(std::string_view id) {
  return std::string(k_session_prefix) + std::string(id);
}

std::string hold_prefix(std::string_view session_id) {
  return std::string(k_hold_prefix) + std::string(session_id) + "/";
}

std::string hold_key(std::string_view session_id, std::uint64_t ino) {
  std::string k = hold_prefix(session_id);
  put_be64(k, ino);
  return k;
}

std::string encode_hold() {
  return start_value();
}

hold_record decode_hold(std::string_view key, std::string_view value) {
  reader in(value, "hold", std::string(key));
  in.expect_version();
  in.expect_end();
  const std::size_t id_at = k_hold_prefix.size();
  if (!key.starts_with(k_hold_prefix) || key.size() != id_at + 16 + 1 + 8 || key[id_at + 16] != '/')
    in.fail("the key is not \"hold/\", 16 hex digits, \"/\" and an inode number");
  hold_record r;
  r.session_id = std::string(key.substr(id_at, 16));
  r.ino = decode_u64_be(key.substr(id_at + 17));
  return r;
}

std::string lock_inode_prefix(std::uint64_t ino) {
  std::string k(k_lock_prefix);
  put_be64(k, ino);
  return k;
}

std::string lock_key(const lock_record& r) {
  std::string k = lock_inode_prefix(r.ino);
  k.push_back(static_cast<char>(r.kind));
  k += r.session_id;
  put_be64(k, r.owner);
  put_be64(k, r.start);
  return k;
}

std::string encode_lock(const lock_record& r) {
  std::string out = start_value();
  out.push_back(static_cast<char>(r.type));
  put_u64(out, r.end);
  put_u32(out, r.pid);
  return out;
}

lock_record decode_lock(std::string_view key, std::string_view value) {
  reader in(value, "lock", printable_name(key));
  in.expect_version();
  lock_record r;
  const std::size_t at = k_lock_prefix.size();
  if (!key.starts_with(k_lock_prefix) || key.size() != at + 8 + 1 + 16 + 8 + 8)
    in.fail(
        "the key is not \"lock/\", an inode number, a kind, 16 hex digits, an owner and a "
        "first byte");
  r.ino = decode_u64_be(key.substr(at, 8));
  const char kind = key[at + 8];
  if (kind != static_cast<char>(lock_kind::flock) && kind != static_cast<char>(lock_kind::posix))
    in.fail("an unknown lock kind");
  r.kind = static_cast<lock_kind>(kind);
  r.session_id = std::string(key.substr(at + 9, 16));
  r.owner = decode_u64_be(key.substr(at + 25, 8));
  r.start = decode_u64_be(key.substr(at + 33, 8));
  const std::uint8_t type = in.u8();
  if (type != static_cast<std::uint8_t>(lock_type::read) &&
      type != static_cast<std::uint8_t>(lock_type::write))
    in.fail("an unknown lock type");
  r.type = static_cast<lock_type>(type);
  r.end = in.u64();
  r.pid = in.u32();
  in.expect_end();
  if (r.end < r.start || r.end > k_lock_to_end) in.fail("a lock whose last byte is out of range");
  return r;
}

namespace {
constexpr std::uint8_t k_session_read_only = 1;
}  // namespace

std::string encode_session(const session_record& r) {
  std::string out = start_value();
  put_u64(out, static_cast<std::uint64_t>(r.started));
  put_u64(out, static_cast<std::uint64_t>(r.heartbeat));
  put_u32(out, r.pid);
  put_string(out, r.host);
  put_string(out, r.mountpoint);
  // Flags, only when one is set: a writer's row is what format 6 first
  // specified.
  if (r.read_only) out.push_back(static_cast<char>(k_session_read_only));
  return out;
}

session_record decode_session(std::string_view key, std::string_view value) {
  reader in(value, "session", std::string(key));
  in.expect_version();
  session_record r;
  if (!key.starts_with(k_session_prefix) || key.size() != k_session_prefix.size() + 16)
    in.fail("the key is not \"session/\" and 16 hex digits");
  r.id = std::string(key.substr(k_session_prefix.size()));
  r.started = static_cast<std::int64_t>(in.u64());
  r.heartbeat = static_cast<std::int64_t>(in.u64());
  r.pid = in.u32();
  r.host = in.string("host name");
  r.mountpoint = in.string("mount point");
  if (in.remaining() > 0) {
    // Never written as 0: the byte is there only when a flag is set.
    const std::uint8_t flags = in.u8();
    if (flags == 0 || (flags & ~k_session_read_only) != 0) in.fail("unknown session flags");
    r.read_only = (flags & k_session_read_only) != 0;
  }
  in.expect_end();
  return r;
}

std::string encode_lease(const lease_record& r) {
  std::string out = start_value();
  put_string(out, r.session_id);
  put_u64(out, static_cast<std::uint64_t>(r.expires));
  return out;
}

lease_record decode_lease(std::string_view key, std::string_view value) {
  reader in(value, "lease", std::string(key));
  in.expect_version();
  lease_record r;
  r.session_id = in.string("session id");
  r.expires = static_cast<std::int64_t>(in.u64());
  in.expect_end();
  if (r.session_id.size() != 16) in.fail("the session id is not 16 hex digits");
  return r;
}

std::string encode_orphan() {
  return start_value();
}

// ---- new file ----
// version u8 | parent u64 | name (u32 length + bytes) [| writer (u32
// length + 16 hex digits), a writer beside others only]

std::string encode_new_file(std::uint64_t parent, std::string_view name, std::string_view writer) {
  std::string out = start_value();
  put_u64(out, parent);
  put_string(out, name);
  if (!writer.empty()) put_string(out, writer);
  return out;
}

new_file_record decode_new_file(std::string_view key, std::string_view value) {
  if (key.size() != k_new_file_prefix.size() + 8 || !key.starts_with(k_new_file_prefix))
    throw store_error(EIO, "corrupt new-file key of " + std::to_string(key.size()) + " bytes");
  new_file_record r;
  r.ino = decode_u64_be(key.substr(k_new_file_prefix.size()));
  reader in(value, "new file", "inode " + std::to_string(r.ino));
  in.expect_version();
  r.parent = in.u64();
  r.name = in.string("name");
  if (in.remaining() > 0) {
    r.writer = in.string("writer");
    if (r.writer.size() != 16 ||
        r.writer.find_first_not_of("0123456789abcdef") != std::string::npos)
      in.fail("the writer is not 16 hex digits");
  }
  in.expect_end();
  if (r.name.empty() || r.name.size() > 255 || r.name.find('/') != std::string::npos ||
      r.name.find('\0') != std::string::npos)
    throw store_error(EIO, "corrupt new-file record of inode " + std::to_string(r.ino) +
                               ": a name of " + std::to_string(r.name.size()) + " bytes");
  return r;
}

void check_orphan(std::uint64_t ino, std::string_view value) {
  reader in(value, "orphan", "inode " + std::to_string(ino));
  in.expect_version();
  in.expect_end();
}

dirent_record decode_dirent(std::string_view value) {
  return detail::decode_dirent(value, "");
}

extent_record decode_extent(std::string_view value) {
  return detail::decode_extent(value, "");
}

chunk_record decode_chunk(std::string_view value) {
  return detail::decode_chunk(value, "");
}

std::string decode_xattr_value(std::string_view value) {
  return detail::decode_xattr_value(value, "");
}

// ---- recompress entry ----
// version u8 | ino u64

std::string encode_recompress(std::uint64_t ino) {
  std::string out = start_value();
  put_u64(out, ino);
  return out;
}

std::uint64_t decode_recompress(const chunk_hash& hash, std::string_view value) {
  reader in(value, "recompress", "chunk " + hash.hex());
  in.expect_version();
  const std::uint64_t ino = in.u64();
  in.expect_end();
  return ino;
}

}  // namespace densefs::store
