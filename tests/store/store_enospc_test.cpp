// A full disk under the store: the writer gets ENOSPC, what was stored stays
// readable, and the store works again once space is freed. Needs a small file
// system of its own, so it mounts a size-limited tmpfs (root only).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "store/payload/pack_format.h"
#include "store/store.h"
#include "tests/temp_dir.h"
#include "tests/test_env.h"

namespace densefs::store {
namespace {

namespace fs = std::filesystem;

std::string noise(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

class small_disk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      DENSEFS_SKIP_UNLESS_REQUIRED("needs root to mount a small tmpfs for the ENOSPC test");
    if (::mount("tmpfs", tmp_.path().c_str(), "tmpfs", 0, "size=64m,mode=0700") != 0)
      DENSEFS_SKIP_UNLESS_REQUIRED("cannot mount tmpfs: " << std::strerror(errno));
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(tmp_.path().c_str(), MNT_DETACH);
  }

  test::temp_dir tmp_;
  bool mounted_ = false;
};

TEST_F(small_disk, a_full_disk_gives_enospc_and_keeps_what_was_stored) {
  const fs::path dir = tmp_ / "store";
  store::create(dir, codec::parse_policy("zstd:level=3"));
  // Ballast to free later, so the test can show the store recovers.
  {
    std::ofstream ballast(tmp_ / "ballast", std::ios::binary);
    const std::string mb(1 << 20, 'b');
    for (int i = 0; i < 12; ++i) ballast << mb;
  }

  auto s = store::open(dir);
  std::vector<std::pair<chunk_hash, std::string>> stored;
  int enospc_at = -1;
  for (int i = 0; i < 64 && enospc_at < 0; ++i) {
    std::string data = noise(1 << 20, static_cast<std::uint64_t>(i));
    const prepared_chunk p = s->prepare_chunk(data);
    transaction t;
    t.put_dirent(k_root_ino, "f" + std::to_string(i), {100u + i, S_IFREG});
    t.ref_chunk(p);
    try {
      s->commit(t, true);
      stored.emplace_back(p.hash, std::move(data));
    } catch (const store_error& e) {
      ASSERT_EQ(e.error_number(), ENOSPC) << e.what();
      enospc_at = i;
      EXPECT_FALSE(s->get_dirent(k_root_ino, "f" + std::to_string(i)));
    }
  }
  ASSERT_GE(enospc_at, 1) << "the disk never filled up";

  // The refusal kept a reserve: a metadata-only commit (an unlink, say) still
  // works on the "full" disk.
  {
    transaction t;
    t.delete_dirent(k_root_ino, "f0");
    s->commit(t, true);
    t = transaction{};
    t.put_dirent(k_root_ino, "f0", {100u, S_IFREG});
    s->commit(t, true);
  }

  // Everything committed before is intact.
  for (std::size_t i = 0; i < stored.size(); ++i) {
    EXPECT_TRUE(s->get_dirent(k_root_ino, "f" + std::to_string(i)));
    EXPECT_TRUE(*s->read_chunk(stored[i].first) == stored[i].second) << i;
  }

  // Space comes back: new data fits again.
  fs::remove(tmp_ / "ballast");
  const std::string more = noise(1 << 20, 1000);
  transaction t;
  t.put_dirent(k_root_ino, "after", {999, S_IFREG});
  t.ref_chunk(s->prepare_chunk(more));
  s->commit(t, true);
  EXPECT_TRUE(s->get_dirent(k_root_ino, "after"));
  s.reset();

  auto again = store::open(dir);
  EXPECT_TRUE(again->get_dirent(k_root_ino, "after"));
  for (std::size_t i = 0; i < stored.size(); ++i)
    EXPECT_TRUE(*again->read_chunk(stored[i].first) == stored[i].second) << i;
}

// `densefs gc` on a nearly full disk: with no room to copy the live records
// its own target asks for (every pack over 5% dead), it still rewrites the
// packs a fifth dead or more, which is what the daemon's collection would
// do, rather than only deleting packs with nothing live.
TEST_F(small_disk, a_requested_gc_without_room_for_its_target_rewrites_the_packs_a_fifth_dead) {
  // The store keeps a 40 MiB reserve free: the data needs room above it.
  ASSERT_EQ(::mount("tmpfs", tmp_.path().c_str(), "tmpfs", MS_REMOUNT, "size=128m"), 0)
      << std::strerror(errno);
  const fs::path dir = tmp_ / "store";
  store::create(dir, codec::parse_policy("zstd:level=3"), payload_backend::pack);
  const auto add = [](store& s, int count, std::uint64_t seed) {
    std::vector<chunk_hash> out;
    for (int i = 0; i < count; ++i) {
      transaction t;
      const prepared_chunk p = s.prepare_chunk(noise(1 << 20, seed + i), true);
      t.ref_chunk(p);
      s.commit(t);
      out.push_back(p.hash);
    }
    return out;
  };
  const auto drop = [](store& s, std::vector<chunk_hash> hashes) {
    transaction t;
    for (const auto& h : hashes) t.unref_chunk(h);
    s.commit(t);
  };
  // Pack 1: 1 of 10 MiB dead; pack 2: 2 of 5 MiB dead. Requested, both go
  // (12 MiB to copy); the automatic rule takes pack 2 alone (3 MiB).
  auto s = store::open(dir);
  const auto first = add(*s, 10, 100);
  s.reset();  // closes pack 1
  s = store::open(dir);
  const auto second = add(*s, 5, 200);
  drop(*s, {first[0], second[0], second[1]});
  const fs::path pack1 = dir / "packs" / pack_file_name(1),
                 pack2 = dir / "packs" / pack_file_name(2);
  ASSERT_TRUE(fs::exists(pack1) && fs::exists(pack2));

  // Room for 3 MiB of copies and the quarter reserve (10 MiB), not for 12.
  const fs::space_info space = fs::space(tmp_.path());
  const std::uint64_t keep_free = 17u << 20;
  ASSERT_GT(space.available, keep_free) << "the tmpfs is too small for the test";
  {
    std::ofstream ballast(tmp_ / "ballast", std::ios::binary);
    const std::string block(1 << 16, 'b');
    for (std::uint64_t n = 0; n + block.size() <= space.available - keep_free; n += block.size())
      ballast << block;
  }

  const gc_result r = s->collect_garbage();
  EXPECT_TRUE(fs::exists(pack1)) << to_json(r);
  EXPECT_FALSE(fs::exists(pack2)) << to_json(r);
  for (std::size_t i = 1; i < first.size(); ++i)
    EXPECT_TRUE(*s->read_chunk(first[i]) == noise(1 << 20, 100 + i)) << i;
  for (std::size_t i = 2; i < second.size(); ++i)
    EXPECT_TRUE(*s->read_chunk(second[i]) == noise(1 << 20, 200 + i)) << i;
}

}  // namespace
}  // namespace densefs::store
