// Chunks: preparing them (hash and encode), re-encoding them, and reading
// them back checked and decoded.
// Part of store::store (store/store.h); store/store_internal.h says how
// the class is split.
#include "store/store.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <utility>

#include "codec/lepton_file.h"
#include "store/cache/chunk_cache.h"
#include "store/log.h"
#include "store/metadata/metadata_engine.h"
#include "store/payload/payload_store.h"
#include "store/records_detail.h"
#include "store/store_internal.h"

namespace densefs::store {

using namespace internal;

prepared_chunk store::prepare_chunk(std::string_view plain, bool force_encode) const {
  return prepare_chunk(plain, policy_.for_type(codec::file_type::other), force_encode);
}

prepared_chunk store::prepare_chunk(std::string_view plain, const codec::codec_options& options,
                                    bool force_encode) const {
  prepared_chunk p = name_chunk(plain);
  // Dedup before encoding: a chunk the store already has costs a hash and a
  // lookup instead of a compression.
  if (!force_encode && get_chunk(p.hash)) return p;
  encode_into(p, plain, options);
  return p;
}

prepared_chunk store::name_chunk(std::string_view plain) const {
  if (plain.size() > k_chunk_size)
    throw store_error(EINVAL, "chunk of " + std::to_string(plain.size()) +
                                  " bytes exceeds the chunk size " + std::to_string(k_chunk_size));
  prepared_chunk p;
  p.hash = sha256_of(plain);
  p.plain_size = static_cast<std::uint32_t>(plain.size());
  return p;
}

void store::encode_into(prepared_chunk& chunk, std::string_view plain,
                        const codec::codec_options& options) const {
  try {
    chunk.encoded = codec::encode_chunk(plain, options);
  } catch (const codec::codec_error& e) {
    throw store_error(EIO, "encoding chunk " + chunk.hash.hex() + ": " + e.what());
  }
}

namespace {
[[noreturn]] void chunk_failure(const std::string& message) {
  log_error(message);
  throw store_error(EIO, message);
}
}  // namespace

store::reencoding store::reencode_chunk(const chunk_hash& hash, const chunk_record& current,
                                        const codec::codec_options& target,
                                        bool same_codec_too) const {
  reencoding out;
  if (current.codec == target.preferred && !same_codec_too) return out;
  // A Lepton file's chunks are re-encoded per file, never one by one: its
  // members depend on the first chunk's payload.
  if (codec::is_lepton_file_codec(current.codec)) return out;
  const std::shared_ptr<const std::string> plain = read_chunk_unless_gone(hash);
  if (!plain) {
    out.gone = true;
    return out;
  }
  codec::encoded_chunk encoded = codec::encode_chunk(*plain, target);
  out.fell_back_from = encoded.fell_back_from;
  out.fallback_reason = std::move(encoded.fallback_reason);
  if (encoded.codec == target.preferred && encoded.bytes.size() < current.stored_size)
    out.smaller = std::move(encoded);
  return out;
}

namespace {
// The shape a Lepton file needs, from the extents alone: whole chunks in
// order on the chunk grid covering the whole file, no chunk twice.
std::string lepton_file_shape_problem(const extent_list& file, std::uint64_t file_size) {
  if (file.size() < 2) return "fewer than two chunks";
  if (file_size > codec::k_lepton_file_max_bytes) return "larger than a Lepton file may be";
  std::set<chunk_hash> seen;
  for (std::size_t i = 0; i < file.size(); ++i) {
    const auto& [off, e] = file[i];
    const std::uint64_t want = std::min<std::uint64_t>(k_chunk_size, file_size - off);
    if (off != std::uint64_t{i} * k_chunk_size || e.chunk_offset != 0 || e.length != want)
      return "not whole chunks on the chunk grid";
    if (!seen.insert(e.hash).second) return "a chunk appears twice";
  }
  if (file.back().first + file.back().second.length != file_size) return "holes or a short tail";
  return {};
}
}  // namespace

bool store::could_be_lepton_file(const extent_list& file, std::uint64_t file_size) const {
  return lepton_file_shape_problem(file, file_size).empty();
}

store::lepton_file_reencoding store::reencode_lepton_file(const extent_list& file,
                                                          std::uint64_t file_size,
                                                          double min_savings) const {
  lepton_file_reencoding out;
  out.refusal = lepton_file_shape_problem(file, file_size);
  if (!out.refusal.empty()) return out;
  // Records first: their checksums are what the commit compares with.
  std::vector<chunk_record> records;
  for (const auto& [off, e] : file) {
    std::optional<chunk_record> rec = get_chunk(e.hash);
    if (!rec) {
      out.refusal = "chunk " + e.hash.hex() + " is gone";
      return out;
    }
    if (codec::is_lepton_file_codec(rec->codec)) {
      out.refusal = "already part of a Lepton file";
      return out;
    }
    out.stored_before += rec->stored_size;
    records.push_back(*rec);
  }
  std::string jpeg;
  jpeg.reserve(file_size);
  std::vector<std::string> names;
  for (const auto& [off, e] : file) {
    jpeg += *read_chunk(e.hash);
    names.emplace_back(e.hash.view());
  }
  if (jpeg.size() != file_size) {
    out.refusal = "the chunks hold " + std::to_string(jpeg.size()) + " bytes";
    return out;
  }
  codec::lepton_file_encoding enc;
  try {
    enc = codec::encode_lepton_file(jpeg, k_chunk_size, names, min_savings);
  } catch (const codec::codec_error& e) {
    out.refusal = e.what();
    return out;
  }
  if (!enc.payload) {
    out.refusal = enc.refusal;
    return out;
  }
  for (std::size_t i = 0; i < file.size(); ++i) {
    codec::encoded_chunk c;
    if (i == 0) {
      c.codec = codec::codec_id::lepton_file;
      c.bytes = std::move(*enc.payload);
    } else {
      c.codec = codec::codec_id::lepton_member;
      c.bytes = codec::encode_lepton_member(
          {names[0], static_cast<std::uint32_t>(i), file[i].second.length});
    }
    out.stored_after += c.bytes.size();
    out.swaps.push_back({file[i].second.hash, records[i].checksum, std::move(c)});
  }
  if (out.stored_after >= out.stored_before) {
    out.swaps.clear();
    out.refusal = "no smaller than the chunks as they are";
  }
  return out;
}

void store::drop_caches() const {
  cache_->clear();
  engine_->drop_caches();
}

chunk_cache_reads store::chunk_cache_counts() const {
  return cache_->reads();
}

std::shared_ptr<const std::string> store::cached_chunk(const chunk_hash& hash) const {
  return cache_->find(hash);
}

void store::remember_chunk(const chunk_hash& hash, std::shared_ptr<const std::string> plain) const {
  if (caches_chunks()) cache_->insert(hash, std::move(plain));
}

store::stored_chunk store::read_stored_chunk(const chunk_hash& hash) const {
  return read_stored_chunk_once(hash, true);
}

store::stored_chunk store::read_stored_chunk_once(const chunk_hash& hash, bool retry_on_swap,
                                                  bool gone_is_error) const {
  std::optional<chunk_record> rec;
  try {
    rec = get_chunk(hash);
  } catch (const store_error& e) {
    chunk_failure(e.what());
  }
  if (!rec) {
    if (!gone_is_error) throw chunk_cache::load_abandoned();
    chunk_failure("chunk " + hash.hex() + " is missing");
  }
  std::string stored;
  try {
    stored = payloads_->get(hash);
  } catch (const damaged_payload& e) {
    mark_damaged(hash, "payload authentication");
    chunk_failure(e.what());
  } catch (const store_error& e) {
    // Its payload went with it: deleted between the two lookups.
    if (!gone_is_error && !get_chunk(hash)) throw chunk_cache::load_abandoned();
    chunk_failure(e.what());
  }
  const std::uint64_t sum = stored_checksum(stored);
  if (stored.size() != rec->stored_size || sum != rec->checksum) {
    // The record and the payload are read one after the other: a background
    // re-encoding may have swapped both in between. If the record changed,
    // read again; if it did not, the payload is damaged.
    if (retry_on_swap) {
      std::optional<chunk_record> now;
      try {
        now = get_chunk(hash);
      } catch (const store_error&) {
      }
      if (now && *now != *rec) return read_stored_chunk_once(hash, false, gone_is_error);
      if (!now && !gone_is_error) throw chunk_cache::load_abandoned();
    }
  }
  if (stored.size() != rec->stored_size) {
    mark_damaged(hash, "payload size");
    chunk_failure("chunk " + hash.hex() + ": payload is " + std::to_string(stored.size()) +
                  " bytes, its record says " + std::to_string(rec->stored_size));
  }
  if (sum != rec->checksum) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), " (XXH3 %016llx, expected %016llx)",
                  static_cast<unsigned long long>(sum),
                  static_cast<unsigned long long>(rec->checksum));
    mark_damaged(hash, "payload checksum");
    chunk_failure("chunk " + hash.hex() + ": checksum mismatch" + buf);
  }
  return {*rec, std::move(stored)};
}

