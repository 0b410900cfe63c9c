// `densefs cat --encoding=br`: a stored file as one Brotli stream that stock
// `brotli -d` decodes to the exact bytes, from a live mount (through the
// daemon's control socket) and from an unmounted store (--store).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

bool have_brotli() {
  return run_command({"sh", "-c", "command -v brotli"}).exit_code == 0;
}

class export_files : public mount_test {
 protected:
  void SetUp() override {
    mount_test::SetUp();
    if (!have_brotli())
      DENSEFS_SKIP_UNLESS_REQUIRED("the brotli command (Debian package brotli) is missing");
  }

  // `densefs cat ARGS... -o OUT`; returns OUT's content, failing the test
  // when the command fails.
  std::string cat(std::vector<std::string> args) {
    const stdfs::path out = scratch_ / ("cat-" + std::to_string(++outputs_));
    std::vector<std::string> argv = {densefs_binary(), "cat"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("-o");
    argv.push_back(out.string());
    const auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 0) << "densefs cat failed: " << r.err << daemon_log();
    EXPECT_TRUE(r.err.empty()) << r.err;
    return r.exit_code == 0 ? read_file(out) : std::string();
  }

  // Stock `brotli -d` of `stream`.
  std::string brotli_decode(const std::string& stream) {
    const stdfs::path in = scratch_ / ("stream-" + std::to_string(++outputs_) + ".br");
    write_file(in, stream);
    const auto r = run_command({"brotli", "-d", "-c", in.string()});
    EXPECT_EQ(r.exit_code, 0) << "brotli -d refused the stream: " << r.err;
    return r.out;
  }

  int outputs_ = 0;
};

std::string corpus_jpeg() {
  const stdfs::path corpus = test::corpus_dir("jpeg");
  if (!stdfs::is_directory(corpus)) return {};
  std::vector<stdfs::path> files;
  for (const auto& e : stdfs::directory_iterator(corpus)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files.empty() ? std::string() : read_file(files.front());
}

// The files every test exports: name -> content. Written through the mount.
std::map<std::string, std::string> write_test_files(const stdfs::path& mnt) {
  std::map<std::string, std::string> files;
  // More than two chunks of text: whole Broccoli chunks plus a partial tail.
  files["text.txt"] = compressible_bytes(9 * k_mib + 12345, 1);
  files["random.bin"] = random_bytes(5 * k_mib, 2);
  files["empty"] = "";
  files["small.txt"] = "hello, brotli\n";
  if (auto jpeg = corpus_jpeg(); !jpeg.empty()) files["photo.jpg"] = jpeg;
  for (const auto& [name, content] : files) write_file(mnt / name, content);

  // A hole: 10 MiB of nothing, then text, then a hole up to 20 MiB.
  std::string sparse(20 * k_mib, '\0');
  const std::string middle = compressible_bytes(100000, 3);
  sparse.replace(10 * k_mib, middle.size(), middle);
  {
    const int fd = ::open((mnt / "sparse").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(pwrite_all(fd, middle, 10 * k_mib));
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(20 * k_mib)), 0);
    ::close(fd);
  }
  files["sparse"] = sparse;

  // An extent that uses part of its chunk: text truncated inside a chunk.
  std::string cut = compressible_bytes(6 * k_mib, 4);
  write_file(mnt / "cut.txt", cut);
  EXPECT_EQ(::truncate((mnt / "cut.txt").c_str(), static_cast<off_t>(5 * k_mib + 7)), 0);
  cut.resize(5 * k_mib + 7);
  files["cut.txt"] = cut;
  return files;
}

TEST_F(export_files, live_mount_br_decodes_with_stock_brotli) {
  const auto files = write_test_files(mnt_);
  for (const auto& [name, content] : files) {
    SCOPED_TRACE(name);
    const std::string br = cat({"--encoding=br", path(name).string()});
    EXPECT_TRUE(same_bytes(content, brotli_decode(br)));
    if (name == "text.txt") {
      EXPECT_LT(br.size(), content.size() / 3);
    }
    EXPECT_TRUE(same_bytes(content, cat({"--encoding=identity", path(name).string()})));
    EXPECT_TRUE(same_bytes(content, cat({path(name).string()})));  // identity is the default
  }
}

TEST_F(export_files, br_copies_stored_broccoli_chunks_as_they_are) {
  // Two whole chunks of text: the default policy stores text as Broccoli,
  // and the export is those stored streams joined (no recompression), so it
  // is about as long as their stored sizes together.
  const std::string text = compressible_bytes(8 * k_mib, 5);
  write_file(path("two-chunks.txt"), text);
  const auto j = info(path("two-chunks.txt"));
  std::uint64_t stored = 0;
  bool all_broccoli = true;
  for (const auto& c : j.value("chunks", nlohmann::json::array())) {
    stored += c.value("stored_size", std::uint64_t{0});
    all_broccoli = all_broccoli && c.value("codec", std::string()) == "broccoli";
  }
  if (!all_broccoli) GTEST_SKIP() << "text is not stored as broccoli here: " << j.dump();
  const std::string br = cat({"--encoding=br", path("two-chunks.txt").string()});
  EXPECT_TRUE(same_bytes(text, brotli_decode(br)));
  EXPECT_LE(br.size(), stored + 64) << "the export is bigger than the stored chunks";
  EXPECT_GE(br.size() + 64, stored);
}

