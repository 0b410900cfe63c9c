// What fsck and its repairs change through the store.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <cerrno>
#include <map>
#include <mutex>

#include "store/cache/chunk_cache.h"
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
    throw store_error(e.error_number(),
                      "setting the refcount of chunk " + hash.hex() + ": " + e.what());
  }
  if (refcount == 0) {
    garbage_bytes_ += rec->stored_size;
    cache_->erase(hash);
  }
}

std::uint64_t store::rebuild_pack_index(const std::vector<chunk_hash>* only) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  if (!packs_) return 0;
  std::lock_guard lock(commit_mutex_);
  struct wanted {
    std::uint32_t stored_size;
    std::uint64_t checksum;
    std::optional<pack_ref> found;
  };
  std::unordered_map<chunk_hash, wanted, chunk_hash_hasher> chunks;
  const auto want = [&](const chunk_hash& hash, const chunk_record& c) {
    if (c.stored_size >= k_min_pack_payload) chunks[hash] = {c.stored_size, c.checksum, {}};
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
        if (it == chunks.end() || !r.payload_ok || r.stored_size != it->second.stored_size ||
            r.checksum != it->second.checksum)
          return;
        it->second.found = r.where;
      },
      [&](const std::string& why) { log_info("rebuilding the pack index: skipped " + why); });
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  std::uint64_t written = 0;
  for (const auto& [hash, w] : chunks) {
    if (!w.found) continue;
    const std::string value = encode_pack_ref(*w.found);
    // An entry that cannot be read (a damaged block) is rewritten: that is
    // what the rebuild is for.
    std::optional<std::string> now;
    try {
      now = engine_->get(table::payloads, hash.view(), "the payload index");
    } catch (const store_error&) {
    }
    if (now == value) continue;
    batch->put(table::payloads, hash.view(), value);
    ++written;
  }
  try {
    engine_->write(*batch, true);
  } catch (const store_error& e) {
    throw store_error(e.error_number(), "rebuilding the pack index: " + std::string(e.what()));
  }
  for (const auto& [hash, w] : chunks)
    if (w.found) cache_->erase(hash);
  return written;
}

std::vector<chunk_hash> store::rebuild_chunk_records(
    const std::map<chunk_hash, std::uint64_t>& refs) {
  if (options_.read_only) throw store_error(EROFS, "store " + dir_.string() + " is open read-only");
  if (!packs_ || refs.empty()) return {};
  std::lock_guard lock(commit_mutex_);
  // The scan is in (pack, offset) order, so the last good record is the newest.
  std::map<chunk_hash, pack_record_info> found;
  packs_->scan_packs(
      [&](const pack_record_info& r) {
        if (r.payload_ok && refs.contains(r.hash)) found[r.hash] = r;
      },
      [&](const std::string& why) { log_info("rebuilding chunk records: skipped " + why); });
  const std::unique_ptr<metadata_batch> batch = engine_->new_batch();
  std::vector<chunk_hash> rebuilt;
  for (const auto& [hash, r] : found) {
    if (get_chunk(hash)) continue;
    chunk_record c;
    c.codec = r.codec;
    c.plain_size = r.plain_size;
    c.stored_size = r.stored_size;
    c.checksum = r.checksum;
    c.refcount = refs.at(hash);
    batch->put(table::chunks, hash.view(), encode_chunk(c, encoding_));
    batch->put(table::payloads, hash.view(), encode_pack_ref(r.where));
    rebuilt.push_back(hash);
  }
  if (rebuilt.empty()) return rebuilt;
  try {
    engine_->write(*batch, true);
  } catch (const store_error& e) {
    throw store_error(e.error_number(), "rebuilding chunk records: " + std::string(e.what()));
  }
  for (const chunk_hash& h : rebuilt) cache_->erase(h);
  return rebuilt;
}

}  // namespace densefs::store
