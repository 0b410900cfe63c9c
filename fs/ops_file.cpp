// Open files: open, create, read, write, flush, release, fsync, fallocate,
// copy_file_range.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "fs/filesystem.h"
#include "fs/ops_common.h"

namespace densefs::fs {

namespace {
std::uint64_t nanoseconds_since(std::chrono::steady_clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}
}  // namespace

// fuse_reply_iov adds its header to the vector; IOV_MAX is 1024.
constexpr std::size_t k_max_reply_pieces = 1000;

void filesystem::open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  // A read-only mount: the kernel opens files alone from now on (init).
  if (kernel_opens_) {
    fuse_reply_err(req, ENOSYS);
    return;
  }
  run_op(req, "open", [&] {
    auto n = get_node(ino);
    if (options_.read_only && (fi->flags & O_ACCMODE) != O_RDONLY) throw fs_error(EROFS);
    // A follower checks the record at every open (close-to-open): the
    // writer's change notice may still be on its way. A changed file's
    // pages go (no keep_cache below) and so do its attributes.
    bool record_changed = false;
    // So does a writer beside others (their close waits for its commit).
    if (store_->follows() || shares_volume()) {
      const auto r = refresh_from_store(*n);
      // Released by the writer while this kernel still had the inode (a
      // handle: /proc/PID/fd, open_by_handle_at): NFS's stale handle. An
      // open by path that gets ESTALE is walked again by the kernel with
      // its entries revalidated, and finds the name gone (ENOENT).
      if (r == refreshed::gone) throw fs_error(ESTALE);
      record_changed = r == refreshed::changed;
    }
    // O_TRUNC never arrives here: atomic_o_trunc is off (filesystem::init),
    // so the kernel truncates with a setattr after its ETXTBSY check.
    bool atime_changed = false;
    {
      // A reader (an open of a cached file need not wait for a commit on
      // its way), unless it may change the atime, which a commit stores.
      const bool may_touch_atime = options_.updates_atime() && (fi->flags & O_ACCMODE) != O_WRONLY;
      std::unique_lock<meta_lock> as_writer(meta_mutex_, std::defer_lock);
      std::unique_lock<meta_lock::reader> as_reader(meta_mutex_.reading(), std::defer_lock);
      if (may_touch_atime)
        as_writer.lock();
      else
        as_reader.lock();
      // Unlinked and purged since get_node (the kernel does not order an
      // OPEN after an UNLINK of the same inode): the open must not succeed
      // on a file whose records are gone (filesystem::purgeable_now).
      if (n->gone_for_good()) throw fs_error(ESTALE);
      if (S_ISDIR(n->record.mode)) throw fs_error(EISDIR);
      choose_page_cache(*n, fi);
      mark_read_only(fi);
      // A read-only handle has nothing to flush at close(2): staged bytes
      // are the writers' handles' to flush (write-behind: close only
      // submits them anyway), and the version a handle that dropped the
      // cache vouches for is recorded at RELEASE instead (an open before
      // that drops the pages once more: slower, never stale). Without FLUSH
      // a warm read of a small file costs an OPEN and a RELEASE, and rsync's
      // open(O_RDONLY) + fchmod of each file one request less
      // (docs/read-path.md, "Requests per file"). An atime that relatime
      // changed is stored at release instead.
      fi->noflush = needs_no_flush(*fi);
      // -o relatime, strictatime: a file the kernel serves from its cache
      // sends no READ.
      if ((fi->flags & O_ACCMODE) != O_WRONLY) atime_changed = touch_atime(*n);
      ++n->opens;
      if ((fi->flags & O_ACCMODE) != O_RDONLY) ++n->writers;
    }
    // Before the reply: a stat right after a read served from the page cache
    // (no READ, and no FLUSH at close) must not get the cached attributes.
    // Attributes only, so it is safe inside this request.
    if (atime_changed || record_changed) invalidate_attributes(n->ino);
    hold_if_unlinked(*n);  // a follower's open of a file the writer unlinked
    if (fuse_reply_open(req, fi) != 0)
      close_handle(n, (fi->flags & O_ACCMODE) != O_RDONLY);  // the opener is gone
  });
}

