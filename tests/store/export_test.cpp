// store::export_file and resolve_path on a store built with transactions:
// identity and br give the file's bytes for every kind of extent; br reuses
// stored Broccoli chunks as they are; the memory bound holds.
#include "store/export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>

#include "codec/policy.h"
#include "store/store.h"
#include "tests/random_bytes.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

std::string text(std::size_t n, unsigned seed) {
  static const char* const words[] = {"alpha ", "beta ", "gamma ", "delta ", "chunk ", "extent "};
  return test::word_text(n, seed, words);
}

class export_test : public ::testing::Test {
 protected:
  void SetUp() override {
    store::create(tmp_ / "store", codec::parse_policy("zstd:level=3"));
    s_ = store::open(tmp_ / "store");
  }

  // Adds extent [offset, offset + plain.size()) of `ino` backed by a chunk
  // holding `chunk` encoded with `codec`, of which the extent uses
  // [chunk_offset, chunk_offset + length).
  void add_extent(transaction& t, std::uint64_t ino, std::uint64_t offset, const std::string& chunk,
                  const char* codec, std::uint32_t chunk_offset, std::uint32_t length) {
    codec::codec_options options = codec::parse_codec_spec(codec);
    options.min_savings = 0;
    const prepared_chunk c = s_->prepare_chunk(chunk, options, true);
    t.ref_chunk(c);
    t.put_extent(ino, offset, {c.hash, chunk_offset, length});
  }

  void add_file(transaction& t, std::uint64_t ino, const char* name, std::uint64_t size) {
    inode_record r;
    r.ino = ino;
    r.mode = S_IFREG | 0644;
    r.nlink = 1;
    r.size = size;
    t.put_inode(r);
    t.put_dirent(k_root_ino, name, {ino, S_IFREG});
  }

  std::string run(std::uint64_t ino, export_encoding e, export_summary* summary = nullptr,
                  const export_options& options = {}) {
    std::string out;
    const auto sum = export_file(
        *s_, ino, e, [&](std::string_view b) { out.append(b); }, options);
    if (summary) *summary = sum;
    EXPECT_EQ(sum.bytes_out, out.size());
    return out;
  }

  std::string decode_br(const std::string& stream, std::size_t max) {
    return codec::decode_any_size(codec::codec_id::broccoli, stream, max);
  }

  test::temp_dir tmp_;
  std::unique_ptr<store> s_;
};

TEST_F(export_test, every_kind_of_extent_round_trips) {
  const std::uint64_t chunk = k_chunk_size;
  const std::string a = text(chunk, 1);   // whole broccoli chunk
  const std::string b = text(chunk, 2);   // whole zstd chunk
  const std::string c = text(chunk, 3);   // broccoli chunk used in part
  const std::string d = text(100000, 4);  // raw chunk, short
  transaction t;
  const std::uint64_t size = 7 * chunk + 5;  // slot 4 is a hole, tail zeros
  add_file(t, 10, "mixed", size);
  add_extent(t, 10, 0, a, "broccoli", 0, static_cast<std::uint32_t>(chunk));
  add_extent(t, 10, chunk, b, "zstd", 0, static_cast<std::uint32_t>(chunk));
  add_extent(t, 10, 2 * chunk, c, "broccoli", 1000, 500000);
  add_extent(t, 10, 3 * chunk, d, "raw", 0, 100000);
  add_extent(t, 10, 5 * chunk, a, "broccoli", 0, static_cast<std::uint32_t>(chunk));
  s_->commit(t);

  std::string expected(size, '\0');
  expected.replace(0, chunk, a);
  expected.replace(chunk, chunk, b);
  expected.replace(2 * chunk, 500000, c.substr(1000, 500000));
  expected.replace(3 * chunk, 100000, d);
  expected.replace(5 * chunk, chunk, a);

  EXPECT_TRUE(run(10, export_encoding::identity) == expected);
  export_summary sum;
  const std::string br = run(10, export_encoding::br, &sum);
  EXPECT_TRUE(decode_br(br, size) == expected);
  EXPECT_EQ(sum.size, size);
  EXPECT_EQ(sum.reused_pieces, 2u);  // the two whole broccoli extents
  EXPECT_GE(sum.encoded_pieces, 3u);
  EXPECT_EQ(sum.pieces, sum.reused_pieces + sum.encoded_pieces);
}

TEST_F(export_test, empty_and_all_hole_files) {
  transaction t;
  add_file(t, 11, "empty", 0);
  add_file(t, 12, "holes", 3 * k_chunk_size + 17);
  s_->commit(t);
  EXPECT_EQ(run(11, export_encoding::identity), "");
  EXPECT_EQ(decode_br(run(11, export_encoding::br), 10), "");
  const std::string zeros(3 * k_chunk_size + 17, '\0');
  EXPECT_TRUE(run(12, export_encoding::identity) == zeros);
  const std::string br = run(12, export_encoding::br);
  EXPECT_LT(br.size(), 4096u);
  EXPECT_TRUE(decode_br(br, zeros.size()) == zeros);
}

TEST_F(export_test, memory_bound_refuses_big_br_exports) {
  transaction t;
  add_file(t, 13, "big", 2 * k_chunk_size);
  add_extent(t, 13, 0, text(k_chunk_size, 5), "broccoli", 0,
             static_cast<std::uint32_t>(k_chunk_size));
  add_extent(t, 13, k_chunk_size, text(k_chunk_size, 6), "broccoli", 0,
             static_cast<std::uint32_t>(k_chunk_size));
  s_->commit(t);
  export_options options;
  options.max_br_bytes = 1000;
  try {
    run(13, export_encoding::br, nullptr, options);
    FAIL() << "no error";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EFBIG);
  }
  // identity streams and has no such bound.
  EXPECT_EQ(run(13, export_encoding::identity, nullptr, options).size(), 2 * k_chunk_size);
}

TEST_F(export_test, resolve_path_walks_dirents) {
  transaction t;
  inode_record dir;
  dir.ino = 20;
  dir.mode = S_IFDIR | 0755;
  dir.nlink = 2;
  dir.parent = k_root_ino;
  t.put_inode(dir);
  t.put_dirent(k_root_ino, "dir", {20, S_IFDIR});
  add_file(t, 21, "top", 1);
  t.put_dirent(20, "inner", {21, S_IFREG});
  s_->commit(t);
  EXPECT_EQ(resolve_path(*s_, "/"), k_root_ino);
  EXPECT_EQ(resolve_path(*s_, "/top"), 21u);
  EXPECT_EQ(resolve_path(*s_, "/dir/inner"), 21u);
  EXPECT_EQ(resolve_path(*s_, "//dir/./inner"), 21u);
  EXPECT_EQ(resolve_path(*s_, "/dir/../top"), 21u);
  for (const auto& [path, error] : std::vector<std::pair<std::string, int>>{
           {"/missing", ENOENT}, {"/top/x", ENOTDIR}, {"relative", EINVAL}}) {
    try {
      resolve_path(*s_, path);
      ADD_FAILURE() << path << " resolved";
    } catch (const store_error& e) {
      EXPECT_EQ(e.error_number(), error) << path;
    }
  }
  try {
    export_file(*s_, 20, export_encoding::identity, [](std::string_view) {});
    ADD_FAILURE() << "exported a directory";
  } catch (const store_error& e) {
    EXPECT_EQ(e.error_number(), EISDIR);
  }
}

}  // namespace
}  // namespace densefs::store
