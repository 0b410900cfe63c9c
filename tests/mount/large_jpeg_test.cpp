// JPEGs larger than one 4 MiB chunk through a real mount (densefs issue 14):
// the background re-encoder, and `densefs recompress` on an unmounted store,
// make each one Lepton file (a lepton_file payload on the first chunk,
// lepton_member payloads on the others); they read back byte-exact cold and
// from any offset, a partial overwrite keeps the rest exact, two copies
// share their chunks, and a kill -9 during the background pass loses
// nothing: every file reads exact after the remount and `fsck --deep` is
// clean. The JPEGs are made with libjpeg at test time.
#include <fcntl.h>
#include <unistd.h>

#include "tests/make_jpeg.h"
#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

using namespace std::chrono_literals;

std::uint64_t codec_chunks(const nlohmann::json& stats, const char* codec) {
  const auto& codecs = stats["codecs"];
  return codecs.contains(codec) ? codecs[codec]["chunks"].get<std::uint64_t>() : 0;
}

class large_jpeg : public mount_test {
 protected:
  void SetUp() override {
#ifndef DENSEFS_HAVE_LIBJPEG
    DENSEFS_SKIP_UNLESS_REQUIRED("built without libjpeg (libjpeg-dev): no JPEGs to make");
#else
    mount_test::SetUp();
#endif
  }

  // A small decoded-chunk cache, so that re-reads decode stored payloads.
  std::string mount_options() const override {
    return "chunk_cache=8M";
  }

  // A photo-like JPEG of two or three chunks (4.5 to 9 MB).
  static std::string big_jpeg(std::uint32_t seed) {
#ifdef DENSEFS_HAVE_LIBJPEG
    std::string j = make_jpeg(4000, 3000, 94, seed);
    EXPECT_GT(j.size(), 4u << 20);
    return j;
#else
    return {};
#endif
  }

  bool background_done(std::chrono::seconds limit) {
    return eventually([&] { return stats_u64("pending_recompress") == 0; }, limit);
  }

  void fsync_file(const stdfs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << p;
    EXPECT_EQ(::fsync(fd), 0) << p;
    ::close(fd);
  }