// Why the kernel's page cache cannot simply be kept across opens, although
// every change comes through this mount (issue 17): without writeback_cache
// a write(2) copies the bytes into the file's cached pages, leaves them
// clean, and then sends the WRITE. A clean page can be dropped at any time:
// with auto_inval_data (libfuse's default) the kernel drops all of a file's
// pages whenever a GETATTR shows a new mtime, which every write causes
// (fuse_change_attributes -> invalidate_inode_pages2); memory reclaim and
// POSIX_FADV_DONTNEED do too. If another process reads the page after the
// drop and before the daemon has staged that WRITE, the READ returns the
// old bytes and the kernel caches them; the writer's write then returns,
// and with keep_cache on every open nothing ever drops that page again: the
// writer re-opens the file and reads what it wrote before (4 processes
// writing locked ranges that share pages saw it within seconds).
//
// Such a page came from a READ that the daemon served before a write it
// has staged since. So an open keeps the kernel's cache only while no byte
// of the file changed (data_version) since the cache was last known fresh
// (cached_version): since an open that did not keep the cache, whose
// handle was then flushed or released (both come after that open returned).
// That open made the kernel drop every page of the file (waiting for pages
// still being read), so every page cached since was read after every write
// up to its version was staged. Otherwise keep_cache is 0, the kernel
// drops the file's pages before open(2) returns, and the handle carries the
// version its open saw (in fi->fh) until it can vouch for it. A file read
// again and again keeps its pages; the first open after a write drops them
// once. No daemon-side notify is needed: the drop runs in the opener's own
// context, so it cannot deadlock with the kernel's page locks, and an open
// of an unchanged file costs one atomic load.
//
// Tried and dropped: keeping the cache also while no READ was served since
// it was known fresh (for a file written, then read). The pages a write(2)
// leaves were mostly gone by the read (a 256 KiB file written and read
// back was read from the daemon), and the open after that read then had to
// drop the pages once more.
//
// Not covered, as with libfuse's cache=auto: a reader that keeps one
// descriptor open across another process's write can still see the old
// page (ext4 would not); re-opening makes it right.
void filesystem::choose_page_cache(node& n, fuse_file_info* fi) const {
  const std::uint64_t version = n.data_version.load();
  if (version == n.cached_version) {
    fi->keep_cache = 1;
    fi->fh = 0;
  } else {
    fi->keep_cache = 0;
    fi->fh = version + 1;  // 0 means "kept the cache": vouches for nothing
  }
}

void filesystem::vouch_for_cache(node& n, const fuse_file_info* fi) {
  std::lock_guard meta(meta_mutex_.reading());
  vouch_for_cache_locked(n, fi);
}

void filesystem::vouch_for_cache_locked(node& n, const fuse_file_info* fi) {
  if (fi == nullptr) return;
  const std::uint64_t version = fi->fh & ~k_read_only_handle;
  if (version == 0) return;
  n.cached_version = std::max(n.cached_version, version - 1);
}

bool filesystem::touch_atime(node& n) const {
  if (!options_.updates_atime() || options_.read_only) return false;
  const store::timestamp t = now();
  store::inode_record& r = n.record;
  // As the kernel's relatime_need_update: atime not newer than mtime or
  // ctime, or a day old.
  constexpr std::int64_t k_day = 24 * 60 * 60;
  if (!options_.strictatime && r.atime > r.mtime && r.atime > r.ctime &&
      t.sec - r.atime.sec < k_day)
    return false;
  r.atime = t;
  n.record_dirty = true;  // stored by the flush at release
  return true;
}

void filesystem::create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                        fuse_file_info* fi) {
  run_op(req, "create", [&] {
    check_name(name);
    std::lock_guard meta(meta_mutex_);
    auto p = get_node(parent);
    auto n = make_node(req, *p, name, S_IFREG | (mode & 07777), 0, {}, true);
    fuse_entry_param e = entry_for(*n);
    ++n->lookups;
    ++n->opens;
    if ((fi->flags & O_ACCMODE) != O_RDONLY) ++n->writers;
    // A new inode: the kernel caches nothing of it yet.
    n->cached_version = n->data_version.load();
    fi->keep_cache = 1;
    fi->fh = 0;
    mark_read_only(fi);
    fi->noflush = needs_no_flush(*fi);
    if (fuse_reply_create(req, &e, fi) != 0) {
      --n->lookups;
      --n->opens;
      if ((fi->flags & O_ACCMODE) != O_RDONLY) --n->writers;
      maybe_release(n);  // ends its being new too (nothing was written)
    }
  });
}

