// The read path through a mount: both payload readers (-o io=pread and
// -o io=uring), and the decoded-chunk cache with sequential prefetch under
// concurrent readers and writers (fs/read_ahead.h, store::load_chunks).
//
// Reads drop the kernel's cached pages of their range first
// (POSIX_FADV_DONTNEED) so that they reach the daemon: with keep_cache the
// kernel would otherwise serve most of them itself.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "store/payload/batched_reader.h"
#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

using namespace std::chrono_literals;

// Reads [offset, offset + n) through FUSE, not from the page cache.
std::string uncached_pread(int fd, std::size_t n, std::uint64_t offset) {
  ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
  return pread_exact(fd, n, offset);
}

std::string uncached_read_all(const stdfs::path& p, std::size_t piece = 128 * k_kib) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) {
    ADD_FAILURE() << p << ": " << std::strerror(errno);
    return {};
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::string out;
  for (;;) {
    std::string got = pread_exact(fd, piece, out.size());
    if (got.empty()) break;
    out += got;
  }
  ::close(fd);
  return out;
}

// --------------------------------------------------------------- io modes

class read_path_io : public mount_test, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "uring" && !store::io_uring_unavailable_reason().empty())
      DENSEFS_SKIP_UNLESS_REQUIRED(
          "io_uring unavailable: " << store::io_uring_unavailable_reason());
    mount_test::SetUp();
  }
  // A small cache, so that a 40 MiB file does not fit and prefetch evicts.
  std::string mount_options() const override {
    return std::string("io=") + GetParam() + ",chunk_cache=16M";
  }
};

TEST_P(read_path_io, big_and_small_files_read_back_cold_sequentially_and_at_random) {
  const std::string big = compressible_bytes(24 * k_mib, 1) + random_bytes(16 * k_mib, 2);
  write_file(path("big"), big);
  std::vector<std::string> small;
  for (int i = 0; i < 40; ++i) {
    small.push_back(i % 2 ? random_bytes(1 + i * 997, 10 + i) : compressible_bytes(i * 1500, i));
    write_file(path("small" + std::to_string(i)), small.back());
  }
  remount();  // nothing decoded yet, nothing in the kernel's cache

  EXPECT_TRUE(same_bytes(big, uncached_read_all(path("big"))));
  EXPECT_TRUE(same_bytes(big, uncached_read_all(path("big"), 1 * k_mib)));
  for (int i = 0; i < 40; ++i)
    EXPECT_TRUE(same_bytes(small[i], read_file(path("small" + std::to_string(i))))) << i;

  const int fd = ::open(path("big").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const std::size_t n = 1 + rng() % (300 * k_kib);
    const std::uint64_t at = rng() % big.size();
    ASSERT_TRUE(same_bytes(big.substr(at, n), uncached_pread(fd, n, at))) << "at " << at;
  }
  ::close(fd);
  EXPECT_EQ(daemon_log().find("error"), std::string::npos) << daemon_log();
}

INSTANTIATE_TEST_SUITE_P(io, read_path_io, ::testing::Values("pread", "uring"));

// ---------------------------------------------- readers racing writers

// File contents: byte p of version v of file f. Runs of 64 equal bytes keep
// it compressible (zstd chunks, not raw ones), and since 17 is odd, the
// versions 0..255 of one position are 256 different bytes: a reader can tell
// from a byte alone which version it belongs to, so "each byte was the
// file's content at some moment" is checked without locking out writers.
// (Page-granular, let alone file-granular, atomicity is not promised: a read
// racing a write may see part of each, on ext4 too.)
char content_byte(int file, std::uint64_t p, int version) {
  return static_cast<char>((p >> 6) * 131 + static_cast<std::uint64_t>(version) * 17 +
                           static_cast<std::uint64_t>(file) * 53);
}
std::string version_of(int file, std::uint64_t from, std::size_t n, int version) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = content_byte(file, from + i, version);
  return out;
}

// Bytes of `got` (read at `from`) that no version <= max_version of the file
// (nor a zero: truncated and re-extended ranges) can have had.
std::size_t impossible_bytes(int file, std::uint64_t from, std::string_view got, int max_version) {
  std::size_t bad = 0;
  constexpr unsigned k_inverse_of_17 = 241;  // 17 * 241 = 4097 = 1 mod 256
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto b = static_cast<unsigned char>(got[i]);
    if (b == 0) continue;
    const std::uint64_t p = from + i;
    const unsigned delta = (b - static_cast<unsigned>((p >> 6) * 131 + file * 53)) & 0xff;
    const unsigned version = (delta * k_inverse_of_17) & 0xff;
    if (version > static_cast<unsigned>(max_version)) ++bad;
  }
  return bad;
}