  // `densefs fsck --deep` on the unmounted store.
  void expect_fsck_deep_clean() {
    const bool was_mounted = mounted();
    if (was_mounted) unmount();
    const command_result r = run_command({densefs_binary(), "fsck", "--deep", store_.string()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    if (was_mounted) mount();
  }

  void expect_lepton_file(const stdfs::path& p) {
    const nlohmann::json i = info(p);
    ASSERT_GE(i["chunks"].size(), 2u) << i.dump();
    EXPECT_EQ(i["chunks"][0]["codec"], "lepton_file") << i.dump();
    for (std::size_t k = 1; k < i["chunks"].size(); ++k)
      EXPECT_EQ(i["chunks"][k]["codec"], "lepton_member") << i.dump();
  }
};

TEST_F(large_jpeg, becomes_one_lepton_file_and_reads_back_exact_from_any_offset) {
  const std::string jpeg = big_jpeg(1);
  write_file(path("big.jpg"), jpeg);
  EXPECT_TRUE(same_bytes(jpeg, read_file(path("big.jpg"))));
  ASSERT_TRUE(background_done(300s)) << stats().dump();
  expect_lepton_file(path("big.jpg"));
  const nlohmann::json s = stats();
  EXPECT_EQ(codec_chunks(s, "lepton_file"), 1u) << s.dump();
  // Lepton saves ~20% on photos; per chunk it saved only on the first.
  EXPECT_LT(s["stored_bytes"].get<std::uint64_t>(), jpeg.size() * 88 / 100) << s.dump();

  remount();  // cold: the second chunk first, alone
  const int fd = ::open(path("big.jpg").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const std::uint64_t at = (4u << 20) + 12345;
  EXPECT_TRUE(same_bytes(jpeg.substr(at, 100000), pread_exact(fd, 100000, at)));
  ::close(fd);
  remount();
  EXPECT_TRUE(same_bytes(jpeg, read_file(path("big.jpg"))));
  expect_fsck_deep_clean();
}

TEST_F(large_jpeg, a_partial_overwrite_keeps_every_byte_exact) {
  std::string jpeg = big_jpeg(2);
  write_file(path("big.jpg"), jpeg);
  ASSERT_TRUE(background_done(300s)) << stats().dump();
  expect_lepton_file(path("big.jpg"));

  // The same writes on ext4 give the expected bytes.
  write_file(scratch_ / "big.jpg", jpeg);
  const std::string patch = random_bytes(3000, 9);
  for (const stdfs::path& p : {path("big.jpg"), scratch_ / "big.jpg"}) {
    const int fd = ::open(p.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << p;
    EXPECT_TRUE(pwrite_all(fd, patch, (4u << 20) + 777));  // inside chunk 1
    EXPECT_TRUE(pwrite_all(fd, patch, 100));               // inside chunk 0
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  const std::string expected = read_file(scratch_ / "big.jpg");
  EXPECT_TRUE(same_bytes(expected, read_file(path("big.jpg"))));
  background_done(300s);
  remount();
  EXPECT_TRUE(same_bytes(expected, read_file(path("big.jpg"))));
  expect_fsck_deep_clean();
  EXPECT_TRUE(same_bytes(expected, read_file(path("big.jpg"))));
  // Deleted, it leaves no chunk behind (members released their first chunk).
  stdfs::remove(path("big.jpg"));
  remount();
  EXPECT_EQ(stats_u64("chunks"), 0u) << stats().dump();
  expect_fsck_deep_clean();
}

TEST_F(large_jpeg, two_copies_share_their_chunks) {
  const std::string jpeg = big_jpeg(3);
  write_file(path("a.jpg"), jpeg);
  ASSERT_TRUE(background_done(300s)) << stats().dump();
  const std::uint64_t chunks = stats_u64("chunks");
  const std::uint64_t stored = stats_u64("stored_bytes");
  write_file(path("b.jpg"), jpeg);
  ASSERT_TRUE(background_done(300s)) << stats().dump();
  EXPECT_EQ(stats_u64("chunks"), chunks);
  EXPECT_EQ(stats_u64("stored_bytes"), stored);
  expect_lepton_file(path("b.jpg"));
  stdfs::remove(path("a.jpg"));
  remount();
  EXPECT_TRUE(same_bytes(jpeg, read_file(path("b.jpg"))));
  expect_fsck_deep_clean();
}

TEST_F(large_jpeg, kill_9_during_the_background_pass_loses_nothing) {
  std::map<std::string, std::string> files;
  for (std::uint32_t seed = 10; seed < 13; ++seed)
    files["p" + std::to_string(seed) + ".jpg"] = big_jpeg(seed);
  for (const auto& [name, bytes] : files) {
    write_file(path(name), bytes);
    fsync_file(path(name));
  }
  // Some files done, others queued or being encoded.
  eventually([&] { return codec_chunks(stats(), "lepton_file") >= 1; }, 120s);
  kill_daemon();
  {
    const command_result r = run_command({densefs_binary(), "fsck", "--deep", store_.string()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  mount();
  for (const auto& [name, bytes] : files)
    EXPECT_TRUE(same_bytes(bytes, read_file(path(name)))) << name;
  ASSERT_TRUE(background_done(300s)) << stats().dump();
  EXPECT_EQ(codec_chunks(stats(), "lepton_file"), files.size()) << stats().dump();
  remount();
  for (const auto& [name, bytes] : files)
    EXPECT_TRUE(same_bytes(bytes, read_file(path(name)))) << name;
  expect_fsck_deep_clean();
}

class large_jpeg_offline : public large_jpeg {
 protected:
  std::string mount_options() const override { return "recompress_threads=0"; }
};

TEST_F(large_jpeg_offline, densefs_recompress_makes_lepton_files_of_an_unmounted_store) {
  const std::string jpeg = big_jpeg(4);
  write_file(path("big.jpg"), jpeg);
  write_file(path("copy.jpg"), jpeg);
  unmount();
  const command_result r = run_command({densefs_binary(), "recompress", "--json", store_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["lepton_files"], 1) << r.out;  // the copy shares its chunks
  EXPECT_LT(j["stored_bytes_after"].get<std::uint64_t>(),
            j["stored_bytes_before"].get<std::uint64_t>());
  // Its first Lepton file made the store format 4 (a PostgreSQL store is
  // format 5 from mkfs on): older builds refuse it.
  const std::string format = read_file(store_ / "FORMAT");
  EXPECT_TRUE(format.find("format_version=4\n") != std::string::npos ||
              format.find("format_version=5\n") != std::string::npos)
      << format;
  // An export that keeps stored encodings decodes these instead (a
  // member's payload holds none of its chunk's bytes).
  const stdfs::path czip = work_ / "big.czip";
  const command_result p =
      run_command({densefs_binary(), "czip", "pack", "--store", store_.string(), "--codec", "keep",
                   "/big.jpg", czip.string()});
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  const command_result u = run_command({densefs_binary(), "czip", "unpack", czip.string(), "-"});
  ASSERT_EQ(u.exit_code, 0) << u.err;
  EXPECT_TRUE(same_bytes(jpeg, u.out));
  mount();
  expect_lepton_file(path("copy.jpg"));
  EXPECT_TRUE(same_bytes(jpeg, read_file(path("big.jpg"))));
  EXPECT_TRUE(same_bytes(jpeg, read_file(path("copy.jpg"))));
  expect_fsck_deep_clean();
}

}  // namespace
}  // namespace densefs::test
