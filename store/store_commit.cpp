// The commit: free space, payloads staged or written ahead, the locked
// transaction, sync and statvfs.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <utility>

#include "codec/lepton_file.h"
#include "store/cache/chunk_cache.h"
#include "store/cache/entry_cache.h"
#include "store/durable_file.h"
#include "store/log.h"
#include "store/metadata/fault_injection.h"
#include "store/metadata/metadata_engine.h"
#include "store/payload/pack_store.h"
#include "store/payload/payload_store.h"
#include "store/record_reads.h"
#include "store/records_detail.h"
#include "store/snapshot/pre_image.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

namespace {
// New file data may not eat into a reserve kept for metadata (unlink and
// rename must work on a full disk) and for RocksDB's own flushes (a
// memtable full of payloads becomes a blob file before its WAL goes). If
// RocksDB itself hits ENOSPC it stops writing until Resume() can flush,
// which on a full disk is never.
std::uint64_t space_reserve(const struct ::statvfs& sv) {
  const std::uint64_t block = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
  const std::uint64_t total = static_cast<std::uint64_t>(sv.f_blocks) * block;
  return std::clamp<std::uint64_t>(total / 50, k_min_space_reserve, k_max_space_reserve);
}
}  // namespace

void store::check_space_for(std::uint64_t bytes) const {
  struct ::statvfs sv {};
  if (::statvfs(dir_.c_str(), &sv) != 0) return;  // cannot tell: let RocksDB decide
  const std::uint64_t block = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
  const std::uint64_t free = static_cast<std::uint64_t>(sv.f_bavail) * block;
  const std::uint64_t reserve = space_reserve(sv);
  if (free < bytes + reserve) {
    throw store_error(ENOSPC, "store " + dir_.string() + " is full: " + std::to_string(free) +
                                  " bytes free, " + std::to_string(bytes) +
                                  " needed plus a reserve of " + std::to_string(reserve));
  }
}

// A commit's payloads put into the payload store ahead of its locked
// transaction (store::commit beside other writers, or written ahead by
// write_payloads_ahead): the index entries (or inline payloads) each put
// left in its batch, to be written by the commit if the chunk is still new
// then. Keyed by chunk; used only for the same bytes.
struct store::payload_to_stage {
  const chunk_hash* hash;
  const std::string* bytes;
  payload_meta meta;
};

struct store::staged_payload {
  payload_meta meta;
  std::uint64_t size = 0;
  std::uint64_t checksum = 0;                                     // stored_checksum of the bytes
  std::vector<std::pair<std::string, std::string>> payload_rows;  // payloads table: key, value
  bool same_as(std::uint64_t bytes_size, std::uint64_t bytes_checksum,
               const payload_meta& m) const {
    return meta.codec == m.codec && meta.plain_size == m.plain_size && size == bytes_size &&
           checksum == bytes_checksum;
  }
  bool same_as(std::string_view bytes, const payload_meta& m) const {
    return same_as(bytes.size(), stored_checksum(bytes), m);
  }
};

struct payloads_ahead::impl {
  std::shared_lock<std::shared_mutex> gate;  // store::ahead_gate_
  store::staged_payloads payloads;
};

payloads_ahead::payloads_ahead() = default;
payloads_ahead::~payloads_ahead() = default;
payloads_ahead::payloads_ahead(payloads_ahead&&) noexcept = default;
payloads_ahead& payloads_ahead::operator=(payloads_ahead&&) noexcept = default;
bool payloads_ahead::empty() const {
  return !impl_ || impl_->payloads.empty();
}

