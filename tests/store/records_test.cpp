// Record encodings: round trips, golden bytes (a format change must fail
// here and be a deliberate version bump), and hostile input.
#include "store/records.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "store/error.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

using test::from_hex;
using test::to_hex;

inode_record sample_file() {
  inode_record r;
  r.ino = 42;
  r.mode = S_IFREG | 0644;
  r.uid = 1000;
  r.gid = 100;
  r.nlink = 1;
  r.size = 0x0102030405060708ull;
  r.stored_bytes = 0x1000;
  r.rdev = 0;
  r.parent = 0;
  r.atime = {1700000000, 1};
  r.mtime = {1700000001, 2};
  r.ctime = {1700000002, 3};
  r.btime = {-1, 999999999};
  return r;
}

inode_record sample_symlink() {
  inode_record r;
  r.ino = 7;
  r.mode = S_IFLNK | 0777;
  r.nlink = 1;
  r.size = 2;
  r.symlink_target = "ab";
  return r;
}

extent_record sample_extent() {
  extent_record e;
  for (int i = 0; i < 32; ++i) e.hash.bytes[i] = static_cast<std::uint8_t>(i);
  e.chunk_offset = 0x10;
  e.length = 0x200000;
  return e;
}

chunk_record sample_chunk() {
  chunk_record c;
  c.codec = codec::codec_id::zstd;
  c.plain_size = 4194304;
  c.stored_size = 1000;
  c.refcount = 3;
  c.checksum = 0x0123456789abcdefull;
  return c;
}

store_settings sample_settings() {
  store_settings s;
  s.uuid = "00000000-0000-4000-8000-000000000000";
  s.codec_spec = "zstd:level=3";
  s.created = {1700000000, 5};
  s.format_version = k_blob_format_version;  // a blob store's settings
  return s;
}

// Golden bytes, spelled out field by field as in docs/format.md.
// clang-format off
constexpr const char* k_inode_hex =
    "01"                                 // version
    "a4810000" "e8030000" "64000000"     // mode, uid, gid
    "01000000"                           // nlink
    "0807060504030201"                   // size
    "0010000000000000"                   // stored_bytes
    "0000000000000000" "0000000000000000"  // rdev, parent
    "00f1536500000000" "01000000"        // atime
    "01f1536500000000" "02000000"        // mtime
    "02f1536500000000" "03000000"        // ctime
    "ffffffffffffffff" "ffc99a3b"        // btime (-1 s, 999999999 ns)
    "00000000";                          // symlink target length
constexpr const char* k_symlink_hex =
    "01" "ffa10000" "00000000" "00000000" "01000000" "0200000000000000"
    "0000000000000000" "0000000000000000" "0000000000000000"
    "0000000000000000" "00000000" "0000000000000000" "00000000"
    "0000000000000000" "00000000" "0000000000000000" "00000000"
    "02000000" "6162";
constexpr const char* k_dirent_hex = "01" "8877665544332211" "00400000";
constexpr const char* k_extent_hex =
    "01" "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" "10000000" "00002000";
constexpr const char* k_chunk_hex =
    "01" "01" "00004000" "e8030000" "0300000000000000" "efcdab8967452301" "00";
constexpr const char* k_settings_hex =
    "01" "01000000" "00f1536500000000" "05000000"
    "24000000" "30303030303030302d303030302d343030302d383030302d303030303030303030303030"
    "0c000000" "7a7374643a6c6576656c3d33";
// Compact encodings (store format 3), spelled out as in docs/format.md.
constexpr const char* k_compact_inode_hex =
    "03"                                 // version
    "a48302" "e807" "64" "01"            // mode, uid, gid, nlink (varints)
    "888e98a8c0e0808101" "8020"          // size, stored_bytes
    "00" "00"                            // rdev, parent
    "02" "01"                            // type (jpeg), flags (fell back)
    "00"                                 // time_flags: no time repeats another
    "82c49fd50c" "02"                    // mtime (zigzag sec, nsec)
    "80c49fd50c" "01"                    // atime
    "84c49fd50c" "03"                    // ctime
    "01" "ff93ebdc03"                    // btime (-1 s, 999999999 ns)
    "00";                                // symlink target length
constexpr const char* k_compact_symlink_hex =
    "03" "ffc302" "00" "00" "01" "02" "00" "00" "00" "0000"
    "07"                                 // atime, ctime = mtime; btime = ctime
    "00" "00"                            // mtime
    "02" "6162";                         // target