// The plain content of a chunk from its checked stored bytes: decoded, size
// checked, and for codecs without a checksum of their own, the SHA-256.
static std::shared_ptr<const std::string> decode_checked(const chunk_hash& hash,
                                                         const chunk_record& rec,
                                                         std::string_view stored) {
  std::string plain;
  try {
    plain = codec::decode_chunk(rec.codec, stored, rec.plain_size);
  } catch (const codec::codec_error& e) {
    chunk_failure("chunk " + hash.hex() + ": cannot decode " + codec::codec_name(rec.codec) +
                  " payload: " + e.what());
  }
  if (plain.size() != rec.plain_size)
    chunk_failure("chunk " + hash.hex() + ": decoded to " + std::to_string(plain.size()) +
                  " bytes, expected " + std::to_string(rec.plain_size));
  // Lepton, Deflate and Brotli streams carry no checksum of their own, and a
  // different lepton_jpeg or preflate-rs version could decode an old payload
  // differently: the chunk's name is the SHA-256 of its content, so check
  // it. (~1 GB/s, a few percent of a Lepton decode; zstd chunks skip it.)
  if (rec.codec == codec::codec_id::lepton || rec.codec == codec::codec_id::broccoli ||
      rec.codec == codec::codec_id::deflate) {
    if (sha256_of(plain) != hash)
      chunk_failure("chunk " + hash.hex() + ": decoded " + codec::codec_name(rec.codec) +
                    " content does not match the chunk's SHA-256");
  }
  return std::make_shared<const std::string>(std::move(plain));
}

