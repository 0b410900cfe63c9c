#include "codec/czip_crypto.h"

#include "codec/crypto.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <cstring>
#include <memory>
#include <span>

namespace densefs::codec::czip {
namespace {

// Domain-separation strings: frozen with CZIP version 1 (docs/format.md).
constexpr std::string_view k_chunk_key_info = "densefs czip v1 chunk key";

[[noreturn]] void throw_openssl(const char* what) {
  char buf[256] = "unknown error";
  if (const unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  throw codec_error(std::string("czip: ") + what + ": " + buf);
}

const unsigned char* bytes_of(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

aes_key chunk_key(const sha256_digest& plain_hash) {
  return crypto::hkdf_sha256(plain_hash, k_chunk_key_info);
}

// The associated data and the nonce input both bind the codec id and the
// plain size, so stored bytes cannot be replayed under other chunk metadata.
std::array<std::uint8_t, 5> chunk_aad(codec_id codec, std::uint32_t plain_size) {
  return {static_cast<std::uint8_t>(codec), static_cast<std::uint8_t>(plain_size),
          static_cast<std::uint8_t>(plain_size >> 8), static_cast<std::uint8_t>(plain_size >> 16),
          static_cast<std::uint8_t>(plain_size >> 24)};
}

// Deterministic nonce: a keyed hash of exactly what is encrypted. The key is
// convergent on the plain content, but the encrypted bytes are the codec's
// output, which differs between codec settings or library versions for the
// same plain chunk; a nonce taken from the plain hash alone would then reuse
// (key, nonce) for two messages, which breaks GCM. Deriving it from the
// message makes this a synthetic-IV scheme: equal messages, equal nonces.
std::array<std::uint8_t, k_chunk_nonce_size> chunk_nonce(const aes_key& key,
                                                         std::span<const std::uint8_t> aad,
                                                         std::string_view encoded) {
  const crypto::mac256 mac = crypto::hmac_sha256(key, {aad, crypto::bytes_of(encoded)});
  std::array<std::uint8_t, k_chunk_nonce_size> nonce;
  std::memcpy(nonce.data(), mac.data(), nonce.size());
  return nonce;
}

using crypto::gcm_open;
using crypto::gcm_seal;

}  // namespace

void validate(const scrypt_params& params) {
  if (params.log2_n < k_min_scrypt_log2_n || params.log2_n > k_max_scrypt_log2_n)
    throw codec_error("czip: scrypt log2(N) " + std::to_string(params.log2_n) + " is outside " +
                      std::to_string(k_min_scrypt_log2_n) + ".." +
                      std::to_string(k_max_scrypt_log2_n));
  if (params.r < 1 || params.r > k_max_scrypt_r)
    throw codec_error("czip: scrypt r " + std::to_string(params.r) + " is outside 1.." +
                      std::to_string(k_max_scrypt_r));
  if (params.p < 1 || params.p > k_max_scrypt_p)
    throw codec_error("czip: scrypt p " + std::to_string(params.p) + " is outside 1.." +
                      std::to_string(k_max_scrypt_p));
  if (std::uint64_t{128} * params.r << params.log2_n > k_max_scrypt_memory)
    throw codec_error("czip: scrypt cost needs more than 1 GiB of memory");
}

sha256_digest sha256_of(std::string_view bytes) {
  sha256_digest d;
  SHA256(bytes_of(bytes), bytes.size(), d.data());
  return d;
}

sha256_stream::sha256_stream() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr ||
      EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    throw_openssl("SHA-256");
}

sha256_stream::~sha256_stream() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void sha256_stream::update(std::string_view bytes) {
  if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size()) != 1)
    throw_openssl("SHA-256");
}

sha256_digest sha256_stream::finish() {
  sha256_digest d;
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.data(), &size) != 1)
    throw_openssl("SHA-256");
  return d;
}

kdf_salt random_salt() {
  kdf_salt salt;
  crypto::random_bytes(salt);
  return salt;
}

aes_key derive_array_key(std::string_view passphrase, const kdf_salt& salt,
                         const scrypt_params& cost) {
  validate(cost);
  return crypto::scrypt(passphrase, salt, cost.log2_n, cost.r, cost.p, k_max_scrypt_memory);
}

std::string seal_chunk(const sha256_digest& plain_hash, codec_id codec, std::uint32_t plain_size,
                       std::string_view encoded) {
  const aes_key key = chunk_key(plain_hash);
  const auto aad = chunk_aad(codec, plain_size);
  const auto nonce = chunk_nonce(key, aad, encoded);
  std::string out(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  out.reserve(encoded.size() + k_chunk_seal_overhead);
  gcm_seal(key, nonce.data(), aad, {encoded}, out);
  return out;
}

std::string open_chunk(const sha256_digest& plain_hash, codec_id codec, std::uint32_t plain_size,
                       std::string_view stored) {
  if (stored.size() < k_chunk_seal_overhead)
    throw czip_auth_error("sealed chunk shorter than its nonce and tag");
  const aes_key key = chunk_key(plain_hash);
  const auto aad = chunk_aad(codec, plain_size);
  std::string encoded;
  if (!gcm_open(key, reinterpret_cast<const std::uint8_t*>(stored.data()), aad,
                stored.substr(k_chunk_nonce_size), encoded)) {
    throw czip_auth_error("chunk decryption failed (authentication tag mismatch)");
  }
  return encoded;
}

std::string seal_array(const aes_key& key, std::string_view plain, std::string_view aad) {
  static constexpr std::uint8_t k_zero_nonce[12] = {};
  std::string out;
  gcm_seal(key, k_zero_nonce, {bytes_of(aad), aad.size()}, {plain}, out);
  return out;
}

std::string open_array(const aes_key& key, std::string_view sealed, std::string_view aad) {
  static constexpr std::uint8_t k_zero_nonce[12] = {};
  std::string plain;
  if (!gcm_open(key, k_zero_nonce, {bytes_of(aad), aad.size()}, sealed, plain))
    throw czip_auth_error("wrong passphrase or corrupt czip");
  return plain;
}

}  // namespace densefs::codec::czip
