// Mounting a store: the one entry point tools/ calls. Everything FUSE lives
// behind it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "store/payload/batched_reader.h"

namespace densefs::fs {

// How FUSE requests reach the daemon (-o transport=auto|uring|device).
enum class fuse_transport {
  // io_uring where this build's libfuse has it (3.18 and later) and the
  // kernel offers it (fuse's enable_uring parameter is Y); else device.
  automatic,
  // fuse-over-io-uring: one ring per core, requests and replies without a
  // read(2)/writev(2) pair each; the mount fails where it is not available.
  uring,
  // read(2) and writev(2) on /dev/fuse by libfuse's worker threads.
  device,
};

struct mount_options {
  std::filesystem::path store_dir;
  // A scale-out volume mounted by its URI (postgresql://...): the URI, for
  // errors; store_dir is then this machine's client directory of it.
  std::string volume_uri;
  // -o metrics=ADDR:PORT: serve Prometheus metrics there (docs/metrics.md).
  std::string metrics_address;
  // An encrypted volume (docs/encryption.md): -o key_file=, and the secret
  // the CLI got from it, the environment or the terminal before mounting.
  std::string key_file;
  std::optional<std::string> key_secret;
  std::filesystem::path mountpoint;
  bool foreground = false;  // -f: stay attached, log to stderr
  bool debug = false;       // -d: libfuse request tracing (implies foreground)
  bool single_threaded = false;
  bool allow_other = false;  // only when asked; default_permissions is always on
  bool read_only = false;
  // -o snapshot=NAME: the volume as that snapshot holds it, read-only
  // (docs/backup.md, "Snapshots"). Empty: the live volume.
  std::string snapshot;
  // POSIX ACLs enforced by the kernel (FUSE_CAP_POSIX_ACL). -o noacl turns
  // them off, as on ext4: ACL xattrs are then refused (EOPNOTSUPP), and the
  // kernel no longer asks for each inode's ACL when a non-owner opens it
  // (one GETXATTR per inode it has not cached).
  bool posix_acl = true;
  // `mount -o remount,ro|rw MNT`: switch an existing densefs mount between
  // read-only and read-write (the kernel enforces it); nothing else changes.
  bool remount = false;
  // Kernel caches. The store is locked to this mount, so every change comes
  // through it: the kernel updates what it changes itself, and densefs
  // notifies it of what changes behind its back (stored size after a
  // background commit or re-encoding, ".." of a moved directory). So the
  // caches can be long; 0 turns one off. docs/mounting.md, "Kernel caches".
  double entry_timeout = 86400.0;
  double attr_timeout = 86400.0;
  double negative_timeout = 86400.0;
  // Off by default: measured on this 2-core VM, it made 1 MiB writes ~4x and
  // rsync ~2.4x slower (FUSE's strict dirty-page limits throttle writeback);
  // it only helped 4 KiB writes. See docs/design.md.
  bool writeback_cache = false;
  // -o open_requests: the kernel asks densefs at every open and close of a
  // file. Otherwise a read-only mount of a volume no other client writes
  // lets it open files alone (FUSE's no_open): a warm read of a small file
  // is then no request at all. Writable mounts always ask (a new file's
  // last close must reach densefs). docs/read-path.md, "Opens".
  bool open_requests = false;
  // -o local_locks: flock and fcntl locks stay in this machine's kernel,
  // as on a local file system. Otherwise a volume in PostgreSQL keeps them
  // in its database, where every client sees them (docs/scale-out.md,
  // "Locks across clients"); the embedded store's locks are the kernel's
  // always.
  bool local_locks = false;
  // -o relatime: opening a file to read it or reading it sets its atime when
  // that is not newer than mtime or ctime, or is a day old (FUSE leaves
  // atime to the daemon). Off by default: atime is then never updated by
  // reads, as with noatime.
  bool relatime = false;
  // -o strictatime: every open for reading and every read sets atime (as
  // the kernel's strictatime; what a page-cache hit serves without a READ
  // is counted at the open).
  bool strictatime = false;
  bool updates_atime() const { return relatime || strictatime; }
  // -o shared: one of several writers of a PostgreSQL volume
  // (store_open_options::shared_writer; docs/scale-out.md, "Several writers").
  bool shared_writer = false;
  unsigned encode_threads = 0;  // 0: one per core
  // Bytes of file data staged in memory (dirty + being encoded) before
  // writers wait for the encoder: bounds memory on huge sequential writes.
  std::size_t max_staged_bytes = 256u << 20;
  // Write-behind: a closed file's encoded data waits at most this long
  // before it is committed with others in one transaction (-o commit=SEC;
  // ext4's commit= is 5 s). fsync, `densefs sync`, a rename of the file,
  // unmount and SIGTERM commit at once. docs/design.md, "Write-behind".
  std::chrono::milliseconds commit_interval{1000};
  // Overrides the store's codec policy when set (-o codec=SPEC, the grammar
  // of codec/policy.h, e.g. "default/text=zstd:level=9" or "zstd").
  std::string codec_spec;
  // Lepton is slow (a few MB/s per core): by default a new JPEG is stored at
  // once with a fast codec and re-encoded with Lepton in the background
  // (-o lepton=background); -o lepton=sync encodes it with Lepton before the
  // write is acknowledged as committed.
  bool lepton_sync = false;
  // -o ingest=fast: chunks whose policy codec is slow (Broccoli, zstd above
  // level 1) are stored with zstd -1 at write time and queued for the
  // background re-encoder, which stores them with the policy codec when the
  // store is idle (codec::fast_ingest_options). -o ingest=strong encodes
  // with the policy codec before the commit. docs/policy.md has the figures.
  bool fast_ingest = false;
  // -o ingest=auto (the default): a file that is at most this big when its
  // only slot is submitted (a small file, closed) is ingested fast as above,
  // larger files strong. Small files are most of a tree's requests and
  // Broccoli's cost per byte; with write-behind their encoding competes
  // with the writer for the CPU, not for its latency (docs/policy.md,
  // "Fast ingest"). 0: off (-o ingest=strong).
  std::uint64_t fast_ingest_small_bytes = 1u << 20;
  // Threads of the background re-encoder (idle CPU priority); 0 turns it off
  // (queued chunks wait for a later mount or `densefs recompress`).
  unsigned recompress_threads = 1;
  // Decoded chunks kept in memory, shared by all files (a re-read photo
  // costs no Lepton decode).
  std::size_t chunk_cache_bytes = 256u << 20;
  // How payload files are read (-o io=auto|uring|pread).
  store::io_mode io = store::io_mode::automatic;
  // Scale-out volumes: the local payload cache's directory (default
  // STORE/cache) and bound (-o cache_dir=, cache_size=; docs/scale-out.md).
  std::filesystem::path cache_dir{};
  std::uint64_t cache_bytes = 10ull << 30;
  fuse_transport transport = fuse_transport::automatic;
  // Threads that keep cores from idling for a moment after each request
  // (fs/idle_spinner.h); 0 (the default): none. Not on by default: faster
  // single-process reads, slower copies (docs/read-path.md, "Idle cores").
  unsigned idle_spin_threads = 0;
  // Other -o options passed to the kernel/libfuse as they are (e.g. "noatime").
  std::vector<std::string> fuse_options;
};

// Checks the store, locks it, mounts, daemonizes unless foreground, serves
// until unmounted or SIGTERM/SIGINT, flushes everything staged, unmounts.
// Fallible setup happens before daemonizing so errors reach the terminal as
// one line. Returns the process exit status (0 on clean unmount).
int mount(const mount_options& options);

// Errors libfuse has logged in this process (its log goes to densefs's:
// stderr in the foreground, syslog for a background mount). `densefs stats`
// shows it: a failed io_uring ring command counts here.
std::uint64_t libfuse_error_count();

// Names of the virtual, read-only xattrs served on every inode. They are not
// listed by listxattr (rsync -X must not copy them).
inline constexpr const char* k_xattr_info = "user.densefs.info";    // per-file JSON
inline constexpr const char* k_xattr_stats = "user.densefs.stats";  // store JSON (any inode)

}  // namespace densefs::fs