namespace {

// The rows payload_store::put writes, kept for later (staged payloads).
class payload_rows_batch final : public metadata_batch {
 public:
  explicit payload_rows_batch(std::vector<std::pair<std::string, std::string>>& rows)
      : rows_(rows) {}
  void put(table t, std::string_view key, std::string_view value) override {
    if (t != table::payloads)
      throw store_error(EIO, "staging a payload: a write outside the payloads table");
    rows_.emplace_back(key, value);
  }
  void erase(table, std::string_view) override {
    throw store_error(EIO, "staging a payload: an erase");
  }
  bool empty() const override { return rows_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>>& rows_;
};

// Thrown out of a commit's locked transaction when it needs a payload that
// was not staged (a chunk another writer deleted since the staging, one
// encoded again after it, one a payloads_ahead lacks): the commit stages it
// and tries again.
struct payload_not_staged {
  chunk_hash hash;
  const std::string* bytes;
  payload_meta meta;
};

}  // namespace

void store::stage_payload(staged_payloads& staged, const chunk_hash& hash, const std::string& bytes,
                          const payload_meta& meta) {
  staged_payload& p = staged[hash];
  p.meta = meta;
  p.size = bytes.size();
  p.checksum = stored_checksum(bytes);
  p.payload_rows.clear();
  payload_rows_batch rows(p.payload_rows);
  payloads_->put(rows, hash, bytes, meta);
}

void store::stage_payloads(const transaction::impl& t, staged_payloads& staged, bool every_chunk) {
  // The chunks that look new now (or all that come with their bytes), and
  // every swap's bytes; none staged already.
  std::vector<std::string> keys;
  std::vector<const std::pair<const chunk_hash, chunk_delta>*> candidates;
  for (const auto& c : t.chunks) {
    if (c.second.delta <= 0 || !c.second.encoded) continue;
    keys.emplace_back(c.first.view());
    candidates.push_back(&c);
  }
  for (const auto& group : t.replacements)
    for (const transaction::payload_swap& r : group) keys.emplace_back(r.hash.view());
  const std::vector<std::optional<std::string>> records =
      engine_->get_many(table::chunks, keys, "the chunks of a commit");
  std::vector<payload_to_stage> puts;
  std::size_t i = 0;
  const auto is_staged = [&](const chunk_hash& hash, const std::string& bytes,
                             const payload_meta& meta) {
    const auto it = staged.find(hash);
    return it != staged.end() && it->second.same_as(bytes, meta);
  };
  for (; i < candidates.size(); ++i) {
    const auto& [hash, d] = *candidates[i];
    const payload_meta meta{d.encoded->codec, d.plain_size};
    if ((records[i] && !every_chunk) || is_staged(hash, d.encoded->bytes, meta)) continue;
    puts.push_back({&hash, &d.encoded->bytes, meta});
  }
  for (const auto& group : t.replacements)
    for (const transaction::payload_swap& r : group) {
      const std::optional<std::string>& raw = records[i++];
      if (!raw) continue;  // gone: the swap will not apply
      const chunk_record rec = detail::decode_chunk(*raw, "chunk " + r.hash.hex());
      const payload_meta meta{r.encoded.codec, rec.plain_size};
      if (is_staged(r.hash, r.encoded.bytes, meta)) continue;
      puts.push_back({&r.hash, &r.encoded.bytes, meta});
    }
  if (puts.empty()) return;
  stage_all(staged, puts);
  // Durable (uploaded, for a scale-out volume) before a commit names them.
  payloads_->sync();
}

void store::stage_all(staged_payloads& staged, std::span<const payload_to_stage> puts) {
  std::uint64_t bytes = 0;
  for (const payload_to_stage& p : puts) bytes += p.bytes->size();
  check_space_for(bytes);
  for (const payload_to_stage& p : puts) stage_payload(staged, *p.hash, *p.bytes, p.meta);
}

payloads_ahead store::write_payloads_ahead(std::span<const prepared_chunk* const> chunks,
                                           const chunk_records* known) {
  payloads_ahead ahead;
  if (options_.read_only || !payloads_->writes_at_put()) return ahead;
  // The chunks that come with their bytes and are new (or damaged: the
  // commit stores them afresh), each once.
  std::map<chunk_hash, const prepared_chunk*> candidates;
  for (const prepared_chunk* c : chunks)
    if (c && c->encoded) candidates.try_emplace(c->hash, c);
  if (candidates.empty()) return ahead;
  // What a wrong answer costs is small either way: a payload written for
  // a chunk that exists is dead bytes for gc, one left out is written by
  // the commit.
  std::vector<chunk_hash> unknown;
  for (const auto& [hash, c] : candidates)
    if (!known || !known->find(hash)) unknown.push_back(hash);
  const chunk_records read = get_chunks(unknown);
  std::vector<payload_to_stage> puts;
  for (const auto& [hash, c] : candidates) {
    const std::optional<chunk_record>* rec = known ? known->find(hash) : nullptr;
    if (!rec) rec = read.find(hash);
    if (*rec && !damaged_->contains(hash)) continue;
    puts.push_back({&c->hash, &c->encoded->bytes, {c->encoded->codec, c->plain_size}});
  }
  if (puts.empty()) return ahead;
  ahead.impl_ = std::make_unique<payloads_ahead::impl>();
  ahead.impl_->gate = std::shared_lock(ahead_gate_);
  stage_all(ahead.impl_->payloads, puts);
  // Durable before a commit names them durably (an engine whose every
  // write is, or the shared database other writers read at once); else
  // the commit syncs them when it syncs its log.
  if (writes_beside_others() || engine_->writes_are_durable()) payloads_->sync();
  return ahead;
}

namespace {

// The inode number a record key of the inode tables starts with (inodes,
// dirents: the parent, extents, xattrs); the caller checked its 8 bytes.
std::uint64_t key_ino(const txn_op& op) {
  return decode_u64_be(std::string_view(op.key).substr(0, 8));
}

// Inodes whose cached extent lists a transaction's `ops` make stale: those
// it puts or deletes extents of. (A record's change alone leaves the list
// exact: a truncate deletes the extents past the end in its commit, and
// inode numbers are never used again.)
std::vector<std::uint64_t> inodes_with_new_extents(const std::vector<txn_op>& ops) {
  std::vector<std::uint64_t> out;
  for (const txn_op& op : ops)
    if (op.cf == table::extents && op.key.size() >= 8) out.push_back(key_ino(op));
  return out;
}

// The entries (parent, name) a transaction's `ops` put or remove.
std::vector<std::pair<std::uint64_t, std::string>> entries_of(const std::vector<txn_op>& ops) {
  std::vector<std::pair<std::uint64_t, std::string>> entries;
  for (const txn_op& op : ops)
    if (op.cf == table::dirents && op.key.size() >= 8)
      entries.emplace_back(key_ino(op), op.key.substr(8));
  return entries;
}

// What a transaction's `ops` change, as the notice other clients hear (""
// when they change no inode, entry or xattr). `writer`: a shared writer's
// session, so that it can skip its own commits' notices.
std::string notice_of(const std::vector<txn_op>& ops, const std::string& writer) {
  change_notice changed;
  for (const txn_op& op : ops) {
    if (op.key.size() < 8) continue;
    const std::uint64_t ino = key_ino(op);
    if (op.cf == table::dirents)
      changed.entries.emplace_back(ino, op.key.substr(8));
    else if (op.cf == table::inodes || op.cf == table::extents || op.cf == table::xattrs)
      changed.inodes.push_back(ino);
  }
  if (changed.inodes.empty() && changed.entries.empty()) return {};
  changed.writer = writer;
  return encode_change_notice(changed);
}

// The record and payload of a chunk stored new (or afresh): `bytes` as
// encoded, the rest as its record will say.
chunk_record record_for(const chunk_hash& hash, const codec::encoded_chunk& e, chunk_record base) {
  if (e.bytes.size() > std::numeric_limits<std::uint32_t>::max())
    throw store_error(EIO, "chunk " + hash.hex() + ": stored size too large");
  base.codec = e.codec;
  base.stored_size = static_cast<std::uint32_t>(e.bytes.size());
  base.checksum = stored_checksum(e.bytes);
  return base;
}

}  // namespace

// What a commit did, for after it: the caches and the FORMAT file follow.
struct store::commit_outcome {
  std::vector<chunk_hash> deleted;
  std::vector<chunk_hash> healed;  // damaged chunks stored afresh (damaged_chunks.h)
  std::uint64_t garbage = 0;       // payload bytes this commit deletes or replaces
  bool raise_format = false;       // the store's first Lepton file
  store_settings raised;
  std::vector<std::string> kept;  // records now kept for the latest snapshot
};

// What one try of a commit's locked write changes in chunk records, and
// what it leaves for after the commit. Made afresh for each try (a lost
// connection, a payload not staged): nothing of a failed try carries over.
// The steps, in order: read_records, apply_references, apply_swaps,
// put_records, put_payloads.
class store::commit_attempt {
 public:
  commit_attempt(store& s, const transaction::impl& t, locked_reads& reads, metadata_batch& batch)
      : s_(s), t_(t), reads_(reads), batch_(batch) {}

