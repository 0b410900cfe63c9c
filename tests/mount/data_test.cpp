// File contents through a real mount: exact bytes back after write, reopen
// and remount, sparse and large files, overwrites, truncation, copies.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
using namespace std::chrono_literals;
namespace {

// Every data test runs without the kernel's writeback cache (the default) and
// with it (-o writeback_cache): the two send very different WRITE patterns to
// the daemon.
class data : public mount_test, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string mount_options() const override { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(mount_options, data,
                         ::testing::Values(std::string(), std::string("writeback_cache")),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("default") : info.param;
                         });

std::string zeros(std::size_t n) {
  return std::string(n, '\0');
}

// `densefs info` names codecs; accept the frozen numeric id too
// (codec/codec.h: raw = 0, zstd = 1).
std::string codec_of(const nlohmann::json& chunk) {
  const auto& c = chunk["codec"];
  if (c.is_string()) return c.get<std::string>();
  if (c.is_number_unsigned()) {
    switch (c.get<unsigned>()) {
      case 0:
        return "raw";
      case 1:
        return "zstd";
    }
  }
  return c.dump();
}

TEST_P(data, jpeg_corpus_round_trips_byte_exact) {
  stdfs::path const corpus = test::corpus_dir("jpeg");
  if (!stdfs::is_directory(corpus)) DENSEFS_SKIP_UNLESS_REQUIRED("corpus " << corpus << " missing");
  std::map<std::string, std::string> files;
  for (const auto& e : stdfs::directory_iterator(corpus))
    if (e.is_regular_file()) files[e.path().filename().string()] = read_file(e.path());
  ASSERT_FALSE(files.empty()) << "no files in " << corpus;

  ASSERT_EQ(::mkdir(path("jpeg").c_str(), 0755), 0);
  for (const auto& [name, content] : files) write_file(mnt_ / "jpeg" / name, content);
  for (const auto& [name, content] : files)
    EXPECT_TRUE(same_bytes(content, read_file(mnt_ / "jpeg" / name))) << name;

  remount();
  std::size_t listed = 0;
  for (const auto& e : stdfs::directory_iterator(mnt_ / "jpeg")) {
    (void)e;
    ++listed;
  }
  EXPECT_EQ(listed, files.size());
  for (const auto& [name, content] : files) {
    EXPECT_TRUE(same_bytes(content, read_file(mnt_ / "jpeg" / name))) << name << " after remount";
    struct stat st {};
    ASSERT_EQ(stat((mnt_ / "jpeg" / name).c_str(), &st), 0);
    EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), content.size()) << name;
  }
}

struct sized_file {
  std::string name;
  std::string content;
  bool compressible;
};

TEST_P(data, files_of_edge_sizes_round_trip_after_write_reopen_and_remount) {
  std::vector<sized_file> files;
  std::uint64_t seed = 1;
  for (std::uint64_t size :
       {std::uint64_t{0}, std::uint64_t{1}, 4 * k_mib - 1, 4 * k_mib, 4 * k_mib + 1}) {
    files.push_back({"random-" + std::to_string(size), random_bytes(size, seed++), false});
    files.push_back({"text-" + std::to_string(size), compressible_bytes(size, seed++), true});
  }
  files.push_back({"text-100MiB", compressible_bytes(100 * k_mib, seed++), true});
  files.push_back({"random-9MiB+77", random_bytes(9 * k_mib + 77, seed++), false});

  // After write, before close: read back through the writing fd.
  for (const auto& f : files) {
    const int fd = open(path(f.name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
    ASSERT_GE(fd, 0) << f.name << ": " << strerror(errno);
    for (std::size_t off = 0; off < f.content.size(); off += k_mib)
      ASSERT_TRUE(pwrite_all(fd, std::string_view(f.content).substr(off, k_mib), off));
    EXPECT_TRUE(same_bytes(f.content, pread_exact(fd, f.content.size() + 1, 0)))
        << f.name << " read through the writing fd";
    struct stat st {};
    ASSERT_EQ(fstat(fd, &st), 0);
    EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), f.content.size()) << f.name;
    ASSERT_EQ(close(fd), 0) << f.name;
  }

  auto check_all = [&](const char* when) {
    for (auto const& f : files) {
      EXPECT_TRUE(same_bytes(f.content, read_file(path(f.name)))) << f.name << " " << when;
      struct stat st {};
      ASSERT_EQ(stat(path(f.name).c_str(), &st), 0) << f.name;
      EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), f.content.size()) << f.name << " " << when;
      if (!f.content.empty()) {
        EXPECT_GT(st.st_blocks, 0)
            << f.name << ": st_blocks must never be 0 for a non-empty file (" << when << ")";
      }
      if (f.name == "text-100MiB") {
        // st_blocks shows the stored size: compressible text stores in well
        // under half its logical size.
        EXPECT_LT(static_cast<std::uint64_t>(st.st_blocks) * 512, f.content.size() / 2)
            << f.name << " st_blocks=" << st.st_blocks << " " << when;
      }
      if (f.name.rfind("random-", 0) == 0 && f.content.size() >= 4 * k_mib) {
        // Incompressible data is stored raw, so it cannot look smaller than
        // about its size (st_blocks counts 512-byte units, rounded up).
        EXPECT_GE(static_cast<std::uint64_t>(st.st_blocks) * 512, f.content.size() * 9 / 10)
            << f.name << " st_blocks=" << st.st_blocks << " " << when;
      }
    }
  };
  // st_blocks is the stored size once the data is committed: write-behind
  // commits closed files within -o commit=SEC, densefs sync at once.
  sync_mount();
  check_all("after close and reopen");
  remount();
  check_all("after remount");
}