constexpr const char* k_compact_dirent_hex = "02" "88ef99abc5e88c9111" "04";
constexpr const char* k_compact_extent_hex =
    "02" "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" "10" "80808001";
constexpr const char* k_compact_chunk_hex =
    "02" "01" "00" "80808002" "e807" "03" "efcdab8967452301";
// clang-format on

void expect_corrupt(const std::function<void()>& decode, const std::string& kind);

// Version 2 is version 1 with the version byte 02 and two bytes appended:
// the file type and the flags.
std::string as_v2(std::string v1_hex, std::string_view type_and_flags) {
  v1_hex.replace(0, 2, "02");
  return v1_hex + std::string(type_and_flags);
}

TEST(store_records, inode_golden_bytes) {
  inode_record jpeg = sample_file();
  jpeg.type = codec::file_type::jpeg;
  jpeg.flags = k_inode_fell_back;
  EXPECT_EQ(to_hex(encode_inode(jpeg)), as_v2(k_inode_hex, "0201"));
  EXPECT_EQ(to_hex(encode_inode(sample_symlink())), as_v2(k_symlink_hex, "0000"));
  EXPECT_EQ(decode_inode(42, from_hex(as_v2(k_inode_hex, "0201"))), jpeg);
  EXPECT_EQ(decode_inode(7, from_hex(as_v2(k_symlink_hex, "0000"))), sample_symlink());
}

TEST(store_records, inode_version_1_still_decodes_as_an_unclassified_file) {
  const inode_record r = decode_inode(42, from_hex(k_inode_hex));
  EXPECT_EQ(r, sample_file());
  EXPECT_EQ(r.type, codec::file_type::unknown);
  EXPECT_EQ(r.flags, 0);
  EXPECT_EQ(decode_inode(7, from_hex(k_symlink_hex)), sample_symlink());
}

TEST(store_records, inode_version_2_rejects_unknown_types_and_flags) {
  expect_corrupt([&] { decode_inode(42, from_hex(as_v2(k_inode_hex, "ff00"))); }, "inode");
  expect_corrupt([&] { decode_inode(42, from_hex(as_v2(k_inode_hex, "0280"))); }, "inode");
  expect_corrupt([&] { decode_inode(42, from_hex(as_v2(k_inode_hex, "02"))); }, "inode");
  expect_corrupt([&] { decode_inode(42, from_hex(as_v2(k_inode_hex, "020100"))); }, "inode");
  expect_corrupt([&] { decode_inode(42, from_hex("04" + std::string(k_inode_hex).substr(2))); },
                 "inode");
}

TEST(store_records, dirent_golden_bytes) {
  const dirent_record d{0x1122334455667788ull, S_IFDIR};
  EXPECT_EQ(to_hex(encode_dirent(d)), k_dirent_hex);
  EXPECT_EQ(decode_dirent(from_hex(k_dirent_hex)), d);
}

TEST(store_records, extent_golden_bytes) {
  EXPECT_EQ(to_hex(encode_extent(sample_extent())), k_extent_hex);
  EXPECT_EQ(decode_extent(from_hex(k_extent_hex)), sample_extent());
}

TEST(store_records, chunk_golden_bytes) {
  EXPECT_EQ(to_hex(encode_chunk(sample_chunk())), k_chunk_hex);
  EXPECT_EQ(decode_chunk(from_hex(k_chunk_hex)), sample_chunk());
}

TEST(store_records, compact_golden_bytes) {
  inode_record jpeg = sample_file();
  jpeg.type = codec::file_type::jpeg;
  jpeg.flags = k_inode_fell_back;
  const auto c = record_encoding::compact;
  EXPECT_EQ(to_hex(encode_inode(jpeg, c)), k_compact_inode_hex);
  EXPECT_EQ(decode_inode(42, from_hex(k_compact_inode_hex)), jpeg);
  EXPECT_EQ(to_hex(encode_inode(sample_symlink(), c)), k_compact_symlink_hex);
  EXPECT_EQ(decode_inode(7, from_hex(k_compact_symlink_hex)), sample_symlink());
  const dirent_record d{0x1122334455667788ull, S_IFDIR};
  EXPECT_EQ(to_hex(encode_dirent(d, c)), k_compact_dirent_hex);
  EXPECT_EQ(decode_dirent(from_hex(k_compact_dirent_hex)), d);
  EXPECT_EQ(to_hex(encode_extent(sample_extent(), c)), k_compact_extent_hex);
  EXPECT_EQ(decode_extent(from_hex(k_compact_extent_hex)), sample_extent());
  EXPECT_EQ(to_hex(encode_chunk(sample_chunk(), c)), k_compact_chunk_hex);
  EXPECT_EQ(decode_chunk(from_hex(k_compact_chunk_hex)), sample_chunk());
}

