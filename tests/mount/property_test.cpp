// Property test: random sequences of write / overwrite / truncate / unlink /
// rename / link / copy_file_range / unlink-while-open run against a densefs
// mount and a plain directory side by side. After every sequence both trees
// must hold the same names and bytes (also after a remount), and `densefs
// fsck` must find every refcount equal to its references and no leaked
// chunk; after everything is deleted the store must hold no chunk at all.
//
// Seeds: DENSEFS_PROPERTY_SEEDS="1 2 3" (default three fixed seeds), ops per
// seed DENSEFS_PROPERTY_OPS (default 250). A failure prints the seed and the
// operation log, so it can be replayed. Each sequence is also checked after
// a kill -9 of the daemon and a remount.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

std::vector<std::uint64_t> seeds() {
  std::vector<std::uint64_t> out;
  if (const char* env = std::getenv("DENSEFS_PROPERTY_SEEDS")) {
    std::istringstream in(env);
    for (std::uint64_t s; in >> s;) out.push_back(s);
  }
  if (out.empty()) out = {1, 2, 3};
  return out;
}

int ops_per_seed() {
  const char* env = std::getenv("DENSEFS_PROPERTY_OPS");
  return env ? std::atoi(env) : 250;
}

// One side of the comparison: a directory (the mount or the plain one).
struct side {
  stdfs::path root;
  stdfs::path at(const std::string& name) const { return root / name; }
};

class property : public mount_test {
 protected:
  // Runs `ops` random operations on both trees, logging each to log_.
  void run_sequence(std::uint64_t seed, int ops);
  void expect_same_trees(const std::string& log);
  nlohmann::json fsck();

  std::ostringstream log_;
  std::mt19937_64 rng_;
  // Data pool: slices of a few large buffers, so that writes repeat content
  // (dedup inside and across files) as well as bring new content.
  std::vector<std::string> pool_;
  std::string data(std::size_t n) {
    if (rng_() % 3 == 0) return random_bytes(n, rng_());
    const std::string& src = pool_[rng_() % pool_.size()];
    const std::size_t from = rng_() % (src.size() - std::min(src.size(), n) + 1);
    std::string d = src.substr(from, n);
    d.resize(n, 'z');
    return d;
  }
  std::uint64_t pick(std::uint64_t bound) { return bound == 0 ? 0 : rng_() % bound; }
};

constexpr int k_names = 8;

std::string name_of(std::uint64_t i) {
  return "f" + std::to_string(i);
}

