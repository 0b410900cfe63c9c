// Background re-encoding of queued chunks: the filesystem side of
// recompressor.h. A chunk is named by its plain content, so swapping its
// payload for a smaller encoding changes no extent; only the stored_bytes of
// the file that queued it (and the per-codec totals) change.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <limits>
#include <unordered_set>

#include "codec/classify.h"
#include "fs/filesystem.h"
#include "store/log.h"

namespace densefs::fs {

namespace {

// Whether `ino` still references `hash`, for the stored_bytes accounting
// after a swap. Listing a file's extents per item made the pass quadratic:
// 32,768 items of a 1 GiB file each read its 32,768 extents (measured: a
// 446 s idle pass, each scan under meta_mutex_ on a worker). The hashes of
// the last file asked about are kept for a few seconds instead; a file
// changed in between only gets its stored_bytes figure off by one chunk's
// saving (the figure is approximate anyway: docs/design.md, "Known costs").
class reference_cache {
 public:
  bool references(const store::store& s, std::uint64_t ino, const store::chunk_hash& hash) {
    const auto now = std::chrono::steady_clock::now();
    if (ino != ino_ || now - built_ > k_max_age) {
      hashes_.clear();
      for (const auto& [off, ext] : s.extents(ino, 0, std::numeric_limits<std::uint64_t>::max()))
        hashes_.insert(ext.hash);
      ino_ = ino;
      built_ = now;
    }
    return hashes_.count(hash) > 0;
  }

