// `densefs czip pack PATH OUT` of a file on a live mount: the daemon streams
// the file's pieces through the control socket ("chunks"), the czip's
// chunks are the file's extents, whole stored chunks are copied as stored,
// and the czip unpacks to the exact bytes.
#include <fcntl.h>
#include <unistd.h>

#include <map>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

class czip_from_mount : public mount_test {
 protected:
  // `densefs czip pack --json ARGS... IN OUT`: the summary, failing the test
  // when the command fails.
  nlohmann::json pack(const stdfs::path& in, const stdfs::path& out,
                      std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {densefs_binary(), "czip", "pack", "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(in.string());
    argv.push_back(out.string());
    const auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 0) << "czip pack failed: " << r.err << daemon_log();
    if (r.exit_code != 0) return nlohmann::json::object();
    return nlohmann::json::parse(r.out);
  }

  std::string unpack(const stdfs::path& czip) {
    const auto r = run_command({densefs_binary(), "czip", "unpack", czip.string(), "-"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  // Extents that use a whole chunk (densefs info): what --codec keep reuses.
  std::uint64_t whole_extents(const stdfs::path& p) {
    const auto j = info(p);
    std::uint64_t n = 0;
    for (const auto& c : j.value("chunks", nlohmann::json::array()))
      if (c.value("length", 0u) == c.value("plain_size", 1u)) ++n;
    EXPECT_EQ(j.value("chunk_count", 0u), j.value("chunks", nlohmann::json::array()).size())
        << "the chunk list is truncated";
    return n;
  }

  int outputs_ = 0;
  stdfs::path next_out() { return scratch_ / ("out-" + std::to_string(++outputs_) + ".czip"); }
};

TEST_F(czip_from_mount, packs_by_extents_and_reuses_stored_chunks) {
  std::map<std::string, std::string> files;
  files["text.txt"] = compressible_bytes(9 * k_mib + 12345, 1);
  files["random.bin"] = random_bytes(5 * k_mib, 2);
  files["small.txt"] = "hello, czip\n";
  files["empty"] = "";
  for (const auto& [name, content] : files) write_file(path(name), content);
  // A hole between two pieces of text.
  std::string sparse(12 * k_mib, '\0');
  const std::string middle = compressible_bytes(300000, 3);
  sparse.replace(6 * k_mib, middle.size(), middle);
  {
    const int fd = ::open(path("sparse").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(pwrite_all(fd, middle, 6 * k_mib));
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(sparse.size())), 0);
    ::close(fd);
  }
  files["sparse"] = sparse;

  for (const auto& [name, content] : files) {
    SCOPED_TRACE(name);
    const std::uint64_t whole = whole_extents(path(name));
    const stdfs::path kept = next_out();
    const auto j = pack(path(name), kept, {"--codec", "keep"});
    EXPECT_EQ(j.value("original_size", 0u), content.size());
    EXPECT_EQ(j.value("reused_chunks", 0u), whole);
    EXPECT_TRUE(same_bytes(content, unpack(kept)));
    EXPECT_EQ(run_command({densefs_binary(), "czip", "verify", kept.string()}).exit_code, 0);

    // Only zstd chunks are reused with --codec zstd (the default).
    const stdfs::path zstd = next_out();
    const auto z = pack(path(name), zstd);
    EXPECT_LE(z.value("reused_chunks", 0u), whole);
    EXPECT_EQ(z.value("chunks", 0u), j.value("chunks", 1u));
    EXPECT_TRUE(same_bytes(content, unpack(zstd)));
  }
  EXPECT_GE(whole_extents(path("text.txt")), 3u);
}

TEST_F(czip_from_mount, includes_data_not_yet_closed) {
  // The client fsyncs the file first, as cat --encoding=br does.
  const std::string first = compressible_bytes(3 * k_mib, 6);
  const int fd = ::open(path("open.txt").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(pwrite_all(fd, first, 0));
  const stdfs::path out = next_out();
  pack(path("open.txt"), out, {"--codec", "keep"});
  EXPECT_TRUE(same_bytes(first, unpack(out)));
  ::close(fd);
}

TEST_F(czip_from_mount, a_chunker_reads_it_as_a_plain_file) {
  const std::string content = compressible_bytes(2 * k_mib, 7);
  write_file(path("f.txt"), content);
  const stdfs::path out = next_out();
  const auto j = pack(path("f.txt"), out, {"--chunker", "fixed:size=64K"});
  EXPECT_FALSE(j.contains("reused_chunks"));
  EXPECT_EQ(j.value("chunks", 0u), 32u);
  EXPECT_TRUE(same_bytes(content, unpack(out)));
}

}  // namespace
}  // namespace densefs::test
