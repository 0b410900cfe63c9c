// Where chunk payloads (the stored, encoded bytes) live. This is the seam a
// later issue uses to move large payloads to pack files read with io_uring,
// and another to add a remote object store, without touching fs/.
//
// Writes go into the caller's pending batch so that a payload appears in the
// same atomic commit as the chunk record that names it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/hash.h"

namespace rocksdb {
class WriteBatch;
}

namespace densefs::store {

class payload_store {
 public:
  virtual ~payload_store() = default;

  virtual void put(rocksdb::WriteBatch& batch, const chunk_hash& hash, std::string_view stored) = 0;
  virtual void remove(rocksdb::WriteBatch& batch, const chunk_hash& hash) = 0;
  // Throws store_error(EIO) naming the chunk when a payload is missing or
  // unreadable.
  virtual std::string get(const chunk_hash& hash) = 0;
  // Same order as hashes; one batched lookup.
  virtual std::vector<std::string> get_many(std::span<const chunk_hash> hashes) = 0;
};

}  // namespace densefs::store
