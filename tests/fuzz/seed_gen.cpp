// Writes the seed corpora of the fuzz targets: real records, real encoded
// chunks, real czip files, plus edge cases. Run by tests/fuzz/make_corpus.sh
// (which commits nothing: review and `git add` the result).
//
//   fuzz_seed_gen OUT_DIR [JPEG...] [GZIP|PNG|ZIP...]
//
// Writes OUT_DIR/TARGET/NAME for every target of tests/fuzz/CMakeLists.txt.
// The JPEGs (small ones) seed the Lepton targets, the gzip, PNG and zip
// files (names ending .gz, .png, .zip) the deflate targets.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "codec/chunker.h"
#include "codec/codec.h"
#include "codec/czip.h"
#include "codec/czip_crypto.h"
#include "codec/lepton_file.h"
#include "codec/rust/densefs_codec_rs.h"
#include "store/crypto/volume_key.h"
#include "store/dump/dump_stream.h"
#include "store/hash.h"
#include "store/records.h"

namespace fs = std::filesystem;
using namespace densefs;

namespace {

fs::path out_dir;

void put(const std::string& target, const std::string& name, std::string_view bytes) {
  const fs::path dir = out_dir / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(bytes.data(), bytes.size());
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// splitmix64 bytes: the same on every run.
std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::string d(n, '\0');
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t z = (seed += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    d[i] = static_cast<char>(z ^ (z >> 31));
  }
  return d;
}

std::string text(std::size_t n) {
  const std::string line =
      "densefs stores chunks compressed; the quick brown fox jumps. 0123456789\n";
  std::string t;
  for (std::size_t i = 0; t.size() < n; ++i) t += std::to_string(i % 97) + " " + line;
  t.resize(n);
  return t;
}

std::string le24(std::size_t v) {
  return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16)};
}

void records() {
  store::inode_record file;
  file.ino = 42;
  file.mode = 0100644;
  file.uid = 1000;
  file.gid = 1000;
  file.nlink = 1;
  file.size = 123456;
  file.stored_bytes = 4096;
  file.mtime = {1700000000, 5};
  file.type = codec::file_type::jpeg;
  file.flags = store::k_inode_fell_back;
  put("record_inode", "file_v2", store::encode_inode(file));
  store::inode_record dir = file;
  dir.mode = 040755;
  dir.parent = 1;
  dir.type = codec::file_type::unknown;
  dir.flags = 0;
  put("record_inode", "dir_v2", store::encode_inode(dir));
  store::inode_record link = dir;
  link.mode = 0120777;
  link.symlink_target = "../some/where";
  put("record_inode", "symlink_v2", store::encode_inode(link));
  // Version 1: no type and flags bytes.
  std::string v1 = store::encode_inode(link);
  v1[0] = 1;
  v1.resize(v1.size() - 2);
  put("record_inode", "symlink_v1", v1);
  put("record_inode", "empty", "");
  const auto compact = store::record_encoding::compact;
  put("record_inode", "file_v3", store::encode_inode(file, compact));
  put("record_inode", "symlink_v3", store::encode_inode(link, compact));

  put("record_dirent", "file", store::encode_dirent({42, 0100000}));
  put("record_dirent", "dir", store::encode_dirent({7, 040000}));
  store::extent_record e;
  e.hash.bytes.fill(0x5a);
  e.chunk_offset = 4096;
  e.length = 65536;
  put("record_dirent", "file_v2", store::encode_dirent({42, 0100000}, compact));
  put("record_extent", "extent", store::encode_extent(e));
  put("record_extent", "extent_v2", store::encode_extent(e, compact));
  for (int c = 0; c < 4; ++c) {
    store::chunk_record r;
    r.codec = static_cast<codec::codec_id>(c);
    r.plain_size = 4u << 20;
    r.stored_size = 1234;
    r.refcount = 3;
    r.checksum = 0x0123456789abcdef;
    put("record_chunk", "codec" + std::to_string(c), store::encode_chunk(r));
    put("record_chunk", "codec" + std::to_string(c) + "_v2", store::encode_chunk(r, compact));
  }
  store::store_settings s;
  s.uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
  s.codec_spec = "default/jpeg=zstd/text=zstd:level=9";
  s.created = {1700000000, 999999999};
  put("record_settings", "settings", store::encode_settings(s));
  put("record_xattr", "empty", store::encode_xattr_value(""));
  put("record_xattr", "value", store::encode_xattr_value("user value\0bytes"));
  put("record_recompress", "ino", store::encode_recompress(4242));
  put("record_meta", "next_ino", std::string(1, '\0') + store::encode_next_ino(1000));
  put("record_meta", "orphan", std::string(1, '\1') + store::encode_orphan());
  put("record_meta", "key", std::string(1, '\2') + store::inode_key(0x0102030405060708));
}