  // The pre-images of the records this commit changes, for the latest
  // snapshot (pre_image_writer.h), and the references they hold.
  void keep_pre_images();
  // The chunk records this commit changes, read in one go.
  void read_records();
  // Each chunk's reference change: a new chunk's record and payload, a
  // damaged chunk stored afresh, a count that reaches zero deleted (with
  // the reference its Lepton member held on its first chunk).
  void apply_references();
  // The payload swaps (re-encodings), each group whole or not at all.
  void apply_swaps();
  // Every record as this commit leaves it, and the format raised if this
  // is the store's first Lepton file.
  void put_records();
  // The new payloads: their index rows as staged (`staged`), or put now,
  // after the space check, then synced as the engine's durability needs.
  void put_payloads(staged_payloads* staged, bool sync);

  commit_outcome done;

 private:
  store& s_;
  const transaction::impl& t_;
  locked_reads& reads_;
  metadata_batch& batch_;

  std::map<chunk_hash, std::optional<std::string>> read_;
  // References the pre-images of this commit take (keep_pre_images): one
  // per kept extent, on top of the transaction's own changes.
  std::map<chunk_hash, std::int64_t> held_;
  struct new_payload {
    const chunk_hash* hash;
    const std::string* bytes;
    payload_meta meta;
    std::uint64_t checksum;  // stored_checksum(*bytes), as its record has it
  };
  std::vector<new_payload> new_payloads_;
  std::uint64_t new_payload_bytes_ = 0;
  // Chunk records as this commit leaves them (nullopt: deleted), written to
  // the batch at the end: a Lepton member deleted or swapped here gives its
  // reference on its first chunk back, and that chunk may change in this
  // commit too.
  std::map<chunk_hash, std::optional<chunk_record>> touched_;
  // First chunks whose members left them, one entry per reference.
  std::vector<chunk_hash> releases_;
  std::set<chunk_hash> swapped_;  // one swap per chunk and commit