class read_path_race : public mount_test {
 protected:
  // Small enough that prefetch windows and evictions interact.
  std::string mount_options() const override { return "chunk_cache=24M"; }
};

TEST_F(read_path_race, readers_see_only_real_content_while_writers_change_it) {
  // The check itself: real versions pass, other bytes do not.
  ASSERT_EQ(impossible_bytes(1, 5000, version_of(1, 5000, 70000, 9), 9), 0u);
  ASSERT_GT(impossible_bytes(1, 5000, version_of(1, 5000, 70000, 10), 9), 60000u);
  ASSERT_GT(impossible_bytes(1, 5000, version_of(1, 5064, 70000, 3), 9), 60000u);  // shifted
  ASSERT_GT(impossible_bytes(1, 5000, version_of(2, 5000, 70000, 3), 9), 60000u);  // other file
  constexpr int k_files = 3;
  constexpr std::uint64_t k_size = 12 * k_mib;
  std::vector<std::string> model(k_files);
  std::vector<std::atomic<int>> versions(k_files);
  for (int f = 0; f < k_files; ++f) {
    model[f] = version_of(f, 0, k_size, 0);
    write_file(path("f" + std::to_string(f)), model[f]);
  }
  remount();  // cold: every chunk goes through load_chunks and prefetch

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> impossible{0}, reads{0};
  std::vector<std::thread> threads;
  // Writers: one per file (the model is theirs). Overwrites of 64 KiB to
  // 1 MiB, truncates and rewrites of the tail.
  for (int f = 0; f < k_files; ++f) {
    threads.emplace_back([&, f] {
      const int fd = ::open(path("f" + std::to_string(f)).c_str(), O_WRONLY);
      ASSERT_GE(fd, 0);
      std::mt19937_64 rng(100 + f);
      for (int round = 0; round < 24 && !stop; ++round) {
        const int v = versions[f].load() + 1;
        versions[f] = v;  // before the bytes land: a reader may see them at once
        if (round % 6 == 5) {
          const std::uint64_t cut = (rng() % (k_size / k_mib)) * k_mib;
          ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(cut)), 0);
          model[f].resize(cut);
          const std::string tail = version_of(f, cut, k_size - cut, v);
          ASSERT_TRUE(pwrite_all(fd, tail, cut));
          model[f] += tail;
        } else {
          const std::size_t n = (1 + rng() % 16) * 64 * k_kib;
          const std::uint64_t at = rng() % (k_size - n);
          const std::string bytes = version_of(f, at, n, v);
          ASSERT_TRUE(pwrite_all(fd, bytes, at));
          model[f].replace(at, n, bytes);
        }
        if (round % 4 == 0) ::fsync(fd);  // chunks land in the store mid-race
      }
      ::close(fd);
    });
  }
  // Readers: sequential passes (prefetch) and random reads, on every file.
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(200 + r);
      while (!stop) {
        const int f = static_cast<int>(rng() % k_files);
        const int fd = ::open(path("f" + std::to_string(f)).c_str(), O_RDONLY);
        if (fd < 0) continue;
        if (r % 2 == 0) {
          for (std::uint64_t at = 0; at < k_size && !stop; at += 256 * k_kib) {
            const std::string got = uncached_pread(fd, 256 * k_kib, at);
            impossible += impossible_bytes(f, at, got, versions[f].load());
            ++reads;
          }
        } else {
          for (int i = 0; i < 40 && !stop; ++i) {
            const std::size_t n = 1 + rng() % (512 * k_kib);
            const std::uint64_t at = rng() % k_size;
            const std::string got = uncached_pread(fd, n, at);
            impossible += impossible_bytes(f, at, got, versions[f].load());
            ++reads;
          }
        }
        ::close(fd);
      }
    });
  }
  for (int f = 0; f < k_files; ++f) threads[f].join();
  stop = true;
  for (std::size_t t = k_files; t < threads.size(); ++t) threads[t].join();

  EXPECT_EQ(impossible.load(), 0u) << "over " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0u);
  // Writers done: every reader, sequential or not, sees the final bytes.
  for (int f = 0; f < k_files; ++f) {
    EXPECT_TRUE(same_bytes(model[f], uncached_read_all(path("f" + std::to_string(f))))) << f;
    EXPECT_TRUE(same_bytes(model[f], read_file(path("f" + std::to_string(f))))) << f;
  }
  remount();
  for (int f = 0; f < k_files; ++f)
    EXPECT_TRUE(same_bytes(model[f], uncached_read_all(path("f" + std::to_string(f)), k_mib)))
        << f << " after remount";
}

