#include "store/crypto/payload_sealer.h"

#include <cerrno>
#include <cstring>

#include "store/error.h"

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

// OpenSSL failing (no memory, a broken provider) is an I/O error of the
// store, not a codec's.
template <class F>
auto in_store_terms(const char* what, F&& f) {
  try {
    return f();
  } catch (const codec::codec_error& e) {
    throw store_error(EIO, std::string(what) + ": " + e.what());
  }
}

}  // namespace

payload_sealer::payload_sealer(const master_key& key)
    : payload_key_(in_store_terms("deriving the payload key",
                                  [&] { return crypto::hkdf_sha256(key, k_payload_key_info); })),
      name_key_(in_store_terms("deriving the chunk name key", [&] {
        return std::make_unique<const crypto::hmac_sha256_key>(
            crypto::hkdf_sha256(key, k_name_key_info));
      })) {}

payload_sealer::~payload_sealer() = default;

chunk_hash payload_sealer::storage_name(const chunk_hash& hash) const {
  chunk_hash name;
  name.bytes = in_store_terms("naming a chunk", [&] { return name_key_->mac({hash_bytes(hash)}); });
  return name;
}

std::string payload_sealer::seal(const chunk_hash& hash, std::string_view payload,
                                 const payload_meta& meta) const {
  return in_store_terms("sealing a payload", [&] {
    // Random nonces: a payload key seals at most ~2^32 payloads before a
    // repeat becomes likely enough to matter (NIST SP 800-38D), 2^32 seals
    // being far past any volume this build makes (docs/encryption.md).
    std::uint8_t nonce[k_nonce_size];
    crypto::random_bytes(nonce);
    // After the payload, so that opening ends in a truncation, not a copy.
    char trailer[k_trailer_size];
    trailer[0] = static_cast<char>(meta.codec);
    for (int i = 0; i < 4; ++i) trailer[1 + i] = static_cast<char>(meta.plain_size >> (8 * i));
    std::string out;
    out.reserve(payload.size() + k_overhead);
    out.push_back(static_cast<char>(k_seal_version));
    out.append(reinterpret_cast<const char*>(nonce), sizeof nonce);
    crypto::gcm_seal(payload_key_, nonce, hash_bytes(hash),
                     {payload, std::string_view(trailer, sizeof trailer)}, out);
    return out;
  });
}

std::optional<opened_payload> payload_sealer::open(const chunk_hash& hash,
                                                   std::string_view sealed) const {
  if (sealed.size() < k_overhead || static_cast<std::uint8_t>(sealed[0]) != k_seal_version)
    return std::nullopt;
  std::uint8_t nonce[k_nonce_size];
  std::memcpy(nonce, sealed.data() + 1, sizeof nonce);
  opened_payload out;
  std::string& plain = out.stored;
  const bool ok = in_store_terms("opening a payload", [&] {
    return crypto::gcm_open(payload_key_, nonce, hash_bytes(hash), sealed.substr(1 + k_nonce_size),
                            plain);
  });
  if (!ok || plain.size() < k_trailer_size) return std::nullopt;
  const char* trailer = plain.data() + plain.size() - k_trailer_size;
  out.meta.codec = static_cast<codec::codec_id>(static_cast<std::uint8_t>(trailer[0]));
  for (int i = 3; i >= 0; --i)
    out.meta.plain_size = (out.meta.plain_size << 8) | static_cast<std::uint8_t>(trailer[1 + i]);
  plain.resize(plain.size() - k_trailer_size);
  return out;
}

}  // namespace densefs::store
