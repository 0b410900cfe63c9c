// What fsck and its repairs change through the store.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <cerrno>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "store/cache/chunk_cache.h"
#include "store/crypto/payload_sealer.h"
#include "store/log.h"
#include "store/metadata/metadata_engine.h"
#include "store/payload/pack_store.h"
#include "store/payload/payload_store.h"
#include "store/records_detail.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

void store::scan_records(
    std::string_view column_family, std::string_view prefix,
    const std::function<bool(std::string_view key, std::string_view value)>& fn) const {
  std::optional<table> t;
  for (std::size_t i = 0; i < k_table_count; ++i)
    if (column_family == table_name(static_cast<table>(i))) t = static_cast<table>(i);
  if (!t) throw store_error(EINVAL, "no column family " + std::string(column_family));
  const std::string what = "scanning " + std::string(column_family);
  scan_prefix(*t, prefix, prefix, what.c_str(), fn);
}

void store::delete_chunk(metadata_batch& batch, const chunk_hash& hash, bool queued) {
  batch.erase(table::chunks, hash.view());
  if (queued) batch.erase(table::meta, recompress_key(hash));
  payloads_->remove(batch, hash);
}

void store::set_chunk_refcount(const chunk_hash& hash, std::uint64_t refcount) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  std::lock_guard lock(commit_mutex_);
  std::optional<chunk_record> rec = get_chunk(hash);
  if (!rec) return;
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  if (refcount == 0) {
    delete_chunk(*batch, hash, is_queued_for_recompress(hash));
  } else {
    rec->refcount = refcount;
    batch->put(table::chunks, hash.view(), encode_chunk(*rec, encoding_));
  }
  try {
    engine_->write(*batch, false);
  } catch (const store_error& e) {
    ++chunk_record_changes_;
    throw store_error(e.error_number(),
                      "setting the refcount of chunk " + hash.hex() + ": " + e.what());
  }
  ++chunk_record_changes_;
  if (refcount == 0) {
    garbage_bytes_ += rec->stored_size;
    cache_->erase(hash);
  }
}

namespace {

// How pack records name and hold an encrypted volume's chunks (the storage
// name, the sealed payload) against what chunk records say (the chunk's
// SHA-256, the plain payload). Without a sealer both are the same.
class record_view {
 public:
  explicit record_view(const payload_sealer* sealer) : sealer_(sealer) {}

  chunk_hash name_of(const chunk_hash& hash) const {
    return sealer_ ? sealer_->storage_name(hash) : hash;
  }
  std::uint64_t stored_size_of(std::uint64_t payload_size) const {
    return payload_size + (sealer_ ? payload_sealer::k_overhead : 0);
  }
  // The payload of a record of `hash` found by a scan, with its codec and
  // plain size, as the chunk record describes them; nullopt when the
  // record does not hold it. A sealed volume's come from inside the seal,
  // not from the record's header, which the holder of the packs can change.
  std::optional<opened_payload> payload_of(pack_store& packs, const chunk_hash& hash,
                                           const pack_record_info& r) const {
    try {
      std::string stored = packs.read_record(name_of(hash), r.where);
      if (sealer_) return sealer_->open(hash, stored);
      return opened_payload{{r.codec, r.plain_size}, std::move(stored)};
    } catch (const store_error&) {
      return std::nullopt;
    }
  }
  bool sealed() const { return sealer_ != nullptr; }

 private:
  const payload_sealer* sealer_;
};

}  // namespace