TEST_P(data, sparse_6gib_file_reads_holes_as_zeros_and_stores_little) {
  std::uint64_t const size = 6 * k_gib;
  struct region {
    std::uint64_t offset;
    std::string bytes;
  };
  const std::vector<region> regions{
      {0, random_bytes(3 * k_mib, 11)},
      {4 * k_gib + 12345, random_bytes(2 * k_mib + 17, 12)},
      {size - k_mib, random_bytes(k_mib, 13)},  // ends exactly at 6 GiB
  };
  int fd = open(path("sparse").c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  for (const auto& r : regions) ASSERT_TRUE(pwrite_all(fd, r.bytes, r.offset));
  ASSERT_EQ(close(fd), 0);

  // Expected content of [off, off+n) from the regions; zeros elsewhere.
  auto expected = [&](std::uint64_t off, std::size_t n) {
    std::string out(n, '\0');
    for (auto const& r : regions) {
      std::uint64_t const b = std::max(off, r.offset);
      std::uint64_t const e = std::min(off + n, r.offset + r.bytes.size());
      if (b < e) std::copy_n(r.bytes.data() + (b - r.offset), e - b, out.data() + (b - off));
    }
    return out;
  };

  auto check = [&](const char* when) {
    struct stat st {};
    ASSERT_EQ(stat(path("sparse").c_str(), &st), 0);
    EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), size) << when;
    EXPECT_GT(st.st_blocks, 0) << when;
    EXPECT_LT(static_cast<std::uint64_t>(st.st_blocks) * 512, 64 * k_mib)
        << "st_blocks of a sparse file with 6 MiB of data " << when;
    int const rfd = open(path("sparse").c_str(), O_RDONLY);
    ASSERT_GE(rfd, 0) << strerror(errno);
    // The written regions, whole.
    for (auto const& r : regions)
      EXPECT_TRUE(same_bytes(r.bytes, pread_exact(rfd, r.bytes.size(), r.offset)))
          << "region at " << r.offset << " " << when;
    // 1 MiB samples inside holes and across every hole boundary.
    std::vector<std::uint64_t> const samples{
        3 * k_mib,                          // just after the first region
        3 * k_mib - 512,                    // across its end
        4 * k_mib - 4096,                   // across the first chunk boundary in a hole
        1 * k_gib + 333,                    // deep in the first hole
        2 * k_gib,                          //
        4 * k_gib - k_mib,                  // ends right at 4 GiB (still a hole)
        4 * k_gib + 12345 - k_mib / 2,      // across the start of the second region
        4 * k_gib + 12345 + 2 * k_mib - 9,  // across its end
        5 * k_gib + 7,                      // deep in the second hole
        size - k_mib - k_mib / 2,           // across the start of the last region
    };
    for (std::uint64_t off : samples)
      EXPECT_TRUE(same_bytes(expected(off, k_mib), pread_exact(rfd, k_mib, off)))
          << "1 MiB at offset " << off << " " << when;
    // At and past EOF nothing is read.
    EXPECT_EQ(pread_exact(rfd, 4096, size).size(), 0u) << when;
    EXPECT_TRUE(same_bytes(expected(size - 100, 100), pread_exact(rfd, 4096, size - 100)))
        << "short read at EOF " << when;
    close(rfd);
    std::uint64_t const stored = stats_u64("stored_bytes");
    EXPECT_LT(stored, 64 * k_mib) << "stored_bytes for 6 MiB of data in a 6 GiB sparse file "
                                  << when;
  };
  check("after close");
  remount();
  check("after remount");
}

