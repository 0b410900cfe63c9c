// `densefs czip pack --store STORE PATH OUT`, in-process, on a store built
// with transactions: the czip unpacks to the exact file, its chunks are the
// file's extents, and whole stored chunks whose codec matches are copied
// byte for byte instead of being compressed again.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "codec/czip.h"
#include "codec/policy.h"
#include "store/store.h"
#include "tests/random_bytes.h"
#include "tests/tools/tools_test_util.h"

namespace densefs::tools {
namespace {

using namespace tools::testing;  // tests/tools/tools_test_util.h
namespace stdfs = std::filesystem;
namespace czip = codec::czip;

std::string text(std::size_t n, unsigned seed) {
  static const char* const words[] = {"alpha ", "beta ", "gamma ", "delta ", "chunk ", "extent "};
  return test::word_text(n, seed, words);
}

class memory_source : public czip::byte_source {
 public:
  explicit memory_source(const std::string& bytes) : bytes_(bytes) {}
  std::uint64_t size() const override { return bytes_.size(); }
  void read_at(std::uint64_t offset, char* out, std::size_t n) const override {
    bytes_.copy(out, n, static_cast<std::size_t>(offset));
  }

 private:
  const std::string& bytes_;
};

class czip_densefs : public ::testing::Test {
 protected:
  void SetUp() override {
    store_dir_ = tmp_.path() / "store";
    store::store::create(store_dir_, codec::parse_policy("zstd:level=3"));
    auto s = store::store::open(store_dir_);
    const std::uint64_t chunk = store::k_chunk_size;
    a_ = text(chunk, 1);
    b_ = text(chunk, 2);
    c_ = text(chunk, 3);
    d_ = text(100000, 4);
    e_ = text(200000, 5);
    size_ = 7 * chunk + 5;  // slot 4 is a hole, zeros at the end
    store::transaction t;
    store::inode_record r;
    r.ino = 10;
    r.mode = S_IFREG | 0644;
    r.nlink = 1;
    r.size = size_;
    t.put_inode(r);
    t.put_dirent(store::k_root_ino, "mixed", {10, S_IFREG});
    add_extent(*s, t, 0, a_, "zstd", 0, chunk);                   // whole zstd: reused
    add_extent(*s, t, chunk, b_, "broccoli", 0, chunk);           // whole broccoli
    add_extent(*s, t, 2 * chunk, c_, "zstd", 1000, 500000);       // zstd, part of a chunk
    add_extent(*s, t, 3 * chunk, d_, "raw", 0, 100000);           // whole raw
    add_extent(*s, t, 5 * chunk, a_, "zstd", 0, chunk);           // a again: one payload
    add_extent(*s, t, 6 * chunk, e_, "zstd:level=9", 0, 200000);  // whole zstd, short
    s->commit(t);

    expected_.assign(size_, '\0');
    expected_.replace(0, chunk, a_);
    expected_.replace(chunk, chunk, b_);
    expected_.replace(2 * chunk, 500000, c_.substr(1000, 500000));
    expected_.replace(3 * chunk, 100000, d_);
    expected_.replace(5 * chunk, chunk, a_);
    expected_.replace(6 * chunk, 200000, e_);
  }

  void add_extent(store::store& s, store::transaction& t, std::uint64_t offset,
                  const std::string& chunk, const char* codec, std::uint32_t chunk_offset,
                  std::uint64_t length) {
    codec::codec_options options = codec::parse_codec_spec(codec);
    options.min_savings = 0;
    const store::prepared_chunk c = s.prepare_chunk(chunk, options, true);
    t.ref_chunk(c);
    t.put_extent(10, offset, {c.hash, chunk_offset, static_cast<std::uint32_t>(length)});
  }