TEST_F(export_files, live_export_includes_data_not_yet_closed) {
  // Staged data reaches the store first: cat fsyncs the file.
  const std::string first = compressible_bytes(3 * k_mib, 6);
  const int fd = ::open(path("open.txt").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, first, 0));
  EXPECT_TRUE(same_bytes(first, brotli_decode(cat({"--encoding=br", path("open.txt").string()}))));
  const std::string more = compressible_bytes(2 * k_mib, 7);
  ASSERT_TRUE(pwrite_all(fd, more, first.size()));
  EXPECT_TRUE(
      same_bytes(first + more, brotli_decode(cat({"--encoding=br", path("open.txt").string()}))));
  ::close(fd);
}

TEST_F(export_files, store_export_after_unmount_matches) {
  const auto files = write_test_files(mnt_);
  ASSERT_EQ(::mkdir(path("dir").c_str(), 0755), 0);
  write_file(path("dir/nested.txt"), "nested\n");
  unmount();
  for (const auto& [name, content] : files) {
    SCOPED_TRACE(name);
    const std::string br = cat({"--store", store_.string(), "--encoding=br", "/" + name});
    EXPECT_TRUE(same_bytes(content, brotli_decode(br)));
    EXPECT_TRUE(same_bytes(content, cat({"--store", store_.string(), "/" + name})));
  }
  EXPECT_EQ(brotli_decode(cat({"--store", store_.string(), "--encoding=br", "/dir/nested.txt"})),
            "nested\n");
  mount();  // the fixture's TearDown unmounts
}

TEST_F(export_files, control_socket_is_private_and_removed_at_unmount) {
  const stdfs::path socket = store_ / "control.sock";
  // The mount appears before the daemon has opened the store (a FUSE
  // request would wait for it; this lstat does not).
  struct stat st {};
  ASSERT_TRUE(eventually([&] { return ::lstat(socket.c_str(), &st) == 0; }))
      << "no control socket while mounted";
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  unmount();
  EXPECT_FALSE(stdfs::exists(socket)) << "control socket left behind after unmount";
  mount();
}

TEST_F(export_files, errors_are_one_line_and_leave_no_output) {
  write_file(path("file"), "x");
  ASSERT_EQ(::mkdir(path("dir").c_str(), 0755), 0);
  sync_mount();  // the create and the mkdir are put off; --store reads the store
  const stdfs::path plain = scratch_ / "plain-file";
  write_file(plain, "not on densefs");
  const stdfs::path out = scratch_ / "out";
  const std::vector<std::vector<std::string>> failures = {
      {"--encoding=br", plain.string()},            // not a densefs mount
      {"--encoding=br", path("missing").string()},  // no such file
      {"--encoding=br", path("dir").string()},      // a directory
      {"--store", store_.string(), "/file"},        // allowed: see below
      {"--store", store_.string(), "/missing"},     // no such file in the store
      {"--encoding=gzip", path("file").string()},   // unknown encoding
      {"--store", scratch_.string(), "/file"},      // not a store
  };
  for (const auto& args : failures) {
    std::vector<std::string> argv = {densefs_binary(), "cat"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("-o");
    argv.push_back(out.string());
    const auto r = run_command(argv);
    SCOPED_TRACE(args.back());
    if (args[1] == store_.string() && args[2] == "/file") {
      // A read-only open of a mounted store is allowed (like `densefs
      // stats STORE`); it sees what the daemon has written.
      EXPECT_EQ(r.exit_code, 0) << r.err;
      stdfs::remove(out);
      continue;
    }
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err.rfind("densefs: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(stdfs::exists(out));
  }
  const auto r = run_command({densefs_binary(), "cat", "--encoding=br", plain.string()});
  EXPECT_NE(r.err.find("not on a densefs mount"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace densefs::test

namespace densefs::test {
namespace {

// -o allow_other: other users read files through the mount, but the control
// socket is the owner's: their br export fails with a clear line, and
// identity (a plain read) works.
class export_other_user : public export_files {
 protected:
  std::string mount_options() const override { return "allow_other"; }
};

TEST_F(export_other_user, br_is_for_the_owner_identity_for_every_reader) {
  if (::geteuid() != 0) DENSEFS_SKIP_UNLESS_REQUIRED("needs root to run a command as another user");
  if (run_command({"sh", "-c", "command -v setpriv"}).exit_code != 0)
    DENSEFS_SKIP_UNLESS_REQUIRED("setpriv (util-linux) is missing");
  // The test directories are private; let "nobody" reach the mount (the
  // store directory stays 0700).
  stdfs::permissions(
      work_, stdfs::perms::owner_all | stdfs::perms::others_exec | stdfs::perms::group_exec);
  const std::string content = compressible_bytes(100000, 9);
  write_file(path("shared.txt"), content, 0644);
  const std::vector<std::string> as_nobody = {"setpriv",        "--reuid=65534",  "--regid=65534",
                                              "--clear-groups", densefs_binary(), "cat"};
  auto argv = as_nobody;
  argv.insert(argv.end(), {"--encoding=br", path("shared.txt").string()});
  auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, 1) << r.out.size() << " bytes out";
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("mount owner"), std::string::npos) << r.err;

  argv = as_nobody;
  argv.push_back(path("shared.txt").string());
  r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(same_bytes(content, r.out));
}

}  // namespace
}  // namespace densefs::test