TEST_P(data, overwrite_in_the_middle_of_a_20mib_file) {
  std::string content = random_bytes(20 * k_mib, 21);
  // Written 4 MiB at a time, each piece fsync'd before the next. With
  // writeback_cache the kernel may otherwise send the pages of one write out
  // of order (background writeback starts where it left off), and a 4 MiB
  // slot that reaches the daemon before the end of the slot before it is cut
  // without that context; the rewrite below, with it, would then cut that
  // slot differently from its start (dedup lost for a few chunks, never
  // wrong bytes: docs/chunking.md). That is not what this test measures.
  {
    const int fd = open(path("big").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << strerror(errno);
    for (std::uint64_t at = 0; at < content.size(); at += 4 * k_mib) {
      ASSERT_TRUE(pwrite_all(fd, std::string_view(content).substr(at, 4 * k_mib), at));
      ASSERT_EQ(fsync(fd), 0) << strerror(errno);
    }
    ASSERT_EQ(close(fd), 0);
  }
  const auto before = info(path("big"));

  // Straddles the chunk boundary at 8 MiB; odd offset and length.
  std::uint64_t const off = 8 * k_mib - 5 * k_kib - 3;
  std::string const patch = random_bytes(k_mib + 12345, 22);
  const int fd = open(path("big").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_TRUE(pwrite_all(fd, patch, off));
  ASSERT_EQ(close(fd), 0);
  std::copy(patch.begin(), patch.end(), content.begin() + static_cast<std::ptrdiff_t>(off));

  EXPECT_TRUE(same_bytes(content, read_file(path("big"))));
  struct stat st {};
  ASSERT_EQ(stat(path("big").c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), content.size());

  // Only the chunks around the overwrite are new: content-defined
  // boundaries fall back onto the old ones a few chunks after the change,
  // and every other chunk keeps its offset and hash.
  const auto after = info(path("big"));
  ASSERT_TRUE(before.contains("chunks") && after.contains("chunks")) << before.dump() << "\n"
                                                                     << after.dump();
  ASSERT_FALSE(before.value("chunks_truncated", false)) << "densefs info lists every chunk";
  std::map<std::uint64_t, std::string> before_hashes;
  for (const auto& c : before["chunks"])
    before_hashes[c["offset"].get<std::uint64_t>()] = c["hash"].get<std::string>();
  std::uint64_t new_bytes = 0;
  std::uint64_t kept = 0;
  for (const auto& c : after["chunks"]) {
    const auto b = c["offset"].get<std::uint64_t>();
    const auto it = before_hashes.find(b);
    if (it != before_hashes.end() && it->second == c["hash"].get<std::string>()) {
      ++kept;
      EXPECT_FALSE(b < off + patch.size() && off < b + c["length"].get<std::uint64_t>())
          << "a chunk under the overwrite kept its hash at " << b;
    } else {
      new_bytes += c["length"].get<std::uint64_t>();
      // New chunks lie around the change (a few chunks of at most 128 KiB
      // on either side, with the default chunker for random data).
      EXPECT_GT(b + c["length"].get<std::uint64_t>() + k_mib, off) << "new chunk at " << b;
      EXPECT_LT(b, off + patch.size() + k_mib) << "new chunk at " << b;
    }
  }
  EXPECT_GE(new_bytes, patch.size());
  EXPECT_LT(new_bytes, patch.size() + k_mib) << "bytes in new chunks";
  EXPECT_GT(kept, after["chunks"].size() * 3 / 4) << "chunks kept of " << after["chunks"].size();

  remount();
  EXPECT_TRUE(same_bytes(content, read_file(path("big")))) << "after remount";
}

TEST_P(data, reads_see_unflushed_writes_through_another_fd) {
  const int wfd = open(path("f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(wfd, 0) << strerror(errno);
  std::string const first = random_bytes(5 * k_mib + 100 * k_kib, 31);
  ASSERT_TRUE(pwrite_all(wfd, first, 0));

  const int rfd = open(path("f").c_str(), O_RDONLY);
  ASSERT_GE(rfd, 0) << strerror(errno);
  EXPECT_TRUE(same_bytes(first, pread_exact(rfd, first.size() + 10, 0)));
  struct stat st {};
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), first.size());

  // More data, and an overwrite of bytes already read, still unflushed.
  std::string const more = compressible_bytes(3 * k_mib, 32);
  ASSERT_TRUE(pwrite_all(wfd, more, first.size()));
  std::string const patch = random_bytes(1000, 33);
  ASSERT_TRUE(pwrite_all(wfd, patch, 4 * k_mib - 500));
  std::string expected = first + more;
  std::copy(patch.begin(), patch.end(), expected.begin() + (4 * k_mib - 500));
  EXPECT_TRUE(same_bytes(expected, pread_exact(rfd, expected.size() + 10, 0)));

  // A third fd opened now sees the same.
  EXPECT_TRUE(same_bytes(expected, read_file(path("f"))));
  close(rfd);
  ASSERT_EQ(close(wfd), 0);
  EXPECT_TRUE(same_bytes(expected, read_file(path("f")))) << "after close";
}

TEST_P(data, truncate_shrinks_grows_with_zeros_and_never_resurrects_old_bytes) {
  std::string const original = random_bytes(10 * k_mib, 41);
  write_file(path("t"), original);
  auto size_of = [&](const stdfs::path& p) {
    struct stat st {};
    EXPECT_EQ(stat(p.c_str(), &st), 0) << p;
    return static_cast<std::uint64_t>(st.st_size);
  };

  // Shrink.
  std::uint64_t const s1 = 5 * k_mib + 123;
  ASSERT_EQ(truncate(path("t").c_str(), static_cast<off_t>(s1)), 0) << strerror(errno);
  EXPECT_EQ(size_of(path("t")), s1);
  std::string expected = original.substr(0, s1);
  EXPECT_TRUE(same_bytes(expected, read_file(path("t")))) << "after shrink";

  // Grow: the new bytes read as zeros, not the old ones.
  ASSERT_EQ(truncate(path("t").c_str(), static_cast<off_t>(9 * k_mib)), 0);
  EXPECT_EQ(size_of(path("t")), 9 * k_mib);
  expected += zeros(9 * k_mib - s1);
  EXPECT_TRUE(same_bytes(expected, read_file(path("t")))) << "after grow";

  // Shrink into the middle of the first chunk, then grow again: the tail of
  // that chunk must not reappear.
  std::uint64_t const s2 = 2 * k_mib + 7;
  ASSERT_EQ(truncate(path("t").c_str(), static_cast<off_t>(s2)), 0);
  ASSERT_EQ(truncate(path("t").c_str(), static_cast<off_t>(6 * k_mib)), 0);
  expected = original.substr(0, s2) + zeros(6 * k_mib - s2);
  EXPECT_TRUE(same_bytes(expected, read_file(path("t")))) << "after shrink into a chunk and grow";

  // To zero and back.
  ASSERT_EQ(truncate(path("t").c_str(), 0), 0);
  EXPECT_EQ(size_of(path("t")), 0u);
  ASSERT_EQ(truncate(path("t").c_str(), 4097), 0);
  EXPECT_TRUE(same_bytes(zeros(4097), read_file(path("t")))) << "after truncate to 0 and grow";

  // ftruncate on an open fd with unflushed writes.
  const int fd = open(path("ft").c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::string const data = random_bytes(6 * k_mib, 42);
  ASSERT_TRUE(pwrite_all(fd, data, 0));
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(3 * k_mib + 1)), 0) << strerror(errno);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), 3 * k_mib + 1);
  EXPECT_TRUE(same_bytes(data.substr(0, 3 * k_mib + 1), pread_exact(fd, 6 * k_mib, 0)))
      << "ftruncate shrink seen through the fd";
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(5 * k_mib)), 0);
  std::string const tail = random_bytes(100, 43);
  ASSERT_TRUE(pwrite_all(fd, tail, 7 * k_mib));  // past EOF: a hole in between
  std::string ft_expected =
      data.substr(0, 3 * k_mib + 1) + zeros(7 * k_mib - (3 * k_mib + 1)) + tail;
  EXPECT_TRUE(same_bytes(ft_expected, pread_exact(fd, 8 * k_mib, 0)))
      << "ftruncate grow then write past EOF, through the fd";
  ASSERT_EQ(close(fd), 0);
  EXPECT_TRUE(same_bytes(ft_expected, read_file(path("ft")))) << "after close";

  remount();
  EXPECT_TRUE(same_bytes(zeros(4097), read_file(path("t")))) << "after remount";
  EXPECT_TRUE(same_bytes(ft_expected, read_file(path("ft")))) << "after remount";
}

