#include "store/crypto/payload_sealer.h"

#include <cstring>

namespace densefs::store {
namespace {

namespace crypto = codec::crypto;

// Domain-separation strings: frozen with seal version 1 (docs/format.md).
constexpr std::string_view k_payload_key_info = "densefs payload key v1";
constexpr std::string_view k_name_key_info = "densefs chunk name key v1";
constexpr std::size_t k_nonce_size = crypto::k_gcm_nonce_size;

std::span<const std::uint8_t> hash_bytes(const chunk_hash& hash) {
  return hash.bytes;
}

}  // namespace

payload_sealer::payload_sealer(const master_key& key)
    : payload_key_(crypto::hkdf_sha256(key, k_payload_key_info)),
      name_key_(crypto::hkdf_sha256(key, k_name_key_info)) {}

chunk_hash payload_sealer::storage_name(const chunk_hash& hash) const {
  chunk_hash name;
  name.bytes = crypto::hmac_sha256(name_key_, {hash_bytes(hash)});
  return name;
}

std::string payload_sealer::seal(const chunk_hash& hash, std::string_view payload) const {
  // Random nonces: a payload key seals at most ~2^32 payloads before a
  // repeat becomes likely enough to matter (NIST SP 800-38D), 2^32 chunks
  // being far past any volume this build makes (docs/encryption.md).
  std::uint8_t nonce[k_nonce_size];
  crypto::random_bytes(nonce);
  std::string out;
  out.reserve(payload.size() + k_overhead);
  out.push_back(static_cast<char>(k_seal_version));
  out.append(reinterpret_cast<const char*>(nonce), sizeof nonce);
  crypto::gcm_seal(payload_key_, nonce, hash_bytes(hash), payload, out);
  return out;
}

std::optional<std::string> payload_sealer::open(const chunk_hash& hash,
                                                std::string_view sealed) const {
  if (sealed.size() < k_overhead || static_cast<std::uint8_t>(sealed[0]) != k_seal_version)
    return std::nullopt;
  std::uint8_t nonce[k_nonce_size];
  std::memcpy(nonce, sealed.data() + 1, sizeof nonce);
  std::string plain;
  if (!crypto::gcm_open(payload_key_, nonce, hash_bytes(hash), sealed.substr(1 + k_nonce_size),
                        plain))
    return std::nullopt;
  return plain;
}

}  // namespace densefs::store