// What the compact encodings are for: a small file just written (every
// time equal) costs a third of its fixed-width inode value.
TEST(store_records, compact_small_file_records_are_short) {
  inode_record r = sample_file();
  r.size = 5000;
  r.stored_bytes = 2000;
  r.atime = r.mtime = r.ctime = r.btime = {1700000000, 5};
  EXPECT_EQ(to_hex(encode_inode(r, record_encoding::compact)),
            "03a48302e80764018827d00f000000000780c49fd50c0500");
  EXPECT_EQ(encode_inode(r).size(), 103u);
  EXPECT_EQ(encode_dirent({123456, S_IFREG}, record_encoding::compact).size(), 5u);
  EXPECT_EQ(encode_chunk({codec::codec_id::raw, 3000, 3000, 1, 7}, record_encoding::compact).size(),
            16u);
}

TEST(store_records, record_encoding_follows_the_format_version) {
  EXPECT_EQ(record_encoding_for(k_blob_format_version), record_encoding::fixed);
  EXPECT_EQ(record_encoding_for(k_pack_format_version), record_encoding::fixed);
  EXPECT_EQ(record_encoding_for(k_compact_format_version), record_encoding::compact);
}

TEST(store_records, compact_round_trips_with_extreme_values) {
  const auto c = record_encoding::compact;
  inode_record r = sample_file();
  r.ino = ~0ull;
  r.mode = ~0u;
  r.uid = r.gid = r.nlink = ~0u;
  r.size = r.stored_bytes = r.rdev = r.parent = ~0ull;
  r.atime = {INT64_MIN, 0};
  r.mtime = {INT64_MAX, 999999999};
  r.ctime = {INT64_MIN, 999999999};
  r.btime = {0, 0};
  r.symlink_target = std::string(4096, '\xff') + std::string(1, '\0');
  EXPECT_EQ(decode_inode(r.ino, encode_inode(r, c)), r);
  // Every combination of repeated times.
  for (int bits = 0; bits < 8; ++bits) {
    inode_record t = sample_file();
    if (bits & 1) t.atime = t.mtime;
    if (bits & 2) t.ctime = t.mtime;
    if (bits & 4) t.btime = t.ctime;
    const std::string v = encode_inode(t, c);
    EXPECT_EQ(decode_inode(42, v), t) << bits;
  }
  for (const std::uint32_t type : {S_IFREG, S_IFDIR, S_IFLNK, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK})
    EXPECT_EQ(decode_dirent(encode_dirent({~0ull, type}, c)), (dirent_record{~0ull, type}));
  // A type with bits below S_IFMT cannot be written compact: it keeps the
  // fixed layout rather than losing them.
  EXPECT_EQ(decode_dirent(encode_dirent({9, 0644}, c)), (dirent_record{9, 0644}));
  extent_record e = sample_extent();
  e.chunk_offset = 0;
  e.length = static_cast<std::uint32_t>(k_chunk_size);
  EXPECT_EQ(decode_extent(encode_extent(e, c)), e);
  chunk_record k = sample_chunk();
  k.refcount = ~0ull;
  k.checksum = ~0ull;
  k.plain_size = 0;
  k.stored_size = ~0u;
  EXPECT_EQ(decode_chunk(encode_chunk(k, c)), k);
}