void codecs(const std::vector<std::string>& jpegs, const std::vector<std::string>& gzips) {
  struct sample {
    std::string name, plain;
  };
  std::vector<sample> samples = {{"text", text(3000)},
                                 {"zeros", std::string(5000, '\0')},
                                 {"random", random_bytes(700, 1)},
                                 {"byte", "x"}};
  for (const char* c : {"raw", "zstd", "broccoli", "lepton", "deflate"}) {
    const codec::codec_id id = *codec::codec_from_name(c);
    const std::string dec = std::string("codec_decode_") + c;
    const std::string rt = std::string("codec_roundtrip_") + c;
    std::vector<sample> inputs = samples;
    if (id == codec::codec_id::lepton) {
      inputs.clear();
      for (std::size_t i = 0; i < jpegs.size(); ++i)
        inputs.push_back({"jpeg" + std::to_string(i), jpegs[i]});
    }
    if (id == codec::codec_id::deflate) {
      inputs.clear();
      for (std::size_t i = 0; i < gzips.size(); ++i)
        inputs.push_back({"container" + std::to_string(i), gzips[i]});
    }
    for (const auto& [name, plain] : inputs) {
      codec::codec_options o;
      o.preferred = id;
      o.min_savings = 0;
      o.broccoli_quality = 1;
      const codec::encoded_chunk e = codec::encode_chunk(plain, o);
      if (e.codec == id) {
        put(dec, name, le24(plain.size()) + le24(plain.size()) + e.bytes);
        // Edge cases: a wrong plain size, a bound below the size, truncated.
        put(dec, name + "_short_size", le24(plain.size() / 2) + le24(plain.size() + 1) + e.bytes);
        put(dec, name + "_truncated",
            le24(plain.size()) + le24(plain.size()) + e.bytes.substr(0, e.bytes.size() / 2));
      }
      // Option bytes: zstd level 3, brotli quality 1, window 22, guard on.
      put(rt, name, std::string{6, 1, 12} + plain);
    }
    put(dec, "empty", le24(0) + le24(0));
  }

  // Lepton file payloads of the small JPEGs in 4 KiB chunks (many chunk
  // names), and a member of each.
  constexpr std::uint32_t k_chunk = 4096;
  for (std::size_t i = 0; i < jpegs.size(); ++i) {
    std::vector<std::string> names;
    for (std::size_t at = 0; at < jpegs[i].size(); at += k_chunk)
      names.emplace_back(store::sha256_of(std::string_view(jpegs[i]).substr(at, k_chunk)).view());
    const codec::lepton_file_encoding e = codec::encode_lepton_file(jpegs[i], k_chunk, names, 0);
    if (!e.payload) continue;
    put("lepton_file", "file" + std::to_string(i), *e.payload);
    if (names.size() > 1) {
      put("lepton_file", "member" + std::to_string(i),
          codec::encode_lepton_member({names[0], 1, k_chunk}));
    }
  }

  // rust_deflate_decode: output bound, u16 skeleton length, the skeleton
  // and the plain text, as densefs_rs_deflate_split makes them (its
  // segment table, between the two, left out).
  for (std::size_t i = 0; i < gzips.size(); ++i) {
    densefs_rs_result r = densefs_rs_deflate_split(
        reinterpret_cast<const std::uint8_t*>(gzips[i].data()), gzips[i].size());
    if (r.status == DENSEFS_RS_OK) {
      const std::string_view b(reinterpret_cast<const char*>(r.data), r.len);
      std::uint64_t n = 0;
      for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<std::uint8_t>(b[k]);
      std::uint64_t t = 0;
      for (int k = 7; n + 16 <= b.size() && k >= 0; --k)
        t = (t << 8) | static_cast<std::uint8_t>(b[8 + n + k]);
      if (n < 65536 && n + 16 + t <= b.size()) {
        const std::string len16{static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
        put("rust_deflate_decode", "container" + std::to_string(i),
            le24(gzips[i].size()) + len16 + std::string(b.substr(8, n)) +
                std::string(b.substr(16 + n + t)));
      }
    }
    densefs_rs_free(&r);
  }
}

void specs() {
  const std::string data = text(600) + random_bytes(1400, 2);
  const char* chunkers[] = {"fixed",
                            "fixed:size=64K",
                            "fixed:size=100",
                            "cdc",
                            "cdc:min=16K:avg=64K:max=256K",
                            "cdc:min=64:avg=128:max=512"};
  int i = 0;
  for (const char* c : chunkers)
    put("chunker_spec", "spec" + std::to_string(i++), std::string(c) + '\0' + data);
  const char* policies[] = {
      "default",
      "zstd:level=3",
      "raw",
      "default/jpeg=zstd/text=zstd:level=9",
      "database=zstd+cdc:avg=16K",
      "+fixed",
      "text=broccoli:quality=9:window=20/+fixed:size=1M",
      "zstd:level=-5:min_savings=0.1/archive=raw+cdc:min=8K:avg=32K:max=128K"};
  i = 0;
  for (const char* p : policies) put("policy_spec", "spec" + std::to_string(i++), p);
}

class memory_sink : public codec::czip::byte_sink {
 public:
  explicit memory_sink(bool seekable) : seekable_(seekable) {}
  void write(std::string_view bytes) override { data.append(bytes); }
  bool seekable() const override { return seekable_; }
  void write_at(std::uint64_t offset, std::string_view bytes) override {
    data.replace(offset, bytes.size(), bytes);
  }
  std::string data;

 private:
  bool seekable_;
};

void czips() {
  namespace cz = codec::czip;
  const std::string body = text(2500) + random_bytes(300, 3) + text(2500);
  struct variant {
    std::string name;
    bool seekable, encrypted;
    const char* chunker;
    codec::codec_id codec;
  };
  const variant variants[] = {
      {"header_zstd_cdc", true, false, "cdc:min=64:avg=512:max=2K", codec::codec_id::zstd},
      {"footer_zstd_cdc", false, false, "cdc:min=64:avg=512:max=2K", codec::codec_id::zstd},
      {"header_broccoli_fixed", true, false, "fixed:size=1K", codec::codec_id::broccoli},
      {"header_raw_fixed", true, false, "fixed:size=2K", codec::codec_id::raw},
      {"header_encrypted", true, true, "fixed:size=2K", codec::codec_id::zstd},
      {"footer_encrypted", false, true, "cdc:min=64:avg=512:max=2K", codec::codec_id::zstd},
  };
  for (const variant& v : variants) {
    for (const bool empty : {false, true}) {
      memory_sink sink(v.seekable);
      cz::writer_options o;
      o.chunker = codec::parse_chunker_spec(v.chunker);
      o.codec.preferred = v.codec;
      o.codec.broccoli_quality = 1;
      if (v.encrypted) {
        o.passphrase = "fuzz";
        o.scrypt = {10, 8, 1};  // the cheapest cost a reader accepts
        o.salt = codec::czip::kdf_salt{1, 2, 3};
      }
      cz::writer w(sink, o);
      if (!empty) w.write(body);
      w.finish();
      // Mode byte: bit 0 repairs checksums after mutation, bit 1 passes the passphrase.
      const std::string name = v.name + (empty ? "_empty" : "");
      put("czip_read", name, std::string(1, v.encrypted ? 3 : 1) + sink.data);
      if (v.encrypted) put("czip_read", name + "_nopass", std::string(1, 1) + sink.data);
    }
  }
  // Chunks cut by the caller ("source").
  memory_sink sink(true);
  cz::writer w(sink, {});
  w.write_chunk(text(100));
  w.write_chunk(random_bytes(50, 4));
  w.write_chunk(text(100));
  w.finish();
  put("czip_read", "header_source", std::string(1, 1) + sink.data);
  put("czip_read", "short",
      std::string(1, 1) +
          "\x89"
          "CZIP\r\n\x1a");
}

// Metadata dumps (store/dump/dump_stream.h): an empty one, one record in
// each table, and one whose table of inodes spans two frames.
void dumps() {
  using store::table;
  const auto make = [](int records, std::size_t value_bytes) {
    std::ostringstream out;
    store::dump_header h;
    h.store_format_version = store::k_compact_format_version;
    h.dumped_at = 1764460800;
    store::dump_writer w(out, "seed", h);
    for (std::size_t t = 0; t < store::k_table_count && records > 0; ++t)
      for (int i = 0; i < records; ++i)
        w.add(static_cast<table>(t), "key" + std::to_string(1000 + i),
              random_bytes(value_bytes, static_cast<std::uint64_t>(t * 1000 + i)));
    w.finish();
    return out.str();
  };
  put("dump_read", "empty", make(0, 0));
  put("dump_read", "one_per_table", make(1, 20));
  put("dump_read", "three_per_table", make(3, 9));
  std::ostringstream out;
  store::dump_writer w(out, "seed", {.store_format_version = 6, .from_postgres = true});
  for (int i = 0; i < 3; ++i)
    w.add(table::inodes, "i" + std::to_string(i), random_bytes(600'000, i));
  w.finish();
  put("dump_read", "two_frames", out.str());
}

// An encrypted volume's key record (cheapest cost) and key files; the first
// byte picks the parser (volume_key_fuzz.cpp).
void volume_keys() {
  const store::master_key key{};
  put("volume_key", "record",
      std::string(1, '\0') +
          store::encode_wrapped_key(store::wrap_master_key(key, "seed secret", {10, 8, 1})));
  put("volume_key", "key_file_line", "\x01a passphrase of a line\n");
  put("volume_key", "key_file_random", "\x01" + random_bytes(32, 7));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fuzz_seed_gen OUT_DIR [JPEG...] [GZIP|PNG|ZIP...]\n";
    return 2;
  }
  out_dir = argv[1];
  std::vector<std::string> jpegs, gzips;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool deflate = a.ends_with(".gz") || a.ends_with(".png") || a.ends_with(".zip");
    (deflate ? gzips : jpegs).push_back(read_file(argv[i]));
  }
  records();
  codecs(jpegs, gzips);
  specs();
  czips();
  dumps();
  volume_keys();
  return 0;
}
