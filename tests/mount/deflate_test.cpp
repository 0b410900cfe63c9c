// gzip files through a real mount: stored raw at once, re-encoded with the
// deflate codec by the background re-encoder (or `densefs recompress`), and
// read back byte-exact before, after, across a remount and after a kill -9
// in the middle of the pass; hostile gzip files (a bomb, a truncated one)
// are counted as fallbacks and kept exact; `densefs fsck --deep` agrees.
#include <zlib.h>

#include <algorithm>
#include <map>

#include "tests/mount/mount_fixture.h"
#include "tests/zlib_deflate.h"

namespace densefs::test {
namespace {

using namespace std::chrono_literals;

// Every 100th .gz man page of this machine (about 200), by relative path,
// plus made-up ones when there are none: a test that always has input.
std::map<std::string, std::string> gzip_files() {
  std::map<std::string, std::string> files;
  std::vector<stdfs::path> all;
  std::error_code ec;
  for (auto it = stdfs::recursive_directory_iterator("/usr/share/man", ec);
       !ec && it != stdfs::end(it); it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec) && it->path().extension() == ".gz")
      all.push_back(it->path());
  }
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i < all.size(); i += 100) {
    std::string name = all[i].lexically_relative("/usr/share/man").string();
    std::replace(name.begin(), name.end(), '/', '_');
    files["man_" + name] = read_file(all[i]);
  }
  for (int i = 0; i < 20; ++i)
    files["made_" + std::to_string(i) + ".gz"] =
        gzip_with_zlib(compressible_bytes(20000 + i * 997, i));
  return files;
}

std::uint64_t codec_chunks(const nlohmann::json& stats, const char* codec) {
  const auto& codecs = stats["codecs"];
  return codecs.contains(codec) ? codecs[codec]["chunks"].get<std::uint64_t>() : 0;
}

class deflate : public mount_test {
 protected:
  std::string mount_options() const override { return "chunk_cache=4M"; }

  std::map<std::string, std::string> write_all(const stdfs::path& dir) {
    auto files = gzip_files();
    // Hostile: 64 MiB of zeros in a ~64 KB gzip (inflates past the 16 MiB
    // cap for a chunk this size), and a gzip file cut in half.
    files["bomb.gz"] = gzip_with_zlib(std::string(64u << 20, '\0'));
    const std::string whole = gzip_with_zlib(compressible_bytes(100000, 99));
    files["truncated.gz"] = whole.substr(0, whole.size() / 2);
    stdfs::create_directories(dir);
    for (const auto& [name, bytes] : files) write_file(dir / name, bytes);
    return files;
  }

  void expect_all_exact(const std::map<std::string, std::string>& files, const stdfs::path& dir) {
    for (const auto& [name, bytes] : files)
      EXPECT_TRUE(same_bytes(bytes, read_file(dir / name))) << name;
  }

  // Runs a Python script that makes files in a directory of its own
  // (argv[1]), copies them into the mount's `dir` and checks them there;
  // the files by name, empty when the script failed.
  std::map<std::string, std::string> copy_in_made_by_python(const std::string& script,
                                                            const std::string& dir) {
    const stdfs::path made = work_ / dir;
    stdfs::create_directories(made);
    const auto py = run_command({"python3", "-c", script, made.string()});
    std::map<std::string, std::string> files;
    if (py.exit_code != 0) {
      ADD_FAILURE() << py.err;
      return files;
    }
    for (const auto& e : stdfs::directory_iterator(made))
      files[e.path().filename().string()] = read_file(e.path());
    stdfs::create_directories(path(dir));
    for (const auto& [name, bytes] : files) write_file(path(dir) / name, bytes);
    expect_all_exact(files, path(dir));
    return files;
  }

  bool background_done(std::chrono::seconds limit) {
    return eventually([&] { return stats_u64("pending_recompress") == 0; }, limit);
  }
};

TEST_F(deflate, gzip_files_are_stored_raw_then_recompressed_and_read_back_exact) {
  const auto files = write_all(path("gz"));
  // Readable at once, and stored as they came: no CPU spent at write.
  expect_all_exact(files, path("gz"));
  const nlohmann::json fresh = info(path("gz") / "made_0.gz");
  EXPECT_EQ(fresh["file_type"], "gzip") << fresh.dump();

  ASSERT_TRUE(background_done(300s)) << stats().dump();
  const nlohmann::json s = stats();
  EXPECT_GE(codec_chunks(s, "deflate"), files.size() * 8 / 10) << s.dump();
  ASSERT_TRUE(s["types"].contains("gzip")) << s.dump();
  EXPECT_EQ(s["types"]["gzip"]["files"].get<std::uint64_t>(), files.size());
  // The bomb and the truncated file at least: refused, counted, kept.
  EXPECT_GE(s["types"]["gzip"]["fallbacks"].get<std::uint64_t>(), 2u) << s.dump();
  EXPECT_LT(s["types"]["gzip"]["stored_bytes"].get<std::uint64_t>(),
            s["types"]["gzip"]["logical_bytes"].get<std::uint64_t>());
  EXPECT_NE(daemon_log().find("inflates to more than"), std::string::npos) << daemon_log();

  // Per file (`densefs info`): the man pages are stored with deflate and
  // smaller (zlib -9 of the made-up text leaves zstd too little to gain).
  std::size_t man = 0, smaller = 0;
  for (const auto& [name, bytes] : files) {
    if (!name.starts_with("man_")) continue;
    ++man;
    const nlohmann::json one = info(path("gz") / name);
    if (one["chunks"][0]["codec"] == "deflate" &&
        one["stored_bytes"].get<std::uint64_t>() < bytes.size())
      ++smaller;
  }
  EXPECT_GE(smaller * 10, man * 9) << smaller << " of " << man;
  const nlohmann::json bomb = info(path("gz") / "bomb.gz");
  EXPECT_NE(bomb["chunks"][0]["codec"], "deflate") << bomb.dump();

  expect_all_exact(files, path("gz"));
  remount();
  expect_all_exact(files, path("gz"));
  unmount();
  const auto fsck = run_command({densefs_binary(), "fsck", store_.string(), "--deep"}, 300s);
  EXPECT_EQ(fsck.exit_code, 0) << fsck.out << fsck.err;
  mount();
}