std::shared_ptr<const std::string> store::decode_lepton_file_chunk(const chunk_hash& hash,
                                                                   std::uint32_t plain_size,
                                                                   const chunk_hash& first,
                                                                   std::string_view payload,
                                                                   std::uint32_t index) const {
  const std::string what = "chunk " + hash.hex() + " (chunk " + std::to_string(index) +
                           " of the Lepton file in chunk " + first.hex() + ")";
  codec::lepton_file_view file;
  std::string jpeg;
  try {
    file = codec::parse_lepton_file(payload);
    if (file.chunk_size > k_chunk_size || file.name_size != chunk_hash::k_size ||
        file.chunk_names[0] != first.view())
      chunk_failure(what + ": the Lepton file does not name its own chunk first");
    if (index >= file.chunk_count() || file.chunk_names[index] != hash.view() ||
        file.chunk_plain_size(index) != plain_size)
      chunk_failure(what + ": the Lepton file has no such chunk of " + std::to_string(plain_size) +
                    " bytes");
    jpeg = codec::decode_lepton_file(file);
  } catch (const codec::codec_error& e) {
    chunk_failure(what + ": cannot decode: " + e.what());
  }
  // Every chunk is checked against its name before any is served: a file
  // whose checksum matched but whose names do not is damaged as a whole.
  std::vector<std::shared_ptr<const std::string>> chunks;
  chunks.reserve(file.chunk_count());
  for (std::size_t i = 0; i < file.chunk_count(); ++i) {
    const std::string_view piece = codec::lepton_file_chunk(file, jpeg, i);
    if (sha256_of(piece).view() != file.chunk_names[i])
      chunk_failure(what + ": decoded chunk " + std::to_string(i) + " does not match its name");
    chunks.push_back(std::make_shared<const std::string>(piece));
  }
  // One decode serves the whole photo: the other chunks go to the cache
  // (and to any reader waiting for one of them).
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (i != index) cache_->fulfil(chunk_hash::from_bytes(file.chunk_names[i]), chunks[i]);
  }
  return chunks[index];
}

