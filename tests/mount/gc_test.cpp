// Garbage collection seen from a mount (docs/gc.md): after deleting every
// file, `densefs gc STORE` brings the store back to the size of an empty
// one; on a live mount the daemon collects when asked through the control
// socket, and by itself once deleting stops.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

using gc = mount_test;
using nlohmann::json;

// What `du -sb` counts for the files of a directory.
std::uint64_t dir_bytes(const stdfs::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (stdfs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}

// The store of an empty file system: mkfs'ed, never mounted.
std::uint64_t empty_store_bytes(const stdfs::path& work) {
  const stdfs::path dir = work / "empty-store";
  const auto r = run_command({densefs_binary(), "mkfs", dir.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir_bytes(dir);
}

// After collecting, a store differs from an empty one by its MANIFEST and
// OPTIONS files (and, before RocksDB's info logs left the store, the LOG of
// the collecting open): measured 31-36 KiB more than an empty store.
// Without gc the deleted tree leaves at least ~870 KiB (table files with
// tombstones; then also info logs of earlier opens) even
// in runs where RocksDB's own compactions happened to drop every blob file,
// and ~95 MiB in the others. 512 KiB is 14 times the measured difference
// and still fails without gc.
constexpr std::uint64_t k_empty_slack = 512 * k_kib;

json gc_json(const stdfs::path& store, bool dry_run) {
  std::vector<std::string> argv{densefs_binary(), "gc", store.string(), "--json"};
  if (dry_run) argv.push_back("--dry-run");
  const auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;  // no progress line when not on a terminal
  auto j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j.is_discarded() ? json::object() : j;
}

std::uint64_t u64(const json& j, const char* report, const char* field) {
  if (!j.contains(report) || !j[report].contains(field)) {
    ADD_FAILURE() << "no " << report << "." << field << " in " << j.dump();
    return 0;
  }
  return j[report][field].get<std::uint64_t>();
}

// ~145 MB of mixed data: one large incompressible file, compressible
// files, duplicates, thousands of small files (payloads inline in table
// files and in blob files), an overwrite and a truncate (references dropped
// while files live on).
std::uint64_t write_mixed_tree(const stdfs::path& root) {
  std::uint64_t bytes = 0;
  const auto put = [&](const stdfs::path& p, const std::string& data) {
    write_file(p, data);
    bytes += data.size();
  };
  put(root / "random.bin", random_bytes(64 * k_mib, 1));
  stdfs::create_directories(root / "text");
  for (int i = 0; i < 24; ++i)
    put(root / "text" / ("doc" + std::to_string(i) + ".txt"),
        compressible_bytes(2 * k_mib, 10 + i));
  put(root / "text" / "copy-of-doc0.txt", compressible_bytes(2 * k_mib, 10));  // dedup
  for (int d = 0; d < 20; ++d) {
    const stdfs::path dir = root / "small" / ("d" + std::to_string(d));
    stdfs::create_directories(dir);
    for (int i = 0; i < 100; ++i) {
      const std::size_t size = 512 + static_cast<std::size_t>((d * 100 + i) * 37 % 8192);
      put(dir / ("f" + std::to_string(i)), (i % 2 ? random_bytes : compressible_bytes)(
                                               size, static_cast<std::uint64_t>(d * 100 + i)));
    }
  }
  put(root / "overwritten.bin", random_bytes(8 * k_mib, 2));
  write_file(root / "overwritten.bin", random_bytes(8 * k_mib, 3));
  put(root / "truncated.bin", random_bytes(8 * k_mib, 4));
  stdfs::resize_file(root / "truncated.bin", k_mib);
  return bytes;
}

void remove_everything(const stdfs::path& root) {
  for (const auto& e : stdfs::directory_iterator(root)) stdfs::remove_all(e.path());
}

TEST_F(gc, after_deleting_every_file_gc_returns_the_store_to_its_empty_size) {
  const std::uint64_t empty = empty_store_bytes(work_);
  const std::uint64_t written = write_mixed_tree(mnt_);
  EXPECT_GE(written, 130 * k_mib);
  unmount();
  const std::uint64_t full = dir_bytes(store_);
  EXPECT_GE(full, 90 * k_mib);  // compressible parts shrink, the random ones do not

  mount();
  remove_everything(mnt_);
  unmount();
  const std::uint64_t deleted = dir_bytes(store_);

  const auto r = run_command({densefs_binary(), "gc", store_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("reclaimed"), std::string::npos) << r.out;
  const std::uint64_t after = dir_bytes(store_);
  EXPECT_LE(after, empty + k_empty_slack) << "store " << after << " bytes after gc, an empty store "
                                          << empty << " (" << full << " with the files)\n"
                                          << r.out;

  // For docs/gc.md: the figures of this run.
  std::cout << "[ measured ] written " << written << " bytes; store: empty " << empty
            << ", with the files " << full << ", after deleting them " << deleted
            << ", after densefs gc " << after << "\n"
            << r.out;

  const auto fsck = run_command({densefs_binary(), "fsck", store_.string(), "--json"});
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out << fsck.err;
  const json report = gc_json(store_, true);
  EXPECT_EQ(u64(report, "before", "chunks"), 0u);
  EXPECT_EQ(u64(report, "before", "payload_file_bytes"), 0u);

  // The collected store is an ordinary empty file system.
  mount();
  EXPECT_TRUE(stdfs::is_empty(mnt_));
  write_file(path("again.txt"), "still works\n");
  remount();
  EXPECT_EQ(read_file(path("again.txt")), "still works\n");
}

TEST_F(gc, gc_on_a_live_mount_runs_in_the_daemon_and_keeps_live_files) {
  const std::string kept = random_bytes(8 * k_mib, 20);
  write_file(path("kept.bin"), kept);
  for (int i = 0; i < 8; ++i)
    write_file(path("gone" + std::to_string(i)), random_bytes(4 * k_mib, 30 + i));
  sync_mount();
  for (int i = 0; i < 8; ++i) stdfs::remove(path("gone" + std::to_string(i)));

  const json dry = gc_json(store_, true);
  EXPECT_TRUE(dry.value("mounted", false)) << dry.dump();
  EXPECT_TRUE(dry.value("dry_run", false));
  EXPECT_EQ(u64(dry, "before", "live_payload_bytes"), 8 * k_mib);

  const json done = gc_json(store_, false);
  EXPECT_TRUE(done.value("mounted", false)) << done.dump();
  EXPECT_FALSE(done.value("dry_run", true));
  EXPECT_EQ(u64(done, "after", "chunks"), u64(dry, "before", "chunks"));
  EXPECT_GE(u64(done, "after", "payload_file_bytes"), 8 * k_mib);
  EXPECT_LE(u64(done, "after", "payload_file_bytes"), 9 * k_mib) << done.dump(2);
  EXPECT_EQ(u64(done, "after", "wal_bytes"), 0u) << done.dump(2);
  EXPECT_TRUE(same_bytes(kept, read_file(path("kept.bin"))));

  // Every payload left decodes (fsck --deep), and the file reads back from
  // the store, not from the daemon's chunk cache.
  unmount();
  const auto fsck = run_command({densefs_binary(), "fsck", store_.string(), "--deep"});
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out << fsck.err;
  mount();
  EXPECT_TRUE(same_bytes(kept, read_file(path("kept.bin"))));
}

// Pack stores (docs/packs.md): a kill -9 of the daemon while gc rewrites
// packs (copies made, index moved, old pack deleted: the kill lands at a
// different point each round) loses nothing: fsck is clean and every file
// that was not deleted reads back exactly. ~3 s a round.
TEST_F(gc, kill_minus_nine_during_pack_compaction_loses_nothing) {
  unmount();
  stdfs::remove_all(store_);
  const auto mkfs = run_command({densefs_binary(), "mkfs", store_.string(), "--payloads=pack"});
  ASSERT_EQ(mkfs.exit_code, 0) << mkfs.err;
  mount();
  std::map<std::string, std::string> kept;
  std::uint32_t seed = 1000;
  std::uint64_t packs_seen = 0;
  for (int round = 0; round < 6 && !HasFailure(); ++round) {
    // 12 files of 1 MiB, 8 of them deleted: the packs are mostly dead.
    std::vector<std::string> gone;
    for (int i = 0; i < 12; ++i) {
      const std::string name = "r" + std::to_string(round) + "-" + std::to_string(i);
      const std::string data = random_bytes(k_mib, seed++);
      write_file(path(name), data);
      if (i % 3 == 0) {
        kept[name] = data;
      } else {
        gone.push_back(name);
      }
    }
    sync_mount();
    for (const auto& name : gone) stdfs::remove(path(name));
    sync_mount();
    const auto list_packs = [this] {
      std::set<std::string> names;
      std::error_code ec;
      for (const auto& e : stdfs::directory_iterator(store_ / "packs", ec))
        if (e.path().extension() == ".pack") names.insert(e.path().filename().string());
      return names;
    };
    const std::set<std::string> before = list_packs();
    packs_seen += before.size();
    std::thread collector([this] {
      run_command({densefs_binary(), "gc", store_.string()}, std::chrono::seconds(60));
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(25 * round));
    kill_daemon();
    collector.join();
    // How far the killed gc got: packs deleted, packs started (by copies).
    const std::set<std::string> after = list_packs();
    std::size_t deleted = 0, started = 0;
    for (const auto& p : before) deleted += after.count(p) == 0;
    for (const auto& p : after) started += before.count(p) == 0;
    std::printf("gc: round %d, killed after %d ms: %zu of %zu packs deleted, %zu new\n", round,
                25 * round, deleted, before.size(), started);
    const auto fsck = run_command({densefs_binary(), "fsck", store_.string(), "--json"});
    ASSERT_EQ(fsck.exit_code, 0) << "round " << round << ":\n" << fsck.out << fsck.err;
    mount();
    for (const auto& [name, data] : kept)
      ASSERT_TRUE(same_bytes(data, read_file(path(name)))) << "round " << round << ": " << name;
  }
  EXPECT_GT(packs_seen, 0u) << "the store wrote no pack files";
  // A last, uninterrupted `densefs gc` leaves at most 5% of the pack bytes
  // dead (store.h, gc_depth::requested).
  const json done = gc_json(store_, false);
  EXPECT_EQ(done["after"].value("payload_backend", ""), "pack") << done.dump(2);
  EXPECT_LE(u64(done, "after", "payload_garbage_bytes") * 20,
            u64(done, "after", "payload_file_bytes"))
      << done.dump(2);
  for (const auto& [name, data] : kept) EXPECT_TRUE(same_bytes(data, read_file(path(name))));
}

TEST_F(gc, gc_while_files_are_written_and_deleted_loses_nothing) {
  // A writer keeps creating, overwriting and deleting files while gc runs
  // over the control socket: every file that is left reads back intact
  // from the store afterwards.
  // `mount -f` is mounted before its control socket listens.
  ASSERT_TRUE(eventually([&] { return stdfs::exists(store_ / "control.sock"); }));
  std::atomic<bool> done{false};
  std::atomic<int> collections{0};
  std::map<std::string, std::uint64_t> expected;  // name -> seed of its content
  std::thread writer([&] {
    // At least 60 rounds, and on until two collections have run meanwhile
    // (a fast writer must not finish before the first gc does).
    for (std::uint64_t round = 0; round < 60 || (collections < 2 && round < 600); ++round) {
      const std::string name = "f" + std::to_string(round % 12);
      if (round % 5 == 4) {
        stdfs::remove(path(name));
        expected.erase(name);
      } else {
        write_file(path(name), random_bytes(k_mib + round * 4096, 1000 + round));
        expected[name] = 1000 + round;
      }
    }
    done = true;
  });
  while (!done || collections == 0) {
    const json r = gc_json(store_, false);
    EXPECT_TRUE(r.value("mounted", false)) << r.dump();
    ++collections;
  }
  writer.join();
  EXPECT_GE(collections, 2);  // some ran while the writer wrote

  unmount();
  const auto fsck = run_command({densefs_binary(), "fsck", store_.string(), "--deep"});
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out << fsck.err;
  mount();
  for (const auto& [name, seed] : expected) {
    EXPECT_TRUE(same_bytes(random_bytes(k_mib + (seed - 1000) * 4096, seed), read_file(path(name))))
        << name;
  }
}

TEST_F(gc, the_daemon_collects_by_itself_once_deleting_stops) {
  const std::uint64_t empty = empty_store_bytes(work_);
  for (int i = 0; i < 8; ++i)
    write_file(path("f" + std::to_string(i)), random_bytes(4 * k_mib, 50 + i));
  sync_mount();
  EXPECT_GE(dir_bytes(store_), 32 * k_mib);
  for (int i = 0; i < 8; ++i) stdfs::remove(path("f" + std::to_string(i)));
  // The collector looks every 5 s and starts when the garbage did not grow
  // between two looks: 10-15 s after the last delete.
  EXPECT_TRUE(
      eventually([&] { return dir_bytes(store_) <= empty + 2 * k_mib; }, std::chrono::seconds(30)))
      << dir_bytes(store_) << " bytes";
  EXPECT_TRUE(eventually([&] { return daemon_log().find("gc: ") != std::string::npos; }))
      << daemon_log();
}

}  // namespace
}  // namespace densefs::test
