// Chunk names and checksums.
//  - chunk_hash: SHA-256 of a chunk's plain content (OpenSSL). Chunks are
//    content-addressed by it, so identical data is stored once.
//  - stored_checksum: XXH3-64 of the stored (encoded) bytes, checked on every
//    read before the bytes reach a decoder.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace densefs::store {

struct chunk_hash {
  static constexpr std::size_t k_size = 32;
  std::array<std::uint8_t, k_size> bytes{};

  std::string hex() const;
  std::string_view view() const {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
  static std::optional<chunk_hash> from_hex(std::string_view hex);
  static chunk_hash from_bytes(std::string_view raw);  // raw.size() must be k_size
  auto operator<=>(const chunk_hash&) const = default;
};

chunk_hash sha256_of(std::string_view plain);
// 16 lower-case hex digits from OpenSSL's RAND_bytes: names that must not
// collide across machines (a mount's session, a writer's commit outcome
// row). Throws store_error(EIO) saying it could not draw `what`.
std::string random_hex_id(std::string_view what);
std::uint64_t stored_checksum(std::string_view stored);

struct chunk_hash_hasher {
  std::size_t operator()(const chunk_hash& h) const {
    std::size_t v;
    static_assert(sizeof(v) <= chunk_hash::k_size);
    __builtin_memcpy(&v, h.bytes.data(), sizeof(v));  // already uniformly random
    return v;
  }
};

}  // namespace densefs::store