  std::optional<chunk_record> current(const chunk_hash& h);
  void add_payload(const chunk_hash& hash, const std::string& bytes, const chunk_record& r) {
    new_payloads_.push_back({&hash, &bytes, {r.codec, r.plain_size}, r.checksum});
    new_payload_bytes_ += bytes.size();
  }
  void release_member(const chunk_hash& member, const chunk_record& rec);
  void apply_delta(const chunk_hash& hash, chunk_record rec, std::int64_t delta);
  void apply_releases();
  // Whether `group` may be swapped whole: its records (in `recs`) and the
  // first chunks its new Lepton members take a reference on (in `takes`).
  bool swap_applies(const std::vector<transaction::payload_swap>& group,
                    std::vector<chunk_record>& recs, std::vector<chunk_hash>& takes);
};

void store::commit_attempt::keep_pre_images() {
  s_.refresh_latest_snapshot(reads_);
  // This commit keeps pre-images for the latest snapshot before it; one
  // that moves snapshot_latest (a deletion's last) makes the next read it.
  if (s_.latest_known_)
    for (const txn_op& op : t_.ops)
      if (op.cf == table::meta && op.key == k_snapshot_latest_key) s_.latest_known_ = false;
  if (s_.pre_images_.latest() == 0) return;
  record_changes changes;
  for (const txn_op& op : t_.ops) {
    if (!s_.pre_images_.may_need(op.cf, op.key)) continue;
    auto& after = changes[{op.cf, op.key}];
    if (op.erase)
      after.reset();
    else
      after = encode_value(op, s_.encoding_);
  }
  if (changes.empty()) return;
  pre_image_writer::added added = s_.pre_images_.add(changes, reads_, batch_);
  for (const chunk_hash& h : added.held) ++held_[h];
  done.kept = std::move(added.kept);
}

void store::commit_attempt::read_records() {
  std::vector<chunk_hash> hashes;
  for (const auto& [hash, d] : t_.chunks)
    if (d.delta != 0) hashes.push_back(hash);
  for (const auto& [hash, n] : held_)
    if (!t_.chunks.contains(hash)) hashes.push_back(hash);
  for (const auto& group : t_.replacements)
    for (const transaction::payload_swap& r : group) hashes.push_back(r.hash);
  std::vector<std::string> keys;
  keys.reserve(hashes.size());
  for (const chunk_hash& h : hashes) keys.emplace_back(h.view());
  std::vector<std::optional<std::string>> values =
      reads_.get_many(table::chunks, keys, "the chunks of a commit");
  for (std::size_t i = 0; i < hashes.size(); ++i) read_[hashes[i]] = std::move(values[i]);
}

std::optional<chunk_record> store::commit_attempt::current(const chunk_hash& h) {
  if (const auto it = touched_.find(h); it != touched_.end()) return it->second;
  const std::string what = "chunk " + h.hex();
  std::optional<std::string> raw;
  if (const auto it = read_.find(h); it != read_.end())
    raw = it->second;
  else
    raw = reads_.get(table::chunks, h.view(), what);
  if (!raw) return std::nullopt;
  return detail::decode_chunk(*raw, what);
}

void store::commit_attempt::release_member(const chunk_hash& member, const chunk_record& rec) {
  // Only a member fsck would count gives a reference back (fsck.cpp,
  // count_member_references): its payload matches its record's checksum and
  // names a chunk that is a Lepton file (checked in apply_releases). A
  // damaged member must not take a reference from a chunk others still use.
  try {
    const std::string stored = s_.payloads_->get(member);
    if (!payload_matches(rec, stored))
      throw store_error(EIO, "payload does not match its record's checksum");
    const codec::lepton_member m = codec::parse_lepton_member(stored);
    if (m.first_chunk.size() == chunk_hash::k_size)
      releases_.push_back(chunk_hash::from_bytes(m.first_chunk));
  } catch (const std::exception& e) {
    // Its first chunk keeps one reference too many (fsck reports it as a
    // wrong refcount); no bytes are at risk.
    log_error("chunk " + member.hex() +
              ": cannot read the Lepton member being dropped: " + e.what());
  }
}

void store::commit_attempt::apply_delta(const chunk_hash& hash, chunk_record rec,
                                        std::int64_t delta) {
  std::uint64_t count = rec.refcount;
  if (delta > 0) {
    count += static_cast<std::uint64_t>(delta);
  } else if (static_cast<std::uint64_t>(-delta) > count) {
    // A bug elsewhere; a negative count would wrap around and keep the
    // chunk forever, so clamp and say so.
    log_error("chunk " + hash.hex() + ": refcount " + std::to_string(count) + " minus " +
              std::to_string(-delta) + " would go below zero; treating it as 0");
    count = 0;
  } else {
    count -= static_cast<std::uint64_t>(-delta);
  }
  if (count == 0) {
    if (rec.codec == codec::codec_id::lepton_member) release_member(hash, rec);
    touched_[hash] = std::nullopt;
    done.deleted.push_back(hash);
    done.garbage += rec.stored_size;
  } else {
    rec.refcount = count;
    touched_[hash] = rec;
  }
}

void store::commit_attempt::apply_releases() {
  while (!releases_.empty()) {
    const chunk_hash first = releases_.back();
    releases_.pop_back();
    if (std::optional<chunk_record> rec = current(first);
        rec && rec->codec == codec::codec_id::lepton_file) {
      apply_delta(first, *rec, -1);
    } else if (rec) {
      log_error("chunk " + first.hex() +
                ": a Lepton member named it as its Lepton file, but it is not one; "
                "its references are left as they are");
    } else {
      log_error("chunk " + first.hex() +
                ": a Lepton member gave back a reference to it, but it does not exist");
    }
  }
}

void store::commit_attempt::apply_references() {
  for (const auto& [hash, d] : t_.chunks) {
    // A reference a pre-image keeps: the live extent's is moved to it.
    const auto held = held_.find(hash);
    const std::int64_t delta = d.delta + (held == held_.end() ? 0 : held->second);
    if (delta == 0) continue;
    std::optional<chunk_record> rec = current(hash);
    if (!rec) {
      if (delta < 0) {
        log_error("chunk " + hash.hex() + ": dropping " + std::to_string(-delta) +
                  " reference(s) to a chunk that does not exist");
        continue;
      }
      if (!d.encoded) throw chunk_missing(hash);
      chunk_record fresh;
      fresh.plain_size = d.plain_size;
      fresh.refcount = static_cast<std::uint64_t>(delta);
      fresh.location = payload_location::rocksdb;
      const chunk_record r = record_for(hash, *d.encoded, fresh);
      touched_[hash] = r;
      add_payload(hash, d.encoded->bytes, r);
      continue;
    }
    if (delta > 0 && s_.damaged_->contains(hash)) {
      // Its payload failed a check, and this commit brings the content
      // again (a re-copy, the next backup): a fresh payload under the same
      // record instead of one more reference to the damaged one, so every
      // file using the chunk is whole again. Not a Lepton file or member:
      // others depend on their payloads.
      if (!codec::is_lepton_file_codec(rec->codec) &&
          !(d.encoded && codec::is_lepton_file_codec(d.encoded->codec))) {
        if (!d.encoded) throw chunk_missing(hash);  // the caller encodes it and retries
        chunk_record r = record_for(hash, *d.encoded, *rec);
        r.refcount += static_cast<std::uint64_t>(delta);
        done.garbage += rec->stored_size;
        touched_[hash] = r;
        add_payload(hash, d.encoded->bytes, r);
        damaged_chunks::clear_in(batch_, hash);
        done.healed.push_back(hash);
        continue;
      }
    }
    apply_delta(hash, *rec, delta);
  }
  // Kept extents' chunks the transaction does not change (an extent
  // deleted without its reference given back is a bug elsewhere; the
  // chunk then keeps one too many, which fsck reports).
  for (const auto& [hash, n] : held_) {
    if (t_.chunks.contains(hash)) continue;
    if (std::optional<chunk_record> rec = current(hash))
      apply_delta(hash, *rec, n);
    else
      log_error("chunk " + hash.hex() +
                ": a snapshot keeps an extent naming it, but it is missing");
  }
  // After every chunk's own references: a first chunk that gains one in
  // this commit is not deleted by its member's release first.
  apply_releases();
}

bool store::commit_attempt::swap_applies(const std::vector<transaction::payload_swap>& group,
                                         std::vector<chunk_record>& recs,
                                         std::vector<chunk_hash>& takes) {
  for (const transaction::payload_swap& r : group) {
    std::optional<chunk_record> rec = current(r.hash);
    // Deleted or swapped meanwhile, never mixed with reference changes,
    // never a Lepton file (its members depend on it).
    // A damaged chunk only from checked content: a re-encoding of its
    // damaged payload would make the damage permanent.
    if (!rec || rec->checksum != r.expected_checksum || t_.chunks.count(r.hash) ||
        swapped_.count(r.hash) || rec->codec == codec::codec_id::lepton_file ||
        r.encoded.bytes.size() > std::numeric_limits<std::uint32_t>::max() ||
        (!r.content_checked && s_.damaged_->contains(r.hash)))
      return false;
    recs.push_back(*rec);
  }
  // Each new member names a chunk that is a Lepton file after the swap.
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (group[i].encoded.codec != codec::codec_id::lepton_member) continue;
    codec::lepton_member m;
    try {
      m = codec::parse_lepton_member(group[i].encoded.bytes);
    } catch (const codec::codec_error&) {
      return false;
    }
    if (m.first_chunk.size() != chunk_hash::k_size || m.plain_size != recs[i].plain_size)
      return false;
    const chunk_hash first = chunk_hash::from_bytes(m.first_chunk);
    const auto in_group =
        std::find_if(group.begin(), group.end(), [&](const auto& g) { return g.hash == first; });
    std::optional<chunk_record> first_rec = current(first);
    const bool is_file = in_group != group.end()
                             ? in_group->encoded.codec == codec::codec_id::lepton_file
                             : first_rec && first_rec->codec == codec::codec_id::lepton_file;
    if (!is_file || first == group[i].hash) return false;
    takes.push_back(first);
  }
  return true;
}