bool filesystem::read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off,
                      fuse_file_info* fi) {
  const auto start = std::chrono::steady_clock::now();
  bool answered_later = false;
  run_op(req, "read", [&] {
    auto n = get_node(ino);
    // Served from staged data and the chunk cache when it can be. A chunk
    // that is not decoded yet (a Lepton decode of a photo takes a good
    // fraction of a second) is loaded on the decode pool, which then
    // replies: FUSE threads stay free, and no decode runs under the file's
    // data_mutex. Sequential readers get the chunks ahead of them loaded
    // on the read-ahead pool meanwhile (fs/read_ahead.h).
    // Not for the kernel's own reads through a write-only handle (with
    // writeback_cache, to fill a page a write covers in part).
    if (options_.updates_atime() && (fi->flags & O_ACCMODE) != O_WRONLY) {
      bool atime_changed;
      {
        std::lock_guard meta(meta_mutex_);
        atime_changed = touch_atime(*n);
      }
      if (atime_changed) invalidate_attributes(n->ino);
    }
    std::uint64_t file_size = 0;
    const bool replied = reply_read(req, *n, size, off, true, &file_size);
    // After a reply nothing may throw: run_op would reply again, and a
    // second reply on an io_uring queue commits an entry twice.
    if (read_ahead_ && off >= 0) {
      try {
        read_ahead_->on_read(n->ino, static_cast<std::uint64_t>(off), size, file_size);
      } catch (const std::exception& e) {
        log_warning(std::string("read-ahead: ") + e.what());
      }
    }
    if (replied) return;
    if (off == 0) prefetch_siblings(*n);
    decoders_->submit([this, req, n, size, off, start] {
      run_op(req, "read", [&] {
        decode_chunks(n->ino, static_cast<std::uint64_t>(off), size);
        reply_read(req, *n, size, off, false);
      });
      requests_.add(fuse_request::read, nanoseconds_since(start));
    });
    answered_later = true;
  });
  return answered_later;
}

void filesystem::decode_chunks(std::uint64_t ino, std::uint64_t offset, std::size_t size) const {
  // Into the shared chunk cache, in one batch (records and payloads each
  // one RocksDB MultiGet); chunks another thread is loading (a prefetch, a
  // reader of a file that shares them) are left to it and waited for by
  // the read that follows. Errors surface in that read. Without a cache
  // (-o chunk_cache=0) this would only decode everything twice.
  if (!store_->caches_chunks()) return;
  try {
    std::vector<store::chunk_hash> hashes;
    for (const auto& [start, extent] : store_->extents(ino, offset, offset + size))
      if (hashes.empty() || hashes.back() != extent.hash) hashes.push_back(extent.hash);
    store_->load_chunks(hashes);
  } catch (const std::exception&) {
  }
}

void filesystem::prefetch_siblings(const node& n) {
  if (!read_ahead_) return;
  const std::uint64_t dir_ino = n.parent_hint.load(std::memory_order_relaxed);
  if (dir_ino == 0 || read_ahead_->sibling_prefetch_running(dir_ino)) return;
  // Enough files to cover the window with small ones; the read-ahead stops
  // at its byte budget. The directory's orders come from its last listing,
  // or from a scan on the read-ahead pool (a read never waits for one).
  constexpr std::size_t k_max_sibling_files = 1024;
  std::vector<std::uint64_t> after = read_ahead_->note_cold_file(
      dir_ino, n.ino, k_max_sibling_files, [this, dir_ino] { return listing_orders(dir_ino); });
  if (!after.empty()) read_ahead_->prefetch_siblings(dir_ino, std::move(after));
}

