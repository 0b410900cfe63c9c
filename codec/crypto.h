// The cryptographic primitives densefs builds on, over OpenSSL 3 EVP: one
// place for AES-256-GCM, HKDF, HMAC, scrypt and random bytes, used by the
// CZIP container's encryption (codec/czip_crypto.h) and by encryption at
// rest (store/crypto/). Pure transforms; no I/O. Failures of OpenSSL itself
// throw codec_error naming the primitive.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "codec/codec.h"

namespace densefs::codec::crypto {

using key256 = std::array<std::uint8_t, 32>;
using mac256 = std::array<std::uint8_t, 32>;

inline constexpr std::size_t k_gcm_nonce_size = 12;
inline constexpr std::size_t k_gcm_tag_size = 16;

inline std::span<const std::uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Cryptographically random bytes (OpenSSL's DRBG).
void random_bytes(std::span<std::uint8_t> out);

// HKDF-SHA-256 (RFC 5869), no salt: a 32-byte key from `ikm` for `info`.
key256 hkdf_sha256(std::span<const std::uint8_t> ikm, std::string_view info);

// HMAC-SHA-256 of the concatenation of `parts`.
mac256 hmac_sha256(std::span<const std::uint8_t> key,
                   std::initializer_list<std::span<const std::uint8_t>> parts);

// scrypt(secret, salt, N = 2^log2_n, r, p) -> 32 bytes. The caller bounds the
// cost (memory is 128 * r * N bytes); OpenSSL's own limit is raised to
// `max_memory`.
key256 scrypt(std::string_view secret, std::span<const std::uint8_t> salt, std::uint8_t log2_n,
              std::uint32_t r, std::uint32_t p, std::uint64_t max_memory);

// HMAC-SHA-256 under one key, set once: each mac() starts from a copy of
// the keyed state instead of keying again (a chunk's name is one per read).
// mac() is safe from several threads at once.
class hmac_sha256_key {
 public:
  explicit hmac_sha256_key(std::span<const std::uint8_t> key);
  ~hmac_sha256_key();
  hmac_sha256_key(const hmac_sha256_key&) = delete;
  hmac_sha256_key& operator=(const hmac_sha256_key&) = delete;
  mac256 mac(std::initializer_list<std::span<const std::uint8_t>> parts) const;

 private:
  void* ctx_;  // EVP_MAC_CTX, keyed
};

// AES-256-GCM with a 12-byte nonce over the concatenation of `plain`;
// appends ciphertext || tag to `out`.
void gcm_seal(const key256& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
              std::initializer_list<std::string_view> plain, std::string& out);
// The inverse of gcm_seal over `sealed` = ciphertext || tag. Returns false
// when the tag does not verify; `out` then holds garbage.
bool gcm_open(const key256& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
              std::string_view sealed, std::string& out);

}  // namespace densefs::codec::crypto