TEST_F(read_path_race, files_sharing_chunks_read_concurrently_cold) {
  // Two copies of the same bytes (every chunk shared by dedup) and a third
  // file that shares every other MiB of them.
  const std::string a = compressible_bytes(16 * k_mib, 5);
  std::string c = a;
  const std::string other = random_bytes(k_mib, 6);
  for (std::uint64_t at = 0; at < c.size(); at += 2 * k_mib) c.replace(at, k_mib, other);
  write_file(path("a"), a);
  write_file(path("b"), a);
  write_file(path("c"), c);
  remount();

  std::vector<std::thread> threads;
  std::vector<std::string> got(6);
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      const char* name = t % 3 == 0 ? "a" : t % 3 == 1 ? "b" : "c";
      got[t] = uncached_read_all(path(name), t < 3 ? 128 * k_kib : k_mib);
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < 6; ++t) EXPECT_TRUE(same_bytes(t % 3 == 2 ? c : a, got[t])) << t;
  EXPECT_EQ(daemon_log().find("error"), std::string::npos) << daemon_log();
}

// A directory's small files read cold one after another start the sibling
// prefetch (fs/read_ahead.h), which queues its 1 MiB pieces as separate
// jobs: every byte read is the file's current content, also for files
// overwritten after the prefetch may have loaded their old chunks, and an
// unmount while pieces are still queued ends cleanly. The reader here goes
// by name and never lists the directory (a file list of its own, as rsync
// or a backup tool keeps), so the daemon reads the directory's orders
// itself after the second cold file.
TEST_F(read_path_race, a_directory_read_cold_by_name_reads_current_bytes) {
  ASSERT_EQ(::mkdir(path("dir").c_str(), 0755), 0);
  std::map<std::string, std::string> files;  // by name
  for (int i = 0; i < 400; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "f%04d", i);
    files[name] = i % 3 ? compressible_bytes(12000 + i * 37, i) : random_bytes(9000 + i, i);
    write_file(path("dir/" + std::string(name)), files[name]);
  }
  sync_mount();
  for (int round = 0; round < 2; ++round) {
    remount();
    int index = 0;
    for (const auto& [name, bytes] : files) {
      // The later files change once the prefetch has started.
      if (index == 20 + round * 5) {
        for (auto& [other, content] : files) {
          if (other > name && std::stoi(other.substr(1)) % 7 == round) {
            content = compressible_bytes(content.size() + 100, 1000 + round);
            write_file(path("dir/" + other), content);
          }
        }
      }
      EXPECT_TRUE(same_bytes(bytes, uncached_read_all(path("dir/" + name)))) << name;
      // Give the scan of the directory's orders time to land: the reader
      // does not wait for it, and this reader is faster than it on a
      // loaded machine.
      if (index == 1) std::this_thread::sleep_for(200ms);
      // The second round stops halfway: unmount with prefetch pieces queued.
      if (round == 1 && ++index > 200) break;
      if (round == 0) ++index;
    }
    if (round == 0) {
      const nlohmann::json s = stats();
      EXPECT_GE(s["read_ahead"]["listing_scans"].get<std::uint64_t>(), 1u) << s.dump();
      EXPECT_GE(s["read_ahead"]["sibling_prefetches"].get<std::uint64_t>(), 1u) << s.dump();
    }
  }
  EXPECT_EQ(daemon_log().find("error"), std::string::npos) << daemon_log();
}

// A reader that lists the directory and reads in the listing's order (tar,
// cp -r) gets the prefetch from that listing, without a scan of its own.
TEST_F(read_path_race, a_directory_read_cold_in_listing_order_is_prefetched_from_the_listing) {
  ASSERT_EQ(::mkdir(path("dir").c_str(), 0755), 0);
  std::map<std::string, std::string> files;
  for (int i = 0; i < 200; ++i) {
    const std::string name = "g" + std::to_string(i);
    files[name] = compressible_bytes(8000 + i * 13, i);
    write_file(path("dir/" + name), files[name]);
  }
  sync_mount();
  remount();
  std::vector<std::string> listed;
  DIR* d = ::opendir(path("dir").c_str());
  ASSERT_NE(d, nullptr);
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] == 'g') listed.emplace_back(e->d_name);
  ::closedir(d);
  ASSERT_EQ(listed.size(), files.size());
  for (const std::string& name : listed)
    EXPECT_TRUE(same_bytes(files[name], uncached_read_all(path("dir/" + name)))) << name;
  const nlohmann::json s = stats();
  EXPECT_EQ(s["read_ahead"]["listing_scans"].get<std::uint64_t>(), 0u) << s.dump();
  EXPECT_GE(s["read_ahead"]["sibling_prefetches"].get<std::uint64_t>(), 1u) << s.dump();
}

}  // namespace
}  // namespace densefs::test