bool filesystem::reply_read(fuse_req_t req, node& n, std::size_t size, off_t off, bool cached_only,
                            std::uint64_t* file_size) {
  std::unique_lock lock(n.data_mutex);
  if (file_size) *file_size = n.size;
  const auto offset = static_cast<std::uint64_t>(off);
  if (off < 0 || offset >= n.size) {
    lock.unlock();
    fuse_reply_buf(req, nullptr, 0);
    return true;
  }
  const std::size_t length =
      static_cast<std::size_t>(std::min<std::uint64_t>(size, n.size - offset));
  // The reply points into the decoded chunks (writev from them): no buffer
  // to zero and fill, for a 1 MiB read of 32 KiB chunks ~35 pieces.
  read_gather pieces;
  if (!data_->gather_data(n, offset, length, pieces, cached_only)) return false;
  lock.unlock();
  requests_.add_read_bytes(length);
  if (pieces.iov.size() <= k_max_reply_pieces) {
    fuse_reply_iov(req, pieces.iov.data(), static_cast<int>(pieces.iov.size()));
    return true;
  }
  // More pieces than one writev takes (many tiny extents): one buffer.
  std::string buffer;
  buffer.reserve(length);
  for (const auto& v : pieces.iov) buffer.append(static_cast<const char*>(v.iov_base), v.iov_len);
  fuse_reply_buf(req, buffer.data(), buffer.size());
  return true;
}

void filesystem::write(fuse_req_t req, fuse_ino_t ino, const char* buf, std::size_t size, off_t off,
                       fuse_file_info* fi) {
  run_op(req, "write", [&] {
    if (off < 0) throw fs_error(EINVAL);
    // A daemon mounted read-only stays so after `mount -o remount,rw`
    // (the kernel's flag): where the kernel opens files alone, no OPEN
    // refuses the writer first.
    if (options_.read_only) throw fs_error(EROFS);
    auto n = get_node(ino);
#ifdef FUSE_CAP_HANDLE_KILLPRIV_V2
    if (kills_suid_sgid_ && fi && fi->kill_suidgid) kill_suid_sgid(req, *n);
#else
    (void)fi;
#endif
    std::unique_lock lock(n->data_mutex);
    if (n->write_error != 0) throw fs_error(std::exchange(n->write_error, 0));
    data_->wait_for_staging_room(lock, *n);
    data_->stage_write(lock, *n, static_cast<std::uint64_t>(off), {buf, size});
    if (!options_.writeback_cache) {
      // With writeback_cache the kernel owns mtime while pages are dirty and
      // sends it with setattr; without it, a write is what changes mtime.
      std::lock_guard meta(meta_mutex_);
      n->record.mtime = n->record.ctime = now();
      n->record_dirty = true;
    }
    lock.unlock();
    requests_.add_written_bytes(size);
    fuse_reply_write(req, size);
  });
}

// A writer's handle needs no FLUSH either where no other client has the
// volume: its RELEASE, which the kernel sends as close(2) returns (without
// the caller waiting for it), submits the staged data the same way
// (write-behind), and an error of an earlier background commit reaches the
// file's next write, fsync or rename (ext4 reports a full disk at write(2)
// too; the release keeps the error for them, and a rename of a file with
// an error commits first).
// Each file rsync, cp or tar writes is then one round trip less. Beside
// other clients a close commits before it returns (close-to-open), so
// FLUSH stays; with writeback_cache the kernel sends it anyway, to write
// its dirty pages first. Shared writable mmap is written back when the
// mapping goes (the kernel's fuse_vma_close), FLUSH or not.
bool filesystem::needs_no_flush(const fuse_file_info& fi) const {
  // FLUSH is the only word of a close(2) that lets go of the closer's
  // fcntl locks, readers' included (ops_lock.cpp).
  if (serves_locks_) return false;
  if ((fi.flags & O_ACCMODE) == O_RDONLY) return true;  // open() says why
  return !shares_volume() && !store_->membership().others_mounted();
}

