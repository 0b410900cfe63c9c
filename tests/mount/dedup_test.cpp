// Dedup through a mount: content-defined chunks are found again within a
// file, across files and across versions at shifted offsets; the 4 MiB grid
// (a policy choice) finds only aligned copies; copies made with cp share
// every chunk. Counts come from `densefs stats` (unique plain bytes) and
// `densefs info` (shared chunks). `densefs analyze` cuts a tree as the mount
// does, so it predicts what the mount stores.
#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <string>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

class dedup : public mount_test {
 protected:
  std::string mount_options() const override { return options_; }

  // Plain bytes of unique chunks the store gained while `write` ran.
  std::uint64_t new_unique_bytes(const std::function<void()>& write) {
    const auto before = stats_u64("unique_plain_bytes");
    write();
    return stats_u64("unique_plain_bytes") - before;
  }

  std::string options_;
};

// `base` with `inserted` put at `at` and `count` bytes changed every
// `stride` bytes after it: a new version of a document or image.
std::string edited(std::string base, std::uint64_t at, std::string_view inserted,
                   std::uint64_t stride, std::uint64_t seed) {
  base.insert(at, inserted);
  const std::string noise = random_bytes(base.size() / stride + 1, seed);
  for (std::uint64_t i = at + stride, k = 0; i < base.size(); i += stride, ++k) base[i] = noise[k];
  return base;
}

TEST_F(dedup, repeats_within_a_file_are_stored_once) {
  const std::string block = random_bytes(k_mib, 1);
  std::string content;
  for (int i = 0; i < 12; ++i) content += block;
  const auto added = new_unique_bytes([&] { write_file(path("repeats"), content); });
  // Every 4 MiB slot edge is a forced cut, and each repeat starts inside a
  // chunk, so the chunks around those are extra: at most a few 128 KiB
  // chunks per slot.
  EXPECT_LT(added, block.size() + 3 * 6 * 128 * k_kib) << "of " << content.size();
  const auto i = info(path("repeats"));
  EXPECT_GT(i["shared_bytes"].get<std::uint64_t>(), content.size() * 3 / 4) << i.dump();
  EXPECT_TRUE(same_bytes(content, read_file(path("repeats"))));
}

TEST_F(dedup, a_shifted_copy_and_a_new_version_share_most_chunks) {
  const std::string v1 = random_bytes(16 * k_mib, 2);
  write_file(path("v1"), v1);

  // The same bytes 5000 bytes further into another file.
  const std::string shifted = random_bytes(5000, 3) + v1;
  const auto shifted_new = new_unique_bytes([&] { write_file(path("shifted"), shifted); });
  EXPECT_LT(shifted_new, shifted.size() / 20) << "new bytes for a shifted copy";

  // A new version: 1 KiB inserted near the start, a byte changed every
  // 2 MiB (8 small edits).
  const std::string v2 = edited(v1, 1000, random_bytes(1024, 4), 2 * k_mib, 5);
  const auto v2_new = new_unique_bytes([&] { write_file(path("v2"), v2); });
  EXPECT_LT(v2_new, v2.size() * 7 / 100) << "new bytes for version 2";
  EXPECT_GT(info(path("v2"))["shared_bytes"].get<std::uint64_t>(), v2.size() * 8 / 10);

  remount();
  EXPECT_TRUE(same_bytes(v1, read_file(path("v1"))));
  EXPECT_TRUE(same_bytes(shifted, read_file(path("shifted"))));
  EXPECT_TRUE(same_bytes(v2, read_file(path("v2"))));
}

