// CZIP encryption (docs/format.md, "CZIP container", "Encryption"): convergent
// per-chunk sealing, and the passphrase-derived key that seals the chunk
// array. Pure transforms over OpenSSL 3 EVP; no I/O.
//
// Convergent: a chunk's key is derived from the SHA-256 of its plain content,
// so equal chunks give equal ciphertext and still dedup, and anyone who
// already has a chunk can tell whether a czip contains it (by design).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec/codec.h"

namespace densefs::codec::czip {

using sha256_digest = std::array<std::uint8_t, 32>;
using aes_key = std::array<std::uint8_t, 32>;
using kdf_salt = std::array<std::uint8_t, 16>;

// What sealing adds to a chunk: a 12-byte nonce in front, a 16-byte GCM tag
// behind.
inline constexpr std::size_t k_chunk_nonce_size = 12;
inline constexpr std::size_t k_gcm_tag_size = 16;
inline constexpr std::size_t k_chunk_seal_overhead = k_chunk_nonce_size + k_gcm_tag_size;

// Thrown when authenticated decryption fails. The chunk array's seal failing
// means a wrong passphrase or a corrupt czip: from the bytes alone the two are
// indistinguishable, and the message says so.
class czip_auth_error : public codec_error {
 public:
  using codec_error::codec_error;
};

// scrypt cost, stored in the header so a reader derives the same key.
// Defaults: N = 2^15, r = 8, p = 1 (32 MiB, about 0.1 s): OWASP's minimum for
// scrypt. Readers refuse costs above k_max_scrypt_* before deriving.
struct scrypt_params {
  std::uint8_t log2_n = 15;
  std::uint8_t r = 8;
  std::uint8_t p = 1;
  bool operator==(const scrypt_params&) const = default;
};
inline constexpr std::uint8_t k_min_scrypt_log2_n = 10;  // tests use this; anything less is no KDF
inline constexpr std::uint8_t k_max_scrypt_log2_n = 22;
inline constexpr std::uint8_t k_max_scrypt_r = 32;
inline constexpr std::uint8_t k_max_scrypt_p = 16;
// A header could ask for 128 * r * 2^log2_n bytes of scrypt memory: at most this.
inline constexpr std::uint64_t k_max_scrypt_memory = std::uint64_t{1} << 30;

// Throws codec_error unless the cost is within the bounds above.
void validate(const scrypt_params& params);

// SHA-256 in one call (SHA-NI where the CPU has it).
sha256_digest sha256_of(std::string_view bytes);

// Incremental SHA-256 for the whole-file hashes.
class sha256_stream {
 public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(const sha256_stream&) = delete;
  sha256_stream& operator=(const sha256_stream&) = delete;
  void update(std::string_view bytes);
  sha256_digest finish();  // the stream cannot be updated afterwards

 private:
  void* ctx_;  // EVP_MD_CTX
};

// Cryptographically random bytes (OpenSSL's DRBG); throws codec_error.
kdf_salt random_salt();

// scrypt(passphrase, salt, params) -> the key that seals the chunk array.
aes_key derive_array_key(std::string_view passphrase, const kdf_salt& salt,
                         const scrypt_params& params);

// A chunk's stored bytes: nonce || AES-256-GCM(encoded) || tag, with the key
// HKDF-SHA-256(plain hash) and the nonce HMAC-SHA-256(key, codec || plain size
// || encoded)[0..12). `encoded` is what the codec produced for this chunk.
std::string seal_chunk(const sha256_digest& plain_hash, codec_id codec, std::uint32_t plain_size,
                       std::string_view encoded);
// The inverse; throws czip_auth_error when the tag does not match (a corrupt
// chunk, or stored bytes that belong to another chunk).
std::string open_chunk(const sha256_digest& plain_hash, codec_id codec, std::uint32_t plain_size,
                       std::string_view stored);

// The chunk array's seal: AES-256-GCM(key, zero nonce, aad) -> ciphertext ||
// tag. A zero nonce is safe because every czip draws a fresh random salt, so
// each array key seals exactly one message.
std::string seal_array(const aes_key& key, std::string_view plain, std::string_view aad);
// Throws czip_auth_error("wrong passphrase or corrupt czip").
std::string open_array(const aes_key& key, std::string_view sealed, std::string_view aad);

}  // namespace densefs::codec::czip
