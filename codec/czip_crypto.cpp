#include "codec/czip_crypto.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
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

struct cipher_ctx_deleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
struct kdf_ctx_deleter {
  void operator()(EVP_KDF_CTX* c) const { EVP_KDF_CTX_free(c); }
};
struct mac_ctx_deleter {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};

// Fetching an algorithm walks the provider tables: do it once per process.
EVP_KDF* hkdf_algorithm() {
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, OSSL_KDF_NAME_HKDF, nullptr);
  if (kdf == nullptr) throw_openssl("HKDF unavailable");
  return kdf;
}
EVP_KDF* scrypt_algorithm() {
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, OSSL_KDF_NAME_SCRYPT, nullptr);
  if (kdf == nullptr) throw_openssl("scrypt unavailable");
  return kdf;
}
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, OSSL_MAC_NAME_HMAC, nullptr);
  if (mac == nullptr) throw_openssl("HMAC unavailable");
  return mac;
}

aes_key chunk_key(const sha256_digest& plain_hash) {
  std::unique_ptr<EVP_KDF_CTX, kdf_ctx_deleter> ctx(EVP_KDF_CTX_new(hkdf_algorithm()));
  if (!ctx) throw_openssl("HKDF context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(
          OSSL_KDF_PARAM_KEY, const_cast<std::uint8_t*>(plain_hash.data()), plain_hash.size()),
      OSSL_PARAM_construct_octet_string(
          OSSL_KDF_PARAM_INFO, const_cast<char*>(k_chunk_key_info.data()), k_chunk_key_info.size()),
      OSSL_PARAM_construct_end()};
  aes_key key;
  if (EVP_KDF_derive(ctx.get(), key.data(), key.size(), params) != 1) throw_openssl("HKDF");
  return key;
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
  std::unique_ptr<EVP_MAC_CTX, mac_ctx_deleter> ctx(EVP_MAC_CTX_new(hmac_algorithm()));
  if (!ctx) throw_openssl("HMAC context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  unsigned char mac[32];
  std::size_t mac_size = 0;
  if (EVP_MAC_init(ctx.get(), key.data(), key.size(), params) != 1 ||
      EVP_MAC_update(ctx.get(), aad.data(), aad.size()) != 1 ||
      EVP_MAC_update(ctx.get(), bytes_of(encoded), encoded.size()) != 1 ||
      EVP_MAC_final(ctx.get(), mac, &mac_size, sizeof mac) != 1) {
    throw_openssl("HMAC");
  }
  std::array<std::uint8_t, k_chunk_nonce_size> nonce;
  std::memcpy(nonce.data(), mac, nonce.size());
  return nonce;
}

// AES-256-GCM; `out` receives ciphertext || tag.
void gcm_seal(const aes_key& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
              std::string_view plain, std::string& out) {
  std::unique_ptr<EVP_CIPHER_CTX, cipher_ctx_deleter> ctx(EVP_CIPHER_CTX_new());
  const std::size_t start = out.size();
  out.resize(start + plain.size() + k_gcm_tag_size);
  auto* dst = reinterpret_cast<unsigned char*>(out.data() + start);
  int len = 0;
  int tail = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), dst, &len, bytes_of(plain), static_cast<int>(plain.size())) !=
          1 ||
      EVP_EncryptFinal_ex(ctx.get(), dst + len, &tail) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, k_gcm_tag_size, dst + plain.size()) !=
          1) {
    throw_openssl("AES-256-GCM encrypt");
  }
}

// Returns false when the tag does not verify; `out` is then garbage.
bool gcm_open(const aes_key& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
              std::string_view sealed, std::string& out) {
  if (sealed.size() < k_gcm_tag_size) return false;
  const std::string_view cipher = sealed.substr(0, sealed.size() - k_gcm_tag_size);
  std::array<unsigned char, k_gcm_tag_size> tag;
  std::memcpy(tag.data(), sealed.data() + cipher.size(), tag.size());
  std::unique_ptr<EVP_CIPHER_CTX, cipher_ctx_deleter> ctx(EVP_CIPHER_CTX_new());
  out.resize(cipher.size());
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  int len = 0;
  int tail = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), dst, &len, bytes_of(cipher), static_cast<int>(cipher.size())) !=
          1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, k_gcm_tag_size, tag.data()) != 1) {
    throw_openssl("AES-256-GCM decrypt");
  }
  const bool ok = EVP_DecryptFinal_ex(ctx.get(), dst + len, &tail) == 1;
  ERR_clear_error();
  return ok;
}

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
  if (RAND_bytes(salt.data(), static_cast<int>(salt.size())) != 1) throw_openssl("RAND_bytes");
  return salt;
}

aes_key derive_array_key(std::string_view passphrase, const kdf_salt& salt,
                         const scrypt_params& cost) {
  validate(cost);
  std::unique_ptr<EVP_KDF_CTX, kdf_ctx_deleter> ctx(EVP_KDF_CTX_new(scrypt_algorithm()));
  if (!ctx) throw_openssl("scrypt context");
  std::uint64_t n = std::uint64_t{1} << cost.log2_n;
  std::uint32_t r = cost.r;
  std::uint32_t p = cost.p;
  // OpenSSL refuses anything above its maxmem (32 MiB by default); our own
  // bound was checked by validate().
  std::uint64_t maxmem = k_max_scrypt_memory + (std::uint64_t{1} << 20);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PASSWORD,
                                        const_cast<char*>(passphrase.data()), passphrase.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<std::uint8_t*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_N, &n),
      OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_R, &r),
      OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_P, &p),
      OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_MAXMEM, &maxmem),
      OSSL_PARAM_construct_end()};
  aes_key key;
  if (EVP_KDF_derive(ctx.get(), key.data(), key.size(), params) != 1) throw_openssl("scrypt");
  return key;
}

std::string seal_chunk(const sha256_digest& plain_hash, codec_id codec, std::uint32_t plain_size,
                       std::string_view encoded) {
  const aes_key key = chunk_key(plain_hash);
  const auto aad = chunk_aad(codec, plain_size);
  const auto nonce = chunk_nonce(key, aad, encoded);
  std::string out(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  out.reserve(encoded.size() + k_chunk_seal_overhead);
  gcm_seal(key, nonce.data(), aad, encoded, out);
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
  gcm_seal(key, k_zero_nonce, {bytes_of(aad), aad.size()}, plain, out);
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