void property::run_sequence(std::uint64_t seed, int ops) {
  rng_.seed(seed);
  pool_ = {random_bytes(3 * k_mib, seed * 7 + 1), compressible_bytes(3 * k_mib, seed * 7 + 2),
           std::string(k_mib, '\0')};
  const side a{mnt_ / "p"};
  const side b{scratch_ / "p"};
  stdfs::create_directories(a.root);
  stdfs::create_directories(b.root);
  log_.str("");
  std::ostringstream& log = log_;
  // Files held open across operations (unlink-while-open), per side.
  std::vector<std::pair<int, int>> held;

  for (int op = 0; op < ops; ++op) {
    const std::string n1 = name_of(pick(k_names));
    const std::string n2 = name_of(pick(k_names));
    const auto size_of = [&](const std::string& n) -> std::uint64_t {
      struct stat st {};
      return ::stat(b.at(n).c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    };
    const auto kind = pick(100);
    if (kind < 35) {
      // Write at a random place: inside, at the end, or past it (a hole);
      // sizes from a few bytes to several MiB, crossing 4 MiB slots.
      const std::uint64_t size = size_of(n1);
      const std::uint64_t off = pick(size + 2 * k_mib);
      const std::size_t len = pick(4) == 0 ? pick(6 * k_mib) + 1 : pick(200 * k_kib) + 1;
      const std::string d = data(len);
      log << op << ": write " << n1 << " off=" << off << " len=" << len << "\n";
      for (const side* s : {&a, &b}) {
        const int fd = ::open(s->at(n1).c_str(), O_WRONLY | O_CREAT, 0644);
        ASSERT_GE(fd, 0) << s->at(n1) << ": " << strerror(errno) << "\n" << log.str();
        ASSERT_TRUE(pwrite_all(fd, d, off)) << log.str();
        ASSERT_EQ(::close(fd), 0) << strerror(errno) << "\n" << log.str();
      }
    } else if (kind < 45) {
      // Truncate: shrink (possibly inside a chunk) or grow.
      const std::uint64_t size = size_of(n1);
      const std::uint64_t to = pick(2) ? pick(size + 1) : size + pick(5 * k_mib);
      log << op << ": truncate " << n1 << " to=" << to << "\n";
      for (const side* s : {&a, &b}) {
        const int r = ::truncate(s->at(n1).c_str(), static_cast<off_t>(to));
        if (r != 0) {
          ASSERT_EQ(errno, ENOENT) << log.str();
        }
      }
    } else if (kind < 55) {
      log << op << ": unlink " << n1 << "\n";
      for (const side* s : {&a, &b}) ::unlink(s->at(n1).c_str());
    } else if (kind < 65) {
      // Rename, over an existing name or not.
      log << op << ": rename " << n1 << " -> " << n2 << "\n";
      int results[2];
      int i = 0;
      for (const side* s : {&a, &b})
        results[i++] = ::rename(s->at(n1).c_str(), s->at(n2).c_str()) == 0 ? 0 : errno;
      ASSERT_EQ(results[0], results[1]) << log.str();
    } else if (kind < 72) {
      log << op << ": link " << n1 << " -> " << n2 << "\n";
      int results[2];
      int i = 0;
      for (const side* s : {&a, &b})
        results[i++] = ::link(s->at(n1).c_str(), s->at(n2).c_str()) == 0 ? 0 : errno;
      ASSERT_EQ(results[0], results[1]) << log.str();
    } else if (kind < 85) {
      // copy_file_range, aligned (shares chunks) or not (copies).
      const std::uint64_t size = size_of(n1);
      if (size == 0 || n1 == n2) continue;
      const bool aligned = pick(2) == 0;
      const std::uint64_t src = aligned ? 0 : pick(size);
      const std::uint64_t dst = aligned ? 0 : pick(size_of(n2) + k_mib);
      const std::size_t len = static_cast<std::size_t>(aligned ? size : pick(size - src) + 1);
      log << op << ": copy_file_range " << n1 << "@" << src << " -> " << n2 << "@" << dst
          << " len=" << len << "\n";
      // Hard links can make n1 and n2 one file: an overlapping copy within
      // a file is EINVAL on both sides (the kernel checks it).
      int results[2];
      int i = 0;
      for (const side* s : {&a, &b}) {
        const int in = ::open(s->at(n1).c_str(), O_RDONLY);
        const int out = ::open(s->at(n2).c_str(), O_WRONLY | O_CREAT, 0644);
        ASSERT_GE(in, 0) << log.str();
        ASSERT_GE(out, 0) << log.str();
        loff_t in_off = static_cast<loff_t>(src);
        loff_t out_off = static_cast<loff_t>(dst);
        std::size_t left = len;
        int result = 0;
        while (left > 0) {
          const ssize_t got = ::copy_file_range(in, &in_off, out, &out_off, left, 0);
          if (got < 0) result = errno;
          if (got <= 0) break;
          left -= static_cast<std::size_t>(got);
        }
        results[i++] = result;
        ::close(in);
        ASSERT_EQ(::close(out), 0) << log.str();
      }
      ASSERT_EQ(results[0], results[1]) << strerror(results[0]) << "\n" << log.str();
    } else if (kind < 92) {
      // Open, then unlink: the file lives on until the last close; write
      // through the fd meanwhile.
      log << op << ": hold+unlink " << n1 << "\n";
      const int fa = ::open(a.at(n1).c_str(), O_RDWR);
      const int fb = ::open(b.at(n1).c_str(), O_RDWR);
      ASSERT_EQ(fa < 0, fb < 0) << log.str();
      if (fa < 0) continue;
      ::unlink(a.at(n1).c_str());
      ::unlink(b.at(n1).c_str());
      const std::string d = data(pick(300 * k_kib) + 1);
      ASSERT_TRUE(pwrite_all(fa, d, 1000)) << log.str();
      ASSERT_TRUE(pwrite_all(fb, d, 1000)) << log.str();
      held.emplace_back(fa, fb);
    } else {
      // Close a held file (its chunks go), or fsync a file.
      if (!held.empty()) {
        log << op << ": close held\n";
        const auto [fa, fb] = held.back();
        held.pop_back();
        struct stat sa {
        }, sb{};
        ASSERT_EQ(::fstat(fa, &sa), 0);
        ASSERT_EQ(::fstat(fb, &sb), 0);
        ASSERT_EQ(sa.st_size, sb.st_size) << log.str();
        EXPECT_TRUE(same_bytes(pread_exact(fb, static_cast<std::size_t>(sb.st_size), 0),
                               pread_exact(fa, static_cast<std::size_t>(sa.st_size), 0)))
            << "held file\n"
            << log.str();
        ::close(fa);
        ::close(fb);
      }
    }
  }
  for (const auto& [fa, fb] : held) {
    ::close(fa);
    ::close(fb);
  }
}

void property::expect_same_trees(const std::string& log) {
  std::map<std::string, std::pair<std::uint64_t, nlink_t>> names_b;
  for (const auto& e : stdfs::directory_iterator(scratch_ / "p")) {
    struct stat st {};
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    names_b[e.path().filename()] = {static_cast<std::uint64_t>(st.st_size), st.st_nlink};
  }
  std::map<std::string, std::pair<std::uint64_t, nlink_t>> names_a;
  for (const auto& e : stdfs::directory_iterator(mnt_ / "p")) {
    struct stat st {};
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    names_a[e.path().filename()] = {static_cast<std::uint64_t>(st.st_size), st.st_nlink};
  }
  ASSERT_EQ(names_a, names_b) << log;
  for (const auto& [name, _] : names_b) {
    EXPECT_TRUE(same_bytes(read_file(scratch_ / "p" / name), read_file(mnt_ / "p" / name)))
        << name << "\n"
        << log;
  }
}

nlohmann::json property::fsck() {
  const auto r = run_command({densefs_binary(), "fsck", store_.string(), "--json"});
  try {
    return nlohmann::json::parse(r.out);
  } catch (const nlohmann::json::exception&) {
    ADD_FAILURE() << "densefs fsck --json printed no JSON (exit " << r.exit_code << "): " << r.out
                  << r.err;
    return {};
  }
}

TEST_F(property, random_operations_match_a_plain_directory_and_keep_refcounts_exact) {
  for (const std::uint64_t seed : seeds()) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_sequence(seed, ops_per_seed());
    if (HasFatalFailure()) return;
    const std::string log = log_.str();
    expect_same_trees(log);
    // kill -9 after `densefs sync`: write-behind holds closed files' data
    // until a group commit, and the sync commits it (to the store's
    // write-ahead log, in the kernel's page cache), so nothing is lost.
    sync_mount();
    kill_daemon();
    mount();
    expect_same_trees(log);
    remount();
    expect_same_trees(log);

    // Refcounts equal references and nothing leaked, checked offline.
    unmount();
    const auto report = fsck();
    EXPECT_TRUE(report.value("clean", false)) << report.dump(2) << "\n" << log;
    for (const char* kind : {"wrong_refcount", "leaked_chunk", "dangling_extent"}) {
      EXPECT_EQ(report.dump().find(kind), std::string::npos) << kind << ": " << report.dump(2);
    }
    mount();

    // Everything deleted: no chunk may remain referenced or stored.
    stdfs::remove_all(mnt_ / "p");
    stdfs::remove_all(scratch_ / "p");
    EXPECT_TRUE(eventually([&] { return stats_u64("chunks") == 0; }))
        << "chunks left after deleting everything: " << stats_u64("chunks") << "\n"
        << log;
    EXPECT_EQ(stats_u64("stored_bytes"), 0u);
  }
}

}  // namespace
}  // namespace densefs::test