void store::commit_attempt::apply_swaps() {
  for (const std::vector<transaction::payload_swap>& group : t_.replacements) {
    std::vector<chunk_record> recs;
    std::vector<chunk_hash> takes;
    if (!swap_applies(group, recs, takes)) continue;
    for (std::size_t i = 0; i < group.size(); ++i) {
      const transaction::payload_swap& swap = group[i];
      if (recs[i].codec == codec::codec_id::lepton_member) release_member(swap.hash, recs[i]);
      done.garbage += recs[i].stored_size;
      const chunk_record rec = record_for(swap.hash, swap.encoded, recs[i]);
      touched_[swap.hash] = rec;
      swapped_.insert(swap.hash);
      if (swap.content_checked && s_.damaged_->contains(swap.hash)) {
        // A fresh payload for a damaged chunk (densefs fsck --repair-from).
        damaged_chunks::clear_in(batch_, swap.hash);
        done.healed.push_back(swap.hash);
      }
      add_payload(swap.hash, swap.encoded.bytes, rec);
      done.raise_format =
          done.raise_format ||
          (swap.encoded.codec == codec::codec_id::lepton_file && !s_.holds_lepton_files_);
    }
    for (const chunk_hash& first : takes) {
      chunk_record rec = *current(first);  // present: checked by swap_applies
      ++rec.refcount;
      touched_[first] = rec;
    }
    apply_releases();
  }
}

