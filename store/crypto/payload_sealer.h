// Sealing of an encrypted volume's payloads (docs/encryption.md; bytes in
// docs/format.md, "Sealed payloads"). Two keys come from the volume's master
// key (volume_key.h) by HKDF:
//  - the payload key: every stored payload becomes version || nonce ||
//    AES-256-GCM(payload key, nonce, AAD = its chunk's SHA-256, payload ||
//    codec || plain size) || tag, with a random nonce. The codec and plain
//    size inside the seal are what an index rebuild trusts, not the pack
//    record's header, which anyone holding the packs could change;
//  - the name key: a chunk is known to storage (the payloads table, pack
//    record headers, object names) as HMAC-SHA-256(name key, its SHA-256),
//    so the holder of the packs learns no plain hash of any content, yet
//    equal chunks keep one name and still dedup within the volume.
// Binding the chunk's hash as associated data makes a payload moved under
// another chunk's name fail its check instead of returning other bytes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "store/crypto/volume_key.h"
#include "store/hash.h"
#include "store/payload/payload_store.h"

namespace densefs::store {

// What a seal holds: the payload and what the chunk record says of it.
struct opened_payload {
  payload_meta meta;
  std::string stored;
};

// Crypto failures of OpenSSL itself are store_error(EIO).
class payload_sealer {
 public:
  static constexpr std::uint8_t k_seal_version = 1;
  // codec (1) and plain size (4), sealed after the payload
  static constexpr std::size_t k_trailer_size = 5;
  // version (1) + nonce (12) + trailer + tag (16)
  static constexpr std::size_t k_overhead = 1 + 12 + k_trailer_size + 16;

  explicit payload_sealer(const master_key& key);
  ~payload_sealer();

  chunk_hash storage_name(const chunk_hash& hash) const;
  std::string seal(const chunk_hash& hash, std::string_view payload,
                   const payload_meta& meta) const;
  // The payload, or nullopt when `sealed` is not a payload of `hash` sealed
  // under this volume's key (damaged, moved, or another volume's).
  std::optional<opened_payload> open(const chunk_hash& hash, std::string_view sealed) const;

 private:
  codec::crypto::key256 payload_key_;
  std::unique_ptr<const codec::crypto::hmac_sha256_key> name_key_;
};

}  // namespace densefs::store
