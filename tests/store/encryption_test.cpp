// Encryption at rest (store/crypto/, docs/encryption.md): the volume key
// record refuses damage and wrong secrets; sealed payloads open only under
// their chunk and key; an encrypted store keeps no plain payload and no
// plain chunk hash in its packs, still dedups, refuses a wrong key before
// it writes anything, changes its key without touching data, and rebuilds
// its pack index from sealed records. Real mounts: tests/mount/encryption_test.sh.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "store/crypto/payload_sealer.h"
#include "store/crypto/volume_key.h"
#include "store/error.h"
#include "store/metadata/rocksdb_engine.h"
#include "store/store.h"
#include "tests/store/error_of.h"
#include "tests/temp_dir.h"

using densefs::test::error_of;

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

// The lowest cost a record may carry: tests derive keys many times.
constexpr key_cost k_cheap{10, 8, 1};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string text(std::size_t n, std::string_view word) {
  std::string out;
  while (out.size() < n) out += std::string(word) + " " + std::to_string(out.size()) + "\n";
  out.resize(n);
  return out;
}

TEST(volume_key, wraps_and_unwraps_only_with_its_secret) {
  const master_key key = new_master_key();
  const std::string record = encode_wrapped_key(wrap_master_key(key, "a passphrase", k_cheap));
  ASSERT_EQ(record.size(), k_volume_key_record_size);
  const wrapped_volume_key k = decode_wrapped_key(record);
  EXPECT_EQ(unwrap_master_key(k, "a passphrase"), key);
  EXPECT_FALSE(unwrap_master_key(k, "a passphrasf"));
  EXPECT_FALSE(unwrap_master_key(k, ""));
  // A fresh salt and nonce each time: the same key and secret seal apart.
  EXPECT_NE(encode_wrapped_key(wrap_master_key(key, "a passphrase", k_cheap)), record);
}

TEST(volume_key, refuses_every_damaged_byte_and_a_newer_version) {
  const std::string record =
      encode_wrapped_key(wrap_master_key(new_master_key(), "a passphrase", k_cheap));
  for (std::size_t i = 0; i < record.size(); ++i) {
    std::string bad = record;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_EQ(error_of([&] { decode_wrapped_key(bad); }), EIO) << "byte " << i;
  }
  EXPECT_EQ(error_of([&] { decode_wrapped_key(record.substr(1)); }), EIO);
  EXPECT_EQ(error_of([&] { decode_wrapped_key(record + "x"); }), EIO);
  EXPECT_EQ(error_of([&] { decode_wrapped_key(""); }), EIO);

  // A version this build does not know, with a valid checksum: a newer build's.
  std::string newer = record.substr(0, 84);
  newer[0] = 2;
  const std::uint64_t sum = stored_checksum(newer);
  for (int i = 0; i < 8; ++i) newer.push_back(static_cast<char>(sum >> (8 * i)));
  EXPECT_EQ(error_of([&] { decode_wrapped_key(newer); }), EPROTONOSUPPORT);

  // A cost past the bounds, checksummed: refused before deriving anything.
  std::string costly = record.substr(0, 84);
  costly[2] = 30;
  const std::uint64_t sum2 = stored_checksum(costly);
  for (int i = 0; i < 8; ++i) costly.push_back(static_cast<char>(sum2 >> (8 * i)));
  std::string message;
  EXPECT_EQ(error_of([&] { decode_wrapped_key(costly); }, &message), EIO);
  EXPECT_NE(message.find("scrypt cost"), std::string::npos) << message;
}

TEST(volume_key, a_key_file_holds_one_secret) {
  EXPECT_EQ(parse_key_file("0123456789\n", "k"), "0123456789");
  EXPECT_EQ(parse_key_file("0123456789\r\n", "k"), "0123456789");
  EXPECT_EQ(parse_key_file(std::string("\0\1\2\3\4\5\6\7\n\n", 10), "k"),
            std::string("\0\1\2\3\4\5\6\7\n", 9));
  std::string message;
  EXPECT_EQ(error_of([&] { parse_key_file("\n", "k"); }, &message), EINVAL);
  EXPECT_NE(message.find("no secret"), std::string::npos) << message;
  EXPECT_EQ(error_of([&] { parse_key_file("short\n", "k"); }), EINVAL);
  EXPECT_EQ(error_of([&] { parse_key_file(std::string(k_max_key_file_size + 1, 'x'), "k"); }),
            EINVAL);
  EXPECT_EQ(parse_key_file(std::string(k_max_key_file_size, 'x'), "k").size(), k_max_key_file_size);
}

