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

}  // namespace
}  // namespace densefs::store