  // Packs /mixed with `extra` options; returns the --json summary.
  nlohmann::json pack(const std::vector<std::string>& extra, const stdfs::path& out) {
    std::vector<std::string> args = {"czip", "pack", "--json", "--store", store_dir_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("/mixed");
    args.push_back(out.string());
    const auto r = run_cli(args);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
  }

  // Every payload of `file` whose codec is not raw must be the stored bytes
  // of the store's chunk named by its plain hash, byte for byte. Returns
  // how many were compared.
  std::size_t count_identical_payloads(const std::string& file) {
    const memory_source src(file);
    const czip::reader r(src, {});
    const auto s = store::store::open(store_dir_, {.read_only = true});
    std::size_t same = 0;
    for (const auto& e : r.chunks()) {
      store::chunk_hash h;
      std::copy(e.plain_hash.begin(), e.plain_hash.end(), h.bytes.begin());
      const auto rec = s->get_chunk(h);
      if (!rec || rec->codec != e.codec) continue;
      const auto stored = s->read_stored_chunk(h);
      if (file.compare(e.czip_offset, e.stored_size, stored.bytes) == 0) ++same;
    }
    return same;
  }

  std::string unpack(const stdfs::path& in) {
    const auto r = run_cli({"czip", "unpack", in.string(), "-"});
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  }

  test::temp_dir tmp_;
  stdfs::path store_dir_;
  std::string a_, b_, c_, d_, e_, expected_;
  std::uint64_t size_ = 0;
};

TEST_F(czip_densefs, zstd_reuses_the_whole_zstd_chunks) {
  const stdfs::path out = tmp_.path() / "mixed.czip";
  const auto j = pack({}, out);
  EXPECT_EQ(j["original_size"], size_);
  // a, a again, e: whole zstd chunks. b (broccoli) and d (raw) are decoded
  // and encoded with zstd, as are c's part and the holes: after c's part,
  // after d (two chunks: 4 MiB, then the rest) and the tail.
  EXPECT_EQ(j["reused_chunks"], 3);
  EXPECT_EQ(j["encoded_chunks"], 7);
  EXPECT_EQ(j["chunks"], 10);
  EXPECT_EQ(j["unique_chunks"], 9);  // a twice
  EXPECT_TRUE(unpack(out) == expected_);
  const std::string file = read_file(out);
  // a (one payload, two entries) and e, as stored.
  EXPECT_EQ(count_identical_payloads(file), 3u);

  const auto info = run_cli({"czip", "info", "--json", out.string()});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_EQ(nlohmann::json::parse(info.out)["chunker"], "source");
  EXPECT_EQ(run_cli({"czip", "verify", out.string()}).status, 0);
}

TEST_F(czip_densefs, keep_reuses_every_whole_chunk) {
  const stdfs::path out = tmp_.path() / "keep.czip";
  const auto j = pack({"--codec", "keep"}, out);
  EXPECT_EQ(j["reused_chunks"], 5);   // a, b (broccoli), d (raw), a, e
  EXPECT_EQ(j["encoded_chunks"], 5);  // c's part and the four hole chunks
  EXPECT_TRUE(unpack(out) == expected_);
  const std::string file = read_file(out);
  EXPECT_EQ(count_identical_payloads(file), 5u);  // a, b, d, a, e
  const memory_source src(file);
  const czip::reader r(src, {});
  EXPECT_EQ(r.chunks()[1].codec, codec::codec_id::broccoli);
  EXPECT_EQ(r.chunks()[4].codec, codec::codec_id::raw);
  EXPECT_TRUE(r.verify().ok());
}

TEST_F(czip_densefs, encrypted_reuse_round_trips) {
  const stdfs::path pass = tmp_.path() / "pass";
  std::ofstream(pass) << "secret\n";
  const stdfs::path out = tmp_.path() / "enc.czip";
  const auto j = pack({"--passphrase-file", pass.string()}, out);
  EXPECT_EQ(j["reused_chunks"], 3);
  const auto r = run_cli({"czip", "unpack", "--passphrase-file", pass.string(), out.string(), "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.out == expected_);
}

TEST_F(czip_densefs, errors_are_one_line) {
  const stdfs::path out = tmp_.path() / "x.czip";
  auto r = run_cli({"czip", "pack", "--store", store_dir_.string(), "/missing", out.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(is_one_error_line(r.err));
  EXPECT_FALSE(stdfs::exists(out));
  std::ofstream(tmp_.path() / "plain") << "not in densefs";
  r = run_cli({"czip", "pack", "--codec", "keep", (tmp_.path() / "plain").string(), out.string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(is_one_error_line(r.err));
  r = run_cli({"czip", "pack", "--store", store_dir_.string(), "--chunker", "fixed", "/mixed",
               out.string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(is_one_error_line(r.err));
}

}  // namespace
}  // namespace densefs::tools