std::shared_ptr<const std::string> store::decode_stored_chunk(const chunk_hash& hash,
                                                              const stored_chunk& stored) const {
  const chunk_record& rec = stored.record;
  if (!codec::is_lepton_file_codec(rec.codec)) {
    // Stored bytes that pass their checksum but do not decode to the
    // chunk's content were damaged before the checksum was taken, or by a
    // codec: stored afresh by the next write of the content too.
    try {
      return decode_checked(hash, rec, stored.bytes);
    } catch (const store_error&) {
      mark_damaged(hash, "does not decode to its content");
      throw;
    }
  }

  // One of a bounded number of whole-file decodes (lepton_file_decodes_).
  // A decode of the same photo that ran while this one waited has put this
  // chunk in the cache: no second decode.
  lepton_file_decodes_.acquire();
  struct release_on_exit {
    std::counting_semaphore<k_parallel_lepton_file_decodes>& s;
    ~release_on_exit() { s.release(); }
  } release{lepton_file_decodes_};
  if (caches_chunks()) {
    if (auto cached = cache_->find(hash)) return cached;
  }
  if (rec.codec == codec::codec_id::lepton_file)
    return decode_lepton_file_chunk(hash, rec.plain_size, hash, stored.bytes, 0);

  codec::lepton_member member;
  try {
    member = codec::parse_lepton_member(stored.bytes);
  } catch (const codec::codec_error& e) {
    chunk_failure("chunk " + hash.hex() + ": " + e.what());
  }
  if (member.plain_size != rec.plain_size || member.first_chunk.size() != chunk_hash::k_size)
    chunk_failure("chunk " + hash.hex() + ": its lepton member payload does not match its record");
  const chunk_hash first = chunk_hash::from_bytes(member.first_chunk);
  if (first == hash) chunk_failure("chunk " + hash.hex() + ": a lepton member naming itself");
  const stored_chunk file = read_stored_chunk(first);
  if (file.record.codec != codec::codec_id::lepton_file)
    chunk_failure("chunk " + hash.hex() + ": its first chunk " + first.hex() + " holds " +
                  codec::codec_name(file.record.codec) + ", not a Lepton file");
  return decode_lepton_file_chunk(hash, rec.plain_size, first, file.bytes, member.index);
}

std::vector<chunk_hash> store::damaged_chunk_list() const {
  return damaged_->list();
}

bool store::is_damaged(const chunk_hash& hash) const {
  return damaged_->contains(hash);
}

void store::mark_damaged(const chunk_hash& hash, std::string_view why) const {
  damaged_->mark(hash, why);
}

std::shared_ptr<const std::string> store::read_chunk(const chunk_hash& hash) const {
  return cache_->get_or_load(hash, [&]() -> std::shared_ptr<const std::string> {
    return decode_stored_chunk(hash, read_stored_chunk(hash));
  });
}

std::shared_ptr<const std::string> store::read_chunk_unless_gone(const chunk_hash& hash) const {
  try {
    return cache_->get_or_load(hash, [&]() -> std::shared_ptr<const std::string> {
      return decode_stored_chunk(hash, read_stored_chunk_once(hash, true, false));
    });
  } catch (const chunk_cache::load_abandoned&) {
    return nullptr;  // gone between the caller's lookup and this read
  }
}

