// The hidden `.snapshots` directory of a live mount (docs/backup.md,
// "Browsing snapshots"): `.snapshots/NAME/` is the volume as it was when
// snapshot NAME was taken, read-only, as ZFS's `.zfs/snapshot/NAME`. Not
// listed in the root (rsync --delete and find do not walk into it); a
// lookup of the name finds it, unless the root holds an entry of that name
// of its own, which then wins (nothing stored is hidden).
//
// Stateless towards the kernel: a snapshot never changes, so every request
// is answered from the store (through store::snapshot_reader) and no node
// is kept; lookups need no count and FORGET is nothing. Every change is
// refused with EROFS.
//
// Inode numbers have bit 63 set, which the live volume's never reach:
// `.snapshots` is 1<<63 and inode I of snapshot id S is 1<<63 | S<<40 | I.
// A snapshot with an id of 2^23 or more, or taken when the volume had
// handed out 2^40 inode numbers, cannot be numbered and is not shown.
#pragma once

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "fs/mount.h"
#include "store/snapshot/snapshot_reader.h"
#include "store/store.h"

namespace densefs::fs {

class snapshot_tree {
 public:
  static constexpr const char* k_dir_name = ".snapshots";
  static constexpr fuse_ino_t k_dir_ino = fuse_ino_t{1} << 63;
  // Whether `ino` is `.snapshots` or inside it.
  static bool owns(fuse_ino_t ino) { return (ino & k_dir_ino) != 0; }
  // Whether (parent, name) is `.snapshots` itself.
  static bool names_dir(fuse_ino_t parent, const char* name);

  snapshot_tree(const store::store& live, const mount_options& options);

  // The lookup of `.snapshots` in the root (the root has no entry of its own).
  void reply_dir_entry(fuse_req_t req);
  // The FUSE operations on inodes this tree owns; one reply on every path.
  void lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void getattr(fuse_req_t req, fuse_ino_t ino);
  void readlink(fuse_req_t req, fuse_ino_t ino);
  void open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void read(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off);
  void opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void readdir(fuse_req_t req, fuse_ino_t ino, std::size_t size, off_t off, bool plus);
  void getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, std::size_t size);
  void listxattr(fuse_req_t req, fuse_ino_t ino, std::size_t size);

  // Before this mount deletes snapshot `name`: its requests from now on
  // fail with ESTALE, and this waits for those under way, so that none
  // reads what the deletion moves.
  void close_snapshot(const std::string& name);
  // After this mount created or deleted snapshot `name` (or failed to):
  // the kernel drops what it cached of `.snapshots` and of that name.
  void snapshots_changed(fuse_session* session, const std::string& name);

 private:
  // An inode of a snapshot: the snapshot read beside the live volume, and
  // the inode's number in it.
  struct place {
    std::shared_ptr<const store::snapshot_reader> snapshot;
    std::uint64_t ino = 0;
    // Held for the request: close_snapshot waits for it.
    std::shared_ptr<std::shared_mutex> gate;
    std::shared_lock<std::shared_mutex> in_use;
  };
  // ESTALE when the snapshot is gone (or the number names none).
  place resolve(fuse_ino_t ino);
  // Snapshot `id`, or the one named `name`; null when there is none, it is
  // being deleted, or it cannot be numbered.
  struct known_snapshot {
    std::shared_ptr<const store::snapshot_reader> reader;
    std::chrono::steady_clock::time_point checked;  // last found alive
    std::shared_ptr<std::shared_mutex> gate = std::make_shared<std::shared_mutex>();
  };
  std::optional<known_snapshot> snapshot_by_id(std::uint64_t id);
  std::optional<known_snapshot> snapshot_by_name(const std::string& name);
  // Keeps the reader of `r`, read from the registry at `read_at` after
  // `closes_before` closes; null when it was closed since (it may be
  // deleted by now) or is closing.
  std::optional<known_snapshot> remember(const store::snapshot_record& r,
                                         std::uint64_t closes_before,
                                         std::chrono::steady_clock::time_point read_at);
  // Holds `k` for a request; null when it closed meanwhile.
  std::optional<place> enter(known_snapshot k, std::uint64_t ino);
  std::uint64_t closes();
  static bool numberable(const store::snapshot_record& r);
  static fuse_ino_t outer_ino(std::uint64_t id, std::uint64_t ino);

  struct stat dir_stat(const std::vector<store::snapshot_record>& all) const;
  struct stat to_stat(std::uint64_t id, const store::inode_record& r) const;
  // The entry of inode `ino` of snapshot `id`; the names in `.snapshots`
  // time out in a second (another client may delete one), the rest as the
  // mount's entries do.
  fuse_entry_param entry(std::uint64_t id, const store::inode_record& r) const;

  // One directory's entries in cookie order ("." and ".." are 1 and 2): in
  // a snapshot's directory, in name order, entry i has cookie i + 3. A
  // snapshot's directories never change, so a listing read once is kept
  // (a bounded number of them); `.snapshots`'s is read for each readdir.
  struct listed {
    std::string name;
    fuse_ino_t ino;
    std::uint32_t type;
    std::uint64_t cookie;
  };
  using listing = std::vector<listed>;
  std::shared_ptr<const listing> listing_of(fuse_ino_t ino, const place& p);
  listing snapshots_listing();

  const store::store& live_;
  const mount_options& options_;
  std::mutex mutex_;  // a leaf: held only to look up or update the maps below
  std::map<std::uint64_t, known_snapshot> snapshots_;
  std::uint64_t closes_ = 0;                         // close_snapshot calls so far
  std::map<std::string, std::uint64_t> last_close_;  // name -> closes_ at its last close
  std::set<std::string> closing_;  // closed and not yet deleted (snapshots_changed)
  std::map<fuse_ino_t, std::shared_ptr<const listing>> listings_;
  std::size_t listed_entries_ = 0;
};

}  // namespace densefs::fs
