// CZIP container: round trips (header and footer mode, encrypted or not,
// sizes around chunk boundaries), dedup of unique chunks, random access,
// every kind of damage giving a clean error and never wrong bytes, and the
// golden bytes of docs/format.md.
#include "codec/czip.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/random_bytes.h"
#include "tests/temp_dir.h"

namespace densefs::codec::czip {
namespace {

using test::from_hex;
using test::to_hex;

class memory_sink : public byte_sink {
 public:
  explicit memory_sink(bool seekable) : seekable_(seekable) {}
  void write(std::string_view bytes) override { data.append(bytes); }
  bool seekable() const override { return seekable_; }
  void write_at(std::uint64_t offset, std::string_view bytes) override {
    ASSERT_TRUE(seekable_);
    ASSERT_LE(offset + bytes.size(), data.size());
    data.replace(offset, bytes.size(), bytes);
  }
  std::string data;

 private:
  bool seekable_;
};

class memory_source : public byte_source {
 public:
  explicit memory_source(std::string_view data) : data_(data) {}
  std::uint64_t size() const override { return data_.size(); }
  void read_at(std::uint64_t offset, char* out, std::size_t n) const override {
    if (offset > data_.size() || n > data_.size() - offset)
      throw std::runtime_error("read past the end of the source");
    std::memcpy(out, data_.data() + offset, n);
  }

