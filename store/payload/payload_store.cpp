#include "store/payload/payload_store.h"

#include <cerrno>

#include "store/error.h"

namespace densefs::store {

std::vector<std::optional<std::string>> payload_values(const metadata_engine& engine,
                                                       std::span<const chunk_hash> hashes,
                                                       bool checked_by_caller) {
  if (hashes.empty()) return {};
  std::vector<std::string> keys;
  keys.reserve(hashes.size());
  for (const chunk_hash& h : hashes) keys.emplace_back(h.view());
  try {
    return checked_by_caller ? engine.get_payloads(keys, "chunk payloads")
                             : engine.get_many(table::payloads, keys, "the payload index");
  } catch (const store_error& e) {
    const std::string chunks = hashes.size() == 1 ? "chunk " + hashes[0].hex()
                                                  : std::to_string(hashes.size()) +
                                                        " chunks from chunk " + hashes[0].hex();
    throw store_error(EIO, "reading the payloads of " + chunks + ": " + e.what());
  }
}

}  // namespace densefs::store
