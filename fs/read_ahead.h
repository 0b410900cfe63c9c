// Sequential read detection and prefetch into the decoded-chunk cache.
//
// Each read of a file is reported here. A read that starts where the file's
// previous reads ended (give or take the kernel's own readahead, which sends
// neighbouring requests out of order) makes the file's stream sequential,
// and the chunks ahead of it, up to a window that doubles with every
// sequential read (from 1 MiB up to a bound in bytes and a quarter of the
// chunk cache), are loaded on this class's pool: one batched lookup and a
// serial decode per 1 MiB piece, several pieces at once. Reads then find
// their chunks decoded, and a cold read of a big file keeps every core
// decoding. A read elsewhere in the file resets the window.
//
// Only the cache is touched: reads still go through the file's staged data
// and current extents (fs/data_path.cpp), so a prefetch racing a writer
// cannot serve stale bytes; it can only warm a chunk nobody reads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "fs/worker_pool.h"
#include "store/store.h"

namespace densefs::fs {

class read_ahead {
 public:
  static constexpr std::uint64_t k_initial_window = 1u << 20;
  static constexpr std::uint64_t k_max_window = 32u << 20;
  static constexpr std::uint64_t k_piece = 1u << 20;

  // `max_window` is clamped to a quarter of the chunk cache.
  read_ahead(const store::store& st, std::size_t cache_bytes, unsigned threads,
             std::uint64_t max_window = k_max_window);
  // Pieces still queued are dropped, the ones running stop at their next
  // chunk; the store must outlive this.
  ~read_ahead();
  read_ahead(const read_ahead&) = delete;
  read_ahead& operator=(const read_ahead&) = delete;

  // A read of [offset, offset + size) of `ino`, whose size is `file_size`.
  void on_read(std::uint64_t ino, std::uint64_t offset, std::size_t size, std::uint64_t file_size);

  // Sibling files. A reader of a directory's small files (cp -r, tar,
  // rsync, grep -r, a backup tool) reads them one after another, and each
  // would wait for its own fetch and decode. Readers go in one of two
  // orders: the listing's (readdir's order, by a hash of the name: tar,
  // cp -r, find, grep -r) or by name (rsync, shell globs, ls, tools that
  // sort their file lists). A cold read at the start of `file` in `dir` is
  // reported with note_cold_file; once two such reads follow one of the
  // directory's remembered orders (the second at most k_sibling_gap files
  // after the first), it returns the regular files after `file` in that
  // order (at most `max`) and the caller hands them to prefetch_siblings:
  // the chunks of their first k_sibling_file_bytes are loaded ahead of the
  // reader in batched fetches of k_piece (io_uring: many payloads per
  // submission), at most `max_window` bytes. Each piece is its own job on
  // the pool, queued as soon as its files' extents are looked up, so every
  // pool thread decodes (a piece's chunks are claimed in the cache, and a
  // reader that reaches one waits for it: with one thread decoding a
  // directory's gzip files, a reader waited for that one core). One
  // prefetch per directory runs at a time (sibling_prefetch_running: a
  // cold read meanwhile adds nothing); a fifth directory cancels the
  // oldest: its reader went elsewhere. A random reader (maildir, a web
  // server) rarely triggers it in a big directory (two cold files within
  // k_sibling_gap of each other in one order); in a directory of a few
  // dozen files it may, and then loads little more than the directory.
  static constexpr std::uint64_t k_sibling_file_bytes = 1u << 20;
  static constexpr std::size_t k_max_dir_streams = 4;
  static constexpr std::size_t k_sibling_gap = 16;
  bool sibling_prefetch_running(std::uint64_t dir);

  // A directory's regular files in both orders.
  struct listing_orders {
    std::vector<std::uint64_t> listing;  // readdir's order
    std::vector<std::uint64_t> by_name;  // bytewise name order
  };
  // Reads a directory's orders from the store; nullopt when it has more
  // than k_max_listed_files entries (not worth remembering).
  using listing_scan = std::function<std::optional<listing_orders>()>;
  // When `dir`'s orders are not remembered (listed long ago, or never: a
  // reader with a file list of its own, after a remount), the second cold
  // file of `dir` queues `scan` on the pool, and its result counts the
  // file that queued it as the first cold read: from the next one on the
  // reader gets the prefetch. One scan per directory at a time.
  std::vector<std::uint64_t> note_cold_file(std::uint64_t dir, std::uint64_t file, std::size_t max,
                                            const listing_scan& scan);
  void prefetch_siblings(std::uint64_t dir, std::vector<std::uint64_t> files);

