// Snapshots (store.h; docs/backup.md, "Snapshots"): creating one (one
// record), listing them, and deleting one (its pre-images merged into the
// snapshot before it, in bounded batches that are each a commit, so that
// a kill -9 leaves a deletion to finish and never a half-merged record).
#include <cerrno>
#include <ctime>
#include <mutex>
#include <string>

#include "store/durable_file.h"
#include "store/log.h"
#include "store/records_detail.h"
#include "store/snapshot/pre_image.h"
#include "store/snapshot/registry.h"
#include "store/snapshot/snapshot_reader.h"
#include "store/snapshot/snapshot_view.h"
#include "store/store.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

namespace {

// Pre-images merged per commit of a deletion: bounds the batch and the
// time a commit holds writers off.
constexpr std::size_t k_merge_rows = 4096;

}  // namespace

std::vector<snapshot_record> store::snapshots() const {
  return read_snapshots(*engine_);
}

std::shared_ptr<const snapshot_reader> store::read_snapshot(const snapshot_record& r) const {
  // Opened on a snapshot, engine_ is its view: others are read from below it.
  return std::make_shared<const snapshot_reader>(*this, snapshot_base_ ? *snapshot_base_ : *engine_,
                                                 r);
}

void store::refresh_latest_snapshot(locked_reads& reads) {
  if (!writes_beside_others() && !may_have_snapshots_) return;
  // An embedded volume's writer alone is the only one that moves
  // snapshot_latest (its lock admits no other open): it reads it once, and
  // again after its own create or a commit of its own that moved it
  // (keep_pre_images), not per commit (a read per commit cost 7% of an
  // rsync of new files, 8 us a setattr; docs/bench.md, "Snapshots"). A
  // PostgreSQL writer reads it per commit: its lock can be lost and taken
  // back, and another process may have taken a snapshot meanwhile.
  if (latest_known_) return;
  const std::optional<std::string> latest =
      reads.get(table::meta, k_snapshot_latest_key, "the latest snapshot");
  const std::uint64_t id = latest ? decode_snapshot_id(*latest, "snapshot_latest") : 0;
  // Known only once pre_images_ has it (a read below may throw).
  const bool may_keep = rocksdb_ != nullptr && !writes_beside_others();
  if (id == pre_images_.latest()) {
    latest_known_ = may_keep;
    return;
  }
  if (id == 0) {
    pre_images_.reset(0, 0);
    latest_known_ = may_keep;
    return;
  }
  const std::optional<std::string> row =
      reads.get(table::meta, snapshot_key(id), "the latest snapshot");
  if (!row)
    throw store_error(EIO, "store " + dir_.string() + ": the latest snapshot (" +
                               std::to_string(id) + ") has no record; run densefs fsck");
  pre_images_.reset(id, decode_snapshot(id, *row, "snapshot " + std::to_string(id)).next_ino);
  latest_known_ = may_keep;
}