 private:
  static constexpr std::chrono::seconds k_max_age{5};
  std::uint64_t ino_ = 0;
  std::chrono::steady_clock::time_point built_{};
  std::unordered_set<store::chunk_hash, store::chunk_hash_hasher> hashes_;
};

// A queued chunk of a JPEG of several chunks under a Lepton policy: the
// whole file becomes one Lepton file in one commit (store::
// reencode_lepton_file), which also drops the queue entries of all its
// chunks. Nothing when the file does not have that shape, no longer
// references the chunk, or Lepton refused it whole (remembered per first
// chunk for a while, so its other queued chunks do not each retry the whole
// file): the chunk is then re-encoded on its own as before.
struct lepton_file_job {
  store::transaction txn;
  std::uint64_t saved = 0;
};
std::optional<lepton_file_job> lepton_file_for(const store::store& s,
                                               const store::recompress_item& item,
                                               const codec::codec_options& target) {
  const auto inode = s.get_inode(item.ino);
  if (!inode || !S_ISREG(inode->mode)) return std::nullopt;
  const store::extent_list extents =
      s.extents(item.ino, 0, std::numeric_limits<std::uint64_t>::max());
  if (!s.could_be_lepton_file(extents, inode->size)) return std::nullopt;
  if (std::none_of(extents.begin(), extents.end(),
                   [&](const auto& e) { return e.second.hash == item.hash; }))
    return std::nullopt;
  thread_local std::unordered_set<store::chunk_hash, store::chunk_hash_hasher> refused;
  const store::chunk_hash& first = extents.front().second.hash;
  if (refused.count(first)) return std::nullopt;
  store::store::lepton_file_reencoding r =
      s.reencode_lepton_file(extents, inode->size, target.min_savings);
  if (r.swaps.empty()) {
    log_debug("inode " + std::to_string(item.ino) + ": not one Lepton file: " + r.refusal);
    if (refused.size() > 4096) refused.clear();
    refused.insert(first);
    return std::nullopt;
  }
  lepton_file_job job;
  for (const auto& [off, ext] : extents) job.txn.drop_recompress(ext.hash);
  job.saved = r.stored_before - r.stored_after;
  job.txn.replace_payloads(std::move(r.swaps));
  return job;
}

}  // namespace

void filesystem::recompress_chunk(const store::recompress_item& item) {
  const std::optional<store::chunk_record> rec = store_->get_chunk(item.hash);
  store::transaction txn;
  txn.drop_recompress(item.hash);
  // A chunk deleted meanwhile (its queue entry normally goes with it), also
  // by a rewrite of its file after the lookup here: only the entry goes.
  const auto drop_the_entry = [&] { commit_on_worker(item, std::move(txn), 0, false, false); };
  if (!rec) return drop_the_entry();

  // The target is the policy codec of the file that queued the chunk. When
  // that file is gone: JPEG, gzip, zip or PNG if the chunk looks like one (Lepton
  // or Deflate work), else `other` (fast ingest, -o ingest=fast).
  std::optional<codec::file_type> type;
  if (auto r = store_->get_inode(item.ino); r && r->type != codec::file_type::unknown)
    type = r->type;
  if (!type) {
    type = codec::file_type::other;
    try {
      const auto chunk = store_->read_chunk_unless_gone(item.hash);
      if (!chunk) return drop_the_entry();
      const std::string_view head =
          std::string_view(*chunk).substr(0, codec::k_classify_head_bytes);
      const codec::file_type t = codec::classify(head, {});
      if (t == codec::file_type::jpeg || t == codec::file_type::gzip ||
          t == codec::file_type::zip || t == codec::file_type::png)
        type = t;
    } catch (const std::exception&) {
      type = codec::file_type::jpeg;  // the re-encode below reports the read error
    }
  }
  const codec::codec_options target = store_->policy().for_type(*type);

  if (target.preferred == codec::codec_id::lepton) {
    if (std::optional<lepton_file_job> job = lepton_file_for(*store_, item, target)) {
      commit_on_worker(item, std::move(job->txn), job->saved, false, true);
      return;
    }
  }

  // A chunk stored fast with zstd -1 is re-encoded even when its target is
  // zstd too (a higher level); re-encoding keeps only a smaller result.
  store::store::reencoding r =
      store_->reencode_chunk(item.hash, *rec, target, /*same_codec_too=*/true);
  if (r.gone) return drop_the_entry();
  const bool fell_back = r.fell_back_from.has_value();
  if (fell_back) {
    // Refusals are common and harmless (odd JPEGs, gzip streams preflate
    // cannot predict): debug lines. A chunk past a resource cap (a gzip
    // bomb) is worth one line a user sees.
    const bool capped = r.fallback_reason.find("inflates to more than") != std::string::npos;
    (capped ? log_info : log_debug)(
        "chunk " + item.hash.hex() + ": stays " + codec::codec_name(rec->codec) + ", " +
        codec::codec_name(*r.fell_back_from) + " refused it: " + r.fallback_reason);
  }
  const std::uint64_t saved = r.smaller ? rec->stored_size - r.smaller->bytes.size() : 0;
  // The replaced payload is garbage in the payload files now; the store
  // counts it for the garbage collector.
  if (r.smaller) txn.replace_payload(item.hash, rec->checksum, std::move(*r.smaller));

  // Looked up here, on the re-encoder's thread with no lock held, not in
  // the commit under meta_mutex_.
  thread_local reference_cache cache;
  const bool references =
      (saved > 0 || fell_back) && cache.references(*store_, item.ino, item.hash);
  commit_on_worker(item, std::move(txn), saved, fell_back, references);
}

// The commit takes meta_mutex_ and the store's commit lock. The re-encoder
// runs at idle priority: preempted while holding them it would stall every
// FUSE request behind it (priority inversion; measured: an rsync of photos
// 3x slower). So the short locked part runs on a worker thread at normal
// priority while the re-encoder waits.
void filesystem::commit_on_worker(const store::recompress_item& item, store::transaction txn,
                                  std::uint64_t saved, bool fell_back, bool references) {
  std::packaged_task<void()> task(
      [&] { commit_recompressed(item, std::move(txn), saved, fell_back, references); });
  std::future<void> done = task.get_future();
  workers_->submit([&task] { task(); });
  done.get();  // rethrows what the commit threw
}

void filesystem::commit_recompressed(const store::recompress_item& item, store::transaction txn,
                                     std::uint64_t saved, bool fell_back, bool references) {
  std::lock_guard meta(meta_mutex_);
  // Account the change to the file that wrote the chunk, if it still uses it.
  if (saved > 0 || fell_back) {
    if (references) {
      const auto adjust = [&](store::inode_record& r) {
        r.stored_bytes -= std::min(r.stored_bytes, saved);
        if (fell_back) r.flags |= store::k_inode_fell_back;
      };
      // The file's record as the store has it in the commit (beside other
      // writers another may have changed or removed it meanwhile).
      if (auto n = table_.find(item.ino)) {
        if (!n->purged) {
          store::inode_record r;
          bool exists = true;
          commit(txn, false, [&](store::transaction& txn) {
            exists = !shares_volume() || store_->get_inode(n->ino).has_value();
            if (!exists) return;
            r = record_to_edit(*n);
            adjust(r);
            txn.put_inode(persistable(*n, r));
          });
          if (!exists) return;
          // st_blocks changed behind the kernel's back.
          if (n->record.stored_bytes != r.stored_bytes && n->lookups > 0)
            invalidate_attributes(n->ino);
          n->record.stored_bytes = r.stored_bytes;
          n->record.flags = r.flags;
          return;
        }
      } else {
        std::optional<store::inode_record> r;
        commit(txn, false, [&](store::transaction& txn) {
          r = store_->get_inode(item.ino);
          if (r) {
            adjust(*r);
            txn.put_inode(*r);
          }
        });
        if (!r) return;
        // A node loaded meanwhile (get_node reads without meta_mutex_) may
        // hold the record from before this commit.
        const auto loaded = table_.find(item.ino);
        if (loaded && !loaded->purged) {
          loaded->record.stored_bytes = r->stored_bytes;
          loaded->record.flags = r->flags;
        }
        // Or a parked inode: the kernel remembers it, and its st_blocks.
        if (loaded || table_.is_parked(item.ino)) invalidate_attributes(item.ino);
        return;
      }
    }
  }
  commit(txn);
}

}  // namespace densefs::fs