TEST(store_records, compact_values_refuse_truncation_and_trailing_bytes) {
  const auto exact = [](const std::string& good, const std::function<void(std::string_view)>& f,
                        const std::string& kind) {
    for (std::size_t n = 0; n < good.size(); ++n)
      expect_corrupt([&] { f(std::string_view(good).substr(0, n)); }, kind);
    expect_corrupt([&] { f(good + '\0'); }, kind);
  };
  exact(
      from_hex(k_compact_inode_hex), [](auto v) { decode_inode(42, v); }, "inode");
  exact(
      from_hex(k_compact_symlink_hex), [](auto v) { decode_inode(7, v); }, "inode");
  exact(
      from_hex(k_compact_dirent_hex), [](auto v) { decode_dirent(v); }, "dirent");
  exact(
      from_hex(k_compact_extent_hex), [](auto v) { decode_extent(v); }, "extent");
  exact(
      from_hex(k_compact_chunk_hex), [](auto v) { decode_chunk(v); }, "chunk");
  // Versions past the compact ones are unknown.
  expect_corrupt([] { decode_inode(1, from_hex("04")); }, "inode");
  expect_corrupt([] { decode_dirent(from_hex("030104")); }, "dirent");
  expect_corrupt([] { decode_chunk(from_hex("03")); }, "chunk");
  expect_corrupt([] { decode_extent(from_hex("03")); }, "extent");
}

TEST(store_records, forged_compact_values_are_eio) {
  // Over-long varints: one number, one encoding.
  expect_corrupt(
      [] {
        decode_dirent(
            from_hex("02"
                     "8100"
                     "04"));
      },
      "dirent");
  // Eleven bytes, or a tenth byte above 1: more than 64 bits.
  expect_corrupt(
      [] {
        decode_dirent(
            from_hex("02"
                     "ffffffffffffffffff02"
                     "04"));
      },
      "dirent");
  expect_corrupt(
      [] {
        decode_dirent(
            from_hex("02"
                     "ffffffffffffffffff8001"
                     "04"));
      },
      "dirent");
  EXPECT_EQ(decode_dirent(from_hex("02"
                                   "ffffffffffffffffff01"
                                   "04"))
                .ino,
            ~0ull);
  // A varint that never ends.
  expect_corrupt(
      [] {
        decode_dirent(
            from_hex("02"
                     "ffffff"));
      },
      "dirent");
  // Type nibble out of range; inode 0.
  expect_corrupt(
      [] {
        decode_dirent(
            from_hex("02"
                     "01"
                     "10"));
      },
      "dirent");
  expect_corrupt(
      [] {
        decode_dirent(
            from_hex("02"
                     "00"
                     "08"));
      },
      "dirent");
  // A 32-bit field given 33 bits.
  std::string chunk = std::string(k_compact_chunk_hex);
  chunk.replace(6, 8, "8080808010");  // plain size 2^32
  expect_corrupt([&] { decode_chunk(from_hex(chunk)); }, "chunk");
  // Plain size beyond a chunk; unknown codec and location.
  chunk = std::string(k_compact_chunk_hex);
  chunk.replace(6, 8, "81808002");
  expect_corrupt([&] { decode_chunk(from_hex(chunk)); }, "chunk");
  chunk = std::string(k_compact_chunk_hex);
  chunk.replace(2, 2, "c8");
  expect_corrupt([&] { decode_chunk(from_hex(chunk)); }, "chunk");
  chunk = std::string(k_compact_chunk_hex);
  chunk.replace(4, 2, "01");
  expect_corrupt([&] { decode_chunk(from_hex(chunk)); }, "chunk");
  // A run past the end of its chunk.
  extent_record e = sample_extent();
  e.chunk_offset = k_chunk_size - 1;
  e.length = 2;
  expect_corrupt([&] { decode_extent(encode_extent(e, record_encoding::compact)); }, "extent");

  const std::string inode = std::string(k_compact_symlink_hex);
  const auto forged = [&](std::size_t hex_at, std::string_view bytes) {
    std::string v = inode;
    v.replace(hex_at, 2, bytes);  // one byte becomes `bytes`
    return from_hex(v);
  };
  // Hex offsets in k_compact_symlink_hex: type 22, flags 24, time_flags 26,
  // target length 32.
  expect_corrupt([&] { decode_inode(7, forged(22, "ff")); }, "inode");
  expect_corrupt([&] { decode_inode(7, forged(24, "80")); }, "inode");
  expect_corrupt([&] { decode_inode(7, forged(26, "0f")); }, "inode");
  expect_corrupt([&] { decode_inode(7, forged(32, "03")); }, "inode");  // 3 bytes, 2 follow
  expect_corrupt([&] { decode_inode(7, forged(32, "ffffffff0f")); }, "inode");
  // Nanoseconds out of range; a mode past 32 bits.
  expect_corrupt([&] { decode_inode(7, forged(30, "8094ebdc03")); }, "inode");
  expect_corrupt(
      [&] {
        decode_inode(7, from_hex("03"
                                 "8080808010" +
                                 inode.substr(8)));
      },
      "inode");
  // A repeated time stored explicitly instead of as its flag.
  inode_record r = sample_file();
  std::string v = encode_inode(r, record_encoding::compact);
  // time_flags 0 with atime changed to equal mtime: same bytes as mtime.
  const std::string hex = to_hex(v);
  const std::size_t mtime_at = hex.find("82c49fd50c02");
  ASSERT_NE(mtime_at, std::string::npos);
  std::string repeated = hex;
  repeated.replace(mtime_at + 12, 12, "82c49fd50c02");  // atime := mtime
  expect_corrupt([&] { decode_inode(42, from_hex(repeated)); }, "inode");
}