snapshot_record store::create_snapshot(std::string_view name) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  check_snapshot_name(name);
  snapshot_record r;
  r.name = std::string(name);
  r.created = static_cast<std::int64_t>(std::time(nullptr));
  std::lock_guard lock(commit_mutex_);
  std::uint64_t own_reserved = 0;
  {
    std::lock_guard ino_lock(ino_mutex_);
    own_reserved = ino_reserved_;
  }
  bool raise = false;
  store_settings raised = settings_;
  // Before the write: one that fails having happened (a lost connection)
  // must still make the next commit look for the snapshot.
  may_have_snapshots_ = true;
  latest_known_ = false;
  // In the commit section: every commit before it is in the snapshot
  // whole, every one after it sees it (refresh_latest_snapshot) and keeps
  // pre-images. The inode counter read here is past every inode a commit
  // before it made (numbers are reserved before they are used).
  engine_->write_locked(
      k_commit_section,
      [&](locked_reads& reads, metadata_batch& batch) {
        for (const snapshot_record& s : read_snapshots(*engine_))
          if (s.name == r.name)
            throw store_error(
                EEXIST, "a snapshot named '" + r.name + "' exists already (densefs snapshot list)");
        const std::optional<std::string> counter =
            reads.get(table::meta, k_snapshot_counter_key, "the snapshot counter");
        r.id = (counter ? decode_snapshot_id(*counter, "snapshot_counter") : 0) + 1;
        const std::optional<std::string> stored =
            reads.get(table::meta, k_next_ino_key, "the inode counter");
        r.next_ino = std::max(own_reserved, stored ? decode_next_ino(*stored) : k_root_ino + 1);
        batch.put(table::meta, snapshot_key(r.id), encode_snapshot(r));
        batch.put(table::meta, k_snapshot_latest_key, encode_snapshot_id(r.id));
        batch.put(table::meta, k_snapshot_counter_key, encode_snapshot_id(r.id));
        const std::optional<std::string> current =
            reads.get(table::meta, k_settings_key, "the settings");
        if (current) raised = decode_settings(*current);
        raise = raised.format_version < k_snapshot_format_version;
        if (raise) {
          raised.format_version = k_snapshot_format_version;
          batch.put(table::meta, k_settings_key, encode_settings(raised));
        }
      },
      true);
  holds_lepton_files_ = true;  // format 8 includes 4
  if (raise) {
    settings_.format_version = raised.format_version;
    // After the database, which is the authority: FORMAT lets older builds
    // refuse the volume before opening it (open() repairs a crash between).
    try {
      write_file_durably(
          dir_ / k_format_file,
          format_marker_text({raised.format_version, raised.uuid, postgres_, data_, encrypted_}));
    } catch (const store_error& e) {
      log_error(std::string("raising the FORMAT file's version: ") + e.what());
    }
  }
  // Numbers below next_ino made from now on get "absent" pre-images; a
  // fresh block past it needs none.
  {
    std::lock_guard ino_lock(ino_mutex_);
    if (next_ino_ < r.next_ino) next_ino_ = ino_reserved_ = r.next_ino;
  }
  log_info("snapshot '" + r.name + "' (" + std::to_string(r.id) + ") of " + dir_.string() +
           " taken");
  return r;
}

bool store::merge_snapshot_rows(transaction& txn, std::uint64_t id, std::string& cursor,
                                std::size_t limit) {
  const std::vector<snapshot_record> all = read_snapshots(*engine_);
  const snapshot_record* gone = nullptr;
  // The snapshot it merges into: the one just below it, even one being
  // deleted too (a deletion cut short, or another writer's): skipping it
  // would let a snapshot below both read a row newer than its own time
  // (its own deletion merges what it gets further down).
  const snapshot_record* before = nullptr;
  for (const snapshot_record& s : all) {
    if (s.id == id) gone = &s;
    if (s.id < id) before = &s;
  }
  if (!gone) return true;  // finished meanwhile

  // The snapshot's rows, from the cursor on, in key order: a record's rows
  // sit together by id, so the row just before one of S is the record's
  // row of the largest id below S, if it has one. The snapshot before
  // reads S's row exactly when that row is below its own id (it has no
  // row of its own, nor has a deleting one between), and when the record
  // existed at its time. Decided during the scan (a lookup per row would
  // be a round trip each on PostgreSQL), changed after it.
  struct row {
    table t;
    std::string key;
    std::string row_key;
    std::string value;
    bool moves = false;
  };
  std::vector<row> rows;
  bool reached_end = true;
  std::optional<pre_image_row> previous;
  if (!cursor.empty()) previous = parse_pre_image_key(cursor);
  scan_options o;
  o.start = cursor;
  o.fill_cache = false;
  engine_->scan(table::meta, prefix_range(k_pre_image_prefix), o, "the pre-images of a snapshot",
                [&](std::string_view key, std::string_view value) {
                  if (!cursor.empty() && key == cursor) return true;
                  std::optional<pre_image_row> r = parse_pre_image_key(key);
                  if (!r) return true;  // fsck reports it
                  if (r->snapshot == id) {
                    if (limit != 0 && rows.size() == limit) {
                      reached_end = false;
                      return false;
                    }
                    bool moves = false;
                    if (before) {
                      const std::optional<std::uint64_t> ino = owner_ino(r->key);
                      const bool existed = !ino || *ino < before->next_ino;
                      const bool row_between = previous && previous->t == r->t &&
                                               previous->key == r->key &&
                                               previous->snapshot >= before->id;
                      moves = existed && !row_between;
                    }
                    rows.push_back({r->t, r->key, std::string(key), std::string(value), moves});
                  }
                  previous = std::move(r);
                  return true;
                });
  if (!rows.empty()) cursor = rows.back().row_key;

  transaction::impl& t = ensure(txn.impl_);
  for (const row& r : rows) {
    if (r.moves) {
      t.ops.push_back({table::meta, false, pre_image_key(r.t, r.key, before->id), r.value});
    } else if (r.t == table::extents) {
      // Its reference goes back with it.
      if (const std::optional<std::string> v = decode_pre_image(r.value, "a snapshot's extent"))
        txn.unref_chunk(decode_extent(*v).hash);
    }
    t.ops.push_back({table::meta, true, r.row_key, {}});
  }
  if (!reached_end || limit != 0) return reached_end;

  // The last step: the record goes, and writers file under the snapshot
  // before it from now on.
  const std::optional<std::string> latest =
      engine_->get(table::meta, k_snapshot_latest_key, "the latest snapshot");
  if (latest && decode_snapshot_id(*latest, "snapshot_latest") == id)
    t.ops.push_back({table::meta, false, std::string(k_snapshot_latest_key),
                     encode_snapshot_id(before ? before->id : 0)});
  t.ops.push_back({table::meta, true, snapshot_key(id), {}});
  return true;
}

