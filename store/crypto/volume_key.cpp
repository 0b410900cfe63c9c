#include "store/crypto/volume_key.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "store/error.h"
#include "store/hash.h"

namespace densefs::store {
namespace {

namespace crypto = codec::crypto;

constexpr std::uint8_t k_kdf_scrypt = 1;
// Domain separation for the seal's associated data: frozen with record version 1.
constexpr std::string_view k_wrap_aad = "densefs volume key v1";

std::uint64_t checksum_of(std::string_view bytes) {
  return stored_checksum(bytes);
}

// The associated data binds the record's first 8 bytes (version, KDF and
// its cost), so a changed cost fails the check instead of deriving another key.
std::string wrap_aad(const std::string& head) {
  return std::string(k_wrap_aad) + head.substr(0, 8);
}

std::string record_head(const wrapped_volume_key& k) {
  std::string head(8, '\0');
  head[0] = static_cast<char>(k_volume_key_record_version);
  head[1] = static_cast<char>(k_kdf_scrypt);
  head[2] = static_cast<char>(k.cost.log2_n);
  head[3] = static_cast<char>(k.cost.r);
  head[4] = static_cast<char>(k.cost.p);
  return head;
}

[[noreturn]] void corrupt(const std::string& why) {
  throw store_error(EIO, "the volume key record is damaged (" + why +
                             "); restore it from a metadata dump (densefs load) or a copy of "
                             "the store");
}

void check_cost(const key_cost& c) {
  if (c.log2_n < k_min_key_log2_n || c.log2_n > k_max_key_log2_n || c.r < 1 || c.p < 1 ||
      (std::uint64_t{128} * c.r << c.log2_n) > k_max_key_memory || c.p > 16)
    corrupt("scrypt cost N=2^" + std::to_string(c.log2_n) + " r=" + std::to_string(c.r) +
            " p=" + std::to_string(c.p) + " is out of bounds");
}

crypto::key256 wrapping_key(const wrapped_volume_key& k, std::string_view secret) {
  return crypto::scrypt(secret, k.salt, k.cost.log2_n, k.cost.r, k.cost.p, k_max_key_memory);
}

}  // namespace

std::string encode_wrapped_key(const wrapped_volume_key& k) {
  std::string out = record_head(k);
  out.append(reinterpret_cast<const char*>(k.salt.data()), k.salt.size());
  out.append(reinterpret_cast<const char*>(k.nonce.data()), k.nonce.size());
  out.append(reinterpret_cast<const char*>(k.sealed.data()), k.sealed.size());
  const std::uint64_t sum = checksum_of(out);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(sum >> (8 * i)));
  return out;
}

wrapped_volume_key decode_wrapped_key(std::string_view record) {
  if (record.size() != k_volume_key_record_size)
    corrupt(std::to_string(record.size()) + " bytes, not " +
            std::to_string(k_volume_key_record_size));
  std::uint64_t sum = 0;
  for (int i = 7; i >= 0; --i)
    sum = (sum << 8) | static_cast<std::uint8_t>(record[k_volume_key_record_size - 8 + i]);
  if (sum != checksum_of(record.substr(0, k_volume_key_record_size - 8))) corrupt("checksum");
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(record[i]); };
  if (byte(0) != k_volume_key_record_version)
    throw store_error(EPROTONOSUPPORT,
                      "the volume key record has version " + std::to_string(byte(0)) +
                          ", which this densefs does not know; use a newer densefs");
  if (byte(1) != k_kdf_scrypt) corrupt("unknown key derivation " + std::to_string(byte(1)));
  if (byte(5) != 0 || byte(6) != 0 || byte(7) != 0) corrupt("reserved bytes set");
  wrapped_volume_key k;
  k.cost = {byte(2), byte(3), byte(4)};
  check_cost(k.cost);
  std::memcpy(k.salt.data(), record.data() + 8, k.salt.size());
  std::memcpy(k.nonce.data(), record.data() + 24, k.nonce.size());
  std::memcpy(k.sealed.data(), record.data() + 36, k.sealed.size());
  return k;
}

master_key new_master_key() {
  master_key key;
  crypto::random_bytes(key);
  return key;
}

wrapped_volume_key wrap_master_key(const master_key& key, std::string_view secret,
                                   const key_cost& cost) {
  wrapped_volume_key k;
  k.cost = cost;
  check_cost(k.cost);
  crypto::random_bytes(k.salt);
  crypto::random_bytes(k.nonce);
  const crypto::key256 kek = wrapping_key(k, secret);
  std::string sealed;
  crypto::gcm_seal(kek, k.nonce.data(), crypto::bytes_of(wrap_aad(record_head(k))),
                   {std::string_view(reinterpret_cast<const char*>(key.data()), key.size())},
                   sealed);
  std::copy(sealed.begin(), sealed.end(), reinterpret_cast<char*>(k.sealed.data()));
  return k;
}

std::optional<master_key> unwrap_master_key(const wrapped_volume_key& k, std::string_view secret) {
  check_cost(k.cost);
  const crypto::key256 kek = wrapping_key(k, secret);
  std::string plain;
  if (!crypto::gcm_open(
          kek, k.nonce.data(), crypto::bytes_of(wrap_aad(record_head(k))),
          std::string_view(reinterpret_cast<const char*>(k.sealed.data()), k.sealed.size()),
          plain) ||
      plain.size() != master_key{}.size())
    return std::nullopt;
  master_key key;
  std::memcpy(key.data(), plain.data(), key.size());
  return key;
}

std::string parse_key_file(std::string_view bytes, const std::string& path) {
  if (bytes.size() > k_max_key_file_size)
    throw store_error(EINVAL, "key file " + path + " is over " +
                                  std::to_string(k_max_key_file_size) +
                                  " bytes; a key file holds one secret");
  if (bytes.ends_with("\r\n"))
    bytes.remove_suffix(2);
  else if (bytes.ends_with('\n'))
    bytes.remove_suffix(1);
  if (bytes.size() < k_min_secret_size)
    throw store_error(EINVAL, "key file " + path + " holds " +
                                  (bytes.empty() ? std::string("no secret")
                                                 : "a secret of only " +
                                                       std::to_string(bytes.size()) + " bytes") +
                                  "; it needs at least " + std::to_string(k_min_secret_size) +
                                  " (e.g. `head -c 32 /dev/urandom > FILE`)");
  return std::string(bytes);
}

}  // namespace densefs::store