// A small deterministic fuzzer over the compact goldens (tests/fuzz has
// the libFuzzer targets, run in CI): flipped, dropped and inserted bytes
// either decode to a record that re-encodes to the same bytes, or are EIO.
// Never anything else, and never a crash.
TEST(store_records, mutated_compact_values_decode_or_are_eio) {
  std::mt19937 rng(14);
  const auto c = record_encoding::compact;
  const std::vector<std::pair<std::string, std::function<std::string(std::string_view)>>> kinds = {
      {from_hex(k_compact_inode_hex),
       [&](std::string_view v) { return encode_inode(decode_inode(42, v), c); }},
      {from_hex(k_compact_symlink_hex),
       [&](std::string_view v) { return encode_inode(decode_inode(7, v), c); }},
      {from_hex(k_compact_dirent_hex),
       [&](std::string_view v) { return encode_dirent(decode_dirent(v), c); }},
      {from_hex(k_compact_extent_hex),
       [&](std::string_view v) { return encode_extent(decode_extent(v), c); }},
      {from_hex(k_compact_chunk_hex),
       [&](std::string_view v) { return encode_chunk(decode_chunk(v), c); }},
  };
  int decoded = 0, refused = 0;
  for (const auto& [golden, round_trip] : kinds) {
    for (int i = 0; i < 3000; ++i) {
      std::string v = golden;
      for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
        const std::size_t at = rng() % (v.size() + 1);
        switch (rng() % 3) {
          case 0:
            if (at < v.size()) v[at] = static_cast<char>(v[at] ^ (1u << (rng() % 8)));
            break;
          case 1:
            if (at < v.size()) v.erase(at, 1);
            break;
          default:
            v.insert(at, 1, static_cast<char>(rng()));
        }
      }
      // A changed version byte may name a fixed layout, which re-encodes
      // differently: there only "decodes or EIO" is checked.
      const bool same_version = !v.empty() && v[0] == golden[0];
      try {
        const std::string again = round_trip(v);
        if (same_version) {
          EXPECT_EQ(to_hex(again), to_hex(v));
        }
        ++decoded;
      } catch (const store_error& e) {
        EXPECT_EQ(e.error_number(), EIO) << e.what();
        ++refused;
      }
    }
  }
  // Both outcomes happen: the mutations reach past the first checks.
  EXPECT_GT(decoded, 100);
  EXPECT_GT(refused, 1000);
}

TEST(store_records, settings_golden_bytes) {
  EXPECT_EQ(to_hex(encode_settings(sample_settings())), k_settings_hex);
  EXPECT_EQ(decode_settings(from_hex(k_settings_hex)), sample_settings());
}

// Pack stores: settings record version 2 (format version 2, one more byte
// for the payload backend); blob stores keep writing version 1 (above).
TEST(store_records, pack_store_settings_golden_bytes) {
  store_settings s = sample_settings();
  s.format_version = k_pack_format_version;
  s.payloads = payload_backend::pack;
  const std::string hex = "0202000000" + std::string(k_settings_hex).substr(10) + "01";
  EXPECT_EQ(to_hex(encode_settings(s)), hex);
  EXPECT_EQ(decode_settings(from_hex(hex)), s);
  // An unknown backend byte is corruption, and so is blob in version 2 (a
  // blob store's settings are version 1: one encoding per record; found by
  // fuzz.record_settings, tests/fuzz/crashers/record_settings).
  EXPECT_THROW(decode_settings(from_hex(hex.substr(0, hex.size() - 2) + "07")), store_error);
  EXPECT_THROW(decode_settings(from_hex(hex.substr(0, hex.size() - 2) + "00")), store_error);
  // A version 1 record with a backend byte has trailing bytes.
  EXPECT_THROW(decode_settings(from_hex(std::string(k_settings_hex) + "01")), store_error);
}