 private:
  std::string_view data_;
};

// splitmix64 bytes: the golden values below were computed from them.
using test::splitmix_bytes;

// Compressible text with repeats far apart (dedup) and near (compression).
std::string repetitive(std::size_t n) {
  const std::string block = splitmix_bytes(96 * 1024, 3);
  std::string out;
  std::uint64_t line = 0;
  while (out.size() < n) {
    out += (line % 7 == 0) ? block : "line " + std::to_string(line++ % 1000) + " of text\n";
    ++line;
  }
  out.resize(n);
  return out;
}

writer_options options_for(bool encrypted, std::string_view chunker = "cdc") {
  writer_options o;
  o.chunker = parse_chunker_spec(chunker);
  if (encrypted) {
    o.passphrase = "correct horse battery staple";
    o.scrypt.log2_n = k_min_scrypt_log2_n;  // tests: cheap, not secure
  }
  return o;
}

std::string pack(std::string_view data, const writer_options& options, bool seekable,
                 std::size_t piece = 100003) {
  memory_sink sink(seekable);
  writer w(sink, options);
  for (std::size_t at = 0; at < data.size(); at += piece) w.write(data.substr(at, piece));
  w.finish();
  return sink.data;
}

reader_options read_options(bool encrypted) {
  reader_options o;
  if (encrypted) o.passphrase = "correct horse battery staple";
  return o;
}

std::string unpack(const reader& r) {
  std::string out;
  r.unpack([&](std::string_view b) { out.append(b); });
  return out;
}

struct round_trip_case {
  bool footer;
  bool encrypted;
};

class czip_round_trip : public ::testing::TestWithParam<round_trip_case> {};

TEST_P(czip_round_trip, SizesAroundChunkBoundaries) {
  const auto [footer, encrypted] = GetParam();
  // fixed:4K makes the boundaries exact: 0, 1, one below, at and above.
  for (const std::size_t size : {0, 1, 63, 4095, 4096, 4097, 8191, 8192, 8193, 65536 + 17}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::string data = splitmix_bytes(size, size);
    const std::string file = pack(data, options_for(encrypted, "fixed:size=4K"), !footer, 1000);
    const memory_source src(file);
    const reader r(src, read_options(encrypted));
    EXPECT_EQ(r.info().footer, footer);
    EXPECT_EQ(r.info().encrypted(), encrypted);
    EXPECT_EQ(r.info().original_size, size);
    EXPECT_EQ(r.info().czip_size, file.size());
    EXPECT_EQ(r.info().chunk_count, (size + 4095) / 4096);
    EXPECT_EQ(unpack(r), data);
    ASSERT_TRUE(r.original_hash());
    EXPECT_EQ(*r.original_hash(), sha256_of(data));
    const verify_report report = r.verify();
    EXPECT_TRUE(report.ok()) << (report.errors.empty() ? "" : report.errors[0]);
    EXPECT_TRUE(report.content_checked);
    EXPECT_EQ(report.bytes_checked, size);
  }
}

TEST_P(czip_round_trip, MebibytesRandomAndRepetitiveWithCdc) {
  const auto [footer, encrypted] = GetParam();
  for (const std::string& data : {splitmix_bytes(3 << 20, 11), repetitive(5 << 20)}) {
    const std::string file = pack(data, options_for(encrypted), !footer);
    const memory_source src(file);
    const reader r(src, read_options(encrypted));
    EXPECT_EQ(unpack(r), data);
    EXPECT_TRUE(r.verify().ok());
    for (const auto& e : r.chunks()) EXPECT_LE(e.original_size, 128u * 1024);
  }
}

INSTANTIATE_TEST_SUITE_P(czip, czip_round_trip,
                         ::testing::Values(round_trip_case{false, false},
                                           round_trip_case{true, false},
                                           round_trip_case{false, true},
                                           round_trip_case{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.footer ? "Footer" : "Header") +
                                  (info.param.encrypted ? "Encrypted" : "Plain");
                         });

TEST(czip, UniqueChunksAreStoredOnce) {
  // Eight copies of 256 KiB of random data on a 64 KiB grid: 32 chunks, 4
  // unique, so the czip is about one copy.
  const std::string block = splitmix_bytes(256 * 1024, 5);
  std::string data;
  for (int i = 0; i < 8; ++i) data += block;
  for (const bool encrypted : {false, true}) {
    const std::string file = pack(data, options_for(encrypted, "fixed:size=64K"), true);
    const memory_source src(file);
    const reader r(src, read_options(encrypted));
    EXPECT_EQ(r.info().chunk_count, 32u);
    EXPECT_EQ(r.info().unique_chunk_count, 4u);
    EXPECT_LT(file.size(), block.size() + 8 * 1024);
    std::set<std::uint64_t> offsets;
    for (const auto& e : r.chunks()) offsets.insert(e.czip_offset);
    EXPECT_EQ(offsets.size(), 4u);
    EXPECT_EQ(unpack(r), data);
  }
}

TEST(czip, CdcDedupsShiftedCopies) {
  // The same data twice with a few bytes inserted between: content-defined
  // boundaries resynchronise, so most of the second copy dedups.
  const std::string block = splitmix_bytes(2 << 20, 9);
  const std::string data = block + "inserted" + block;
  const std::string file = pack(data, options_for(false), true);
  const memory_source src(file);
  const reader r(src, {});
  EXPECT_LT(r.info().unique_chunk_count * 10, r.info().chunk_count * 6);
  EXPECT_LT(file.size(), block.size() + block.size() / 5);
  EXPECT_EQ(unpack(r), data);
}

TEST(czip, ConvergentEncryptionDedupsAcrossPassphrases) {
  // Equal plain chunks give equal stored bytes whatever the passphrase:
  // the payload areas are identical, the sealed arrays are not.
  const std::string data = repetitive(1 << 20);
  writer_options a = options_for(true);
  writer_options b = options_for(true);
  b.passphrase = "another passphrase";
  const std::string file_a = pack(data, a, true);
  const std::string file_b = pack(data, b, true);
  const memory_source src_a(file_a);
  const reader r(src_a, read_options(true));
  const std::size_t payload_end = r.info().chunk_array_offset;
  EXPECT_EQ(file_a.substr(k_header_size, payload_end - k_header_size),
            file_b.substr(k_header_size, payload_end - k_header_size));
  EXPECT_NE(file_a.substr(payload_end), file_b.substr(payload_end));
  // The plain content does not appear in the file.
  EXPECT_EQ(file_a.find(data.substr(0, 64)), std::string::npos);
}

TEST(czip, RandomAccessMatchesTheOriginal) {
  const std::string data = repetitive(3 << 20) + splitmix_bytes(1 << 20, 4);
  for (const bool encrypted : {false, true}) {
    const std::string file = pack(data, options_for(encrypted), false);
    const memory_source src(file);
    const reader r(src, read_options(encrypted));
    std::mt19937_64 rng(1);
    for (int i = 0; i < 300; ++i) {
      const std::uint64_t offset = rng() % (data.size() + 100);
      const std::uint64_t length = i % 10 == 0 ? rng() % (1 << 20) : rng() % 70000;
      std::string got;
      r.read(offset, length, [&](std::string_view b) { got.append(b); });
      const std::string want = offset >= data.size() ? "" : data.substr(offset, length);
      ASSERT_EQ(got, want) << "offset " << offset << " length " << length;
    }
    // Every chunk boundary, one byte either side.
    for (const auto& e : r.chunks()) {
      for (const std::uint64_t at : {e.original_offset, e.original_offset + e.original_size - 1}) {
        std::string got;
        r.read(at, 2, [&](std::string_view b) { got.append(b); });
        ASSERT_EQ(got, data.substr(at, 2));
      }
    }
  }
}

TEST(czip, EncryptedWithoutPassphraseGivesTheHeaderOnly) {
  const std::string data = repetitive(200000);
  const std::string file = pack(data, options_for(true), true);
  const memory_source src(file);
  const reader r(src, {});
  EXPECT_FALSE(r.has_chunks());
  EXPECT_FALSE(r.original_hash());
  EXPECT_EQ(r.info().original_size, data.size());
  EXPECT_THROW(unpack(r), czip_error);
  // The file hash can still be checked.
  const verify_report report = r.verify();
  EXPECT_TRUE(report.ok());
  EXPECT_FALSE(report.content_checked);
}

TEST(czip, WrongPassphraseIsACleanError) {
  const std::string file = pack(repetitive(200000), options_for(true), true);
  const memory_source src(file);
  reader_options wrong;
  wrong.passphrase = "correct horse battery stapler";
  try {
    const reader r(src, wrong);
    FAIL() << "opened with a wrong passphrase";
  } catch (const czip_auth_error& e) {
    EXPECT_STREQ(e.what(), "wrong passphrase or corrupt czip");
  }
}

// Patches a header field and recomputes the CRC, as a buggy or hostile
// writer would: the reader must still refuse cleanly.
std::string recrc(std::string file) {
  // CRC-32 of bytes 0..252 at 252, via encode_header of the decoded fields
  // would undo the patch; compute it here the slow way instead.
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < 252; ++i) {
    c ^= static_cast<unsigned char>(file[i]);
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  c ^= 0xFFFFFFFFu;
  for (int i = 0; i < 4; ++i) file[252 + i] = static_cast<char>(c >> (8 * i));
  return file;
}

std::string patched(std::string file, std::size_t offset, std::uint64_t value, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) file[offset + i] = static_cast<char>(value >> (8 * i));
  return recrc(std::move(file));
}

std::string open_error(const std::string& file, const reader_options& options = {}) {
  const memory_source src(file);
  try {
    const reader r(src, options);
    (void)unpack(r);
  } catch (const czip_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(czip, HeaderDamageGivesClearErrors) {
  const std::string file = pack(repetitive(300000), options_for(false), true);
  EXPECT_EQ(open_error(""), "truncated or not a czip file: 0 bytes, a czip has at least 256");
  EXPECT_EQ(open_error(std::string(1000, 'x')),
            "not a czip file, or truncated (no CZIP header at the start, no trailer at the end)");
  std::string bad_crc = file;
  bad_crc[20] ^= 1;
  EXPECT_EQ(open_error(bad_crc), "header CRC mismatch (corrupt header)");
  EXPECT_EQ(open_error(patched(file, 8, 2, 2)),
            "CZIP version 2 is newer than this densefs reads (1)");
  EXPECT_EQ(open_error(file.substr(0, file.size() - 1)),
            "truncated: the header says " + std::to_string(file.size()) + " bytes, the file has " +
                std::to_string(file.size() - 1));
  EXPECT_NE(open_error(file + "x").find("trailing garbage"), std::string::npos);
  // Absurd counts are refused before anything is allocated for them.
  EXPECT_NE(open_error(patched(file, 32, std::uint64_t{1} << 60, 8)).find("does not match"),
            std::string::npos);
  EXPECT_NE(open_error(patched(file, 48, std::uint64_t{1} << 62, 8)).find("chunk array"),
            std::string::npos);
  EXPECT_NE(open_error(patched(file, 59, 7, 1)).find("unknown encryption scheme 7"),
            std::string::npos);
  EXPECT_NE(open_error(patched(file, 56, 2, 1)).find("unknown hash format 2"), std::string::npos);
  // A hostile scrypt cost is refused before deriving.
  const std::string encrypted = pack("data", options_for(true), true);
  EXPECT_NE(open_error(patched(encrypted, 76, 40, 1), read_options(true)).find("scrypt"),
            std::string::npos);
}

// Whatever happens to the bytes, a reader either refuses with czip_error or
// returns exactly the original: never wrong bytes, never a crash.
void expect_never_wrong(const std::string& file, const std::string& original, bool encrypted,
                        bool must_fail_verify) {
  const memory_source src(file);
  try {
    const reader r(src, read_options(encrypted));
    std::string got;
    try {
      got = unpack(r);
      EXPECT_EQ(got, original);
    } catch (const czip_error&) {
    }
    if (must_fail_verify) {
      EXPECT_FALSE(r.verify().ok());
    }
  } catch (const czip_error&) {
  }
}

TEST(czip, TruncationAnywhereIsRefused) {
  for (const bool footer : {false, true}) {
    for (const bool encrypted : {false, true}) {
      const std::string data = repetitive(150000);
      const std::string file = pack(data, options_for(encrypted, "fixed:size=16K"), !footer);
      for (std::size_t size = 0; size < file.size(); size += 1 + size / 8) {
        SCOPED_TRACE("truncated to " + std::to_string(size));
        const memory_source src(std::string_view(file).substr(0, size));
        EXPECT_THROW(reader(src, read_options(encrypted)), czip_error);
      }
    }
  }
}

TEST(czip, FlippedBytesAreDetected) {
  for (const bool footer : {false, true}) {
    for (const bool encrypted : {false, true}) {
      SCOPED_TRACE(std::string(footer ? "footer" : "header") + (encrypted ? " encrypted" : ""));
      const std::string data = repetitive(60000) + splitmix_bytes(20000, 8);
      const std::string file = pack(data, options_for(encrypted, "fixed:size=8K"), !footer);
      // Every byte of the header and the array, a sample of the payloads.
      const memory_source src(file);
      const reader clean(src, read_options(encrypted));
      const std::uint64_t array_offset = clean.info().chunk_array_offset;
      std::vector<std::size_t> positions;
      for (std::size_t i = 0; i < file.size(); ++i) {
        const bool in_payload = i >= clean.info().body_offset() && i < array_offset;
        if (!in_payload || i % 97 == 0) positions.push_back(i);
      }
      for (const std::size_t i : positions) {
        std::string damaged = file;
        damaged[i] ^= static_cast<char>(1 << (i % 8));
        SCOPED_TRACE("flipped byte " + std::to_string(i));
        expect_never_wrong(damaged, data, encrypted, true);
      }
    }
  }
}

TEST(czip, CorruptPayloadNamesTheChunk) {
  const std::string data = repetitive(100000);
  const std::string file = pack(data, options_for(false, "fixed:size=16K"), true);
  std::string damaged = file;
  damaged[k_header_size + 5] ^= 0x40;  // inside chunk 0's payload
  const memory_source src(damaged);
  const reader r(src, {});
  try {
    (void)unpack(r);
    FAIL() << "no error";
  } catch (const czip_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("chunk 0 (original offset 0): ", 0), 0u) << e.what();
  }
  const verify_report report = r.verify();
  EXPECT_FALSE(report.ok());
  ASSERT_FALSE(report.errors.empty());
  EXPECT_EQ(report.errors[0], "czip file hash mismatch");
  EXPECT_NE(report.errors[1].find("chunk 0 (original offset 0): stored bytes hash mismatch"),
            std::string::npos);
}

TEST(czip, CzipInsideAFooterModeCzip) {
  // The outer czip starts with the inner one's valid header (chunk 0 stored
  // raw): the reader must still find the outer trailer.
  const std::string inner = pack(splitmix_bytes(300000, 12), options_for(false), true);
  writer_options raw = options_for(false);
  raw.codec = parse_codec_spec("raw");
  for (const bool footer : {true, false}) {
    const std::string outer = pack(inner, raw, !footer);
    ASSERT_EQ(outer.substr(footer ? 0 : k_header_size, k_header_size),
              inner.substr(0, k_header_size));
    const memory_source src(outer);
    const reader r(src, {});
    EXPECT_EQ(r.info().footer, footer);
    EXPECT_EQ(unpack(r), inner);
  }
}

TEST(czip, ChunkerNames) {
  EXPECT_EQ(chunker_name(parse_chunker_spec("cdc")), "cdc:min=8K:avg=32K:max=128K");
  EXPECT_EQ(chunker_name(parse_chunker_spec("fixed:size=64K")), "fixed:size=64K");
  EXPECT_EQ(chunker_name(parse_chunker_spec("fixed")), "fixed");
  EXPECT_EQ(chunker_name(std::nullopt), "source");
}

TEST(czip, ChunksCutByTheCaller) {
  // write_chunk: the caller's boundaries, a pre-encoded payload kept as it
  // is, and the header's chunker "source".
  const std::string a(5000, 'a'), b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  const encoded_chunk a_zstd = encode_chunk(a, parse_codec_spec("zstd:level=19"));
  ASSERT_EQ(a_zstd.codec, codec_id::zstd);
  for (const bool encrypted : {false, true}) {
    SCOPED_TRACE(encrypted);
    memory_sink sink(true);
    writer w(sink, options_for(encrypted));
    w.write_chunk(a, sha256_of(a), a_zstd.codec, a_zstd.bytes);
    w.write_chunk(b);
    w.write_chunk(a);  // a duplicate of the first: no new payload
    EXPECT_THROW(w.write("x"), czip_error);
    const header h = w.finish();
    EXPECT_FALSE(h.chunker.has_value());
    EXPECT_EQ(h.unique_chunk_count, 2u);
    const memory_source src(sink.data);
    reader_options ro;
    if (encrypted) ro.passphrase = "correct horse battery staple";
    const reader r(src, ro);
    EXPECT_FALSE(r.info().chunker.has_value());
    ASSERT_EQ(r.chunks().size(), 3u);
    EXPECT_EQ(r.chunks()[0].original_size, a.size());
    EXPECT_EQ(r.chunks()[1].original_size, b.size());
    EXPECT_EQ(r.chunks()[2].czip_offset, r.chunks()[0].czip_offset);
    if (!encrypted) {
      EXPECT_EQ(sink.data.substr(r.chunks()[0].czip_offset, r.chunks()[0].stored_size),
                a_zstd.bytes);
    }
    EXPECT_EQ(unpack(r), a + b + a);
    EXPECT_TRUE(r.verify().ok());
  }
  memory_sink sink(true);
  writer w(sink, options_for(false));
  w.write("x");
  EXPECT_THROW(w.write_chunk("y"), czip_error);
  EXPECT_THROW(writer(sink, options_for(false)).write_chunk(""), czip_error);
}

// The golden example of docs/format.md: "abcd" x 33 (132 bytes) packed with
// fixed:64 chunks (64, 64, 4; the first two are equal), codec raw, header
// mode. These bytes must never change: czips written today must stay
// readable, and a change here is a new CZIP version.
writer_options golden_options() {
  writer_options o;
  o.chunker = parse_chunker_spec("fixed:size=64");
  o.codec = parse_codec_spec("raw");
  return o;
}

std::string golden_input() {
  std::string s;
  for (int i = 0; i < 33; ++i) s += "abcd";
  return s;
}

extern const char* const k_golden_hex;

TEST(czip, GoldenBytes) {
  const std::string file = pack(golden_input(), golden_options(), true);
  EXPECT_EQ(to_hex(file), k_golden_hex);
  const std::string golden = from_hex(k_golden_hex);
  const memory_source src(golden);
  const reader r(src, {});
  EXPECT_EQ(unpack(r), golden_input());
  EXPECT_EQ(r.info().chunk_count, 3u);
  EXPECT_EQ(r.info().unique_chunk_count, 2u);
}

TEST(czip, GoldenEncryptedDigest) {
  // Pins the key derivations and the sealing: a fixed salt makes the output
  // deterministic.
  writer_options o = golden_options();
  o.passphrase = "golden";
  o.scrypt.log2_n = k_min_scrypt_log2_n;
  o.salt = kdf_salt{};
  for (std::size_t i = 0; i < o.salt->size(); ++i) (*o.salt)[i] = static_cast<std::uint8_t>(i);
  const std::string file = pack(golden_input(), o, true);
  EXPECT_EQ(to_hex(std::string_view(reinterpret_cast<const char*>(sha256_of(file).data()), 32)),
            "689c0241c326b5d9c75a5f45e832ecf338692b97877e2c1bb8149f814f11583e");
  const memory_source src(file);
  reader_options ro;
  ro.passphrase = "golden";
  const reader r(src, ro);
  EXPECT_EQ(unpack(r), golden_input());
}

const char* const k_golden_hex =
    "89435a49500d0a1a010000000001000084000000000000006402000000000000"
    "0300000000000000440100000000000020010000000000000120000000000000"
    "4000000040000000400000000000000000000000000000000000000000000000"
    "02000000000000004400000000000000dc25bf65437267a3ca465daa2330474c"
    "453a8def0f3d29744aa2e006d5320bdc6dc16583114c630f1b2e4ac43f4bad42"
    "7e070447b3b239811fac643a32ab0ea8f4dcbf657d307d2a1d1570faf7f96b8f"
    "19f5d5b490eb56da8c7a82da4e76dae500000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000047e21db3"
    "6162636461626364616263646162636461626364616263646162636461626364"
    "6162636461626364616263646162636461626364616263646162636461626364"
    "6162636400000000000000000001000000000000400000004000000000000000"
    "00000000625b41490b883891943c5fa54ad45d7c900b9b6e91e159334e320b1f"
    "5215a209625b41490b883891943c5fa54ad45d7c900b9b6e91e159334e320b1f"
    "5215a20940000000000000000001000000000000400000004000000000000000"
    "00000000625b41490b883891943c5fa54ad45d7c900b9b6e91e159334e320b1f"
    "5215a209625b41490b883891943c5fa54ad45d7c900b9b6e91e159334e320b1f"
    "5215a20980000000000000004001000000000000040000000400000000000000"
    "0000000088d4266fd4e6338d13b845fcf289579d209c897823b9217da3e16193"
    "6f03158988d4266fd4e6338d13b845fcf289579d209c897823b9217da3e16193"
    "6f031589";

}  // namespace
}  // namespace densefs::codec::czip