TEST_P(data, info_reports_chunks_and_codecs_per_file) {
  std::string const text = compressible_bytes(8 * k_mib + 1000, 51);
  std::string const noise = random_bytes(4 * k_mib, 52);
  write_file(path("text"), text);
  write_file(path("noise"), noise);
  // Chunks may be stored with fast zstd first and re-encoded in the
  // background (-o ingest=auto): with writeback_cache the kernel can send a
  // slot while the file still looks small, and under ASan that happened
  // (zstd in every chunk). What the default policy promises is where they
  // end up.
  ASSERT_TRUE(eventually([&] { return stats_u64("pending_recompress") == 0; }, 120s));

  const auto t = info(path("text"));
  ASSERT_TRUE(t.contains("chunks") && t["chunks"].is_array()) << t.dump();
  EXPECT_EQ(t.value("size", std::uint64_t{0}), text.size()) << t.dump();
  ASSERT_GE(t["chunks"].size(), 3u)
      << "8 MiB + 1000 bytes is at least 3 chunks of at most 4 MiB: " << t.dump();
  EXPECT_EQ(t["chunk_count"].get<std::size_t>(), t["chunks"].size());
  EXPECT_EQ(t["policy_chunker"], "cdc:min=256K:avg=1M:max=4M") << t.dump();
  std::uint64_t expect_offset = 0;
  std::uint64_t stored_sum = 0;
  for (const auto& c : t["chunks"]) {
    EXPECT_EQ(c["offset"].get<std::uint64_t>(), expect_offset) << c.dump();
    expect_offset += c["length"].get<std::uint64_t>();
    // Text (by its bytes: the name has no extension) goes to Broccoli under
    // the default policy.
    EXPECT_EQ(codec_of(c), "broccoli") << c.dump();
    EXPECT_LT(c["stored_size"].get<std::uint64_t>(), c["plain_size"].get<std::uint64_t>() / 2)
        << c.dump();
    EXPECT_EQ(c["refcount"].get<std::uint64_t>(), 1u) << c.dump();
    stored_sum += c["stored_size"].get<std::uint64_t>();
  }
  EXPECT_EQ(expect_offset, text.size());
  EXPECT_EQ(t.value("stored_bytes", std::uint64_t{0}), stored_sum) << t.dump();

  // Random bytes are "other": content-defined chunks of 8 to 128 KiB.
  const auto n = info(path("noise"));
  ASSERT_TRUE(n.contains("chunks") && n["chunks"].size() > 4 * k_mib / (128 * k_kib)) << n.dump();
  EXPECT_EQ(n["policy_chunker"], "cdc:min=8K:avg=32K:max=128K") << n.dump();
  std::uint64_t noise_stored = 0;
  for (const auto& c : n["chunks"]) {
    EXPECT_EQ(codec_of(c), "raw") << "random data does not compress: " << c.dump();
    EXPECT_LE(c["length"].get<std::uint64_t>(), 128 * k_kib) << c.dump();
    noise_stored += c["stored_size"].get<std::uint64_t>();
  }
  EXPECT_EQ(noise_stored, noise.size());
  EXPECT_EQ(n["shared_chunks"].get<std::uint64_t>(), 0u);

  // Identical content is stored once: a copy shares the chunks, and info
  // counts them as shared.
  write_file(path("noise-copy"), noise);
  const auto c = info(path("noise-copy"));
  ASSERT_TRUE(c.contains("chunks") && c["chunks"].size() == n["chunks"].size()) << c.dump();
  for (std::size_t i = 0; i < c["chunks"].size(); ++i) {
    EXPECT_EQ(c["chunks"][i]["hash"], n["chunks"][i]["hash"]);
    EXPECT_EQ(c["chunks"][i]["refcount"].get<std::uint64_t>(), 2u) << c.dump();
  }
  EXPECT_EQ(c["shared_chunks"].get<std::uint64_t>(), c["chunks"].size());
  EXPECT_EQ(c["shared_bytes"].get<std::uint64_t>(), noise.size());
}