void store::commit_attempt::put_records() {
  done.raised = s_.settings_;
  if (done.raise_format) {
    done.raised.format_version = k_lepton_file_format_version;
    batch_.put(table::meta, k_settings_key, encode_settings(done.raised));
  }
  // Queue entries this transaction puts (a deleted chunk's entry goes too);
  // gathered once, and only for a commit that deletes a chunk.
  std::optional<std::set<std::string_view>> queued_here;
  for (const auto& [hash, rec] : touched_) {
    if (rec) {
      batch_.put(table::chunks, hash.view(), encode_chunk(*rec, s_.encoding_));
      continue;
    }
    // No other commit of this store runs now: its queue cannot change
    // meanwhile.
    if (!queued_here) {
      queued_here.emplace();
      for (const txn_op& op : t_.ops)
        if (op.cf == table::meta && !op.erase && op.key.starts_with(k_recompress_prefix))
          queued_here->insert(op.key);
    }
    const bool queued =
        queued_here->contains(recompress_key(hash)) || s_.is_queued_for_recompress(hash);
    s_.delete_chunk(batch_, hash, queued);
    if (s_.damaged_->contains(hash)) damaged_chunks::clear_in(batch_, hash);
  }
}

void store::commit_attempt::put_payloads(staged_payloads* staged, bool sync) {
  if (staged) {
    // Staged before the transaction, or not yet: then stage and try again.
    for (const new_payload& p : new_payloads_) {
      const auto it = staged->find(*p.hash);
      if (it == staged->end() || !it->second.same_as(p.bytes->size(), p.checksum, p.meta))
        throw payload_not_staged{*p.hash, p.bytes, p.meta};
      for (const auto& [key, value] : it->second.payload_rows)
        batch_.put(table::payloads, key, value);
    }
    // Pack bytes durable before the log that names them (payloads written
    // ahead on an engine that is not durable at once were not synced, nor
    // were those of earlier commits this synced log makes durable).
    // Beside other writers every staged payload was uploaded already, and
    // an upload must not hold the others' lock.
    if (sync && !s_.writes_beside_others()) s_.payloads_->sync();
    return;
  }
  // After the space check: a pack store writes them out at once.
  if (new_payload_bytes_ > 0) s_.check_space_for(new_payload_bytes_);
  for (const new_payload& p : new_payloads_) s_.payloads_->put(batch_, *p.hash, *p.bytes, p.meta);
  // Pack bytes durable before the log that names them.
  // (Also those of earlier commits, which the synced log includes.) An
  // engine whose every write is durable at once (PostgreSQL) names them
  // durably with this write: a power loss after it must not leave an index
  // entry naming bytes the page cache lost.
  if (sync || (s_.engine_->writes_are_durable() && !new_payloads_.empty())) s_.payloads_->sync();
}