void store::finish_snapshot_deletion(std::uint64_t id) {
  // Bounded batches while writers go on; then one last commit that merges
  // what writers filed under it meanwhile (if it is the latest) and
  // removes it, with nobody committing in between.
  std::string cursor;
  for (bool end = false; !end;) {
    transaction txn;
    std::string next;
    commit(txn, false, [&](transaction& t) {
      next = cursor;
      end = merge_snapshot_rows(t, id, next, k_merge_rows);
    });
    cursor = std::move(next);
  }
  transaction last;
  commit(last, true, [&](transaction& t) {
    std::string from;
    merge_snapshot_rows(t, id, from, 0);
  });
}

void store::delete_snapshot(std::string_view name) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  std::lock_guard lock(snapshot_delete_mutex_);
  std::optional<snapshot_record> r = find_snapshot(*engine_, name);
  if (!r)
    throw store_error(ENOENT, "store " + dir_.string() + " has no snapshot named '" +
                                  std::string(name) + "' (densefs snapshot list)");
  if (r->state == snapshot_state::live) {
    r->state = snapshot_state::deleting;
    transaction mark;
    ensure(mark.impl_)
        .ops.push_back({table::meta, false, snapshot_key(r->id), encode_snapshot(*r)});
    commit(mark, true);
  }
  finish_snapshot_deletion(r->id);
  log_info("snapshot '" + r->name + "' (" + std::to_string(r->id) + ") of " + dir_.string() +
           " deleted");
}

tree_diff_summary store::diff_snapshots(const std::string& from, const std::string& to,
                                        const std::function<void(const tree_change&)>& fn) const {
  // The live records below a store opened on a snapshot, else its own.
  const metadata_engine& live = snapshot_base_ ? *snapshot_base_ : *engine_;
  const auto state = [&](const std::string& name) -> std::unique_ptr<metadata_engine> {
    if (name.empty()) return nullptr;
    const std::optional<snapshot_record> r = find_snapshot(live, name);
    if (!r || r->state != snapshot_state::live)
      throw store_error(ENOENT, "store " + dir_.string() + " has no snapshot named '" + name +
                                    "' (densefs snapshot list)");
    return std::make_unique<snapshot_view>(live, r->id);
  };
  const std::unique_ptr<metadata_engine> a = state(from), b = state(to);
  return diff_trees(a ? *a : live, b ? *b : live, fn);
}

std::size_t store::finish_snapshot_deletions() {
  if (options_.read_only) return 0;
  std::lock_guard lock(snapshot_delete_mutex_);
  // Newest first (any order is right: each merges into the one just below
  // it, deleting or not).
  std::vector<snapshot_record> all = read_snapshots(*engine_);
  std::size_t n = 0;
  for (auto r = all.rbegin(); r != all.rend(); ++r) {
    if (r->state != snapshot_state::deleting) continue;
    finish_snapshot_deletion(r->id);
    ++n;
  }
  return n;
}

}  // namespace densefs::store
