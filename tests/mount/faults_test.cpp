// Faults under the store, through the store's own test-only I/O seam
// (store/metadata/fault_injection.h, DENSEFS_FAULT_INJECTION in the daemon's
// environment) and by damaging a blob file of an unmounted store: the error
// reaches the reader or writer as EIO with a log line, the daemon stays up,
// and nothing already stored is damaged.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fs/stall_watchdog.h"
#include "tests/mount/mount_fixture.h"

namespace densefs::test {
namespace {

class faults : public mount_test {
 protected:
  // Writes two files, flips a byte of one's payload in its payload file,
  // and checks fsck, a scrub of the live mount, the read errors and the
  // log. The damage is healed by a re-copy of the file into the mount, or
  // (heal_from_source) by fsck --repair-from a tree holding it renamed.
  void flipped_byte_case(bool heal_from_source);

  // Replaces the store by a new one with this payload backend (docs/packs.md)
  // and mounts it. The fault injection works under RocksDB's files, so the
  // tests that fail blob file I/O run on a blob store whatever mkfs's
  // default; pack files are read and written outside RocksDB.
  void use_backend(const char* backend) {
    unmount();
    stdfs::remove_all(store_);
    const auto mkfs = run_command(
        {densefs_binary(), "mkfs", store_.string(), std::string("--payloads=") + backend});
    ASSERT_EQ(mkfs.exit_code, 0) << mkfs.err;
    mount();
  }

  void TearDown() override {
    ::unsetenv("DENSEFS_FAULT_INJECTION");
    mount_test::TearDown();
  }

  // Mounts with DENSEFS_FAULT_INJECTION=spec in the daemon's environment
  // (the fixture spawns it with ours).
  void mount_with_faults(const char* spec) {
    ASSERT_EQ(::setenv("DENSEFS_FAULT_INJECTION", spec, 1), 0);
    mount();
    ::unsetenv("DENSEFS_FAULT_INJECTION");
  }