// close(2) and the last release of a handle return once the data is staged
// (write-behind): encoding and the commit follow in the background, and an
// error they hit is returned by the file's next write, fsync or rename, or
// by its close where a FLUSH is sent.
void filesystem::flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  // A handle the kernel opened alone has no FOPEN_NOFLUSH: without this
  // every close(2) would wait for a FLUSH. After ENOSYS the kernel sends
  // none; on a read-only mount nothing is ever staged.
  if (kernel_opens_) {
    fuse_reply_err(req, ENOSYS);
    return;
  }
  run_op(req, "flush", [&] {
    auto n = get_node(ino);
    vouch_for_cache(*n, fi);
    int error = 0;
    try {
      // A reader's close (sent only where locks are served): the writers'
      // data and errors are theirs.
      if (n->regular && (fi->fh & k_read_only_handle) == 0) error = data_->write_behind(*n);
    } catch (...) {
      release_locks(ino, *fi, false);  // the closer's locks go, stored or not
      throw;
    }
    // After the data: another client that takes the lock next reads it.
    release_locks(ino, *fi, false);
    fuse_reply_err(req, error);
  });
}

void filesystem::release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  run_op(req, "release", [&] {
    auto n = get_node(ino);
    int error = 0;
    try {
      // After a FLUSH the close(2) had the error; without one (fi->noflush)
      // it stays the file's, for its next write, fsync or rename.
      if (n->regular)
        error = data_->write_behind(*n, fi->noflush == 0 && (fi->flags & O_ACCMODE) != O_RDONLY);
    } catch (const std::exception& e) {
      log_error("inode " + std::to_string(n->ino) + ": flush at close failed: " + e.what());
      error = EIO;
    }
    // The handle is gone whatever happened: the open count must drop.
    if (error != 0) {
      log_error("inode " + std::to_string(n->ino) +
                ": data not stored at close: " + std::strerror(error));
    }
    vouch_for_cache(*n, fi);
    close_handle(n, (fi->flags & O_ACCMODE) != O_RDONLY);
    if (serves_locks_) {
      bool last_here = false;
      {
        std::lock_guard meta(meta_mutex_.reading());
        last_here = n->opens == 0;
      }
      release_locks(ino, *fi, true, last_here);
    }
    if (n->regular) settle_new_file(*n);
    fuse_reply_err(req, 0);
  });
}

bool filesystem::close_may_unlock(fuse_ino_t ino) {
  return serves_locks_ && store_->membership().locks().granted_any(ino);
}

// On a ring's thread (serve_changing): a close that stores nothing and
// lets go of no file lock, while no commit holds the file's data lock.
// Anything thrown before the reply leaves what the full flush redoes the
// same way: slots handed to the encoders, the file's error not yet taken.
bool filesystem::flush_here(fuse_req_t req, fuse_ino_t ino, const fuse_file_info& fi) {
  if (kernel_opens_) {
    fuse_reply_err(req, ENOSYS);  // as flush
    return true;
  }
  int error = 0;
  try {
    if (close_may_unlock(ino)) return false;
    const std::shared_ptr<node> n = table_.find(ino);
    if (!n) return false;
    const bool writer = n->regular && (fi.fh & k_read_only_handle) == 0;
    std::unique_lock data(n->data_mutex, std::defer_lock);
    if (writer && !data.try_lock()) return false;
    std::unique_lock meta(meta_mutex_.reading(), std::try_to_lock);
    if (!meta.owns_lock() || n->gone_for_good()) return false;
    vouch_for_cache_locked(*n, &fi);
    if (writer) {
      const std::optional<int> stored = data_->write_behind_here(*n, true);
      if (!stored) return false;
      error = *stored;
    }
  } catch (const std::exception&) {
    return false;
  }
  fuse_reply_err(req, error);
  return true;
}

