// Crash rounds: a writer process creates, appends, overwrites, truncates,
// renames and deletes files on a mount (plus JPEGs that the daemon re-encodes
// in the background, and `densefs gc` while deleting), and journals outside
// the mount, before each operation, every state each path may be found in
// after a crash. The daemon is killed with SIGKILL after a random delay;
// then `densefs fsck` must find no error, the store is mounted again and
// every path must be in one of its journalled states. The next round goes on
// with the same store.
//
// What densefs promises (docs/design.md, "Metadata operations" and "Writes"):
// * every operation is one RocksDB batch: after a crash all of it or none;
// * `fsync`/`fsyncdir` make everything before them durable: every file's
//   staged data is committed (write-behind holds closed files' data for up
//   to -o commit=SEC) and the whole WAL is synced. So after any fsync every
//   path must hold exactly what the writer last wrote;
// * a rename of a file with staged data commits that data first, so a name
//   holds one of the states of the file renamed to it, whole;
// * a file created through the mount is found whole as of its last close,
//   or absent: never empty or cut short (its new-file row, removed by the
//   commit that stores the last of its data);
// * a file's persisted size never runs ahead of committed data: a file being
//   appended to is found as a prefix of what was written (never zeros that
//   were not written); an overwrite leaves each byte old or new; a big
//   truncate may stop part of the way (a prefix, no shorter than the new
//   size).
// Renames of a durable file are also checked as a pair: exactly one of the
// two names holds the file.
//
// DENSEFS_CRASH_ROUNDS=N (default 50, 13 in sanitizer builds; DENSEFS_SOAK=1: 300),
// DENSEFS_CRASH_SEED=N to repeat a run's choices (kill timing still varies).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

using namespace std::chrono_literals;

// Sanitized builds run the daemon several times slower: fewer rounds there,
// still every focus and one huge delete (round 12).
constexpr int k_default_rounds = k_sanitized_build ? 13 : 50;

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::map<std::string, std::string> jpeg_corpus() {
  std::map<std::string, std::string> files;
  const stdfs::path corpus = test::corpus_dir("jpeg");
  if (!stdfs::is_directory(corpus)) return files;
  for (const auto& e : stdfs::directory_iterator(corpus)) {
    if (!e.is_regular_file() || e.file_size() > 3 * k_mib) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    files[e.path().filename().string()] = ss.str();
  }
  return files;
}

// One state a path may be found in after a crash.
struct alt {
  enum kind_t { absent, dir, exact, prefix, mix } kind = absent;
  std::vector<std::string> hashes;  // exact, prefix: one; mix: every version
  std::size_t min_len = 0;          // prefix: shortest acceptable length
};

std::string format_alt(const alt& a) {
  switch (a.kind) {
    case alt::absent:
      return "absent";
    case alt::dir:
      return "dir";
    case alt::exact:
      return "exact " + a.hashes[0];
    case alt::prefix:
      return "prefix " + a.hashes[0] + " " + std::to_string(a.min_len);
    case alt::mix: {
      std::string s = "mix";
      for (const auto& h : a.hashes) s += " " + h;
      return s;
    }
  }
  return "?";
}

alt parse_alt(std::istringstream& in) {
  std::string kind;
  in >> kind;
  alt a;
  std::string h;
  if (kind == "absent") {
    a.kind = alt::absent;
  } else if (kind == "dir") {
    a.kind = alt::dir;
  } else if (kind == "exact") {
    a.kind = alt::exact;
    in >> h;
    a.hashes.push_back(h);
  } else if (kind == "prefix") {
    a.kind = alt::prefix;
    in >> h >> a.min_len;
    a.hashes.push_back(h);
  } else if (kind == "mix") {
    a.kind = alt::mix;
    while (in >> h) a.hashes.push_back(h);
  } else {
    ADD_FAILURE() << "journal: unknown state kind \"" << kind << "\"";
  }
  return a;
}

// What a round concentrates on (the kill lands while it happens).
// huge_delete is not in the rotation: it needs a mount with small chunks.
enum class focus { writes, renames, jpeg, gc_deletes, big_delete, count, huge_delete };
const char* focus_name(focus f) {
  switch (f) {
    case focus::writes:
      return "writes";
    case focus::renames:
      return "renames";
    case focus::jpeg:
      return "jpeg";
    case focus::gc_deletes:
      return "gc+deletes";
    case focus::big_delete:
      return "big_delete";
    case focus::huge_delete:
      return "huge_delete";
    case focus::count:
      break;
  }
  return "?";
}