// A mixed tree: text (Broccoli) over two slots and an edited version of it,
// random bytes and a copy shifted by 5000 bytes, zeros, small files. Only
// content-defined chunks find the edited and shifted copies, so analyze
// predicts the store only if it cuts as the mount does (issue 33).
TEST_F(dedup, analyze_predicts_what_a_mount_of_the_same_tree_stores) {
  options_ = "ingest=strong";  // the policy's codec at write time, as analyze encodes
  remount();
  const std::string text = compressible_bytes(6 * k_mib, 10);
  const std::string binary = random_bytes(5 * k_mib, 11);
  std::map<std::string, std::string> tree = {
      {"docs/a.txt", text},
      {"docs/b.txt", edited(text, 3000, "a new paragraph\n", k_mib, 12)},
      {"data/blob.bin", binary},
      {"data/blob-shifted.bin", random_bytes(5000, 13) + binary},
      {"data/sparse.bin",
       random_bytes(k_mib, 14) + std::string(5 * k_mib, '\0') + random_bytes(1000, 15)},
  };
  for (int i = 0; i < 20; ++i)
    tree["small/" + std::to_string(i) + ".txt"] = compressible_bytes(1000 + 700 * i, 20 + i);
  const stdfs::path source = scratch_ / "tree";
  for (const auto& [name, content] : tree) {
    for (const stdfs::path& root : {source, mnt_}) {
      stdfs::create_directories((root / name).parent_path());
      write_file(root / name, content);
    }
  }
  sync_mount();

  const auto analyzed =
      run_command({densefs_binary(), "analyze", "--full", "--json", source.string()});
  ASSERT_EQ(analyzed.exit_code, 0) << analyzed.err;
  const nlohmann::json totals = nlohmann::json::parse(analyzed.out).at("totals");
  const auto predicted = [&](const char* k) { return totals.at(k).get<double>(); };
  const auto stored = static_cast<double>(stats_u64("stored_bytes"));
  const auto unique = static_cast<double>(stats_u64("unique_plain_bytes"));
  EXPECT_NEAR(predicted("unique_bytes"), unique, unique * 0.02) << analyzed.out;
  EXPECT_NEAR(predicted("stored_bytes"), stored, stored * 0.02) << analyzed.out;
}

TEST_F(dedup, the_fixed_grid_policy_finds_only_aligned_copies) {
  options_ = "codec=+fixed";
  remount();
  const std::string v1 = random_bytes(8 * k_mib, 6);
  write_file(path("v1"), v1);
  EXPECT_EQ(info(path("v1"))["policy_chunker"], "fixed");
  EXPECT_EQ(info(path("v1"))["chunk_count"].get<std::uint64_t>(), 2u);
  const auto copy_new = new_unique_bytes([&] { write_file(path("copy"), v1); });
  EXPECT_EQ(copy_new, 0u) << "an aligned copy";
  const std::string shifted = "x" + v1;
  const auto shifted_new = new_unique_bytes([&] { write_file(path("shifted"), shifted); });
  EXPECT_EQ(shifted_new, shifted.size()) << "one byte of shift and nothing matches";
  EXPECT_TRUE(same_bytes(shifted, read_file(path("shifted"))));
}

TEST_F(dedup, a_mount_option_sets_the_chunk_sizes) {
  options_ = "codec=+cdc:min=2K:avg=8K:max=16K";
  remount();
  const std::string data = random_bytes(2 * k_mib, 7);
  write_file(path("small-chunks"), data);
  const auto i = info(path("small-chunks"));
  EXPECT_EQ(i["policy_chunker"], "cdc:min=2K:avg=8K:max=16K");
  ASSERT_FALSE(i.value("chunks_truncated", false));
  std::uint64_t covered = 0;
  for (const auto& c : i["chunks"]) {
    EXPECT_LE(c["length"].get<std::uint64_t>(), 16 * k_kib) << c.dump();
    covered += c["length"].get<std::uint64_t>();
  }
  EXPECT_EQ(covered, data.size());
  EXPECT_GT(i["chunks"].size(), data.size() / (16 * k_kib));
  EXPECT_TRUE(same_bytes(data, read_file(path("small-chunks"))));
}

