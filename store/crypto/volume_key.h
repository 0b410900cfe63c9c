// An encrypted volume's keys (docs/encryption.md, byte layout in
// docs/format.md "The volume key record"). A volume has one random master
// key, drawn at mkfs and never changed; what is stored (meta row
// `volume_key`) is the master key sealed with a key derived from the user's
// secret (a passphrase or a key file's bytes) by scrypt. So the secret can
// change (`densefs key change`) by rewriting one row, without touching data;
// and a wrong secret fails the seal's check before anything is decrypted.
//
// From the master key come, by HKDF, the key that seals payloads and the
// key that names chunks in storage (store/crypto/payload_sealer.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "codec/crypto.h"

namespace densefs::store {

using master_key = codec::crypto::key256;

// The meta row that holds the wrapped key; its presence makes a volume
// encrypted.
inline constexpr std::string_view k_volume_key_key = "volume_key";
inline constexpr std::uint8_t k_volume_key_record_version = 1;
inline constexpr std::size_t k_volume_key_record_size = 92;

// scrypt's cost for a new wrapped key: N = 2^16, r = 8, p = 1 (64 MiB,
// about 0.2 s here), twice OWASP's minimum; paid at every open. Stored in
// the record, so a later default does not lock out older volumes.
struct key_cost {
  std::uint8_t log2_n = 16;
  std::uint8_t r = 8;
  std::uint8_t p = 1;
};
// Bounds a reader enforces before deriving (a record is untrusted input):
// no cost below this is a KDF, none above it fits the machine.
inline constexpr std::uint8_t k_min_key_log2_n = 10;
inline constexpr std::uint8_t k_max_key_log2_n = 22;
inline constexpr std::uint64_t k_max_key_memory = std::uint64_t{1} << 30;

struct wrapped_volume_key {
  key_cost cost;
  std::array<std::uint8_t, 16> salt{};
  std::array<std::uint8_t, 12> nonce{};
  std::array<std::uint8_t, 48> sealed{};  // the master key's ciphertext and GCM tag
};

// The 92-byte record; decode throws store_error(EIO) naming what is wrong
// (a damaged record, told apart from a wrong secret by its XXH3).
std::string encode_wrapped_key(const wrapped_volume_key& k);
wrapped_volume_key decode_wrapped_key(std::string_view record);

master_key new_master_key();
// Seals `key` under scrypt(secret, a fresh salt).
wrapped_volume_key wrap_master_key(const master_key& key, std::string_view secret,
                                   const key_cost& cost = {});
// nullopt when `secret` is not the one the key was wrapped with.
std::optional<master_key> unwrap_master_key(const wrapped_volume_key& k, std::string_view secret);

// A secret must be at least this long (a passphrase a guesser cannot walk).
inline constexpr std::size_t k_min_secret_size = 8;
// A key file holds one secret: at most this many bytes.
inline constexpr std::size_t k_max_key_file_size = 4096;
// The secret a key file's bytes hold: the bytes, one trailing newline
// ("\n" or "\r\n") dropped so that `echo`-made files work. Throws
// store_error(EINVAL) naming `path` for an empty, over-long or too short
// secret.
std::string parse_key_file(std::string_view bytes, const std::string& path);

}  // namespace densefs::store
