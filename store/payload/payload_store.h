// Where chunk payloads (the stored, encoded bytes) live. Two implementations:
// rocksdb_payload_store (RocksDB blob files) and pack_store (append-only
// pack files, store/payload/pack_store.h); the store's settings say which
// (docs/packs.md).
//
// Writes go into the caller's pending batch so that a payload appears in the
// same atomic commit as the chunk record that names it: a payload store keeps
// its index (or the payloads themselves) in the metadata engine's payloads
// table.
#pragma once

#include <cerrno>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "store/error.h"
#include "store/hash.h"
#include "store/metadata/metadata_engine.h"

namespace densefs::store {

// What the chunk record says about a payload, for stores that keep
// self-describing copies (pack records).
struct payload_meta {
  codec::codec_id codec = codec::codec_id::raw;
  std::uint32_t plain_size = 0;
};

// The payloads table's values for `hashes` (payload bytes, or a payload
// store's index entries), in one batched lookup; nullopt where there is none.
// `checked_by_caller`: the caller checks each value against its chunk
// record, so the engine may skip its own checksum (metadata_engine::
// get_payloads). A lookup that fails is store_error(EIO) naming the chunks,
// whatever the engine's errno: an unreadable payload is EIO at the FUSE
// boundary. The message is built only then, not on every read.
std::vector<std::optional<std::string>> payload_values(const metadata_engine& engine,
                                                       std::span<const chunk_hash> hashes,
                                                       bool checked_by_caller);

// Thrown by get/get_many when a payload is there but is not what was put
// (an encrypted volume's payload that fails its authentication): the chunk
// is damaged, as when its checksum does not match.
class damaged_payload : public store_error {
 public:
  damaged_payload(const chunk_hash& hash, const std::string& what)
      : store_error(EIO, what), hash_(hash) {}
  const chunk_hash& hash() const { return hash_; }

 private:
  chunk_hash hash_;
};

class payload_store {
 public:
  virtual ~payload_store() = default;

  // May write the bytes somewhere outside RocksDB before returning (pack
  // files): the caller commits `batch` only after put returned.
  virtual void put(metadata_batch& batch, const chunk_hash& hash, std::string_view stored,
                   const payload_meta& meta) = 0;
  virtual void remove(metadata_batch& batch, const chunk_hash& hash) = 0;
  // Throws store_error(EIO) naming the chunk when a payload is missing or
  // unreadable.
  virtual std::string get(const chunk_hash& hash) = 0;
  // Same order as hashes; one batched lookup.
  virtual std::vector<std::string> get_many(std::span<const chunk_hash> hashes) = 0;
  // Whether put() writes the bytes out at once (pack files) rather than into
  // the batch: then a commit may write them ahead, with no lock held
  // (store::write_payloads_ahead).
  virtual bool writes_at_put() const { return false; }
  // Makes every payload put so far durable, before a commit that names them
  // syncs the write-ahead log. Nothing to do when payloads go through it.
  virtual void sync() {}
};

}  // namespace densefs::store
