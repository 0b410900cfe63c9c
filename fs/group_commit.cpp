#include "fs/group_commit.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <string>
#include <tuple>

#include "fs/data_path.h"
#include "fs/fs_error.h"
#include "store/log.h"

namespace densefs::fs {
namespace {
constexpr std::uint64_t k_slot = store::k_chunk_size;
}  // namespace

void group_commit::run() {
  // By inode, slot and generation: files are locked in inode order (as
  // copy_file_range's std::lock may hold two, never while blocking), and
  // the versions of one slot sit together, the newest last.
  std::sort(group_.begin(), group_.end(), [](const encoded_slot& a, const encoded_slot& b) {
    return std::tie(a.n->ino, a.index, a.gen) < std::tie(b.n->ino, b.index, b.gen);
  });
  try {
    read_chunk_records();
  } catch (const std::exception&) {
    // The commit reads what it needs itself, and reports what fails.
    records_ = {};
  }
  ahead_ = data_.write_payloads_ahead(group_, &records_);
  std::vector<std::unique_lock<std::mutex>> data_locks;
  for (std::size_t i = 0; i < group_.size(); ++i)
    if (i == 0 || group_[i].n != group_[i - 1].n) data_locks.emplace_back(group_[i].n->data_mutex);
  std::unique_lock meta(data_.host_.meta_mutex());
  decide_fates();
  commit();
  // Committed or not: pack compaction may plan again (what was written
  // ahead and not committed is dead bytes now).
  ahead_ = store::payloads_ahead();
  if (error_ == 0) {
    apply_records();
  } else {
    for (fate& f : fates_)
      if (f == fate::commit) f = fate::failed;
  }
  settle_slots();
  store_settled_sizes();
  meta.unlock();
  data_locks.clear();
  after_the_locks();
  meta.lock();
  release_unreachable_files();
}

void group_commit::read_chunk_records() {
  std::vector<store::chunk_hash> hashes;
  for (const encoded_slot& e : group_)
    for (const slot_chunk& c : e.chunks)
      if (c.prepared) hashes.push_back(c.prepared->hash);
  records_ = data_.store_.get_chunks(hashes);
}

std::optional<store::chunk_record> group_commit::stored_record(
    const store::chunk_hash& hash) const {
  // Every chunk of the group was asked for (read_chunk_records in fill).
  const std::optional<store::chunk_record>* rec = records_.find(hash);
  return rec ? *rec : std::nullopt;
}

void group_commit::decide_fates() {
  fates_.assign(group_.size(), fate::commit);
  for (std::size_t i = 0; i < group_.size(); ++i) {
    const encoded_slot& e = group_[i];
    node& n = *e.n;
    const staged_slot& s = n.slots[e.index];
    const bool newer_here =
        i + 1 < group_.size() && group_[i + 1].n == e.n && group_[i + 1].index == e.index;
    if (n.purged || (n.record.nlink == 0 && n.opens == 0))
      fates_[i] = fate::dropped;  // a temporary file deleted before its data landed
    else if (newer_here || s.committed_gen > e.gen)
      fates_[i] = fate::obsolete;  // even if it failed: a newer version replaces it
    else if (e.error != 0)
      fates_[i] = fate::failed;
  }
  for (std::size_t i = 0; i < group_.size(); ++i)
    if (fates_[i] == fate::commit || fates_[i] == fate::obsolete)
      settled_[group_[i].n.get()].insert(group_[i].gen);
}

void group_commit::commit() {
  std::size_t chunk_count = 0;
  for (const encoded_slot& e : group_) chunk_count += e.chunks.size();
  // Beside other writers (shared_writers.cpp) the chunk references, whose
  // payloads are staged before the commit's lock, are all that is decided
  // out here; each file's extents and record are read and written inside it
  // (`fill`): another writer may have changed or removed the file.
  beside_others_ = data_.store_.writes_beside_others();
  for (std::size_t attempt = 0;; ++attempt) {
    try {
      store::transaction txn;
      if (beside_others_) {
        for (std::size_t i = 0; i < group_.size(); ++i)
          if (fates_[i] == fate::commit)
            for (const slot_chunk& c : group_[i].chunks)
              if (c.prepared) txn.ref_chunk(*c.prepared);
        data_.host_.commit(
            txn, false, [this](store::transaction& t) { fill(t); }, &ahead_,
            while_committing::all_wait);
      } else {
        // Readers (a stat, an open of a cached file) need not wait for the
        // round trip: every record this writes is of a file the group
        // pins in the table (staged data), and nothing of memory changes
        // until apply_records, after it.
        fill(txn);
        data_.host_.commit(txn, false, {}, &ahead_, while_committing::readers_pass);
      }
      // Nobody can read these bytes again: dropped like a deleted file's,
      // and the node's late commits with them.
      for (std::size_t i = 0; i < group_.size(); ++i)
        if (gone_.contains(group_[i].n.get())) fates_[i] = fate::dropped;
      for (node* n : gone_) n->purged = true;
      return;
    } catch (const store::chunk_missing& missing) {
      // A chunk we meant to share was released meanwhile: encode it. Each
      // retry encodes one more chunk, so this ends. (Rare; it runs under
      // the files' locks.)
      if (!encode_missing(missing.hash) || attempt > chunk_count) {
        error_ = EIO;
        return;
      }
    } catch (const store::store_error& ex) {
      log_error("committing " + std::to_string(updates_.size()) + " file(s): " + ex.what());
      error_ = ex.error_number();
      return;
    } catch (const std::exception& ex) {
      log_error("committing " + std::to_string(updates_.size()) + " file(s): " + ex.what());
      error_ = EIO;
      return;
    }
  }
}

bool group_commit::encode_missing(const store::chunk_hash& hash) {
  try {
    for (std::size_t i = 0; i < group_.size(); ++i) {
      if (fates_[i] != fate::commit) continue;
      for (slot_chunk& c : group_[i].chunks) {
        if (c.prepared && !c.prepared->encoded && c.prepared->hash == hash) {
          data_.encode_slot_chunk(c, *group_[i].data, group_[i].type, group_[i].small_file);
          return true;
        }
      }
    }
  } catch (const std::exception& ex) {
    log_error("chunk " + hash.hex() + ": encoding failed: " + ex.what());
  }
  return false;
}

void group_commit::fill(store::transaction& txn) {
  // One transaction for every version that commits, and each file's record
  // as it leaves it.
  updates_.clear();
  gone_.clear();
  // Read again where they may have changed since step 0: beside other
  // writers always (their commits are not counted here; this runs inside
  // the commit's lock), alone only after a commit of this client changed
  // a chunk record meanwhile (an unlink, a re-encoding), or where step 0
  // failed.
  if (beside_others_ || records_.of.empty() || !data_.store_.records_still_current(records_))
    read_chunk_records();
  // A chunk the store does not have is made from the first encoding of it
  // the transaction gets (transaction::ref_chunk): in group order, here as
  // beside others. Each file that uses it counts that one's size, also one
  // whose own copy was found stored when it was encoded (and released
  // since: chunk_missing) or was encoded otherwise (a small file's fast
  // codec): the file's stored_bytes is what fsck adds up from the records.
  first_encoding_.clear();
  for (std::size_t i = 0; i < group_.size(); ++i)
    if (fates_[i] == fate::commit)
      for (const slot_chunk& c : group_[i].chunks)
        if (c.prepared && c.prepared->encoded)
          first_encoding_.try_emplace(c.prepared->hash, c.prepared->encoded->bytes.size());
  for (std::size_t i = 0; i < group_.size(); ++i) {
    if (fates_[i] != fate::commit) continue;
    const encoded_slot& e = group_[i];
    node& n = *e.n;
    if (!updates_.contains(&n) && !gone_.contains(&n)) {
      try {
        updates_.try_emplace(&n, file_update{data_.host_.record_to_edit(n)});
      } catch (const fs_error&) {
        gone_.insert(&n);
      }
    }
    if (gone_.contains(&n)) {
      // Its references go back: nothing names these bytes.
      for (const slot_chunk& c : e.chunks)
        if (c.prepared) txn.unref_chunk(c.prepared->hash);
      continue;
    }
    put_slot(txn, e, updates_.at(&n));
  }
  for (auto& [np, u] : updates_) put_file_record(txn, *np, u);
}

void group_commit::put_slot(store::transaction& txn, const encoded_slot& e, file_update& u) {
  node& n = *e.n;
  store::inode_record& r = u.record;
  const std::uint64_t slot_start = e.index * k_slot;
  r.stored_bytes -=
      std::min(r.stored_bytes, data_.drop_extents(txn, n.ino, slot_start, slot_start + k_slot));
  for (const slot_chunk& c : e.chunks) {
    if (!c.prepared) continue;
    const store::prepared_chunk& prepared = *c.prepared;
    txn.put_extent(n.ino, slot_start + c.offset, {prepared.hash, 0, c.length});
    if (!beside_others_) txn.ref_chunk(prepared);
    // A chunk that exists keeps its record (another writer may have
    // stored it since we prepared it, even with another codec).
    const std::optional<store::chunk_record> existing = stored_record(prepared.hash);
    if (existing) {
      r.stored_bytes += existing->stored_size;
    } else if (const auto first = first_encoding_.find(prepared.hash);
               first != first_encoding_.end()) {
      r.stored_bytes += first->second;
    }
    if (prepared.encoded && !existing) {
      if (prepared.encoded->fell_back_from) {
        r.flags |= store::k_inode_fell_back;
        log_debug("inode " + std::to_string(n.ino) + ": chunk " + prepared.hash.hex() +
                  " stored with " + codec::codec_name(prepared.encoded->codec) + " instead of " +
                  codec::codec_name(*prepared.encoded->fell_back_from) + ": " +
                  prepared.encoded->fallback_reason);
      }
      if (c.queue_recompress) {
        txn.queue_recompress(prepared.hash, n.ino);
        u.queued = true;
      }
    }
  }
  r.type = e.type;
  u.data_end = std::max(u.data_end, slot_start + e.data->size());
}

void group_commit::put_file_record(store::transaction& txn, node& n, file_update& u) {
  // The persisted size may only cover data that is committed: it stops at
  // the lowest slot that still holds staged bytes other than the versions
  // this group settles, so a crash never exposes zeros that were never
  // written. Once nothing is staged, it is the size.
  const std::set<std::uint64_t>& done = settled_[&n];
  std::uint64_t lowest_staged = std::numeric_limits<std::uint64_t>::max();
  for (const auto& [i, other] : n.slots) {
    bool staged = static_cast<bool>(other.dirty);
    for (const auto& [gen, bytes] : other.in_flight) staged = staged || !done.count(gen);
    if (staged) {
      lowest_staged = i * k_slot;
      break;
    }
  }
  const bool settled =
      lowest_staged == std::numeric_limits<std::uint64_t>::max() && n.write_error == 0;
  if (settled)
    u.persisted = n.size;
  else
    u.persisted = std::max(n.persisted_size, std::min({n.size, u.data_end, lowest_staged}));
  // A new file whose data as of its last close lands here stops being new
  // in the same commit (new_files.cpp).
  if (data_.host_.new_file_ends(n, settled)) {
    txn.clear_new_file(n.ino);
    u.ends_new_file = true;
  }
  store::inode_record p = u.record;
  p.size = u.persisted;
  txn.put_inode(p);
}

void group_commit::apply_records() {
  for (auto& [np, u] : updates_) {
    node& n = *np;
    // st_blocks moved behind the kernel's back: it may cache the old one
    // for attr_timeout.
    if (n.record.stored_bytes != u.record.stored_bytes && n.lookups > 0)
      attributes_changed_.push_back(n.ino);
    n.record.stored_bytes = u.record.stored_bytes;
    n.record.type = u.record.type;
    n.record.flags = u.record.flags;
    n.persisted_size = u.persisted;
    n.record_dirty = false;  // the record just stored is n.record
    if (u.ends_new_file) n.new_file = false;
    queued_any_ = queued_any_ || u.queued;
  }
}

void group_commit::settle_slots() {
  for (std::size_t i = 0; i < group_.size(); ++i) {
    encoded_slot& e = group_[i];
    node& n = *e.n;
    staged_slot& s = n.slots[e.index];
    released_bytes_ += e.data->size();
    if (fates_[i] == fate::commit) {
      s.committed_gen = e.gen;
      // An older version must never serve a read or become the base of a
      // new write once a newer one has landed.
      s.in_flight.erase(s.in_flight.begin(), s.in_flight.upper_bound(e.gen));
    }
    s.in_flight.erase(e.gen);
    --s.jobs;
    n.running_jobs.erase(e.gen);
    if (fates_[i] == fate::failed) {
      const int why = e.error != 0 ? e.error : error_;
      if (n.write_error == 0) n.write_error = why;
      // Keep the data staged so a flush after space is freed can still
      // store it, unless a newer version exists (built on top of this one).
      const bool newer = s.dirty || s.committed_gen > e.gen ||
                         (!s.in_flight.empty() && s.in_flight.rbegin()->first > e.gen);
      if (!newer) {
        s.dirty = std::make_shared<std::string>(*e.data);
        s.dirty_gen = n.next_gen++;
        ++n.dirty_slots;
      }
    }
    --n.in_flight_slots;
    if (s.empty()) n.slots.erase(e.index);
    if (i + 1 == group_.size() || group_[i + 1].n != e.n) n.data_cv.notify_all();
  }
}

void group_commit::store_settled_sizes() {
  // A file whose last versions were all obsolete here (a newer one landed
  // in an earlier group while an older one still encoded) got no record in
  // the transaction above, and nothing staged is left to write it: its
  // size would stay behind in the store, and the next load of the node
  // would read the file short.
  for (std::size_t i = 0; i < group_.size(); ++i) {
    if (i > 0 && group_[i].n == group_[i - 1].n) continue;
    try {
      // Nothing passes: with the group's files settled, a node released
      // after an earlier window could be loaded again, short, meanwhile.
      data_.store_record_if_settled_locked(*group_[i].n, while_committing::all_wait);
    } catch (const std::exception& ex) {
      log_error("inode " + std::to_string(group_[i].n->ino) + ": storing its size: " + ex.what());
    }
  }
}

void group_commit::after_the_locks() {
  data_.release_in_flight(released_bytes_);
  for (const std::uint64_t ino : attributes_changed_) data_.host_.invalidate_attributes(ino);
  data_.host_.data_committed(queued_any_);
  remember_committed_chunks();
}

void group_commit::remember_committed_chunks() {
  // Where reading a chunk back means asking the server for its record and
  // its payload's place (PostgreSQL), the bytes just committed go into the
  // decoded-chunk cache: a file read back after its pages left the kernel
  // then costs no round trip, and answers during a partition. A chunk that
  // is the whole slot shares the slot's string; others are copied (here,
  // after the locks), as is a whole slot whose buffer has much more room
  // than bytes (a short last slot of a streamed write, given 4 MiB): the
  // cache counts sizes, not capacities. The embedded store reads its own
  // disk: left as it was.
  // Last of the steps, and never throwing (a group commit must not): a
  // chunk it could not keep (no memory) is read from the store later.
  if (error_ != 0 || !data_.store_.caches_chunks() || !data_.store_.reads_are_round_trips()) return;
  try {
    for (std::size_t i = 0; i < group_.size(); ++i) {
      if (fates_[i] != fate::commit) continue;
      const encoded_slot& e = group_[i];
      for (const slot_chunk& c : e.chunks) {
        if (!c.prepared || std::size_t{c.offset} + c.length > e.data->size()) continue;
        const bool whole = c.offset == 0 && c.length == e.data->size() &&
                           e.data->capacity() <= e.data->size() + e.data->size() / 4;
        data_.store_.remember_chunk(
            c.prepared->hash,
            whole ? e.data
                  : std::make_shared<const std::string>(e.data->substr(c.offset, c.length)));
      }
    }
  } catch (const std::exception&) {
  }
}

void group_commit::release_unreachable_files() {
  for (std::size_t i = 0; i < group_.size(); ++i) {
    if (i > 0 && group_[i].n == group_[i - 1].n) continue;
    try {
      data_.host_.maybe_release(group_[i].n);
    } catch (const std::exception& ex) {
      // Stays an orphan in the store; the next mount releases it.
      log_error("inode " + std::to_string(group_[i].n->ino) + ": release failed: " + ex.what());
    }
  }
}

}  // namespace densefs::fs
