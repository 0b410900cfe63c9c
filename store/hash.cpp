#include "store/hash.h"

#include <openssl/rand.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "store/error.h"
#include "store/text.h"

namespace densefs::store {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string chunk_hash::hex() const {
  return to_hex({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
}

std::string random_hex_id(std::string_view what) {
  std::uint8_t bytes[8];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw store_error(EIO, "cannot draw " + std::string(what) + " (OpenSSL RAND_bytes failed)");
  return to_hex({reinterpret_cast<const char*>(bytes), sizeof bytes});
}

std::optional<chunk_hash> chunk_hash::from_hex(std::string_view hex) {
  if (hex.size() != k_size * 2) return std::nullopt;
  chunk_hash h;
  for (std::size_t i = 0; i < k_size; ++i) {
    const int hi = hex_digit(hex[2 * i]);
    const int lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    h.bytes[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return h;
}

chunk_hash chunk_hash::from_bytes(std::string_view raw) {
  chunk_hash h;
  // Callers pass keys they read back from the store; a short key would be a
  // corrupt database, so copy what is there rather than read past the end.
  std::memcpy(h.bytes.data(), raw.data(), std::min(raw.size(), k_size));
  return h;
}

chunk_hash sha256_of(std::string_view plain) {
  chunk_hash h;
  static_assert(SHA256_DIGEST_LENGTH == chunk_hash::k_size);
  // One-shot SHA256() uses the SHA-NI path when the CPU has it (~1.15 GB/s).
  SHA256(reinterpret_cast<const unsigned char*>(plain.data()), plain.size(), h.bytes.data());
  return h;
}

std::uint64_t stored_checksum(std::string_view stored) {
  return XXH3_64bits(stored.data(), stored.size());
}

}  // namespace densefs::store