// On a ring's thread: release with the file's data lock and the metadata
// lock (as a writer: no commit's window open) held throughout, each way to
// the store ruled out first: a record to store, a hold to let go of, an
// inode to release (an unlinked file's purge is a commit), a new file
// ended while the committer is gone (unmounting).
bool filesystem::release_here(fuse_req_t req, fuse_ino_t ino, const fuse_file_info& fi) {
  const bool writer = (fi.flags & O_ACCMODE) != O_RDONLY;
  std::shared_ptr<node> n;
  std::optional<int> data_error;
  int error = 0;
  {
    std::unique_lock<std::mutex> data;
    std::unique_lock<meta_lock> meta;
    try {
      if (close_may_unlock(ino)) return false;
      n = table_.find(ino);
      if (!n || !n->regular) return false;
      data = std::unique_lock(n->data_mutex, std::try_to_lock);
      if (!data.owns_lock()) return false;
      meta = std::unique_lock(meta_mutex_, std::try_to_lock);
      if (!meta.owns_lock()) return false;
      const bool last_open = n->opens <= 1;
      if (n->gone_for_good() || (last_open && (n->held || n->lookups == 0))) return false;
      if (n->new_file && settle_committer_.load() == nullptr) return false;
      // The last step that may say no: it takes the file's error.
      data_error = data_->write_behind_here(*n, fi.noflush == 0 && writer);
      if (!data_error) return false;
    } catch (const std::exception&) {
      return false;  // nothing changed yet that the full release does not redo
    }
    try {
      vouch_for_cache_locked(*n, &fi);
      close_handle_locked(n, writer);
      settle_new_file_locked(*n);
    } catch (...) {
      error = error_of_current_exception("release");  // as run_op
    }
  }
  if (*data_error != 0) {
    log_error("inode " + std::to_string(n->ino) +
              ": data not stored at close: " + std::strerror(*data_error));
  }
  fuse_reply_err(req, error);
  return true;
}

// fsync and fdatasync make everything written through the mount before
// them durable, not only this file: one synced RocksDB log holds every
// commit, so this costs no more disk flushes than one file would, and
// "close, then fsync another file" orders the two as users expect
// (docs/design.md, "Durability").
void filesystem::run_sync_request(fuse_req_t req, fuse_request kind, const char* op,
                                  std::function<int()> sync) {
  auto job = [this, req, kind, op, sync = std::move(sync),
              start = std::chrono::steady_clock::now()] {
    int error = 0;
    try {
      error = sync();
    } catch (...) {
      error = error_of_current_exception(op);
    }
    // Answered even when SIGTERM ended the session meanwhile (a cut-off
    // link): the mount is still there until shutdown() returns, and the
    // ring entry the request lives in stays mapped while it is unanswered
    // (third_party/libfuse, patch 0003).
    fuse_reply_err(req, error);
    requests_.add(kind, nanoseconds_since(start));
  };
  if (syncs_)
    syncs_->submit(std::move(job));
  else
    job();
}

bool filesystem::hands_off(fuse_req_t req) const {
#ifdef FUSE_CAP_OVER_IO_URING
  return ring_jobs_ && fuse_req_is_uring(req);
#else
  (void)req;
  return false;
#endif
}

void filesystem::run_off_ring(std::function<void()> job) {
  requests_off_ring_.fetch_add(1, std::memory_order_relaxed);
  if (ring_jobs_)
    ring_jobs_->submit(std::move(job));
  else
    job();
}

void filesystem::fsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  run_sync_request(req, fuse_request::fsync, "fsync",
                   [this, ino] { return sync_everything(get_node(ino).get()); });
}

int filesystem::sync_all(const node* own) {
  const std::vector<std::shared_ptr<node>> nodes = table_.all();
  // Every file's slots to the workers first, so they encode in parallel;
  // then wait for each. Other files' errors stay theirs, for their own
  // close or fsync (with no `own`, the first is returned, not cleared).
  for (const auto& n : nodes) {
    if (!n->regular) continue;
    std::unique_lock lock(n->data_mutex);
    data_->submit_dirty_slots(*n);
  }
  int error = 0;
  for (const auto& n : nodes) {
    if (!n->regular) continue;
    std::unique_lock lock(n->data_mutex);
    const int e = data_->flush_data(lock, *n, n.get() == own);
    if (n.get() == own || (own == nullptr && error == 0)) error = e;
  }
  // Names put off (deferred_names.h): their commit may be the only one.
  try {
    commit_deferred();
  } catch (const store::store_error& e) {
    log_error(std::string("committing the names put off: ") + e.what());
    if (error == 0) error = e.error_number();
  }
  // Everything written is settled now: the next request parks what is
  // idle, however many nodes a burst of writes left unparkable when
  // park_idle_nodes last looked (its threshold stays above those).
  park_above_.store(resident_limit_, std::memory_order_relaxed);
  return error;
}

int filesystem::sync_everything(const node* own) {
  const int error = sync_all(own);
  settle_new_files(own);
  store_->sync();
  return error;
}