void store::commit(transaction& txn, bool sync, const std::function<void(transaction&)>& fill,
                   payloads_ahead* ahead) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  transaction::impl& t = ensure(txn.impl_);

  // (Pack compaction plans under commit_mutex_ too: the payloads this
  // writes are named by its index entries before compaction looks.)
  std::lock_guard lock(commit_mutex_);
  // One writer: nothing can change between fill's reads and the write.
  const bool fill_locked = fill && writes_beside_others();
  if (fill && !fill_locked) fill(txn);
  if (!fill_locked && txn.empty()) return;

  // Inodes whose cached extent lists this commit makes stale, and the
  // notice that tells other clients what it changes.
  std::vector<std::uint64_t> extents_changed;
  std::string notice;
  const auto note_changes = [&] {
    if (caches_extents()) extents_changed = inodes_with_new_extents(t.ops);
    if (membership_->keeps_sessions())
      notice = notice_of(t.ops, writes_beside_others() ? membership_->session_id() : std::string());
  };
  // What `fill` starts from on each try: the transaction as passed.
  const std::size_t base_ops = t.ops.size();
  std::map<chunk_hash, std::int64_t> base_deltas;
  if (fill_locked)
    for (const auto& [hash, d] : t.chunks) base_deltas[hash] = d.delta;
  const auto refill = [&] {
    t.ops.resize(base_ops);
    t.new_inodes.clear();
    t.new_directories.clear();
    std::erase_if(t.chunks, [&](const auto& c) { return !base_deltas.contains(c.first); });
    for (auto& [hash, d] : t.chunks) d.delta = base_deltas.at(hash);
    fill(txn);
    note_changes();
  };
  if (!fill_locked) note_changes();

  // A writer beside others on one volume reads the chunk records and
  // writes the batch in one locked transaction (write_locked), which must
  // not hold the others off for a pack upload: the payloads that may be new
  // go to the payload store first, and the transaction writes the index
  // entries of those still new then. (A payload found to exist by then is
  // left in its pack as dead bytes, for gc.)
  // Payloads written ahead (write_payloads_ahead) are used the same way;
  // what they lack is staged on the first try that needs it.
  std::optional<staged_payloads> own_staged;
  staged_payloads* staged = nullptr;
  if (ahead && ahead->impl_)
    staged = &ahead->impl_->payloads;
  else if (writes_beside_others())
    staged = &own_staged.emplace();
  if (staged && writes_beside_others()) stage_payloads(t, *staged, false);

  commit_outcome done;
  const auto build = [&](locked_reads& reads, metadata_batch& batch) {
    if (fill_locked) refill();
    for (const txn_op& op : t.ops) {
      if (op.erase)
        batch.erase(op.cf, op.key);
      else
        batch.put(op.cf, op.key, encode_value(op, encoding_));
    }
    if (!notice.empty()) batch.set_notice(notice);
    commit_attempt attempt(*this, t, reads, batch);
    attempt.keep_pre_images();
    attempt.read_records();
    attempt.apply_references();
    attempt.apply_swaps();
    attempt.put_records();
    attempt.put_payloads(staged, sync);
    done = std::move(attempt.done);
  };

  for (int attempt = 1;; ++attempt) {
    try {
      engine_->write_locked(k_commit_section, build, sync);
      break;
    } catch (const payload_not_staged& missing) {
      // Nothing was applied. A chunk that existed at the staging was
      // deleted by another writer since: stage every chunk that came with
      // its bytes, so that this cannot happen again.
      if (attempt >= 3)
        throw store_error(EIO, "chunk " + missing.hash.hex() +
                                   ": its payload was not staged for the commit that makes it");
      stage_payloads(t, *staged, true);
      if (const auto it = staged->find(missing.hash);
          it == staged->end() || !it->second.same_as(*missing.bytes, missing.meta)) {
        check_space_for(missing.bytes->size());
        stage_payload(*staged, missing.hash, *missing.bytes, missing.meta);
        payloads_->sync();
      }
    } catch (...) {
      // Applied or not (a lost connection leaves it unknown): nothing cached
      // of these inodes and names may stay. Only of these: the entry cache
      // is kept only where this client's commits are the only changes
      // (entry_cache.h), so the others are still exact, and a lookup of a
      // name the kernel had cached still answers while the link is cut.
      ++chunk_record_changes_;
      drop_cached_extents(extents_changed, false);
      if (entry_cache_) entry_cache_->forget(entries_of(t.ops));
      forget_cached_records_if_lock_retaken();
      throw;
    }
  }
  if (!t.chunks.empty() || !t.replacements.empty()) ++chunk_record_changes_;
  after_commit(t, done, extents_changed);
  // Under the commit mutex, as compaction's moves: a pack this commit's
  // sync uploaded may have gathered records to move (pack_store.h).
  if (packs_ && packs_->has_moves_ready()) {
    try {
      packs_->move_gathered();
    } catch (const store_error& e) {
      log_error(std::string("moving gathered payloads into their uploaded pack (tried again "
                            "after the next commit): ") +
                e.what());
    }
  }
}

void store::forget_cached_records_if_lock_retaken() {
  const std::uint64_t retakes = engine_->lock_retakes();
  if (retakes == lock_retakes_seen_) return;
  lock_retakes_seen_ = retakes;
  if (entry_cache_) entry_cache_->forget_all();
  drop_cached_extents({}, true);
}

