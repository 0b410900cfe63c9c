// payload_store over the `payloads` column family: key = the raw 32-byte
// chunk hash, value = the stored bytes exactly (no header: the versioned chunk
// record says how to read them). Values of 4 KiB and more go to RocksDB blob
// files, so compaction does not rewrite chunk data.
#pragma once

#include "store/payload_store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace densefs::store {

class rocksdb_payload_store final : public payload_store {
 public:
  // Borrows db and cf; both must outlive this object.
  rocksdb_payload_store(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf) : db_(db), cf_(cf) {}

  void put(rocksdb::WriteBatch& batch, const chunk_hash& hash, std::string_view stored,
           const payload_meta& meta) override;
  void remove(rocksdb::WriteBatch& batch, const chunk_hash& hash) override;
  std::string get(const chunk_hash& hash) override;
  std::vector<std::string> get_many(std::span<const chunk_hash> hashes) override;

 private:
  rocksdb::DB* db_;
  rocksdb::ColumnFamilyHandle* cf_;
};

}  // namespace densefs::store