  // The orders of a directory's regular files, kept from each listing the
  // daemon reads (and each scan above): the daemon drops the listing
  // itself at the end of a readdir (the kernel caches it then), and tar,
  // cp -r and `cat dir/*` list a directory whole before they read its
  // files. At most k_max_listings directories and k_max_listed_files
  // inodes in all (24 bytes each); the least recently used are forgotten.
  // Only a hint: a listing that changed since makes a prefetch load chunks
  // nobody reads, never wrong bytes.
  static constexpr std::size_t k_max_listings = 16;
  static constexpr std::size_t k_max_listed_files = 256u << 10;
  void remember_listing(std::uint64_t dir, listing_orders orders);

  // For `densefs stats` (and the tests): pieces queued so far, sibling
  // prefetches started, directories scanned for their order.
  std::uint64_t pieces_queued() const { return pieces_queued_.load(); }
  std::uint64_t sibling_prefetches() const { return sibling_prefetches_.load(); }
  std::uint64_t listing_scans() const { return listing_scans_.load(); }

 private:
  struct stream {
    std::uint64_t next = 0;       // end of the furthest read so far
    std::uint64_t window = 0;     // 0: not sequential (yet)
    std::uint64_t queued_to = 0;  // prefetch queued up to here
    std::uint64_t last_use = 0;
  };
  void load_piece(std::uint64_t ino, std::uint64_t from, std::uint64_t to);

  struct dir_stream {
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::uint64_t started = 0;
  };
  // One directory's prefetch: the job that looks up its files' extents and
  // the piece jobs it queued. The directory's dir_streams_ entry goes when
  // the last of them ends.
  struct sibling_run {
    std::uint64_t dir = 0;
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::atomic<std::size_t> jobs{1};  // the planning job
  };
  void plan_siblings(const std::shared_ptr<sibling_run>& run,
                     const std::vector<std::uint64_t>& files);
  void sibling_job_done(sibling_run& run);

  const store::store& store_;
  const std::uint64_t max_window_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> pieces_queued_{0};
  std::mutex mutex_;
  std::unordered_map<std::uint64_t, stream> streams_;          // by inode, at most k_max_streams
  std::unordered_map<std::uint64_t, dir_stream> dir_streams_;  // by directory, running
  // The places of the last cold file start per directory in both orders,
  // at most k_max_streams directories (the least recent forgotten).
  struct cold_start {
    std::size_t listing_index = 0;
    std::size_t name_index = 0;
    std::uint64_t last_use = 0;
  };
  std::unordered_map<std::uint64_t, cold_start> cold_starts_;
  // A directory without remembered orders: its first cold file, until the
  // second queues the scan (then: 0 while the scan runs).
  struct unlisted_start {
    std::uint64_t file = 0;
    std::uint64_t last_use = 0;
  };
  std::unordered_map<std::uint64_t, unlisted_start> unlisted_starts_;
  struct remembered_listing {
    listing_orders orders;
    // Sorted by inode: its index in listing order, then in name order.
    std::vector<std::tuple<std::uint64_t, std::uint32_t, std::uint32_t>> by_ino;
    std::uint64_t last_use = 0;
  };
  // Where `file` is in `l`'s two orders; nullopt when it is not listed.
  static std::optional<cold_start> place_of(const remembered_listing& l, std::uint64_t file);
  std::unordered_map<std::uint64_t, remembered_listing> listings_;  // by directory
  std::size_t listed_files_ = 0;                                    // in listings_
  std::atomic<std::uint64_t> sibling_prefetches_{0};
  std::atomic<std::uint64_t> listing_scans_{0};
  std::uint64_t clock_ = 0;
  std::unique_ptr<worker_pool> pool_;  // last: its jobs use the members above
};

}  // namespace densefs::fs

namespace densefs::fs {

// The kernel's readahead for the FUSE mount at `mountpoint` (just mounted,
// given as mounted: absolute and normal), raised to `kib`: the mount's
// backing_dev_info starts at 128 KiB, so a sequential reader gets 128 KiB
// READ requests with one or two in flight; with a bigger window the kernel
// sends up to max_pages (1 MiB) per request and keeps several ahead.
// FUSE_INIT's max_readahead can only lower it. Needs root (sysfs); without
// it the default stays, with a debug line. Reads /proc/self/mountinfo only:
// stat() of the mount point would wait for this very daemon.
// The kernel keeps the smaller of the mount's readahead and FUSE_INIT's
// max_readahead when INIT's reply arrives: call this between
// fuse_session_mount and the session loop, and have init() answer
// max_readahead = kib * 1024.
inline constexpr unsigned k_kernel_read_ahead_kib = 4096;
void raise_kernel_read_ahead(const std::string& mountpoint, unsigned kib);

}  // namespace densefs::fs
