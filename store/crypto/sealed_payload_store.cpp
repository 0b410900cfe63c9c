#include "store/crypto/sealed_payload_store.h"

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

// The store below names chunks by their storage names; its errors say so.
// Said again with the chunks' own names, which the rest of densefs (fsck,
// the damaged-chunk list, the log) knows them by.
[[noreturn]] void rethrow_named(const store_error& e, std::span<const chunk_hash> hashes,
                                std::span<const chunk_hash> names) {
  std::string what = e.what();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string stored = names[i].hex();
    for (std::size_t at = what.find(stored); at != std::string::npos; at = what.find(stored, at))
      what.replace(at, stored.size(), hashes[i].hex());
  }
  throw store_error(e.error_number(), what);
}

}  // namespace

sealed_payload_store::sealed_payload_store(std::unique_ptr<payload_store> inner,
                                           std::shared_ptr<const payload_sealer> sealer,
                                           std::string volume)
    : inner_(std::move(inner)), sealer_(std::move(sealer)), volume_(std::move(volume)) {}

const payload_sealer& sealed_payload_store::sealer() const {
  if (!sealer_)
    throw store_error(ENOKEY, "volume " + volume_ +
                                  " is encrypted and was opened without its key; give it with "
                                  "--key-file FILE or DENSEFS_PASSPHRASE");
  return *sealer_;
}

void sealed_payload_store::put(metadata_batch& batch, const chunk_hash& hash,
                               std::string_view stored, const payload_meta& meta) {
  const payload_sealer& s = sealer();
  const chunk_hash name = s.storage_name(hash);
  try {
    // The pack record's header says the codec (its size limits depend on
    // it) but not the plain size, which the seal keeps.
    inner_->put(batch, name, s.seal(hash, stored, meta), {meta.codec, 0});
  } catch (const store_error& e) {
    rethrow_named(e, std::span(&hash, 1), std::span(&name, 1));
  }
}

void sealed_payload_store::remove(metadata_batch& batch, const chunk_hash& hash) {
  inner_->remove(batch, sealer().storage_name(hash));
}

std::string sealed_payload_store::get(const chunk_hash& hash) {
  std::vector<std::string> v = get_many(std::span(&hash, 1));
  return std::move(v.front());
}

std::vector<std::string> sealed_payload_store::get_many(std::span<const chunk_hash> hashes) {
  const payload_sealer& s = sealer();
  std::vector<chunk_hash> names;
  names.reserve(hashes.size());
  for (const chunk_hash& h : hashes) names.push_back(s.storage_name(h));
  std::vector<std::string> sealed;
  try {
    sealed = inner_->get_many(names);
  } catch (const store_error& e) {
    rethrow_named(e, hashes, names);
  }
  for (std::size_t i = 0; i < sealed.size(); ++i) {
    std::optional<opened_payload> plain = s.open(hashes[i], sealed[i]);
    if (!plain)
      throw damaged_payload(hashes[i], "payload of chunk " + hashes[i].hex() + " in " + volume_ +
                                           " fails its authentication check (damaged, or not "
                                           "sealed with this volume's key)");
    sealed[i] = std::move(plain->stored);
  }
  return sealed;
}

}  // namespace densefs::store