TEST(store_records, meta_values_golden_bytes) {
  EXPECT_EQ(to_hex(encode_xattr_value("hi")), "016869");
  EXPECT_EQ(decode_xattr_value(from_hex("016869")), "hi");
  EXPECT_EQ(decode_xattr_value(from_hex("01")), "");
  EXPECT_EQ(to_hex(encode_next_ino(1026)), "010204000000000000");
  EXPECT_EQ(decode_next_ino(from_hex("010204000000000000")), 1026u);
  EXPECT_EQ(to_hex(encode_orphan()), "01");
  EXPECT_NO_THROW(check_orphan(5, from_hex("01")));
}

TEST(store_records, session_golden_bytes) {
  session_record r;
  r.id = "0123456789abcdef";
  r.host = "h1";
  r.pid = 258;
  r.mountpoint = "/m";
  r.started = 0x01020304;
  r.heartbeat = 0x01020305;
  const std::string hex =
      "01"                // version
      "0403020100000000"  // started
      "0503020100000000"  // heartbeat
      "02010000"          // pid
      "020000006831"      // "h1"
      "020000002f6d";     // "/m"
  EXPECT_EQ(session_key(r.id), "session/0123456789abcdef");
  EXPECT_EQ(to_hex(encode_session(r)), hex);
  EXPECT_EQ(decode_session(session_key(r.id), from_hex(hex)), r);
  // Corruption: a short or long value, a host length past the end, a key
  // without 16 hex digits.
  EXPECT_THROW(decode_session(session_key(r.id), from_hex(hex.substr(0, hex.size() - 2))),
               store_error);
  EXPECT_THROW(decode_session(session_key(r.id), from_hex(hex + "00")), store_error);
  EXPECT_THROW(
      decode_session(session_key(r.id), from_hex("01" + std::string(40, '0') + "ffffffff")),
      store_error);
  EXPECT_THROW(decode_session("session/0123", from_hex(hex)), store_error);
  // A follower's row: the flags byte, bit 0. Other bits are refused.
  r.read_only = true;
  EXPECT_EQ(to_hex(encode_session(r)), hex + "01");
  EXPECT_EQ(decode_session(session_key(r.id), from_hex(hex + "01")), r);
  EXPECT_THROW(decode_session(session_key(r.id), from_hex(hex + "03")), store_error);
  EXPECT_THROW(decode_session(session_key(r.id), from_hex(hex + "0100")), store_error);
}

TEST(store_records, new_file_golden_bytes) {
  const std::string key = new_file_key(5);
  EXPECT_EQ(to_hex(key), to_hex("new_file/") + "0000000000000005");
  const std::string hex =
      "01"                // version
      "0200000000000000"  // parent
      "02000000"
      "6631";  // "f1"
  EXPECT_EQ(to_hex(encode_new_file(2, "f1")), hex);
  new_file_record r = decode_new_file(key, from_hex(hex));
  EXPECT_EQ(r.ino, 5u);
  EXPECT_EQ(r.parent, 2u);
  EXPECT_EQ(r.name, "f1");
  EXPECT_EQ(r.writer, "");
  // A writer beside others names its session.
  const std::string writer = "10000000" + to_hex("0123456789abcdef");
  EXPECT_EQ(to_hex(encode_new_file(2, "f1", "0123456789abcdef")), hex + writer);
  r = decode_new_file(key, from_hex(hex + writer));
  EXPECT_EQ(r.writer, "0123456789abcdef");
  // Corruption: a writer of other digits or length, trailing bytes, an
  // empty name or one with a slash.
  EXPECT_THROW(decode_new_file(key, from_hex(hex + "10000000" + to_hex("0123456789ABCDEF"))),
               store_error);
  EXPECT_THROW(decode_new_file(key, from_hex(hex + "02000000" + to_hex("01"))), store_error);
  EXPECT_THROW(decode_new_file(key, from_hex(hex + writer + "00")), store_error);
  EXPECT_THROW(decode_new_file(key, from_hex("01"
                                             "0200000000000000"
                                             "00000000")),
               store_error);
  EXPECT_THROW(decode_new_file(key, from_hex("01"
                                             "0200000000000000"
                                             "03000000" +
                                             to_hex("a/b"))),
               store_error);
}

