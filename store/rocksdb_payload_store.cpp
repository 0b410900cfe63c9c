#include "store/rocksdb_payload_store.h"

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

[[noreturn]] void missing(const chunk_hash& hash) {
  throw store_error(EIO, "payload of chunk " + hash.hex() + " is missing from the store");
}

// A payload that cannot be read is EIO naming its chunk, whatever the
// engine's errno (a missing table file would otherwise read as ENOENT).
template <typename F>
auto as_eio(F&& f) {
  try {
    return f();
  } catch (const store_error& e) {
    if (e.error_number() == EIO) throw;
    throw store_error(EIO, e.what());
  }
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
  const std::string key(hash.view());
  std::vector<std::optional<std::string>> v = as_eio(
      [&] { return engine_.get_payloads(std::span(&key, 1), "payload of chunk " + hash.hex()); });
  if (!v[0]) missing(hash);
  return std::move(*v[0]);
}

std::vector<std::string> rocksdb_payload_store::get_many(std::span<const chunk_hash> hashes) {
  if (hashes.empty()) return {};
  std::vector<std::string> keys;
  keys.reserve(hashes.size());
  for (const auto& h : hashes) keys.emplace_back(h.view());
  std::vector<std::optional<std::string>> values = as_eio([&] {
    return engine_.get_payloads(keys, hashes.size() == 1
                                          ? "payload of chunk " + hashes[0].hex()
                                          : std::to_string(hashes.size()) +
                                                " chunk payloads from chunk " + hashes[0].hex());
  });
  std::vector<std::string> out;
  out.reserve(values.size());
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (!values[i]) missing(hashes[i]);
    out.push_back(std::move(*values[i]));
  }
  return out;
}

}  // namespace densefs::store
