#include "store/rocksdb_payload_store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

rocksdb::Slice key_of(const chunk_hash& hash) {
  return {reinterpret_cast<const char*>(hash.bytes.data()), hash.bytes.size()};
}

[[noreturn]] void fail(const chunk_hash& hash, const rocksdb::Status& s) {
  if (s.IsNotFound())
    throw store_error(EIO, "payload of chunk " + hash.hex() + " is missing from the store");
  throw store_error(EIO, "reading payload of chunk " + hash.hex() + ": " + s.ToString());
}

void check_batch(const chunk_hash& hash, const rocksdb::Status& s) {
  // WriteBatch only fails on absurd sizes (> 4 GiB batches).
  if (!s.ok())
    throw store_error(EIO, "staging payload of chunk " + hash.hex() + ": " + s.ToString());
}

}  // namespace

void rocksdb_payload_store::put(rocksdb::WriteBatch& batch, const chunk_hash& hash,
                                std::string_view stored, const payload_meta&) {
  check_batch(hash, batch.Put(cf_, key_of(hash), rocksdb::Slice(stored.data(), stored.size())));
}

void rocksdb_payload_store::remove(rocksdb::WriteBatch& batch, const chunk_hash& hash) {
  check_batch(hash, batch.Delete(cf_, key_of(hash)));
}

// Payload reads skip RocksDB's CRC32C of the blob record: the caller checks
// every payload's size and XXH3 against its chunk record (store::
// read_stored_chunk), which the SST block checksums protect. Debian's
// RocksDB has only the table-driven CRC32C (Slow_CRC32: 7.6% of the
// daemon's CPU on a cold read of 32 KiB chunks, perf), so the second check
// was the costly one.
static rocksdb::ReadOptions payload_read_options() {
  rocksdb::ReadOptions o;
  o.verify_checksums = false;
  return o;
}

std::string rocksdb_payload_store::get(const chunk_hash& hash) {
  std::string value;
  const rocksdb::Status s = db_->Get(payload_read_options(), cf_, key_of(hash), &value);
  if (!s.ok()) fail(hash, s);
  return value;
}

std::vector<std::string> rocksdb_payload_store::get_many(std::span<const chunk_hash> hashes) {
  std::vector<rocksdb::Slice> keys;
  keys.reserve(hashes.size());
  for (const auto& h : hashes) keys.push_back(key_of(h));
  const std::vector<rocksdb::ColumnFamilyHandle*> cfs(hashes.size(), cf_);
  std::vector<std::string> values;
  const std::vector<rocksdb::Status> statuses =
      db_->MultiGet(payload_read_options(), cfs, keys, &values);
  for (std::size_t i = 0; i < hashes.size(); ++i)
    if (!statuses[i].ok()) fail(hashes[i], statuses[i]);
  return values;
}

}  // namespace densefs::store