TEST(store_records, hold_golden_bytes) {
  const std::string key = hold_key("0123456789abcdef", 5);
  EXPECT_EQ(to_hex(key), to_hex("hold/0123456789abcdef/") + "0000000000000005");
  EXPECT_EQ(hold_prefix("0123456789abcdef"), "hold/0123456789abcdef/");
  EXPECT_EQ(to_hex(encode_hold()), "01");
  const hold_record h = decode_hold(key, from_hex("01"));
  EXPECT_EQ(h.session_id, "0123456789abcdef");
  EXPECT_EQ(h.ino, 5u);
  // Corruption: another value, a short key, no "/" after the session id.
  EXPECT_THROW(decode_hold(key, from_hex("0100")), store_error);
  EXPECT_THROW(decode_hold(key, from_hex("02")), store_error);
  EXPECT_THROW(decode_hold(key.substr(0, key.size() - 1), from_hex("01")), store_error);
  std::string no_slash = key;
  no_slash[5 + 16] = 'x';
  EXPECT_THROW(decode_hold(no_slash, from_hex("01")), store_error);
}

TEST(store_records, key_layouts) {
  EXPECT_EQ(to_hex(inode_key(1)), "0000000000000001");
  EXPECT_EQ(to_hex(dirent_key(2, "a")), "000000000000000261");
  EXPECT_EQ(to_hex(dirent_prefix(2)), "0000000000000002");
  EXPECT_EQ(to_hex(extent_key(3, 4194304)), "00000000000000030000000000400000");
  EXPECT_EQ(to_hex(extent_prefix(3)), "0000000000000003");
  EXPECT_EQ(to_hex(xattr_key(4, "user.x")), "0000000000000004757365722e78");
  EXPECT_EQ(to_hex(orphan_key(5)), "6f727068616e2f0000000000000005");
  EXPECT_EQ(decode_u64_be(from_hex("0102030405060708")), 0x0102030405060708ull);
  EXPECT_THROW(decode_u64_be(from_hex("01020304050607")), store_error);
  EXPECT_THROW(decode_u64_be(from_hex("010203040506070809")), store_error);
  // Bytewise key order is numeric order: what listings and extent scans need.
  EXPECT_LT(inode_key(255), inode_key(256));
  EXPECT_LT(extent_key(9, 0xff), extent_key(9, 0x100));
  EXPECT_LT(extent_key(9, ~0ull), extent_key(10, 0));
}

TEST(store_records, round_trips_with_extreme_values) {
  inode_record r = sample_file();
  r.ino = ~0ull;
  r.mode = ~0u;
  r.size = ~0ull;
  r.rdev = ~0ull;
  r.atime = {INT64_MIN, 0};
  r.mtime = {INT64_MAX, 999999999};
  r.symlink_target = std::string(4096, '\xff') + std::string(1, '\0');
  EXPECT_EQ(decode_inode(r.ino, encode_inode(r)), r);

  chunk_record c = sample_chunk();
  c.codec = codec::codec_id::raw;
  c.refcount = ~0ull;
  c.checksum = 0;
  c.plain_size = 0;
  EXPECT_EQ(decode_chunk(encode_chunk(c)), c);

  store_settings s = sample_settings();
  s.codec_spec = "";
  EXPECT_EQ(decode_settings(encode_settings(s)), s);
}

// Runs `decode` and expects a store_error(EIO) whose message mentions `kind`.
void expect_corrupt(const std::function<void()>& decode, const std::string& kind) {
  try {
    decode();
    ADD_FAILURE() << "decoding a damaged " << kind << " record did not throw";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EIO) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt " + kind + " record"), std::string::npos)
        << e.what();
  }
}

// Every strict prefix and a one-byte extension of `good` must be refused.
void expect_exact_length(const std::string& good,
                         const std::function<void(std::string_view)>& decode,
                         const std::string& kind) {
  for (std::size_t n = 0; n < good.size(); ++n)
    expect_corrupt([&] { decode(std::string_view(good).substr(0, n)); }, kind);
  expect_corrupt([&] { decode(good + '\0'); }, kind);
  std::string bad_version = good;
  bad_version[0] = 0x7f;
  expect_corrupt([&] { decode(bad_version); }, kind);
  bad_version[0] = 0;
  expect_corrupt([&] { decode(bad_version); }, kind);
}