TEST_F(dedup, cp_shares_every_chunk) {
  const std::string content = random_bytes(6 * k_mib + 12345, 8);
  write_file(path("a"), content);
  const auto chunks = stats_u64("chunks");
  const auto stored = stats_u64("stored_bytes");
  // coreutils cp tries a clone (FICLONE: FUSE has none), then
  // copy_file_range, which densefs answers by sharing chunks.
  const auto r = run_command({"cp", "--reflink=auto", path("a").string(), path("b").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(stats_u64("chunks"), chunks);
  EXPECT_EQ(stats_u64("stored_bytes"), stored);
  EXPECT_TRUE(same_bytes(content, read_file(path("b"))));
  const auto b = info(path("b"));
  EXPECT_EQ(b["shared_bytes"].get<std::uint64_t>(), content.size()) << b.dump();
}

TEST_F(dedup, zero_runs_are_holes_and_a_sparse_cp_still_dedups) {
  // 3 MiB of zeros between data: zero chunks are not stored.
  const std::string content =
      random_bytes(2 * k_mib, 9) + std::string(3 * k_mib, '\0') + random_bytes(k_mib, 10);
  write_file(path("a"), content);
  EXPECT_LT(stats_u64("unique_plain_bytes"), 3 * k_mib + 512 * k_kib);
  const auto stored = stats_u64("stored_bytes");
  // cp finds the hole (SEEK_DATA/SEEK_HOLE) and copies the data around it;
  // the part after the hole is not slot-aligned, so it is written anew,
  // and its content-defined chunks are found again, but for one or two.
  const auto r = run_command({"cp", "--reflink=auto", path("a").string(), path("b").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(same_bytes(content, read_file(path("b"))));
  EXPECT_LT(stats_u64("stored_bytes"), stored + 256 * k_kib);
}

TEST_F(dedup, a_file_of_many_chunks_is_released_in_batches) {
  // More extents than one release batch (16384): 40 MiB in ~2 KiB chunks.
  options_ = "codec=+cdc:min=1K:avg=2K:max=8K";
  remount();
  const auto chunks_empty = stats_u64("chunks");
  const std::string content = random_bytes(40 * k_mib, 11);
  write_file(path("many"), content);
  const auto count = info(path("many"))["chunk_count"].get<std::uint64_t>();
  ASSERT_GT(count, 16384u);
  // Unlinked while open: released at the last close, on a worker.
  const int fd = ::open(path("many").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::unlink(path("many").c_str()), 0);
  EXPECT_TRUE(same_bytes(content.substr(0, k_mib), pread_exact(fd, k_mib, 0)));
  ::close(fd);
  EXPECT_TRUE(
      eventually([&] { return stats_u64("chunks") == chunks_empty; }, std::chrono::seconds(60)))
      << "chunks left: " << stats_u64("chunks") - chunks_empty << " of " << count;
  unmount();
  const auto r = run_command({densefs_binary(), "fsck", store_.string(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  mount();
}

TEST_F(dedup, a_truncate_of_many_chunks_drops_them_in_batches) {
  options_ = "codec=+cdc:min=1K:avg=2K:max=8K";
  remount();
  const auto chunks_empty = stats_u64("chunks");
  const std::string content = random_bytes(40 * k_mib, 12);
  write_file(path("many"), content);
  ASSERT_GT(info(path("many"))["chunk_count"].get<std::uint64_t>(), 16384u);

  const std::uint64_t cut = 5 * k_mib + 3;
  ASSERT_EQ(::truncate(path("many").c_str(), static_cast<off_t>(cut)), 0) << strerror(errno);
  EXPECT_TRUE(same_bytes(content.substr(0, cut), read_file(path("many"))));
  const auto left = info(path("many"));
  EXPECT_EQ(stats_u64("chunks"), chunks_empty + left["chunk_count"].get<std::uint64_t>());
  EXPECT_LT(left["chunk_count"].get<std::uint64_t>(), 16384u);

  write_file(path("many"), content);  // O_TRUNC, then 40 MiB again
  const int fd = ::open(path("many").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << strerror(errno);
  ::close(fd);
  EXPECT_EQ(read_file(path("many")), "");
  EXPECT_EQ(stats_u64("chunks"), chunks_empty);
  remount();
  EXPECT_EQ(read_file(path("many")), "");
  unmount();
  const auto r = run_command({densefs_binary(), "fsck", store_.string(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  mount();
}

}  // namespace
}  // namespace densefs::test