void store::after_commit(const transaction::impl& t, const commit_outcome& done,
                         std::span<const std::uint64_t> extents_changed) {
  // The extent lists this commit changed, as they now are, where they are
  // known: a list in the cache gets the commit's puts and deletes (commits are
  // applied one at a time, so it stays the stored list), and a file the
  // commit made gets the extents it gave it (none were ever stored under a
  // number given out now; a file made empty gets an empty list). Not dropped
  // and read again: a file written and committed is then read back without
  // asking the engine (on PostgreSQL a round trip, and during a partition an
  // EIO once the kernel has dropped its pages), also when its data came in
  // several group commits. A big file's list is kept as one window from
  // its start to its end (up to k_window_extents); its other windows go.
  if (caches_extents()) {
    std::lock_guard lock(extent_cache_mutex_);
    ++extents_gen_;  // a scan that raced this commit is not cached
    // Where each list being kept is, by offset, while the ops are applied.
    std::unordered_map<std::uint64_t, std::map<std::uint64_t, extent_record>> kept;
    for (const std::uint64_t ino : extents_changed) {
      const auto it = extent_cache_.find(ino);
      const auto windows = extent_windows_.find(ino);
      // A window from the start to the end: the whole list of a big file.
      const extent_window* whole = nullptr;
      if (windows != extent_windows_.end())
        for (const extent_window& w : windows->second)
          if (w.first == 0 && w.to_end) whole = &w;
      if (it != extent_cache_.end() && !it->second.too_many)
        kept[ino].insert(it->second.list.begin(), it->second.list.end());
      else if (whole != nullptr)
        kept[ino].insert(whole->list.begin(), whole->list.end());
      else if (std::find(t.new_inodes.begin(), t.new_inodes.end(), ino) != t.new_inodes.end())
        kept[ino];
      if (windows != extent_windows_.end()) extent_windows_.erase(windows);
      if (it != extent_cache_.end()) extent_cache_.erase(it);
    }
    for (const txn_op& op : t.ops) {
      if (op.cf != table::extents || op.key.size() < 8) continue;
      const auto it = kept.find(key_ino(op));
      if (it == kept.end()) continue;
      const std::uint64_t offset = record_reads::extent_offset(it->first, op.key);
      if (op.erase)
        it->second.erase(offset);
      else if (const auto* record = std::get_if<extent_record>(&op.value))
        it->second.insert_or_assign(offset, *record);
      else
        it->second.insert_or_assign(
            offset, detail::decode_extent(std::get<std::string>(op.value),
                                          record_reads::extent_what(it->first, offset)));
    }
    // New files the commit gave no extents: empty lists.
    for (const std::uint64_t ino : t.new_inodes) kept.try_emplace(ino);
    if (extent_cache_.size() + kept.size() > k_extent_cache_files) extent_cache_.clear();
    for (auto& [ino, extents] : kept) {
      cached_extents& c = extent_cache_[ino];
      if (extents.size() <= k_cached_extents) {
        c.list.assign(extents.begin(), extents.end());
        continue;
      }
      // More: a marker, and the whole list as one window (as a read's scan
      // from the start would have kept it), up to a window's size.
      c.too_many = true;
      if (extents.size() > k_window_extents) continue;
      if (extent_windows_.size() >= k_extent_windows)
        extent_windows_.erase(extent_windows_.begin());  // another file's, any
      extent_window w;
      w.list.assign(extents.begin(), extents.end());
      w.first = 0;
      w.last = w.list.back().first;
      w.to_end = true;
      extent_windows_[ino].push_back(std::move(w));
    }
  }
  forget_cached_records_if_lock_retaken();
  if (entry_cache_) {
    std::vector<entry_cache::change> changes;
    for (const txn_op& op : t.ops) {
      if (op.cf != table::dirents || op.key.size() < 8) continue;
      entry_cache::change& c = changes.emplace_back();
      c.parent = key_ino(op);
      c.name = std::string_view(op.key).substr(8);
      if (!op.erase) c.entry = std::get<dirent_record>(op.value);
    }
    entry_cache_->committed(changes, t.new_directories);
  }
  pre_images_.remember(done.kept);
  garbage_bytes_ += done.garbage;
  for (const auto& h : done.deleted) {
    cache_->erase(h);
    damaged_->forget(h);
  }
  for (const auto& h : done.healed) {
    damaged_->forget(h);
    log_info("chunk " + h.hex() + " stored afresh: the files using it are whole again");
  }
  if (done.raise_format) {
    holds_lepton_files_ = true;
    // After the database, which is the authority: FORMAT lets older builds
    // refuse the store before starting RocksDB (open() repairs it if a
    // crash comes in between).
    try {
      write_file_durably(dir_ / k_format_file,
                         format_marker_text({done.raised.format_version, done.raised.uuid,
                                             postgres_, data_, encrypted_}));
    } catch (const store_error& e) {
      log_error(std::string("raising the FORMAT file's version: ") + e.what());
    }
  }
}

void store::sync() {
  if (options_.read_only) return;
  payloads_->sync();  // pack bytes durable before the log that names them
  engine_->sync();
}

struct statvfs store::statvfs() const {
  struct statvfs out {};
  if (packs_ && packs_->remote()) {
    // Object storage has no size to report: Used is what the volume's pack
    // objects hold (as this client listed them once, at mount, plus its
    // own uploads and deletes since; 0 until listed: statfs never waits on
    // the network), Avail a fixed petabyte, as JuiceFS reports an
    // unlimited volume. No fixed number of inodes, as on btrfs: 0 of them
    // (df -i shows none). The local disk's own space is checked where the
    // client stages writes (check_space_for), not shown here.
    constexpr std::uint64_t k_block = 4096;
    constexpr std::uint64_t k_free_blocks = (1ull << 50) / k_block;
    const std::uint64_t used_blocks =
        (packs_->known_file_bytes().value_or(0) + k_block - 1) / k_block;
    out.f_bsize = out.f_frsize = k_block;
    out.f_blocks = used_blocks + k_free_blocks;
    out.f_bfree = out.f_bavail = k_free_blocks;
    return out;
  }
  if (::statvfs(dir_.c_str(), &out) != 0)
    throw store_error(errno, "statvfs " + dir_.string() + ": " + errno_text(errno));
  // What file data may still use: the reserve is to it what ext4's blocks
  // reserved for root are to users (in f_bfree, not in f_bavail), so that
  // a program that fills what df says is free is not refused (fallocate
  // of f_bavail bytes succeeds; xfstests generic/103).
  const std::uint64_t block = out.f_frsize ? out.f_frsize : out.f_bsize;
  const std::uint64_t reserved_blocks = block ? (space_reserve(out) + block - 1) / block : 0;
  out.f_bavail = out.f_bavail > reserved_blocks ? out.f_bavail - reserved_blocks : 0;
  return out;
}

}  // namespace densefs::store