TEST_P(data, copy_file_range_copies_exactly_and_shares_chunks) {
  std::string const content = random_bytes(12 * k_mib + 5, 61);
  write_file(path("src"), content);
  const auto chunks_before = stats_u64("chunks");
  const auto stored_before = stats_u64("stored_bytes");

  const int in = open(path("src").c_str(), O_RDONLY);
  const int out = open(path("dst").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(in, 0);
  ASSERT_GE(out, 0);
  std::uint64_t copied = 0;
  while (copied < content.size()) {
    const ssize_t n = copy_file_range(in, nullptr, out, nullptr, content.size() - copied, 0);
    ASSERT_GT(n, 0) << "copy_file_range after " << copied << " bytes: " << strerror(errno);
    copied += static_cast<std::uint64_t>(n);
  }
  ASSERT_EQ(fsync(out), 0) << strerror(errno);
  close(in);
  ASSERT_EQ(close(out), 0);
  EXPECT_TRUE(same_bytes(content, read_file(path("dst"))));

  // A whole-file copy has the same chunks, so nothing new is stored: the
  // count must not grow (whether the fs shared them or deduplicated a copy).
  EXPECT_TRUE(eventually([&] { return stats_u64("chunks") <= chunks_before; }))
      << "chunks before " << chunks_before << ", after " << stats_u64("chunks");
  EXPECT_LE(stats_u64("stored_bytes"), stored_before);

  // An unaligned copy into the middle of an existing file.
  std::string target = compressible_bytes(6 * k_mib, 62);
  write_file(path("dst2"), target);
  const int in2 = open(path("src").c_str(), O_RDONLY);
  const int out2 = open(path("dst2").c_str(), O_WRONLY);
  ASSERT_GE(in2, 0);
  ASSERT_GE(out2, 0);
  loff_t in_off = 1000;
  loff_t out_off = 3 * k_mib + 17;
  std::uint64_t const len = 5 * k_mib + 3;
  std::uint64_t done = 0;
  while (done < len) {
    const ssize_t n = copy_file_range(in2, &in_off, out2, &out_off, len - done, 0);
    ASSERT_GT(n, 0) << "unaligned copy_file_range after " << done << " bytes: " << strerror(errno);
    done += static_cast<std::uint64_t>(n);
  }
  close(in2);
  ASSERT_EQ(close(out2), 0);
  target.resize(3 * k_mib + 17 + len);
  std::copy_n(content.begin() + 1000, len, target.begin() + (3 * k_mib + 17));
  EXPECT_TRUE(same_bytes(target, read_file(path("dst2"))));

  remount();
  EXPECT_TRUE(same_bytes(content, read_file(path("dst")))) << "after remount";
  EXPECT_TRUE(same_bytes(target, read_file(path("dst2")))) << "after remount";
}

// open(O_TRUNC) empties the file and marks mtime and ctime, whether the
// kernel sends it as part of OPEN (atomic_o_trunc) or as a setattr.
TEST_P(data, open_with_o_trunc_empties_the_file_and_updates_times) {
  write_file(path("t"), compressible_bytes(5 << 20, 3));
  struct stat before {};
  ASSERT_EQ(::stat(path("t").c_str(), &before), 0);
  ::usleep(20000);
  const int fd = ::open(path("t").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::close(fd), 0);
  struct stat after {};
  ASSERT_EQ(::stat(path("t").c_str(), &after), 0);
  EXPECT_EQ(after.st_size, 0);
  EXPECT_TRUE(read_file(path("t")).empty());
  auto later = [](const timespec& a, const timespec& b) {
    return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
  };
  EXPECT_TRUE(later(after.st_mtim, before.st_mtim));
  EXPECT_TRUE(later(after.st_ctim, before.st_ctim));
  remount();
  EXPECT_TRUE(read_file(path("t")).empty());
}

}  // namespace
}  // namespace densefs::test
