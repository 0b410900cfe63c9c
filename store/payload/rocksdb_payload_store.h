// payload_store over the metadata engine's `payloads` table: key = the raw
// 32-byte chunk hash, value = the stored bytes exactly (no header: the
// versioned chunk record says how to read them). On the RocksDB engine values
// of 4 KiB and more go to blob files, so compaction does not rewrite chunk
// data (the "blob" backend, docs/packs.md).
#pragma once

#include "store/payload/payload_store.h"

namespace densefs::store {

class rocksdb_payload_store final : public payload_store {
 public:
  // Borrows the engine; it must outlive this object.
  explicit rocksdb_payload_store(metadata_engine& engine) : engine_(engine) {}

  void put(metadata_batch& batch, const chunk_hash& hash, std::string_view stored,
           const payload_meta& meta) override;
  void remove(metadata_batch& batch, const chunk_hash& hash) override;
  std::string get(const chunk_hash& hash) override;
  std::vector<std::string> get_many(std::span<const chunk_hash> hashes) override;

 private:
  metadata_engine& engine_;
};

}  // namespace densefs::store