TEST(store_records, truncated_overlong_and_unknown_version_values_are_eio) {
  expect_exact_length(
      from_hex(k_inode_hex), [](auto v) { decode_inode(42, v); }, "inode");
  expect_exact_length(
      from_hex(k_symlink_hex), [](auto v) { decode_inode(7, v); }, "inode");
  expect_exact_length(
      from_hex(k_dirent_hex), [](auto v) { decode_dirent(v); }, "dirent");
  expect_exact_length(
      from_hex(k_extent_hex), [](auto v) { decode_extent(v); }, "extent");
  expect_exact_length(
      from_hex(k_chunk_hex), [](auto v) { decode_chunk(v); }, "chunk");
  expect_exact_length(
      from_hex(k_settings_hex), [](auto v) { decode_settings(v); }, "settings");
  expect_exact_length(
      from_hex("010204000000000000"), [](auto v) { decode_next_ino(v); }, "next_ino");
  expect_corrupt([] { decode_xattr_value(""); }, "xattr");
  expect_corrupt([] { decode_xattr_value(from_hex("026869")); }, "xattr");
  expect_corrupt([] { check_orphan(1, ""); }, "orphan");
  expect_corrupt([] { check_orphan(1, from_hex("0100")); }, "orphan");
}

TEST(store_records, inode_error_names_the_inode) {
  try {
    decode_inode(1234, from_hex("01a481"));
    FAIL() << "no exception";
  } catch (const store_error& e) {
    EXPECT_NE(std::string(e.what()).find("inode 1234"), std::string::npos) << e.what();
  }
}

TEST(store_records, string_length_beyond_value_is_eio) {
  std::string v = from_hex(k_symlink_hex);
  v[v.size() - 6] = 3;  // target length 3, but 2 bytes follow
  expect_corrupt([&] { decode_inode(7, v); }, "inode");
  v[v.size() - 6] = static_cast<char>(0xff);
  v[v.size() - 3] = static_cast<char>(0xff);  // ~4 GiB claimed
  expect_corrupt([&] { decode_inode(7, v); }, "inode");
  std::string s = from_hex(k_settings_hex);
  s[17] = static_cast<char>(0x25);  // uuid length 37: eats into the spec
  expect_corrupt([&] { decode_settings(s); }, "settings");
}

TEST(store_records, unknown_codec_and_location_are_eio) {
  std::string v = from_hex(k_chunk_hex);
  v[1] = static_cast<char>(200);
  expect_corrupt([&] { decode_chunk(v); }, "chunk");
  v = from_hex(k_chunk_hex);
  v[v.size() - 1] = 1;  // payload location 1 does not exist
  expect_corrupt([&] { decode_chunk(v); }, "chunk");
}

TEST(store_records, out_of_range_fields_are_eio) {
  chunk_record c = sample_chunk();
  c.plain_size = k_chunk_size + 1;
  expect_corrupt([&] { decode_chunk(encode_chunk(c)); }, "chunk");

  extent_record e = sample_extent();
  e.chunk_offset = k_chunk_size - 1;
  e.length = 2;
  expect_corrupt([&] { decode_extent(encode_extent(e)); }, "extent");

  inode_record r = sample_file();
  r.mtime.nsec = 1000000000;
  expect_corrupt([&] { decode_inode(42, encode_inode(r)); }, "inode");

  expect_corrupt([] { decode_dirent(encode_dirent({0, S_IFREG})); }, "dirent");
}

TEST(store_records, hash_hex_round_trip) {
  const chunk_hash h = sha256_of("abc");
  EXPECT_EQ(h.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const auto back = chunk_hash::from_hex(h.hex());
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, h);
  EXPECT_EQ(chunk_hash::from_bytes(h.view()), h);
  EXPECT_FALSE(chunk_hash::from_hex("zz"));
  EXPECT_FALSE(chunk_hash::from_hex(std::string(64, 'g')));
  EXPECT_EQ(sha256_of("").hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // XXH3-64 reference values (xxHash's own test vectors for empty input).
  EXPECT_EQ(stored_checksum(""), 0x2D06800538D394C2ull);
  EXPECT_NE(stored_checksum("a"), stored_checksum("b"));
}

}  // namespace
}  // namespace densefs::store
