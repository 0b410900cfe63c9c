#include "store/payload/rocksdb_payload_store.h"

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

[[noreturn]] void missing(const chunk_hash& hash) {
  throw store_error(EIO, "payload of chunk " + hash.hex() + " is missing from the store");
}

}  // namespace

void rocksdb_payload_store::put(metadata_batch& batch, const chunk_hash& hash,
                                std::string_view stored, const payload_meta&) {
  batch.put(table::payloads, hash.view(), stored);
}

void rocksdb_payload_store::remove(metadata_batch& batch, const chunk_hash& hash) {
  batch.erase(table::payloads, hash.view());
}

std::string rocksdb_payload_store::get(const chunk_hash& hash) {
  std::vector<std::string> v = get_many(std::span(&hash, 1));
  return std::move(v[0]);
}

std::vector<std::string> rocksdb_payload_store::get_many(std::span<const chunk_hash> hashes) {
  std::vector<std::optional<std::string>> values = payload_values(engine_, hashes, true);
  std::vector<std::string> out;
  out.reserve(values.size());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (!values[i]) missing(hashes[i]);
    out.push_back(std::move(*values[i]));
  }
  return out;
}

}  // namespace densefs::store
