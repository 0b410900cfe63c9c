// payload_store of an encrypted volume: seals each payload (payload_sealer)
// and hands it, under the chunk's storage name, to the payload store below
// (pack_store, rocksdb_payload_store), which never sees a plain payload or
// a plain chunk hash. The chunk records above it keep describing the plain
// payload (its size and XXH3), so every reader, checker and the background
// re-encoder work unchanged on an encrypted volume.
//
// Opened without the key (a tool that only reads records: stats, dump),
// every payload access fails with ENOKEY naming how to give the key.
#pragma once

#include <memory>
#include <string>

#include "store/crypto/payload_sealer.h"
#include "store/payload/payload_store.h"

namespace densefs::store {

class sealed_payload_store final : public payload_store {
 public:
  // `sealer` null: opened without the key. `volume` names the store in errors.
  sealed_payload_store(std::unique_ptr<payload_store> inner,
                       std::shared_ptr<const payload_sealer> sealer, std::string volume);

  void put(metadata_batch& batch, const chunk_hash& hash, std::string_view stored,
           const payload_meta& meta) override;
  void remove(metadata_batch& batch, const chunk_hash& hash) override;
  std::string get(const chunk_hash& hash) override;
  std::vector<std::string> get_many(std::span<const chunk_hash> hashes) override;
  bool writes_at_put() const override { return inner_->writes_at_put(); }
  void sync() override { inner_->sync(); }

 private:
  const payload_sealer& sealer() const;

  std::unique_ptr<payload_store> inner_;
  std::shared_ptr<const payload_sealer> sealer_;
  std::string volume_;
};

}  // namespace densefs::store