// The writer: runs in a forked child until the dead mount fails a call.
// Paths are relative to the mount. Before each operation it journals what
// the operation may leave behind ("A path STATE": one more acceptable
// state); after an fsync it journals the one state of every path changed
// since the last one ("C path STATE"). "R from to" precedes the rename of a
// durable file: then exactly one of the two names may hold it.
class writer {
 public:
  writer(stdfs::path mnt, stdfs::path journal, stdfs::path blobs,
         std::map<std::string, std::string> files, std::set<std::string> dirs,
         const std::map<std::string, std::string>& jpegs, std::uint64_t seed, focus f, int round)
      : mnt_(std::move(mnt)),
        blobs_(std::move(blobs)),
        cur_(std::move(files)),
        dirs_(std::move(dirs)),
        jpegs_(jpegs),
        rng_(seed),
        focus_(f),
        round_(round) {
    journal_fd_ = ::open(journal.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (journal_fd_ < 0) die("open journal", errno);
  }

  [[noreturn]] void run() {
    // Each op ends the child when the mount is gone (ENOTCONN/ECONNABORTED;
    // ECANCELED, or EINTR as an fsync once got, for a request in flight on
    // fuse-over-io-uring). Nothing signals the writer, and a writer that
    // stops before the kill fails the round.
    for (;;) {
      step();
      ++ops_;
    }
  }

 private:
  [[noreturn]] void die(const std::string& what, int e) {
    constexpr int k_exit_eio = 5;
    if (e == ENOTCONN || e == ECONNABORTED || e == ECANCELED || e == EINTR) {
      journal("X " + std::to_string(ops_) + " ops, then " + what + ": " + std::strerror(e));
      ::_exit(0);
    }
    if (e == EIO) {
      // The kernel's own EIO when the daemon dies under a call, e.g. a
      // close() whose write-back of dirty pages (writeback_cache) the abort
      // ended. The parent accepts it only after the kill and only if the
      // daemon logged no error (densefs logs every EIO it returns).
      journal("X " + std::to_string(ops_) + " ops, then " + what + ": " + std::strerror(e));
      ::_exit(k_exit_eio);
    }
    std::fprintf(stderr, "crash writer: %s: %s (op %d, round %d)\n", what.c_str(), std::strerror(e),
                 ops_, round_);
    ::_exit(3);
  }

  void journal(const std::string& line) {
    const std::string l = line + "\n";
    if (::write(journal_fd_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) {
      std::fprintf(stderr, "crash writer: journal write failed\n");
      ::_exit(4);
    }
  }

  std::string blob(const std::string& content) {
    const std::string h = hex64(xxh3(content));
    const stdfs::path p = blobs_ / h;
    if (!stdfs::exists(p)) {
      const stdfs::path tmp = blobs_ / (h + ".tmp");
      std::ofstream out(tmp, std::ios::binary);
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
      out.close();
      stdfs::rename(tmp, p);
    }
    return h;
  }

  void add(const std::string& p, const alt& a) {
    dirty_.insert(p);
    journal("A " + p + " " + format_alt(a));
  }
  alt exact_of(const std::string& content) { return {alt::exact, {blob(content)}, 0}; }
  alt prefix_of(const std::string& content, std::size_t min_len) {
    return {alt::prefix, {blob(content)}, min_len};
  }

  std::string full(const std::string& p) const { return (mnt_ / p).string(); }

  std::uint64_t pick(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  std::string content(std::size_t n) {
    return chance(0.5) ? random_bytes(n, rng_()) : compressible_bytes(n, rng_());
  }
  std::size_t some_size() {
    const auto r = pick(0, 99);
    if (r < 10) return pick(0, 10);
    if (r < 70) return pick(1, 256 * k_kib);
    if (r < 95) return pick(256 * k_kib, 3 * k_mib);
    return pick(4 * k_mib - 10, 9 * k_mib);  // several 4 MiB slots
  }

  // A path whose every state since the last sync is one "family" of
  // operations, so their acceptable states stay simple unions.
  enum class family { none, grow, overwrite, frozen };

  std::string some_file(std::initializer_list<family> allowed) {
    std::vector<const std::string*> c;
    for (const auto& [p, data] : cur_) {
      const auto it = fam_.find(p);
      const family f = it == fam_.end() ? family::none : it->second;
      for (family a : allowed)
        if (a == f) c.push_back(&p);
    }
    if (c.empty()) return {};
    return *c[pick(0, c.size() - 1)];
  }
  std::string some_dir() {
    std::vector<std::string> ds{"d0", "d1", "d2", "d3"};
    return ds[pick(0, ds.size() - 1)];
  }
  std::string new_name(const std::string& dir, const char* stem) {
    return dir + "/" + stem + std::to_string(round_) + "_" + std::to_string(++seq_);
  }

  int open_file(const std::string& p, int flags) {
    const int fd = ::open(full(p).c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) die("open " + p, errno);
    return fd;
  }
  void write_all(int fd, const std::string& p, std::string_view data, std::uint64_t off) {
    while (!data.empty()) {
      // Uneven pieces: partial slots, small and big FUSE writes.
      const std::size_t n = std::min<std::size_t>(data.size(), pick(1, 1536 * k_kib));
      const ssize_t w = ::pwrite(fd, data.data(), n, static_cast<off_t>(off));
      if (w < 0) die("pwrite " + p, errno);
      data.remove_prefix(static_cast<std::size_t>(w));
      off += static_cast<std::uint64_t>(w);
    }
  }
  void close_file(int fd, const std::string& p, bool do_fsync) {
    if (do_fsync) {
      if (::fsync(fd) != 0) die("fsync " + p, errno);
    }
    if (::close(fd) != 0) die("close " + p, errno);
    if (do_fsync) synced();
  }

  // After an fsync everything before it is durable: each changed path has
  // exactly one state now.
  void synced() {
    for (const auto& p : dirty_) {
      if (cur_.count(p)) {
        journal("C " + p + " " + format_alt(exact_of(cur_.at(p))));
      } else if (dirs_.count(p)) {
        journal("C " + p + " dir");
      } else {
        journal("C " + p + " absent");
      }
    }
    dirty_.clear();
    fam_.clear();
    min_len_.clear();
    versions_.clear();
  }
  void fsync_dir(const std::string& d) {
    const int fd = ::open(full(d).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) die("open dir " + d, errno);
    if (::fsync(fd) != 0) die("fsync dir " + d, errno);
    ::close(fd);
    synced();
  }

  std::uint64_t total_bytes() const {
    std::uint64_t t = 0;
    for (const auto& [p, d] : cur_) t += d.size();
    return t;
  }

  void create(const std::string& p, const std::string& data, bool do_fsync) {
    // A new file is found whole or not at all (its new-file row): never
    // empty or a prefix, though it was created before its data came.
    add(p, exact_of(data));
    const int fd = open_file(p, O_WRONLY | O_CREAT | O_EXCL);
    cur_[p] = data;
    fam_[p] = family::grow;
    min_len_[p] = 0;
    write_all(fd, p, data, 0);
    close_file(fd, p, do_fsync);
  }

  void op_create() { create(new_name(some_dir(), "f"), content(some_size()), chance(0.3)); }

  void op_append() {
    const std::string p = some_file({family::none, family::grow});
    if (p.empty()) return op_create();
    if (!fam_.count(p)) min_len_[p] = cur_[p].size();
    const std::string more = content(pick(1, chance(0.8) ? 200 * k_kib : 5 * k_mib));
    const std::uint64_t off = cur_[p].size();
    cur_[p] += more;
    add(p, prefix_of(cur_[p], min_len_[p]));
    fam_[p] = family::grow;
    const int fd = open_file(p, O_WRONLY);
    write_all(fd, p, more, off);
    close_file(fd, p, chance(0.3));
  }

  void op_overwrite() {
    std::string p = some_file({family::none, family::overwrite});
    if (p.empty() || cur_[p].empty()) return op_create();
    auto& vs = versions_[p];
    if (vs.empty()) vs.push_back(blob(cur_[p]));
    std::string data = cur_[p];
    const int fd = open_file(p, O_WRONLY);
    std::vector<std::pair<std::uint64_t, std::string>> pieces;
    for (auto n = pick(1, 4); n > 0; --n) {
      const std::uint64_t off = pick(0, data.size() - 1);
      const std::size_t len = pick(1, std::min<std::uint64_t>(data.size() - off, 2 * k_mib));
      std::string bytes = random_bytes(len, rng_());
      data.replace(off, len, bytes);
      pieces.emplace_back(off, std::move(bytes));
      // Pieces may overlap: a crash between two leaves bytes of the first.
      vs.push_back(blob(data));
    }
    alt a{alt::mix, vs, 0};
    add(p, a);
    fam_[p] = family::overwrite;
    cur_[p] = data;
    for (const auto& [off, bytes] : pieces) write_all(fd, p, bytes, off);
    close_file(fd, p, chance(0.3));
  }

  void op_truncate() {
    const std::string p = some_file({family::none});
    if (p.empty() || cur_[p].empty()) return op_create();
    const std::uint64_t len = pick(0, cur_[p].size() - 1);
    add(p, prefix_of(cur_[p], len));
    fam_[p] = family::frozen;
    cur_[p].resize(len);
    const int fd = open_file(p, O_WRONLY);
    if (::ftruncate(fd, static_cast<off_t>(len)) != 0) die("ftruncate " + p, errno);
    close_file(fd, p, chance(0.3));
  }

  // rename(from, to), `to` replaced if it exists.
  void rename_file(const std::string& from, const std::string& to) {
    if (!dirty_.count(from) && !dirty_.count(to)) {
      // Both durable: the pair is checked as one.
      journal("R " + from + " " + to);
    }
    // `to` may now hold anything `from` may hold.
    dirty_.insert(from);
    dirty_.insert(to);
    journal("M " + from + " " + to);
    cur_[to] = cur_[from];
    cur_.erase(from);
    fam_[from] = fam_[to] = family::frozen;
    if (::rename(full(from).c_str(), full(to).c_str()) != 0) die("rename " + from, errno);
  }

  void op_atomic_save() {
    // The editor's save: write a temporary, fsync it, rename over the
    // original, fsync the directory.
    std::string target = some_file({family::none});
    if (target.empty() || chance(0.2)) target = new_name(some_dir(), "s");
    const std::string dir = target.substr(0, target.find('/'));
    const std::string tmp = new_name(dir, "tmp");
    create(tmp, content(some_size()), chance(0.8));
    rename_file(tmp, target);
    if (chance(0.5)) fsync_dir(dir);
  }

  void op_move() {
    const std::string from = some_file({family::none, family::grow});
    if (from.empty()) return op_create();
    std::string to = chance(0.3) ? some_file({family::none}) : "";
    if (to.empty() || to == from) to = new_name(some_dir(), "m");
    rename_file(from, to);
    if (chance(0.3)) fsync_dir(to.substr(0, to.find('/')));
  }

  void remove_file(const std::string& p) {
    add(p, {alt::absent, {}, 0});
    cur_.erase(p);
    fam_[p] = family::frozen;
    if (::unlink(full(p).c_str()) != 0) die("unlink " + p, errno);
  }

  void op_unlink() {
    const std::string p = some_file({family::none, family::grow, family::overwrite});
    if (p.empty()) return;
    remove_file(p);
    if (chance(0.2)) fsync_dir(p.substr(0, p.find('/')));
  }

  // Unlinked while open and written to: an orphan the next mount finishes.
  void op_orphan() {
    const std::string p = some_file({family::none});
    if (p.empty()) return;
    const int fd = open_file(p, O_RDWR);
    remove_file(p);
    const std::string more = content(pick(1, 3 * k_mib));
    write_all(fd, p, more, 0);
    if (chance(0.5)) {
      if (::fsync(fd) != 0) die("fsync orphan " + p, errno);
      synced();
    }
    held_.push_back(fd);  // open until the crash
  }

  void op_jpeg() {
    if (jpegs_.empty()) return op_create();
    auto it = jpegs_.begin();
    std::advance(it, static_cast<long>(pick(0, jpegs_.size() - 1)));
    const std::string p = new_name("jpg", "j") + ".jpg";
    create(p, it->second, chance(0.7));
  }

  void op_big_delete() {
    // A directory of many files made durable, then deleted file by file.
    const std::string d = "big" + std::to_string(round_) + "_" + std::to_string(++seq_);
    add(d, {alt::dir, {}, 0});
    if (::mkdir(full(d).c_str(), 0755) != 0) die("mkdir " + d, errno);
    dirs_.insert(d);
    const auto n = pick(50, 300);
    std::vector<std::string> names;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::string p = d + "/b" + std::to_string(i);
      const std::size_t size = chance(0.03) ? pick(1 * k_mib, 4 * k_mib) : pick(0, 8 * k_kib);
      create(p, content(size), false);
      names.push_back(p);
    }
    fsync_dir(d);
    for (const auto& p : names) remove_file(p);
    add(d, {alt::absent, {}, 0});
    dirs_.erase(d);
    if (::rmdir(full(d).c_str()) != 0) die("rmdir " + d, errno);
    if (chance(0.5)) fsync_dir(".");
  }

  void op_delete_many() {
    // Deletes about half of the files (JPEG copies included), fsync at the end.
    std::vector<std::string> victims;
    for (const auto& [p, data] : cur_)
      if (!fam_.count(p) && chance(0.5)) victims.push_back(p);
    for (const auto& p : victims) remove_file(p);
    fsync_dir(".");
  }

  void step() {
    // Keep the live data small enough to read back every round.
    if (total_bytes() > 40 * k_mib) return op_delete_many();
    const auto r = pick(0, 99);
    switch (focus_) {
      case focus::writes:
        if (r < 30) return op_create();
        if (r < 50) return op_append();
        if (r < 75) return op_overwrite();
        if (r < 85) return op_truncate();
        if (r < 95) return op_unlink();
        return op_orphan();
      case focus::renames:
        if (r < 45) return op_atomic_save();
        if (r < 75) return op_move();
        if (r < 90) return op_create();
        return op_unlink();
      case focus::jpeg:
        if (r < 60) return op_jpeg();
        if (r < 80) return op_overwrite();
        return op_unlink();
      case focus::gc_deletes:
        if (r < 15) return op_delete_many();
        if (r < 45) return op_unlink();
        if (r < 65) return op_jpeg();
        if (r < 85) return op_create();
        return op_overwrite();
      case focus::big_delete:
        if (r < 50) return op_big_delete();
        if (r < 75) return op_unlink();
        return op_create();
      case focus::huge_delete:
        if (!huge_done_) return op_huge_delete();
        return r < 50 ? op_create() : op_unlink();
      case focus::count:
        break;
    }
  }

  // A file of more than 16,384 extents is released in batches after its
  // last close, each batch its own commit, the inode in the orphan list
  // until the end (docs/design.md): the kill is timed to land meanwhile.
  void op_huge_delete() {
    huge_done_ = true;
    const std::string p = new_name("d0", "huge");
    // 64 MiB of ~2 KiB chunks: ~32,000 extents, two batches and a rest.
    create(p, random_bytes(64 * k_mib, rng_()), true);
    journal("H");  // the parent times the kill from here
    remove_file(p);
    fsync_dir("d0");
  }

  stdfs::path mnt_;
  stdfs::path blobs_;
  std::map<std::string, std::string> cur_;
  std::set<std::string> dirs_;
  const std::map<std::string, std::string>& jpegs_;
  std::mt19937_64 rng_;
  focus focus_;
  int round_;
  int journal_fd_ = -1;
  int ops_ = 0;
  int seq_ = 0;
  std::set<std::string> dirty_;
  std::map<std::string, family> fam_;
  std::map<std::string, std::uint64_t> min_len_;
  std::map<std::string, std::vector<std::string>> versions_;
  std::vector<int> held_;
  bool huge_done_ = false;
};

class crash : public mount_test {
 protected:
  std::string mount_options() const override { return options_; }

  const std::string& blob(const std::string& h) {
    if (auto it = blob_cache_.find(h); it != blob_cache_.end()) return it->second;
    std::ifstream in(blobs_ / h, std::ios::binary);
    if (!in) ADD_FAILURE() << "journal names blob " << h << " that the writer did not store";
    std::stringstream ss;
    ss << in.rdbuf();
    return blob_cache_[h] = ss.str();
  }

  // Whether `found` (nullopt: no such path; "\0dir": a directory) is `a`.
  bool matches(const alt& a, const std::optional<std::string>& found, bool is_dir) {
    switch (a.kind) {
      case alt::absent:
        return !found && !is_dir;
      case alt::dir:
        return is_dir;
      case alt::exact:
        return found && *found == blob(a.hashes[0]);
      case alt::prefix: {
        if (!found) return false;
        const std::string& b = blob(a.hashes[0]);
        return found->size() >= a.min_len && found->size() <= b.size() &&
               b.compare(0, found->size(), *found) == 0;
      }
      case alt::mix: {
        if (!found) return false;
        std::vector<const std::string*> vs;
        for (const auto& h : a.hashes) vs.push_back(&blob(h));
        for (const auto* v : vs)
          if (v->size() != found->size()) return false;
        for (std::size_t i = 0; i < found->size(); ++i) {
          bool ok = false;
          for (const auto* v : vs) ok = ok || (*v)[i] == (*found)[i];
          if (!ok) return false;
        }
        return true;
      }
    }
    return false;
  }

  std::string describe(const std::optional<std::string>& found, bool is_dir) {
    if (is_dir) return "a directory";
    if (!found) return "absent";
    return std::to_string(found->size()) + " bytes, xxh3 " + hex64(xxh3(*found));
  }

  // Reads every path under the mount: files by content, directories.
  void scan(std::map<std::string, std::string>& files, std::set<std::string>& dirs) {
    for (auto it = stdfs::recursive_directory_iterator(mnt_);
         it != stdfs::recursive_directory_iterator(); ++it) {
      const std::string rel = stdfs::relative(it->path(), mnt_).string();
      if (it->is_directory()) {
        dirs.insert(rel);
      } else if (it->is_regular_file()) {
        files[rel] = read_file(it->path());
      } else {
        ADD_FAILURE() << "unexpected entry type at " << rel;
      }
    }
  }

  stdfs::path blobs_;
  std::map<std::string, std::string> blob_cache_;
  std::string options_;
};

TEST_F(crash, kill_minus_nine_rounds_keep_synced_data_and_never_garbage) {
  const char* soak = std::getenv("DENSEFS_SOAK");
  int rounds = soak != nullptr && std::string(soak) == "1" ? 300 : k_default_rounds;
  if (const char* r = std::getenv("DENSEFS_CRASH_ROUNDS")) rounds = std::stoi(r);
  std::uint64_t seed = static_cast<std::uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
  if (const char* s = std::getenv("DENSEFS_CRASH_SEED")) seed = std::stoull(s);
  std::printf("crash: seed %llu (DENSEFS_CRASH_SEED), %d rounds\n",
              static_cast<unsigned long long>(seed), rounds);
  std::mt19937_64 rng(seed);
  const auto jpegs = jpeg_corpus();

  blobs_ = work_ / "blobs";
  const stdfs::path journal_path = work_ / "journal";

  // The durable state at the start of each round, as the last check read it.
  std::map<std::string, std::string> files;
  std::set<std::string> dirs{"d0", "d1", "d2", "d3", "jpg"};
  for (const auto& d : dirs) ASSERT_TRUE(stdfs::create_directory(path(d)));

  int kills = 0;
  int failures = 0;  // paths and renames found in no journalled state
  std::uint64_t verified = 0;
  std::uint64_t orphans_seen = 0;
  std::uint64_t queued_seen = 0;  // re-encodings pending at a kill
  std::uint64_t not_latest = 0;   // paths found in an older state than last written
  std::uint64_t writer_ops = 0;
  int writeback_rounds = 0;
  std::uint64_t huge_orphans = 0;  // orphans after kills during batched releases
  std::map<std::string, int> per_focus;
  for (int round = 0; round < rounds && !HasFailure(); ++round) {
    // The state read last round is what the store holds; fsyncdir makes it
    // durable in the doc's sense before the writer changes it.
    {
      const int fd = ::open(mnt_.c_str(), O_RDONLY | O_DIRECTORY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::fsync(fd), 0) << strerror(errno);
      ::close(fd);
    }
    stdfs::remove_all(blobs_);
    stdfs::create_directories(blobs_);
    blob_cache_.clear();
    // Twice per 50 rounds, a huge file with small chunks deleted.
    const bool huge = round % 25 == 12;
    const auto f =
        huge ? focus::huge_delete : static_cast<focus>(round % static_cast<int>(focus::count));
    // Every seventh round (varying focus) with the kernel's write-back cache (dirty pages in
    // the kernel until close or fsync writes them back): the same promises.
    // Not for writers beside others, which refuse it.
    const bool writeback = !huge && round % 7 == 3 && !mounts_shared();
    if (huge) {
      options_ = "codec=+cdc:min=1K:avg=2K:max=8K";
      remount();
    } else if (writeback) {
      options_ = "writeback_cache";
      remount();
    }
    ++per_focus[focus_name(f)];
    if (writeback) ++writeback_rounds;
    const std::uint64_t writer_seed = rng();

    const std::size_t log_start = daemon_log().size();
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      writer w(mnt_, journal_path, blobs_, files, dirs, jpegs, writer_seed, f, round);
      w.run();
    }

    // gc through the control socket while the writer deletes, killed with
    // the daemon at a random point of its work.
    std::thread gc;
    if (f == focus::gc_deletes || (f == focus::big_delete && rng() % 2 == 0)) {
      const auto gc_delay = std::chrono::milliseconds(rng() % 600);
      gc = std::thread([this, gc_delay] {
        std::this_thread::sleep_for(gc_delay);
        run_command({densefs_binary(), "gc", store_.string()}, 60s);
      });
    }
    // Most kills land in the first second, some later (background
    // re-encoding of JPEGs written earlier in the round).
    auto delay_ms = rng() % 4 == 0 ? 1000 + rng() % 2000 : 20 + rng() % 1000;
    if (huge) {
      // From the unlink of the huge file (its writing takes seconds).
      for (int i = 0; i < 12000; ++i) {
        std::ifstream j(journal_path);
        std::stringstream ss;
        ss << j.rdbuf();
        if (ss.str().find("\nH\n") != std::string::npos) break;
        std::this_thread::sleep_for(5ms);
      }
      delay_ms = rng() % 150;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));

    int writer_status = 0;
    // A writer that stopped before the kill failed, whatever its status.
    ASSERT_NE(::waitpid(child, &writer_status, WNOHANG), child)
        << "round " << round << ": the writer stopped (status " << writer_status
        << ") before the crash; daemon log:\n"
        << daemon_log().substr(log_start);
    kill_daemon([&] {
      // The writer stops at its first failed call; it must be gone before
      // the dead mount is unmounted, or it would write into the directory
      // below.
      for (int i = 0; i < 200; ++i) {
        if (::waitpid(child, &writer_status, WNOHANG) == child) return;
        std::this_thread::sleep_for(50ms);
      }
      ::kill(child, SIGKILL);
      ::waitpid(child, &writer_status, 0);
      ADD_FAILURE() << "the writer did not stop within 10 s of the crash";
    });
    ++kills;
    if (gc.joinable()) gc.join();
    // Exit 5: EIO from the kernel as the daemon died, never one densefs
    // returned (it would have logged an error this round).
    const std::string round_log = daemon_log().substr(log_start);
    const bool eio_from_crash = WIFEXITED(writer_status) && WEXITSTATUS(writer_status) == 5 &&
                                round_log.find(": error: ") == std::string::npos;
    ASSERT_TRUE(WIFEXITED(writer_status) && (WEXITSTATUS(writer_status) == 0 || eio_from_crash))
        << "round " << round << ": the writer failed (status " << writer_status
        << "); daemon log of the round:\n"
        << round_log;

    // fsck after the crash: no errors; orphans are normal (the next mount
    // finishes them).
    const auto fsck = run_command({densefs_binary(), "fsck", store_.string(), "--json"}, 300s);
    ASSERT_EQ(fsck.exit_code, 0) << "round " << round << " (" << focus_name(f)
                                 << "): fsck after the crash:\n"
                                 << fsck.out << fsck.err;
    const auto counts = nlohmann::json::parse(fsck.out)["counts"];
    orphans_seen += counts["orphans"].get<std::uint64_t>();
    if (huge) huge_orphans += counts["orphans"].get<std::uint64_t>();
    options_.clear();
    queued_seen += counts["queued"].get<std::uint64_t>();

    // Replay the journal into each path's acceptable states.
    std::map<std::string, std::vector<alt>> alts;
    for (const auto& [p, data] : files) {
      alts[p] = {{alt::exact, {hex64(xxh3(data))}, 0}};
      blob_cache_[hex64(xxh3(data))] = data;
    }
    for (const auto& d : dirs) alts[d] = {{alt::dir, {}, 0}};
    struct pair_check {
      std::string from, to;
      std::vector<alt> from_states, to_states;
    };
    std::vector<pair_check> pairs;
    std::ifstream journal(journal_path);
    std::string line;
    int lines = 0;
    while (std::getline(journal, line)) {
      ++lines;
      std::istringstream in(line);
      std::string tag, p;
      in >> tag >> p;
      auto states_of = [&](const std::string& q) -> std::vector<alt>& {
        auto [it, fresh] = alts.try_emplace(q);
        if (fresh) it->second.push_back({alt::absent, {}, 0});
        return it->second;
      };
      if (tag == "A") {
        states_of(p).push_back(parse_alt(in));
      } else if (tag == "C") {
        alts[p] = {parse_alt(in)};
        std::erase_if(pairs, [&](const pair_check& c) { return c.from == p || c.to == p; });
      } else if (tag == "R") {
        std::string to;
        in >> to;
        pairs.push_back({p, to, states_of(p), states_of(to)});
      } else if (tag == "M") {
        std::string to;
        in >> to;
        auto from_states = states_of(p);
        auto& to_states = states_of(to);
        for (const auto& a : from_states)
          if (a.kind != alt::absent) to_states.push_back(a);
        states_of(p).push_back({alt::absent, {}, 0});
      } else if (tag == "H") {
        continue;
      } else if (tag == "X") {
        writer_ops += std::stoull(p);
      } else {
        ADD_FAILURE() << "journal line " << lines << ": " << line;
      }
    }

    mount();
    std::map<std::string, std::string> found_files;
    std::set<std::string> found_dirs;
    scan(found_files, found_dirs);
    for (const auto& p : found_files)
      EXPECT_TRUE(alts.count(p.first)) << "round " << round << ": unexpected file " << p.first;
    for (const auto& d : found_dirs)
      EXPECT_TRUE(alts.count(d)) << "round " << round << ": unexpected directory " << d;
    auto lookup = [&](const std::string& p) -> std::optional<std::string> {
      if (auto it = found_files.find(p); it != found_files.end()) return it->second;
      return std::nullopt;
    };
    for (const auto& [p, states] : alts) {
      const auto got = lookup(p);
      const bool is_dir = found_dirs.count(p) > 0;
      bool ok = false;
      for (const auto& a : states) ok = ok || matches(a, got, is_dir);
      if (ok && states.size() > 1 && !matches(states.back(), got, is_dir)) ++not_latest;
      ++verified;
      if (!ok) {
        std::string want;
        for (const auto& a : states) want += "\n  " + format_alt(a);
        ++failures;
        ADD_FAILURE() << "round " << round << " (" << focus_name(f) << ", seed " << seed
                      << "): " << p << " is " << describe(got, is_dir)
                      << ", none of the states journalled:" << want;
      }
    }
    for (const auto& c : pairs) {
      // A durable file renamed: either the rename happened (from gone) or
      // not (from still there, to as before) — never both gone or both old.
      const auto from = lookup(c.from);
      const auto to = lookup(c.to);
      bool ok = false;
      if (from) {
        bool from_ok = false, to_ok = false;
        for (const auto& a : c.from_states) from_ok = from_ok || matches(a, from, false);
        for (const auto& a : c.to_states) to_ok = to_ok || matches(a, to, false);
        ok = from_ok && to_ok;
      } else {
        for (const auto& a : c.from_states) ok = ok || matches(a, to, false);
      }
      if (!ok) ++failures;
      EXPECT_TRUE(ok) << "round " << round << ": rename " << c.from << " -> " << c.to
                      << " is half done: from " << describe(from, false) << ", to "
                      << describe(to, false);
    }
    files = std::move(found_files);
    dirs = std::move(found_dirs);

    // Every tenth round a clean unmount: fsck must then find no orphan
    // left (the mount after the crash finished them).
    if (round % 10 == 9) {
      unmount();
      const auto clean = run_command({densefs_binary(), "fsck", store_.string(), "--json"}, 300s);
      EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
      EXPECT_EQ(nlohmann::json::parse(clean.out)["counts"]["orphans"], 0) << clean.out;
      mount();
    }
  }
  std::string focus_counts;
  for (const auto& [name, n] : per_focus) focus_counts += " " + name + "=" + std::to_string(n);
  std::printf("crash: %d rounds with -o writeback_cache\n", writeback_rounds);
  std::printf(
      "crash: rounds per focus:%s; writer operations %llu; after the kills fsck found %llu "
      "orphans (%llu after huge deletes) and %llu queued re-encodings; %llu paths were found in "
      "an earlier state than the last one written\n",
      focus_counts.c_str(), static_cast<unsigned long long>(writer_ops),
      static_cast<unsigned long long>(orphans_seen), static_cast<unsigned long long>(huge_orphans),
      static_cast<unsigned long long>(queued_seen), static_cast<unsigned long long>(not_latest));
  std::printf("COUNTS: crash rounds=%d kills=%d verified_files=%llu failures=%d\n", kills, kills,
              static_cast<unsigned long long>(verified),
              failures == 0 && HasFailure() ? 1 : failures);
}

}  // namespace
}  // namespace densefs::test