TEST(payload_sealer, opens_only_its_own_chunk_under_its_own_key) {
  const payload_sealer sealer(new_master_key());
  const chunk_hash a = sha256_of("a");
  const chunk_hash b = sha256_of("b");
  const std::string payload = text(10'000, "payload");
  const payload_meta meta{codec::codec_id::zstd, 123'456};
  const std::string sealed = sealer.seal(a, payload, meta);
  EXPECT_EQ(sealed.size(), payload.size() + payload_sealer::k_overhead);
  EXPECT_EQ(sealed.find("payload"), std::string::npos);
  const std::optional<opened_payload> opened = sealer.open(a, sealed);
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->stored, payload);
  // The codec and plain size come back from inside the seal.
  EXPECT_EQ(opened->meta.codec, codec::codec_id::zstd);
  EXPECT_EQ(opened->meta.plain_size, 123'456u);
  EXPECT_NE(sealer.seal(a, payload, meta), sealed);  // random nonces
  EXPECT_FALSE(sealer.open(b, sealed));              // moved under another chunk's name
  EXPECT_FALSE(payload_sealer(new_master_key()).open(a, sealed));
  for (const std::size_t i :
       {std::size_t{0}, std::size_t{5}, std::size_t{14}, std::size_t{100}, sealed.size() - 1}) {
    std::string bad = sealed;
    bad[i] = static_cast<char>(bad[i] ^ 1);
    EXPECT_FALSE(sealer.open(a, bad)) << "byte " << i;
  }
  EXPECT_FALSE(sealer.open(a, sealed.substr(0, payload_sealer::k_overhead - 1)));
  EXPECT_EQ(sealer.open(a, sealer.seal(a, "", meta))->stored, "");

  EXPECT_EQ(sealer.storage_name(a), sealer.storage_name(a));
  EXPECT_NE(sealer.storage_name(a), a);
  EXPECT_NE(sealer.storage_name(a), sealer.storage_name(b));
  EXPECT_NE(payload_sealer(new_master_key()).storage_name(a), sealer.storage_name(a));
}

class encrypted_store_test : public ::testing::TestWithParam<payload_backend> {
 protected:
  void SetUp() override {
    store::create(dir(), codec::parse_policy("zstd:level=3"), GetParam(), {}, {},
                  volume_encryption{"the volume secret", k_cheap});
  }
  fs::path dir() const { return tmp_.path() / "s"; }
  store_open_options with_key(std::string secret = "the volume secret") const {
    store_open_options o;
    o.key_secret = std::move(secret);
    return o;
  }
  // Files "big" (a pack payload) and "small" (an inline one) and a copy of
  // "big" that dedups against it.
  void write_files(store& s) {
    transaction txn;
    std::uint64_t ino = 2;
    for (const std::string& plain : {big_, std::string("small secret content"), big_}) {
      const prepared_chunk p = s.prepare_chunk(plain, true);
      txn.ref_chunk(p);
      txn.put_extent(ino, 0, {p.hash, 0, static_cast<std::uint32_t>(plain.size())});
      inode_record r;
      r.ino = ino;
      r.mode = S_IFREG | 0644;
      r.nlink = 1;
      r.size = plain.size();
      txn.put_inode(r);
      txn.put_dirent(k_root_ino, "f" + std::to_string(ino), {ino, S_IFREG});
      ++ino;
    }
    s.commit(txn, true);
  }
  std::string read_file(store& s, std::uint64_t ino) {
    std::string out;
    for (const auto& [offset, e] : s.extents(ino, 0, UINT64_MAX)) {
      const auto chunk = s.read_chunk(e.hash);
      out += chunk->substr(e.chunk_offset, e.length);
    }
    return out;
  }
  // Every byte the store directory holds outside its database.
  std::string pack_bytes() {
    std::string all;
    if (fs::exists(dir() / "packs"))
      for (const auto& f : fs::directory_iterator(dir() / "packs")) all += file_bytes(f.path());
    return all;
  }

  const std::string big_ = text(300'000, "a secret line of text");
  test::temp_dir tmp_;
};

TEST_P(encrypted_store_test, keeps_no_plain_payload_or_chunk_hash_in_its_packs) {
  {
    auto s = store::open(dir(), with_key());
    EXPECT_TRUE(s->encrypted());
    write_files(*s);
    EXPECT_EQ(read_file(*s, 2), big_);
    EXPECT_EQ(read_file(*s, 3), "small secret content");
    EXPECT_EQ(read_file(*s, 4), big_);
    // One chunk for the two copies: dedup within the volume still works.
    EXPECT_EQ(s->extents(2, 0, UINT64_MAX).front().second.hash,
              s->extents(4, 0, UINT64_MAX).front().second.hash);
    EXPECT_EQ(s->get_chunk(s->extents(2, 0, UINT64_MAX).front().second.hash)->refcount, 2u);
    EXPECT_EQ(s->stats().encryption, "aes-256-gcm");
  }
  EXPECT_EQ(file_bytes(dir() / "FORMAT").find("encryption=aes-256-gcm\n") != std::string::npos,
            true);
  EXPECT_TRUE(store::is_encrypted(dir()));
  const std::string packs = pack_bytes();
  if (GetParam() == payload_backend::pack) {
    EXPECT_GT(packs.size(), 1000u);
  }
  const chunk_hash big_hash = sha256_of(big_);
  EXPECT_EQ(packs.find(big_hash.view()), std::string::npos);
  EXPECT_EQ(packs.find("a secret line"), std::string::npos);
  // Nor does the payloads table name a chunk by its plain hash or hold its bytes.
  const auto e = rocksdb_engine::open(dir(), {.read_only = true});
  EXPECT_FALSE(e->get(table::payloads, big_hash.view(), "test"));
  e->scan(table::payloads, {}, {}, "test", [&](std::string_view, std::string_view v) {
    EXPECT_EQ(v.find("small secret"), std::string::npos);
    EXPECT_EQ(v.find("a secret line"), std::string::npos);
    return true;
  });
}

TEST_P(encrypted_store_test, a_wrong_or_missing_key_is_refused_and_changes_nothing) {
  {
    auto s = store::open(dir(), with_key());
    write_files(*s);
  }
  const auto listing = [&] {
    std::string out;
    for (const auto& f : fs::recursive_directory_iterator(dir()))
      out += f.path().string() + " " +
             std::to_string(f.is_regular_file() ? fs::file_size(f.path()) : 0) + " " +
             std::to_string(fs::last_write_time(f.path()).time_since_epoch().count()) + "\n";
    return out;
  };
  const std::string before = listing();
  std::string message;
  EXPECT_EQ(error_of([&] { store::open(dir(), with_key("not the secret")); }, &message), EACCES);
  EXPECT_NE(message.find("wrong key"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_EQ(listing(), before);
  EXPECT_EQ(error_of([&] { store::open(dir()); }, &message), ENOKEY);
  EXPECT_NE(message.find("--key-file"), std::string::npos) << message;

  // Read-only without the key: the records, but no payload.
  store_open_options ro;
  ro.read_only = true;
  auto s = store::open(dir(), ro);
  EXPECT_EQ(s->get_inode(2)->size, big_.size());
  // EIO, as every unreadable payload is at the FUSE boundary; the message
  // says what is missing.
  EXPECT_EQ(error_of([&] { read_file(*s, 2); }, &message), EIO);
  EXPECT_NE(message.find("DENSEFS_PASSPHRASE"), std::string::npos) << message;
}

TEST_P(encrypted_store_test, a_key_change_rewrites_one_record_and_no_data) {
  {
    auto s = store::open(dir(), with_key());
    write_files(*s);
  }
  const std::string packs = pack_bytes();
  EXPECT_EQ(error_of([&] {
              store::change_key(dir(), "not the secret", {"the new secret", k_cheap});
            }),
            EACCES);
  EXPECT_EQ(error_of([&] {
              store::change_key(dir(), "the volume secret", {"short", k_cheap});
            }),
            EINVAL);
  store::change_key(dir(), "the volume secret", {"the new secret", k_cheap});
  EXPECT_EQ(pack_bytes(), packs);
  EXPECT_EQ(error_of([&] { store::open(dir(), with_key()); }), EACCES);
  auto s = store::open(dir(), with_key("the new secret"));
  EXPECT_EQ(read_file(*s, 2), big_);
  EXPECT_EQ(read_file(*s, 3), "small secret content");
}

TEST_P(encrypted_store_test, a_lost_pack_index_is_rebuilt_from_sealed_records) {
  if (GetParam() != payload_backend::pack) GTEST_SKIP() << "pack stores only";
  chunk_hash big_hash;
  {
    auto s = store::open(dir(), with_key());
    write_files(*s);
    big_hash = s->extents(2, 0, UINT64_MAX).front().second.hash;
  }
  {
    // Lose every index entry of a pack record (inline payloads stay).
    auto e = rocksdb_engine::open(dir(), {});
    auto b = e->new_batch();
    std::size_t lost = 0;
    e->scan(table::payloads, {}, {}, "test", [&](std::string_view k, std::string_view v) {
      if (!v.empty() && v[0] == 2) {
        b->erase(table::payloads, k);
        ++lost;
      }
      return true;
    });
    EXPECT_EQ(lost, 1u);
    e->write(*b, true);
  }
  auto s = store::open(dir(), with_key());
  s->drop_caches();
  EXPECT_EQ(error_of([&] { read_file(*s, 2); }), EIO);
  EXPECT_EQ(s->rebuild_pack_index(), 1u);
  EXPECT_EQ(read_file(*s, 2), big_);
  EXPECT_EQ(s->rebuild_pack_index(), 0u);

  // A chunk record lost too: rebuilt from the sealed record, describing the
  // payload inside the seal.
  const chunk_record before = *s->get_chunk(big_hash);
  s->set_chunk_refcount(big_hash, 0);
  EXPECT_FALSE(s->get_chunk(big_hash));
  const auto rebuilt = s->rebuild_chunk_records({{big_hash, 2}});
  ASSERT_EQ(rebuilt.size(), 1u);
  const chunk_record after = *s->get_chunk(big_hash);
  EXPECT_EQ(after.stored_size, before.stored_size);
  EXPECT_EQ(after.checksum, before.checksum);
  EXPECT_EQ(read_file(*s, 2), big_);
}

TEST_P(encrypted_store_test, a_payload_failing_its_seal_marks_its_chunk_damaged) {
  if (GetParam() != payload_backend::pack) GTEST_SKIP() << "pack stores only";
  chunk_hash big_hash;
  {
    auto s = store::open(dir(), with_key());
    write_files(*s);
    big_hash = s->extents(2, 0, UINT64_MAX).front().second.hash;
  }
  // One byte in the middle of the pack, inside the big chunk's sealed
  // payload, with the record's own XXH3 fixed up as bit rot in a copy
  // would not be: only the seal can tell.
  fs::path pack;
  for (const auto& f : fs::directory_iterator(dir() / "packs")) pack = f.path();
  std::string bytes = file_bytes(pack);
  const std::size_t record = 32;  // the first record, after the pack header
  ASSERT_GT(bytes.size(), record + 64 + 1000);
  std::uint32_t stored = 0;
  for (int i = 3; i >= 0; --i)
    stored = (stored << 8) | static_cast<std::uint8_t>(bytes[record + 44 + i]);
  ASSERT_GT(stored, 1000u);
  const std::size_t at = record + 64 + stored / 2;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x40);
  const auto put_u64 = [&](std::size_t offset, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>(v >> (8 * i));
  };
  put_u64(record + 48, stored_checksum(std::string_view(bytes).substr(record + 64, stored)));
  put_u64(record + 56, stored_checksum(std::string_view(bytes).substr(record, 56)));
  std::ofstream(pack, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());

  auto s = store::open(dir(), with_key());
  std::string message;
  EXPECT_EQ(error_of([&] { read_file(*s, 2); }, &message), EIO);
  EXPECT_NE(message.find("authentication"), std::string::npos) << message;
  EXPECT_TRUE(s->is_damaged(big_hash));
  EXPECT_EQ(read_file(*s, 3), "small secret content");
}

TEST_P(encrypted_store_test, a_lost_volume_key_record_is_refused_not_opened_as_plain) {
  {
    auto e = rocksdb_engine::open(dir(), {});
    auto b = e->new_batch();
    b->erase(table::meta, k_volume_key_key);
    e->write(*b, true);
  }
  std::string message;
  EXPECT_EQ(error_of([&] { store::open(dir(), with_key()); }, &message), EIO);
  EXPECT_NE(message.find("no volume key"), std::string::npos) << message;
  EXPECT_NE(message.find("densefs load"), std::string::npos) << message;
  store_open_options ro;
  ro.read_only = true;
  EXPECT_EQ(error_of([&] { store::open(dir(), ro); }), EIO);
  // Nor when FORMAT lost its line too: the format version says encrypted.
  std::string format = file_bytes(dir() / "FORMAT");
  format.erase(format.find("encryption="));
  std::ofstream(dir() / "FORMAT", std::ios::trunc) << format;
  EXPECT_EQ(error_of([&] { store::open(dir(), ro); }), EIO);
}

INSTANTIATE_TEST_SUITE_P(backends, encrypted_store_test,
                         ::testing::Values(payload_backend::pack, payload_backend::blob),
                         [](const auto& info) {
                           return std::string(payload_backend_name(info.param));
                         });

}  // namespace
}  // namespace densefs::store