void filesystem::fsyncdir(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) {
  run_sync_request(req, fuse_request::fsyncdir, "fsyncdir", [this] {
    sync_everything(nullptr);
    return 0;
  });
}

void filesystem::fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                           fuse_file_info*) {
  run_op(req, "fallocate", [&] {
    if (offset < 0 || length <= 0) throw fs_error(EINVAL);
    if (options_.read_only) throw fs_error(EROFS);  // as write()
    auto n = get_node(ino);
    if (!n->regular) throw fs_error(ENODEV);
    const auto begin = static_cast<std::uint64_t>(offset);
    const auto end = begin + static_cast<std::uint64_t>(length);
    std::unique_lock lock(n->data_mutex);
    if (mode == 0 || mode == FALLOC_FL_KEEP_SIZE) {
      // Space is not reserved (chunks are allocated when data arrives), but
      // it must be there now: a program that preallocates (a database, a
      // torrent client, a VM image) relies on ENOSPC here rather than at a
      // later write, as on ext4. The bytes the range already holds cost
      // nothing more; staged data is committed first so that it counts.
      // Compression may later need less than this.
      if (int error = data_->flush_data(lock, *n)) throw fs_error(error);
      try {
        store_->check_space_for_data(end - begin - stored_bytes_in(n->ino, begin, end));
      } catch (const store::store_error& e) {
        if (e.error_number() == ENOSPC) throw fs_error(ENOSPC);  // the caller's answer, no log
        throw;
      }
      // The size grows as posix_fallocate requires. mtime and ctime move
      // even when it does not, as on ext4 and XFS (the kernel's
      // file_modified(); found by the differential test: a file whose
      // mtime utime had set kept it here and not on ext4).
      std::lock_guard meta(meta_mutex_);
      if (mode == 0 && end > n->size) {
        n->size = end;
        n->record.size = end;
      }
      n->record.ctime = n->record.mtime = now();
      n->record_dirty = true;
    } else if (mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) ||
               mode == FALLOC_FL_ZERO_RANGE ||
               mode == (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)) {
      // Zeros are staged like any write; slots that end up all zero are
      // stored as holes.
      std::uint64_t stop = end;
      if (mode & FALLOC_FL_KEEP_SIZE) stop = std::min(end, n->size);
      static const std::string zeros(1 << 20, '\0');
      for (std::uint64_t pos = begin; pos < stop;) {
        const std::size_t take =
            static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), stop - pos));
        data_->wait_for_staging_room(lock, *n);
        data_->stage_write(lock, *n, pos, {zeros.data(), take});
        pos += take;
      }
      std::lock_guard meta(meta_mutex_);
      n->record.ctime = n->record.mtime = now();
      n->record_dirty = true;
    } else {
      throw fs_error(EOPNOTSUPP);
    }
    if (int error = data_->flush_data(lock, *n)) throw fs_error(error);
    lock.unlock();
    fuse_reply_err(req, 0);
  });
}

std::uint64_t filesystem::stored_bytes_in(std::uint64_t ino, std::uint64_t begin,
                                          std::uint64_t end) const {
  std::uint64_t covered = 0;
  for (const auto& [off, ext] : store_->extents(ino, begin, end)) {
    const std::uint64_t start = std::max(off, begin);
    const std::uint64_t stop = std::min(off + ext.length, end);
    if (start < stop) covered += stop - start;
  }
  return covered;
}