  // Reads a whole file; the errno of the first failing call, 0 if none.
  static int read_errno(const stdfs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) return errno;
    std::string buf(1 << 20, '\0');
    int e = 0;
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0) e = errno;
      if (n <= 0) break;
    }
    ::close(fd);
    return e;
  }

  void expect_fsck_clean() {
    const auto r = run_command({densefs_binary(), "fsck", store_.string(), "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  }
};

TEST_F(faults, bad_fault_spec_refuses_the_mount) {
  unmount();
  for (const char* bad : {"read_eio:after=x", "write_eio:files=blobs", "read_eio:nope=1",
                          "read_eio:after=1:after=2", "eio", "read_eio:p=0", "read_eio:p=1.5"}) {
    ::setenv("DENSEFS_FAULT_INJECTION", bad, 1);
    const auto r = run_command({densefs_binary(), "mount", "-f", store_.string(), mnt_.string()},
                               std::chrono::seconds(20));
    EXPECT_NE(r.exit_code, 0) << bad << " was accepted";
    EXPECT_NE(r.err.find("DENSEFS_FAULT_INJECTION"), std::string::npos) << bad << ": " << r.err;
    if (mounted_fs_type(mnt_)) run_command({"fusermount3", "-u", mnt_.string()});
  }
  ::unsetenv("DENSEFS_FAULT_INJECTION");
  mount();
}

// Payloads of 4 KiB and more live in RocksDB blob files: failing every read
// of those fails reads of file data, and nothing else.
TEST_F(faults, eio_on_store_reads_reaches_the_reader_and_damages_nothing) {
  ASSERT_NO_FATAL_FAILURE(use_backend("blob"));
  const std::string a = random_bytes(3 << 20, 1);
  const std::string b = compressible_bytes(2 << 20, 2);
  write_file(path("a"), a);
  write_file(path("b"), b);
  ASSERT_EQ(::mkdir(path("dir").c_str(), 0755), 0);
  unmount();  // memtables flushed: the payloads are in blob files now

  ASSERT_NO_FATAL_FAILURE(mount_with_faults("read_eio:files=blob"));
  EXPECT_EQ(log_lines_containing("fault injection on"), 1u) << daemon_log();
  EXPECT_EQ(read_errno(path("a")), EIO);
  EXPECT_EQ(read_errno(path("b")), EIO);
  EXPECT_GE(log_lines_containing("Input/output error") + log_lines_containing("injected fault"), 1u)
      << "no log line for the failed read:\n"
      << daemon_log();
  // Metadata still works, and so does new data (in the memtable, not a blob
  // file yet); the daemon is alive.
  struct stat st {};
  EXPECT_EQ(::stat(path("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(a.size()));
  EXPECT_TRUE(stdfs::is_directory(path("dir")));
  const std::string c = random_bytes(1 << 20, 3);
  write_file(path("c"), c);
  EXPECT_TRUE(same_bytes(c, read_file(path("c"))));
  EXPECT_EQ(read_errno(path("a")), EIO) << "a failed read must not be cached as data";
  unmount();

  mount();
  EXPECT_TRUE(same_bytes(a, read_file(path("a"))));
  EXPECT_TRUE(same_bytes(b, read_file(path("b"))));
  EXPECT_TRUE(same_bytes(c, read_file(path("c"))));
  unmount();
  expect_fsck_clean();
  mount();
}

// Random read faults (half the payload reads; the kernel retries a failed
// readahead, so a read fails when both tries do): every read returns
// the right bytes or EIO, never other bytes, and the daemon stays up.
TEST_F(faults, random_read_faults_give_exact_bytes_or_eio_never_others) {
  ASSERT_NO_FATAL_FAILURE(use_backend("blob"));
  std::vector<std::string> files;
  for (int i = 0; i < 16; ++i) {
    files.push_back(random_bytes(300 * k_kib, 100 + i));
    write_file(path("f" + std::to_string(i)), files.back());
  }
  unmount();
  const char* spec = "read_eio:files=blob:p=0.5:seed=5";
  ASSERT_NO_FATAL_FAILURE(mount_with_faults(spec));
  int exact = 0, eio = 0;
  // Six rounds, and more until a failure has reached a reader: how many do
  // is up to timing (the kernel's retry of a failed readahead, the decoded
  // chunks the daemon keeps, the sibling prefetch that loads the next
  // files' chunks in the background, where a failure reaches no reader),
  // and once in a while six rounds saw none. Until one has, each round
  // starts on a fresh daemon, whose cache holds nothing yet.
  for (int round = 0; round < 6 || (eio == 0 && round < 60); ++round) {
    if (round > 0 && eio == 0) {
      unmount();
      ASSERT_NO_FATAL_FAILURE(mount_with_faults(spec));
    }
    for (std::size_t i = 0; i < files.size(); ++i) {
      const int fd = ::open(path("f" + std::to_string(i)).c_str(), O_RDONLY);
      ASSERT_GE(fd, 0) << strerror(errno);
      // Not from the page cache: each read asks the daemon again.
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      // A read that fails part of the way returns the bytes before the
      // failure (a short read), and the next read the error (POSIX).
      std::string got;
      int e = 0;
      for (;;) {
        char buf[64 * 1024];
        const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(got.size()));
        if (n < 0) e = errno;
        if (n <= 0) break;
        got.append(buf, static_cast<std::size_t>(n));
      }
      ::close(fd);
      EXPECT_LE(got.size(), files[i].size());
      EXPECT_EQ(files[i].compare(0, got.size(), got), 0)
          << "file " << i << ": bytes read before the error are not the file's";
      if (e != 0) {
        EXPECT_EQ(e, EIO) << strerror(e);
        ++eio;
      } else {
        EXPECT_TRUE(same_bytes(files[i], got)) << "file " << i;
        ++exact;
      }
    }
  }
  std::printf("faults: random read faults: %d reads exact, %d EIO\n", exact, eio);
  EXPECT_GT(eio, 0);
  EXPECT_GT(exact, 0);
  unmount();
  mount();
  for (std::size_t i = 0; i < files.size(); ++i)
    EXPECT_TRUE(same_bytes(files[i], read_file(path("f" + std::to_string(i)))));
}

// A store write fails once (the write-ahead log: every commit goes through
// it) and the fault clears. The writer sees EIO and what was stored is
// intact. RocksDB (7.8) does not resume after a failed log write: the mount
// keeps answering writes with EIO, and one log line each, until it is
// mounted again; it must unmount cleanly (exit status 0) and the next mount
// writes again.
TEST_F(faults, eio_on_store_writes_reaches_the_writer_and_a_remount_writes_again) {
  const std::string before = random_bytes(2 << 20, 4);
  write_file(path("before"), before);
  unmount();

  ASSERT_NO_FATAL_FAILURE(mount_with_faults("write_eio:files=wal:count=1"));
  const std::string lost = random_bytes(1 << 20, 5);
  const auto try_write = [&](const char* name, const std::string& data) {
    const int fd = ::open(path(name).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) return errno;
    int e = 0;
    if (::pwrite(fd, data.data(), data.size(), 0) < 0) e = errno;
    if (::fsync(fd) != 0 && e == 0) e = errno;
    if (::close(fd) != 0 && e == 0) e = errno;
    return e;
  };
  EXPECT_EQ(try_write("failing", lost), EIO)
      << "a failing store write must reach the writer as EIO\n"
      << daemon_log();
  EXPECT_EQ(try_write("still_failing", lost), EIO) << "RocksDB resumed after a log write error?";
  EXPECT_GE(log_lines_containing("unmount and mount it again"), 1u) << daemon_log();
  // Reads and metadata still work.
  EXPECT_TRUE(same_bytes(before, read_file(path("before"))));
  EXPECT_TRUE(stdfs::exists(path("before")));
  unmount();  // expects exit status 0: no abort inside RocksDB at close
  EXPECT_EQ(log_lines_containing("the next mount recovers it"), 1u) << daemon_log();

  mount();
  const std::string after = random_bytes(2 << 20, 6);
  EXPECT_EQ(try_write("after", after), 0) << daemon_log();
  EXPECT_TRUE(same_bytes(before, read_file(path("before"))));
  EXPECT_TRUE(same_bytes(after, read_file(path("after"))));
  // The failed files may exist (a commit before the fault) with old or new
  // bytes, never others.
  for (const char* name : {"failing", "still_failing"}) {
    if (!stdfs::exists(path(name))) continue;
    const std::string got = read_file(path(name));
    EXPECT_TRUE(got.empty() || got == lost) << name << ": " << got.size() << " bytes";
  }
  unmount();
  expect_fsck_clean();
  mount();
}

// A failed background flush (memtable to blob file) is found at the next
// commit: the writer gets EIO, the mount then needs a remount like after a
// log write error, and every file whose fsync succeeded before is intact
// after it (the store closes without flushing, the log still holds them).
TEST_F(faults, eio_writing_a_blob_file_in_a_flush_loses_no_synced_file) {
  ASSERT_NO_FATAL_FAILURE(use_backend("blob"));
  unmount();
  ASSERT_NO_FATAL_FAILURE(mount_with_faults("write_eio:files=blob:count=1"));
  std::vector<std::string> synced;
  int error = 0;
  // 16 MiB memtables: 48 MiB of new payloads make flushes happen.
  for (int i = 0; i < 24 && error == 0; ++i) {
    const std::string data = random_bytes(2 << 20, 200 + i);
    const int fd = ::open(path("w" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644);
    if (fd < 0) {
      error = errno;
      break;
    }
    if (::pwrite(fd, data.data(), data.size(), 0) < 0) error = errno;
    if (::fsync(fd) != 0 && error == 0) error = errno;
    if (::close(fd) != 0 && error == 0) error = errno;
    if (error == 0) synced.push_back(data);
  }
  EXPECT_EQ(error, EIO) << "the failed flush never reached a writer\n" << daemon_log();
  EXPECT_GE(synced.size(), 2u);
  unmount();
  mount();
  for (std::size_t i = 0; i < synced.size(); ++i)
    EXPECT_TRUE(same_bytes(synced[i], read_file(path("w" + std::to_string(i))))) << "w" << i;
  const std::string after = random_bytes(1 << 20, 300);
  write_file(path("after"), after);
  EXPECT_TRUE(same_bytes(after, read_file(path("after"))));
  std::printf("faults: flush failure after %zu synced files\n", synced.size());
  unmount();
  expect_fsck_clean();
  mount();
}

// Finds `needle` in the store's payload files (blob or pack files); the
// file and offset.
std::optional<std::pair<stdfs::path, std::size_t>> find_in_payload_files(
    const stdfs::path& store, const std::string& needle) {
  for (const auto& e : stdfs::recursive_directory_iterator(store)) {
    if (e.path().extension() != ".blob" && e.path().extension() != ".pack") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    if (const auto at = data.find(needle); at != std::string::npos) return {{e.path(), at}};
  }
  return std::nullopt;
}

// A flipped byte inside a stored payload, as a bad disk would leave it:
// reading the file fails with EIO and a log line, other files read fine,
// and fsck names the damaged chunk and the file using it by its path. Then
// a copy of the same content heals it (issue 38): the copy stores a fresh
// payload instead of a reference to the damaged one, and the damaged file
// reads whole again.
// A mount whose daemon stops answering (here: stopped with SIGSTOP, as a
// stalled ring or a deadlock would leave it) is noticed by the watchdog's
// probes within its bound, and the notice ends when answers come again.
TEST_F(faults, a_mount_that_stops_answering_is_noticed_by_the_stall_watchdog) {
  fs::stall_watchdog watchdog;
  watchdog.start(mnt_, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(watchdog.stalled());
  ASSERT_EQ(::kill(daemon_pid_, SIGSTOP), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!watchdog.stalled() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool noticed = watchdog.stalled();
  ASSERT_EQ(::kill(daemon_pid_, SIGCONT), 0);
  EXPECT_TRUE(noticed);
  EXPECT_EQ(watchdog.stalls(), 1u);
  const auto again = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (watchdog.stalled() && std::chrono::steady_clock::now() < again)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(watchdog.stalled());
  watchdog.stop();
  // The daemon's own watchdog found nothing, and its probes are not
  // counted as the users' statfs requests.
  const nlohmann::json s = stats();
  EXPECT_EQ(s["transport_stalls"], 0) << s.dump();
  EXPECT_EQ(s["transport_stalled"], false) << s.dump();
}

TEST_F(faults, flipped_byte_in_a_payload_file_is_eio_and_fsck_reports_it) {
  for (const char* backend : {"pack", "blob"}) {
    for (const bool heal_from_source : {false, true}) {
      SCOPED_TRACE(std::string("payload backend ") + backend +
                   (heal_from_source ? ", fsck --repair-from" : ", a re-copy"));
      ASSERT_NO_FATAL_FAILURE(use_backend(backend));
      ASSERT_NO_FATAL_FAILURE(flipped_byte_case(heal_from_source));
    }
  }
}

void faults::flipped_byte_case(bool heal_from_source) {
  // Random data is stored raw: its plain bytes are in the payload file.
  const std::string victim = random_bytes(1 << 20, 7);
  const std::string other = random_bytes(1 << 20, 8);
  write_file(path("victim"), victim);
  write_file(path("other"), other);
  unmount();

  const auto where = find_in_payload_files(store_, victim.substr(500000, 64));
  ASSERT_TRUE(where) << "the raw payload is not in any payload file";
  {
    std::fstream f(where->first, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(where->second + 10));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x40);
    f.seekp(static_cast<std::streamoff>(where->second + 10));
    f.write(&byte, 1);
  }

  const auto fsck = run_command({densefs_binary(), "fsck", store_.string(), "--json"});
  EXPECT_EQ(fsck.exit_code, 1) << fsck.out << fsck.err;
  const auto report = nlohmann::json::parse(fsck.out);
  ASSERT_TRUE(report["problems"].contains("bad_payload")) << fsck.out << fsck.err;
  EXPECT_EQ(report["problems"]["bad_payload"]["found"], 1) << fsck.out;
  EXPECT_EQ(report["problems"].size(), 1u) << "only the damaged chunk: " << fsck.out;
  const std::string example = report["problems"]["bad_payload"]["examples"][0];
  EXPECT_NE(example.find("used by /victim (inode "), std::string::npos) << example;

  if (heal_from_source) {
    const stdfs::path source = store_.parent_path() / "source";
    stdfs::create_directories(source / "sub");
    write_file(source / "sub" / "renamed", victim);
    const auto repair =
        run_command({densefs_binary(), "fsck", store_.string(), "--repair-from", source.string()});
    stdfs::remove_all(source);
    EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
    EXPECT_NE(repair.out.find("healed 1 of 1 damaged chunk(s)"), std::string::npos) << repair.out;
    EXPECT_NE(repair.out.find("sub/renamed"), std::string::npos) << repair.out;
    mount();
    EXPECT_TRUE(same_bytes(victim, read_file(path("victim"))));
    ::unlink(path("victim").c_str());
    ::unlink(path("other").c_str());
    return;
  }

  mount();
  // A scrub of the live mount finds it first and names the file.
  const auto scrub = run_command({densefs_binary(), "scrub", store_.string(), "--json"});
  EXPECT_EQ(scrub.exit_code, 1) << scrub.out << scrub.err;
  const auto scrubbed = nlohmann::json::parse(scrub.out);
  EXPECT_EQ(scrubbed["mounted"], true) << scrub.out;
  EXPECT_EQ(scrubbed["damaged"], 1) << scrub.out;
  ASSERT_EQ(scrubbed["files"].size(), 1u) << scrub.out;
  EXPECT_EQ(scrubbed["files"][0].get<std::string>().rfind("/victim (inode ", 0), 0u) << scrub.out;
  EXPECT_EQ(read_errno(path("victim")), EIO);
  EXPECT_GE(log_lines_containing("checksum mismatch"), 1u) << "no log line for the damaged chunk:\n"
                                                           << daemon_log();
  // The daemon and fsck name the same chunk.
  const auto hex_at = example.find("chunk ");
  ASSERT_NE(hex_at, std::string::npos) << example;
  const std::string hex = example.substr(hex_at + 6, 64);
  EXPECT_GE(log_lines_containing(hex), 1u) << "fsck names " << hex << ", the log:\n"
                                           << daemon_log();
  EXPECT_TRUE(same_bytes(other, read_file(path("other"))));
  // The bytes before the damaged chunk still read.
  const int fd = ::open(path("victim").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(same_bytes(victim.substr(0, 4096), pread_exact(fd, 4096, 0)));
  ::close(fd);
  std::printf("faults: daemon log after reading the damaged file:\n%s\n", daemon_log().c_str());

  // The next backup of the same file heals it.
  write_file(path("again"), victim);
  ASSERT_NO_FATAL_FAILURE(sync_mount());
  EXPECT_GE(log_lines_containing("stored afresh"), 1u) << daemon_log();
  EXPECT_TRUE(same_bytes(victim, read_file(path("again"))));
  EXPECT_TRUE(same_bytes(victim, read_file(path("victim"))));
  unmount();
  const auto healed = run_command({densefs_binary(), "fsck", store_.string()});
  EXPECT_EQ(healed.exit_code, 0) << healed.out << healed.err;
  mount();
  EXPECT_TRUE(same_bytes(victim, read_file(path("victim"))));
  // Gone again, so the next round's fsck sees only its own damage.
  ::unlink(path("victim").c_str());
  ::unlink(path("again").c_str());
  ::unlink(path("other").c_str());
}

}  // namespace
}  // namespace densefs::test