std::uint64_t store::rebuild_pack_index(const std::vector<chunk_hash>* only) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  if (!packs_) return 0;
  const record_view view(sealer_.get());
  std::lock_guard lock(commit_mutex_);
  struct wanted {
    chunk_hash hash;
    std::uint32_t stored_size;
    std::uint64_t checksum;
    // Records that match by name and size, oldest first; a sealed volume's
    // are checked by opening them (their XXH3 is of the sealed bytes).
    std::vector<pack_record_info> candidates;
  };
  // By the name pack records give the chunk.
  std::unordered_map<chunk_hash, wanted, chunk_hash_hasher> chunks;
  const auto want = [&](const chunk_hash& hash, const chunk_record& c) {
    if (view.stored_size_of(c.stored_size) >= k_min_pack_payload)
      chunks[view.name_of(hash)] = {hash, c.stored_size, c.checksum, {}};
  };
  if (only) {
    for (const chunk_hash& h : *only)
      if (const std::optional<chunk_record> c = get_chunk(h)) want(h, *c);
  } else {
    scan_prefix(table::chunks, {}, {}, "scanning chunks",
                [&](std::string_view key, std::string_view value) {
                  if (key.size() != chunk_hash::k_size) return true;
                  const chunk_hash hash = chunk_hash::from_bytes(key);
                  try {
                    want(hash, detail::decode_chunk(value, "chunk " + hash.hex()));
                  } catch (const store_error&) {
                    // fsck reports the record
                  }
                  return true;
                });
  }
  // The scan is in (pack, offset) order, so the last match is the newest.
  packs_->scan_packs(
      [&](const pack_record_info& r) {
        auto it = chunks.find(r.hash);
        if (it == chunks.end() || !r.payload_ok ||
            r.stored_size != view.stored_size_of(it->second.stored_size) ||
            (!view.sealed() && r.checksum != it->second.checksum))
          return;
        // Unsealed records match by XXH3 already: only the newest is kept.
        if (!view.sealed()) it->second.candidates.clear();
        it->second.candidates.push_back(r);
      },
      [&](const std::string& why) { log_info("rebuilding the pack index: skipped " + why); });
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  std::uint64_t written = 0;
  std::vector<chunk_hash> found;
  for (auto& [name, w] : chunks) {
    const pack_record_info* newest = nullptr;
    for (auto r = w.candidates.rbegin(); r != w.candidates.rend() && !newest; ++r) {
      if (!view.sealed()) {
        newest = &*r;
      } else if (const std::optional<opened_payload> p = view.payload_of(*packs_, w.hash, *r);
                 p && stored_checksum(p->stored) == w.checksum) {
        newest = &*r;
      }
    }
    if (!newest) continue;
    found.push_back(w.hash);
    const std::string value = encode_pack_ref(newest->where);
    // An entry that cannot be read (a damaged block) is rewritten: that is
    // what the rebuild is for.
    std::optional<std::string> now;
    try {
      now = engine_->get(table::payloads, name.view(), "the payload index");
    } catch (const store_error&) {
    }
    if (now == value) continue;
    batch->put(table::payloads, name.view(), value);
    ++written;
  }
  try {
    engine_->write(*batch, true);
  } catch (const store_error& e) {
    throw store_error(e.error_number(), "rebuilding the pack index: " + std::string(e.what()));
  }
  for (const chunk_hash& hash : found) cache_->erase(hash);
  return written;
}

std::vector<chunk_hash> store::rebuild_chunk_records(
    const std::map<chunk_hash, std::uint64_t>& refs) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  if (!packs_ || refs.empty()) return {};
  const record_view view(sealer_.get());
  std::lock_guard lock(commit_mutex_);
  // Each chunk by the name its pack records carry.
  std::unordered_map<chunk_hash, chunk_hash, chunk_hash_hasher> by_name;
  for (const auto& [hash, count] : refs) by_name.emplace(view.name_of(hash), hash);
  // The scan is in (pack, offset) order, so the last good record is the newest.
  std::map<chunk_hash, std::vector<pack_record_info>> found;
  packs_->scan_packs(
      [&](const pack_record_info& r) {
        const auto it = by_name.find(r.hash);
        if (r.payload_ok && it != by_name.end()) found[it->second].push_back(r);
      },
      [&](const std::string& why) { log_info("rebuilding chunk records: skipped " + why); });
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  std::vector<chunk_hash> rebuilt;
  for (const auto& [hash, records] : found) {
    if (get_chunk(hash)) continue;
    for (auto r = records.rbegin(); r != records.rend(); ++r) {
      chunk_record c;
      c.codec = r->codec;
      c.plain_size = r->plain_size;
      c.stored_size = r->stored_size;
      c.checksum = r->checksum;
      if (view.sealed()) {
        // The chunk record describes the payload inside the seal.
        const std::optional<opened_payload> p = view.payload_of(*packs_, hash, *r);
        if (!p) continue;
        c.codec = p->meta.codec;
        c.plain_size = p->meta.plain_size;
        c.stored_size = static_cast<std::uint32_t>(p->stored.size());
        c.checksum = stored_checksum(p->stored);
      }
      c.refcount = refs.at(hash);
      batch->put(table::chunks, hash.view(), encode_chunk(c, encoding_));
      batch->put(table::payloads, view.name_of(hash).view(), encode_pack_ref(r->where));
      rebuilt.push_back(hash);
      break;
    }
  }
  if (rebuilt.empty()) return rebuilt;
  try {
    engine_->write(*batch, true);
  } catch (const store_error& e) {
    ++chunk_record_changes_;
    throw store_error(e.error_number(), "rebuilding chunk records: " + std::string(e.what()));
  }
  ++chunk_record_changes_;
  for (const chunk_hash& h : rebuilt) cache_->erase(h);
  return rebuilt;
}

}  // namespace densefs::store
