// The local home of pack files (store/payload/local_pack_home.h) on its
// own: numbering, durability and removal. The object home runs under
// pack_store in tests/store/pack_store_test.cpp (over the directory object
// store, no server).
#include "store/payload/pack_home.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "store/error.h"
#include "store/payload/local_pack_home.h"
#include "tests/store/error_of.h"
#include "tests/temp_dir.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;
using test::temp_dir;

using test::error_of;

TEST(local_pack_home, numbers_new_packs_after_the_last_file_and_never_reuses_one) {
  temp_dir tmp;
  fs::create_directory(tmp / "packs");
  std::ofstream(tmp / "packs" / pack_file_name(7)) << "left by an earlier run";
  local_pack_home home(tmp / "packs");
  const std::shared_ptr<pack_file> a = home.create();
  EXPECT_EQ(a->id, 8u);
  // A file that appeared meanwhile under the next number: refused (never
  // appended to), and that number is skipped.
  std::ofstream(tmp / "packs" / pack_file_name(9)) << "x";
  EXPECT_EQ(error_of([&] { home.create(); }), EEXIST);
  EXPECT_EQ(home.create()->id, 10u);
  // The open file is what local_file() hands out.
  EXPECT_EQ(home.local_file(8), a);
  EXPECT_EQ(home.local_file(42), nullptr);
}

TEST(local_pack_home, make_durable_clears_what_it_synced_and_remove_deletes_the_file) {
  temp_dir tmp;
  local_pack_home home(tmp / "packs");  // made by the first create
  packs_to_make_durable p;
  p.packs.push_back(home.create());
  p.created = true;
  home.make_durable(p);
  EXPECT_TRUE(p.packs.empty());
  EXPECT_FALSE(p.created);
  // A new pack holds its header alone.
  ASSERT_EQ(home.sizes().size(), 1u);
  EXPECT_EQ(home.sizes()[0], (std::pair<std::uint32_t, std::uint64_t>{1, k_pack_header_size}));
  std::string whole;
  home.read_whole(1, k_pack_header_size, [&](std::string_view bytes) { whole = bytes; });
  EXPECT_EQ(whole, pack_header(1));
  // What a failed sync could not make durable stays for the next one.
  packs_to_make_durable failing;
  failing.packs.push_back(std::make_shared<pack_file>(99, -1, tmp / "packs" / "closed"));
  failing.created = true;
  EXPECT_EQ(error_of([&] { home.make_durable(failing); }), EBADF);
  EXPECT_EQ(failing.packs.size(), 1u);
  EXPECT_TRUE(failing.created);
  // A pack too short to be one is reported, not read.
  fs::resize_file(tmp / "packs" / pack_file_name(1), 4);
  EXPECT_EQ(error_of([&] { home.read_whole(1, 4, [](std::string_view) {}); }), EIO);
  home.remove(1);
  EXPECT_TRUE(home.sizes().empty());
  EXPECT_EQ(home.local_file(1), nullptr);  // its descriptor closed with it
  EXPECT_FALSE(fs::exists(tmp / "packs" / pack_file_name(1)));
  // A record of a pack that is gone is EIO naming the chunk and the file.
  std::string message;
  const chunk_hash h = sha256_of("x");
  const pack_ref ref{1, k_pack_header_size, 100};
  EXPECT_EQ(error_of([&] { home.fetch(std::span(&h, 1), std::span(&ref, 1)); }, &message), EIO);
  EXPECT_NE(message.find(h.hex()), std::string::npos) << message;
  EXPECT_NE(message.find("the pack file is missing"), std::string::npos) << message;
}

}  // namespace
}  // namespace densefs::store
