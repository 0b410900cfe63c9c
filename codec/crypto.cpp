#include "codec/crypto.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <memory>

namespace densefs::codec::crypto {
namespace {

[[noreturn]] void throw_openssl(const char* what) {
  char buf[256] = "unknown error";
  if (const unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  throw codec_error(std::string(what) + ": " + buf);
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

const unsigned char* uchars(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

void random_bytes(std::span<std::uint8_t> out) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) throw_openssl("RAND_bytes");
}

key256 hkdf_sha256(std::span<const std::uint8_t> ikm, std::string_view info) {
  std::unique_ptr<EVP_KDF_CTX, kdf_ctx_deleter> ctx(EVP_KDF_CTX_new(hkdf_algorithm()));
  if (!ctx) throw_openssl("HKDF context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_KEY, const_cast<std::uint8_t*>(ikm.data()), ikm.size()),
                         OSSL_PARAM_construct_octet_string(
                             OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
                         OSSL_PARAM_construct_end()};
  key256 key;
  if (EVP_KDF_derive(ctx.get(), key.data(), key.size(), params) != 1) throw_openssl("HKDF");
  return key;
}

mac256 hmac_sha256(std::span<const std::uint8_t> key,
                   std::initializer_list<std::span<const std::uint8_t>> parts) {
  return hmac_sha256_key(key).mac(parts);
}

hmac_sha256_key::hmac_sha256_key(std::span<const std::uint8_t> key)
    : ctx_(EVP_MAC_CTX_new(hmac_algorithm())) {
  auto* ctx = static_cast<EVP_MAC_CTX*>(ctx_);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (ctx == nullptr || EVP_MAC_init(ctx, key.data(), key.size(), params) != 1) {
    EVP_MAC_CTX_free(ctx);
    throw_openssl("HMAC key");
  }
}

hmac_sha256_key::~hmac_sha256_key() {
  EVP_MAC_CTX_free(static_cast<EVP_MAC_CTX*>(ctx_));
}

mac256 hmac_sha256_key::mac(std::initializer_list<std::span<const std::uint8_t>> parts) const {
  std::unique_ptr<EVP_MAC_CTX, mac_ctx_deleter> ctx(
      EVP_MAC_CTX_dup(static_cast<const EVP_MAC_CTX*>(ctx_)));
  if (!ctx) throw_openssl("HMAC context");
  for (const auto& part : parts)
    if (EVP_MAC_update(ctx.get(), part.data(), part.size()) != 1) throw_openssl("HMAC");
  mac256 mac;
  std::size_t mac_size = 0;
  if (EVP_MAC_final(ctx.get(), mac.data(), &mac_size, mac.size()) != 1 || mac_size != mac.size())
    throw_openssl("HMAC");
  return mac;
}

key256 scrypt(std::string_view secret, std::span<const std::uint8_t> salt, std::uint8_t log2_n,
              std::uint32_t r, std::uint32_t p, std::uint64_t max_memory) {
  std::unique_ptr<EVP_KDF_CTX, kdf_ctx_deleter> ctx(EVP_KDF_CTX_new(scrypt_algorithm()));
  if (!ctx) throw_openssl("scrypt context");
  std::uint64_t n = std::uint64_t{1} << log2_n;
  // OpenSSL refuses anything above its maxmem (32 MiB by default).
  std::uint64_t maxmem = max_memory + (std::uint64_t{1} << 20);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PASSWORD, const_cast<char*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<std::uint8_t*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_N, &n),
      OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_R, &r),
      OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_P, &p),
      OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_MAXMEM, &maxmem),
      OSSL_PARAM_construct_end()};
  key256 key;
  if (EVP_KDF_derive(ctx.get(), key.data(), key.size(), params) != 1) throw_openssl("scrypt");
  return key;
}

void gcm_seal(const key256& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
              std::initializer_list<std::string_view> plain, std::string& out) {
  std::unique_ptr<EVP_CIPHER_CTX, cipher_ctx_deleter> ctx(EVP_CIPHER_CTX_new());
  std::size_t size = 0;
  for (const std::string_view part : plain) size += part.size();
  const std::size_t start = out.size();
  out.resize(start + size + k_gcm_tag_size);
  auto* dst = reinterpret_cast<unsigned char*>(out.data() + start);
  int len = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1)
    throw_openssl("AES-256-GCM encrypt");
  std::size_t done = 0;
  for (const std::string_view part : plain) {
    if (EVP_EncryptUpdate(ctx.get(), dst + done, &len, uchars(part),
                          static_cast<int>(part.size())) != 1)
      throw_openssl("AES-256-GCM encrypt");
    done += static_cast<std::size_t>(len);
  }
  int tail = 0;
  if (EVP_EncryptFinal_ex(ctx.get(), dst + done, &tail) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, k_gcm_tag_size, dst + size) != 1)
    throw_openssl("AES-256-GCM encrypt");
}

bool gcm_open(const key256& key, const std::uint8_t* nonce, std::span<const std::uint8_t> aad,
              std::string_view sealed, std::string& out) {
  if (sealed.size() < k_gcm_tag_size) return false;
  const std::string_view cipher = sealed.substr(0, sealed.size() - k_gcm_tag_size);
  std::array<unsigned char, k_gcm_tag_size> tag;
  std::copy(sealed.end() - k_gcm_tag_size, sealed.end(), tag.begin());
  std::unique_ptr<EVP_CIPHER_CTX, cipher_ctx_deleter> ctx(EVP_CIPHER_CTX_new());
  out.resize(cipher.size());
  auto* dst = reinterpret_cast<unsigned char*>(out.data());
  int len = 0;
  int tail = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), dst, &len, uchars(cipher), static_cast<int>(cipher.size())) !=
          1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, k_gcm_tag_size, tag.data()) != 1) {
    throw_openssl("AES-256-GCM decrypt");
  }
  const bool ok = EVP_DecryptFinal_ex(ctx.get(), dst + len, &tail) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace densefs::codec::crypto