void filesystem::copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, fuse_file_info*,
                                 fuse_ino_t ino_out, off_t off_out, fuse_file_info*,
                                 std::size_t len, int flags) {
  run_op(req, "copy_file_range", [&] {
    if (flags != 0 || off_in < 0 || off_out < 0) throw fs_error(EINVAL);
    if (options_.read_only) throw fs_error(EROFS);  // as write()
    auto in = get_node(ino_in);
    auto out = get_node(ino_out);
    if (!in->regular || !out->regular) throw fs_error(EINVAL);
    constexpr std::uint64_t k_slot = store::k_chunk_size;
    std::uint64_t src = static_cast<std::uint64_t>(off_in);
    std::uint64_t dst = static_cast<std::uint64_t>(off_out);
    std::uint64_t copied = 0;

    // Land both files' staged data first, one file at a time, so that their
    // extents are likely final. Never wait while holding the other file's
    // lock: the commits being waited for may need it.
    for (const auto& n : {in, out}) {
      std::unique_lock lock(n->data_mutex);
      if (int error = data_->flush_data(lock, *n)) throw fs_error(error);
    }
    std::unique_lock out_lock(out->data_mutex, std::defer_lock);
    std::unique_lock in_lock(in->data_mutex, std::defer_lock);
    if (in == out)
      out_lock.lock();
    else
      std::lock(out_lock, in_lock);
    const std::uint64_t in_size = in->size;  // read under the lock: truncates race
    if (src >= in_size) {
      fuse_reply_write(req, 0);
      return;
    }
    std::uint64_t remaining = std::min<std::uint64_t>(len, in_size - src);

    // Whole slots at aligned offsets are shared: the destination references
    // the source's chunks, nothing is copied or re-encoded.
    // Sharing reads both files' committed extents: only when neither has
    // staged data (new writes may have arrived since the flush above).
    // Not beside other writers: the extents read here could change before
    // the commit (the bytes are copied instead, through the staging).
    if (in != out && !shares_volume() && !in->has_staged() && !out->has_staged() &&
        src % k_slot == 0 && dst % k_slot == 0) {
      std::lock_guard meta(meta_mutex_);
      store::transaction txn;
      store::inode_record r = out->record;
      std::uint64_t shared = 0;
      while (remaining > shared) {
        const std::uint64_t piece = std::min<std::uint64_t>(k_slot, remaining - shared);
        // A partial slot is shared only as the source's tail landing on the
        // destination's tail; anything else would need a new chunk.
        const bool whole_slot = piece == k_slot;
        const bool source_tail = src + shared + piece == in_size;
        const bool dest_tail = dst + shared + piece >= out->size;
        if (!whole_slot && !(source_tail && dest_tail)) break;
        r.stored_bytes -= std::min(r.stored_bytes, data_->drop_extents(txn, out->ino, dst + shared,
                                                                       dst + shared + k_slot));
        for (const auto& [off, ext] :
             store_->extents(in->ino, src + shared, src + shared + piece)) {
          auto chunk = store_->get_chunk(ext.hash);
          if (!chunk) throw store::store_error(EIO, "chunk " + ext.hash.hex() + " is missing");
          store::extent_record copy = ext;
          const std::uint64_t start = std::max(off, src + shared);
          const std::uint64_t stop = std::min(off + ext.length, src + shared + piece);
          if (start >= stop) continue;
          copy.chunk_offset = static_cast<std::uint32_t>(ext.chunk_offset + (start - off));
          copy.length = static_cast<std::uint32_t>(stop - start);
          txn.put_extent(out->ino, dst + (start - src), copy);
          txn.ref_chunk({ext.hash, chunk->plain_size, std::nullopt});
          r.stored_bytes += chunk->stored_size;
        }
        shared += piece;
      }
      if (shared > 0) {
        const std::uint64_t new_end = dst + shared;
        const store::timestamp t = now();
        r.mtime = r.ctime = t;
        if (new_end > r.size) r.size = new_end;
        store::inode_record p = r;
        p.size = std::max(out->persisted_size, r.size);
        txn.put_inode(p);
        commit(txn);
        out->record = r;
        out->size = r.size;
        out->persisted_size = p.size;
        out->bytes_changed();  // the kernel may cache the bytes replaced
        copied = shared;
        src += shared;
        dst += shared;
        remaining -= shared;
      }
    }

    // The rest is copied through the staging path.
    std::vector<char> buffer;
    while (remaining > 0) {
      const std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining, 1 << 20));
      buffer.resize(take);
      data_->read_data(*in, src, take, buffer.data());
      data_->stage_write(out_lock, *out, dst, {buffer.data(), take});
      src += take;
      dst += take;
      copied += take;
      remaining -= take;
    }
    {
      std::lock_guard meta(meta_mutex_);
      out->record.mtime = out->record.ctime = now();
      out->record_dirty = true;
    }
    requests_.add_written_bytes(copied);
    fuse_reply_write(req, copied);
  });
}

}  // namespace densefs::fs