std::size_t store::load_chunks(std::span<const chunk_hash> hashes,
                               const std::function<bool()>& keep_going) const {
  if (!caches_chunks()) return 0;
  // Claim the chunks nobody has or is loading; the rest are someone else's.
  std::vector<chunk_hash> mine;
  for (const chunk_hash& h : hashes) {
    if (std::find(mine.begin(), mine.end(), h) != mine.end()) continue;  // dedup in the batch
    if (cache_->claim(h).mine) mine.push_back(h);
  }
  if (mine.empty()) return 0;

  // Every claim ends in fulfil or fail, whatever happens below: readers of
  // these chunks are waiting for them.
  std::size_t settled = 0;
  std::size_t loaded = 0;
  const auto settle_one = [&](std::size_t i, const std::function<chunk_cache::value()>& load) {
    try {
      cache_->fulfil(mine[i], load());
      ++loaded;
    } catch (...) {
      // Whoever waits for this chunk loads it again itself and gets its own
      // error: ours may be a chunk deleted since (a prefetch racing an
      // overwrite) and created again by the time the reader needs it.
      cache_->fail(mine[i], std::make_exception_ptr(chunk_cache::load_abandoned()));
    }
  };
  const auto release_rest = [&] {
    // Abandoned (stopped, or the batch lookup itself failed): the waiters
    // get an error and retry with read_chunk on their own.
    for (; settled < mine.size(); ++settled)
      cache_->fail(mine[settled], std::make_exception_ptr(chunk_cache::load_abandoned()));
  };

  try {
    // One MultiGet for the records, one for the payloads.
    std::vector<std::string> keys;
    keys.reserve(mine.size());
    for (const auto& h : mine) keys.emplace_back(h.view());
    // A failed lookup abandons the batch (below): the single path says why.
    const std::vector<std::optional<std::string>> record_values =
        engine_->get_many(table::chunks, keys, "chunk records");
    std::vector<std::optional<chunk_record>> records(mine.size());
    std::vector<chunk_hash> present;
    std::vector<bool> missing(mine.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      // Missing: deleted since the caller read the extents naming it (not an
      // error to log here; a read that still needs it will say so).
      missing[i] = !record_values[i];
      if (missing[i]) continue;
      try {
        records[i] = detail::decode_chunk(*record_values[i], "chunk " + mine[i].hex());
        present.push_back(mine[i]);
      } catch (const store_error&) {
      }
    }
    std::vector<std::string> payloads;
    try {
      payloads = payloads_->get_many(present);
    } catch (const store_error&) {
      payloads.clear();  // one is missing: every chunk takes the single path
    }
    std::size_t p = 0;
    for (; settled < mine.size(); ++settled) {
      if (keep_going && !keep_going()) break;
      const std::size_t i = settled;
      const chunk_hash& h = mine[i];
      const std::string* stored = nullptr;
      if (records[i]) {
        if (p < payloads.size()) stored = &payloads[p];
        ++p;
      }
      settle_one(i, [&]() -> chunk_cache::value {
        if (missing[i]) throw chunk_cache::load_abandoned();
        // An earlier chunk of this batch was a Lepton file (or a member of
        // one) and published this one with it.
        if (chunk_cache::value v = cache_->find(h)) return v;
        if (stored && payload_matches(*records[i], *stored))
          return decode_stored_chunk(h, {*records[i], *stored});
        // Missing, damaged, or swapped by a re-encoding between the two
        // lookups: the single path retries once and reports, but for a
        // chunk deleted meanwhile (a prefetch racing an overwrite): the
        // read that still needs it says so.
        return decode_stored_chunk(h, read_stored_chunk_once(h, true, false));
      });
    }
  } catch (...) {
  }
  release_rest();
  return loaded;
}

}  // namespace densefs::store