class deflate_no_threads : public deflate {
 protected:
  std::string mount_options() const override { return "chunk_cache=4M,recompress_threads=0"; }
};

// Without re-encoder threads the queue waits; `densefs recompress` on the
// unmounted store does the work offline, and the store reads back exact.
TEST_F(deflate_no_threads, densefs_recompress_applies_the_codec_offline) {
  const auto files = write_all(path("gz"));
  EXPECT_EQ(codec_chunks(stats(), "deflate"), 0u);
  unmount();
  const auto r = run_command({densefs_binary(), "recompress", "--json", store_.string()}, 600s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  mount();
  EXPECT_GE(codec_chunks(stats(), "deflate"), files.size() * 8 / 10) << stats().dump();
  expect_all_exact(files, path("gz"));
}

// Zip-based files (here made by Python's zipfile, as a docx, an odt, a jar
// and a whl would be) get the deflate codec from the default policy: type
// `zip`, stored as they came, then recompressed in the background, exact.
TEST_F(deflate, zip_files_get_the_codec_by_default) {
  const auto files = copy_in_made_by_python(R"(
import random, sys, zipfile
words = "the of and file system store chunk codec deflate zip entry page text".split()
for i, ext in enumerate(["docx", "odt", "jar", "whl", "zip", "epub"]):
    rng = random.Random(i)
    with zipfile.ZipFile(f"{sys.argv[1]}/doc{i}.{ext}", "w") as z:
        z.writestr("mimetype", "application/x-test", zipfile.ZIP_STORED)
        for m in range(8):
            lines = (" ".join(rng.choice(words) for _ in range(12)) for _ in range(3000))
            z.writestr(f"part/{m}.xml", "\n".join(lines), zipfile.ZIP_DEFLATED, compresslevel=6)
)",
                                            "zip");
  ASSERT_EQ(files.size(), 6u);

  ASSERT_TRUE(background_done(300s)) << stats().dump();
  for (const auto& [name, bytes] : files) {
    const nlohmann::json one = info(path("zip") / name);
    EXPECT_EQ(one["file_type"], "zip") << name << one.dump();
    EXPECT_EQ(one["chunks"][0]["codec"], "deflate") << name << one.dump();
    EXPECT_LT(one["stored_bytes"].get<std::uint64_t>(), bytes.size() * 9 / 10) << name;
  }
  const nlohmann::json s = stats();
  ASSERT_TRUE(s["types"].contains("zip")) << s.dump();
  EXPECT_EQ(s["types"]["zip"]["files"].get<std::uint64_t>(), files.size());
  remount();
  expect_all_exact(files, path("zip"));
}

// PNG files (type `png`) and a document whose pictures are PNG members
// (made here by Python's zlib and zipfile, as a desktop suite saves them)
// get the deflate codec by default, their pixels in JPEG XL: stored far
// smaller once the background pass is done, exact before and after a
// remount.
TEST_F(deflate, png_pictures_get_their_pixels_recompressed_by_default) {
  const auto files = copy_in_made_by_python(R"(
import random, struct, sys, zipfile, zlib
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
def png(w, h, seed):
    rng = random.Random(seed)
    rows = b"".join(bytes([0]) + bytes(255 if c == 3 else (x * 2 + y + c * 60 + (rng.randrange(9) == 0)) % 256
                    for x in range(w) for c in range(4)) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))
for i in range(3):
    open(f"{sys.argv[1]}/icon{i}.png", "wb").write(png(64 + 32 * i, 48 + 16 * i, i))
with zipfile.ZipFile(f"{sys.argv[1]}/slides.odp", "w") as z:
    z.writestr("mimetype", "application/vnd.oasis.opendocument.presentation", zipfile.ZIP_STORED)
    z.writestr("content.xml", "<office:document>" + "<p>slide</p>" * 400 + "</office:document>",
               zipfile.ZIP_DEFLATED)
    z.writestr("Pictures/a.png", png(120, 90, 7), zipfile.ZIP_STORED)
    z.writestr("Pictures/b.png", png(100, 80, 8), zipfile.ZIP_DEFLATED)
)",
                                            "pictures");
  ASSERT_EQ(files.size(), 4u);

  ASSERT_TRUE(background_done(300s)) << stats().dump();
  for (const auto& [name, bytes] : files) {
    const nlohmann::json one = info(path("pictures") / name);
    EXPECT_EQ(one["file_type"], name.ends_with(".png") ? "png" : "zip") << name << one.dump();
    EXPECT_EQ(one["chunks"][0]["codec"], "deflate") << name << one.dump();
    EXPECT_LT(one["stored_bytes"].get<std::uint64_t>(), bytes.size() * 8 / 10) << name;
  }
  remount();
  expect_all_exact(files, path("pictures"));
}

TEST_F(deflate, a_kill_during_the_background_pass_loses_nothing) {
  const auto files = write_all(path("gz"));
  sync_mount();
  eventually([&] { return codec_chunks(stats(), "deflate") >= 5; }, 120s);
  kill_daemon();
  mount();
  expect_all_exact(files, path("gz"));
  ASSERT_TRUE(background_done(300s)) << stats().dump();
  expect_all_exact(files, path("gz"));
}

}  // namespace
}  // namespace densefs::test
