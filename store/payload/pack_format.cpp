#include "store/payload/pack_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "store/error.h"

namespace densefs::store {
namespace fs = std::filesystem;

namespace {

constexpr char k_pack_magic[8] = {'D', 'F', 'S', 'P', 'A', 'C', 'K', '\0'};
constexpr std::uint32_t k_pack_version = 1;
constexpr char k_record_magic[4] = {'D', 'F', 'P', 'R'};
constexpr std::uint8_t k_record_version = 1;
// Tags of payloads column family values in a pack store.
constexpr std::uint8_t k_value_inline = 1;
constexpr std::uint8_t k_value_pack_ref = 2;
constexpr std::size_t k_pack_ref_value_size = 1 + 4 + 8 + 4;
// codec ids a record may name (codec::codec_id): every id this build knows.
constexpr std::uint8_t k_max_codec_id = codec::k_codec_count - 1;

}  // namespace

void put_le(char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string pack_header(std::uint32_t id) {
  std::string h(k_pack_header_size, '\0');
  std::memcpy(h.data(), k_pack_magic, 8);
  put_le(h.data() + 8, k_pack_version, 4);
  put_le(h.data() + 12, id, 4);
  // 16..23 reserved (zero)
  put_le(h.data() + 24, stored_checksum(std::string_view(h.data(), 24)), 8);
  return h;
}

void write_record_header(char* h, const chunk_hash& hash, const payload_meta& meta,
                         std::string_view stored) {
  std::memset(h, 0, k_pack_record_header_size);
  std::memcpy(h, k_record_magic, 4);
  h[4] = static_cast<char>(k_record_version);
  h[5] = static_cast<char>(meta.codec);
  // 6..7 reserved (zero)
  std::memcpy(h + 8, hash.bytes.data(), chunk_hash::k_size);
  put_le(h + 40, meta.plain_size, 4);
  put_le(h + 44, stored.size(), 4);
  put_le(h + 48, stored_checksum(stored), 8);
  put_le(h + 56, stored_checksum(std::string_view(h, 56)), 8);
}

std::string record_header_problem(const char* h, std::uint64_t length) {
  if (std::memcmp(h, k_record_magic, 4) != 0) return "no record magic";
  if (get_le(h + 56, 8) != stored_checksum(std::string_view(h, 56)))
    return "record header checksum mismatch";
  if (static_cast<std::uint8_t>(h[4]) != k_record_version)
    return "unknown record version " + std::to_string(static_cast<std::uint8_t>(h[4]));
  if (static_cast<std::uint8_t>(h[5]) > k_max_codec_id)
    return "unknown codec id " + std::to_string(static_cast<std::uint8_t>(h[5]));
  const std::uint64_t stored = get_le(h + 44, 4);
  if (stored > max_pack_payload(static_cast<codec::codec_id>(static_cast<std::uint8_t>(h[5]))))
    return "stored size " + std::to_string(stored) + " too large";
  if (length != 0 && stored + k_pack_record_header_size != length)
    return "record holds " + std::to_string(stored) + " payload bytes, the index says " +
           std::to_string(length - k_pack_record_header_size);
  return {};
}

std::vector<std::uint32_t> list_pack_files(const fs::path& dir) {
  std::vector<std::uint32_t> ids;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 13 || !name.ends_with(".pack")) continue;
    if (!std::all_of(name.begin(), name.begin() + 8, [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    ids.push_back(static_cast<std::uint32_t>(std::stoul(name.substr(0, 8))));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string pack_object_name(std::uint32_t id) {
  return "packs/" + pack_file_name(id);
}

std::optional<std::uint32_t> pack_id_of_object(std::string_view name) {
  if (name.size() != 19 || !name.starts_with("packs/") || !name.ends_with(".pack"))
    return std::nullopt;
  const std::string_view digits = name.substr(6, 8);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return static_cast<std::uint32_t>(std::stoul(std::string(digits)));
}

void scan_pack_bytes(std::uint32_t id, const std::string& label, std::string_view bytes,
                     const std::function<void(const pack_record_info&)>& fn,
                     const std::function<void(const std::string&)>& bad) {
  const char* base = bytes.data();
  const std::uint64_t size = bytes.size();
  if (size < k_pack_header_size) {
    bad(label + ": shorter than a pack header");
    return;
  }
  if (std::memcmp(base, k_pack_magic, 8) != 0 ||
      get_le(base + 24, 8) != stored_checksum(std::string_view(base, 24)) ||
      get_le(base + 8, 4) != k_pack_version || get_le(base + 12, 4) != id)
    bad(label + ": bad pack header (magic, checksum, version or id)");
  std::uint64_t pos = k_pack_header_size;
  while (pos + k_pack_record_header_size <= size) {
    const char* h = base + pos;
    std::string why = record_header_problem(h, 0);
    const std::uint64_t stored = get_le(h + 44, 4);
    if (why.empty() && pos + k_pack_record_header_size + stored > size)
      why = "record passes the end of the pack (torn append)";
    if (why.empty()) {
      pack_record_info r;
      r.hash = chunk_hash::from_bytes(std::string_view(h + 8, chunk_hash::k_size));
      r.codec = static_cast<codec::codec_id>(static_cast<std::uint8_t>(h[5]));
      r.plain_size = static_cast<std::uint32_t>(get_le(h + 40, 4));
      r.stored_size = static_cast<std::uint32_t>(stored);
      r.checksum = get_le(h + 48, 8);
      r.payload_ok =
          stored_checksum(std::string_view(h + k_pack_record_header_size, stored)) == r.checksum;
      r.where = {id, pos, static_cast<std::uint32_t>(k_pack_record_header_size + stored)};
      fn(r);
      pos += r.where.length;
      continue;
    }
    bad(label + " at offset " + std::to_string(pos) + ": " + why);
    // Resynchronise on the next record magic.
    const void* next = ::memmem(h + 1, size - pos - 1, k_record_magic, sizeof(k_record_magic));
    if (!next) break;
    pos = static_cast<std::uint64_t>(static_cast<const char*>(next) - base);
  }
}

std::string pack_file_name(std::uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08u.pack", id);
  return buf;
}

std::string encode_inline_payload(std::string_view stored) {
  std::string v;
  v.reserve(stored.size() + 1);
  v.push_back(static_cast<char>(k_value_inline));
  v.append(stored);
  return v;
}

std::string encode_pack_ref(const pack_ref& ref) {
  std::string v(k_pack_ref_value_size, '\0');
  v[0] = static_cast<char>(k_value_pack_ref);
  put_le(v.data() + 1, ref.pack, 4);
  put_le(v.data() + 5, ref.offset, 8);
  put_le(v.data() + 13, ref.length, 4);
  return v;
}

payload_value decode_payload_value(const chunk_hash& hash, std::string_view value) {
  payload_value out;
  const auto bad = [&](const std::string& why) {
    return store_error(EIO, "payload index entry of chunk " + hash.hex() + " is corrupt: " + why);
  };
  if (value.empty()) throw bad("empty value");
  const auto tag = static_cast<std::uint8_t>(value[0]);
  if (tag == k_value_inline) {
    out.inline_bytes = value.substr(1);
    return out;
  }
  if (tag != k_value_pack_ref) throw bad("unknown kind " + std::to_string(tag));
  if (value.size() != k_pack_ref_value_size)
    throw bad(std::to_string(value.size()) + " bytes, expected " +
              std::to_string(k_pack_ref_value_size));
  out.ref.pack = static_cast<std::uint32_t>(get_le(value.data() + 1, 4));
  out.ref.offset = get_le(value.data() + 5, 8);
  out.ref.length = static_cast<std::uint32_t>(get_le(value.data() + 13, 4));
  if (out.ref.length <= k_pack_record_header_size ||
      out.ref.length > k_pack_record_header_size + k_max_lepton_file_pack_payload ||
      out.ref.offset < k_pack_header_size)
    throw bad("record length " + std::to_string(out.ref.length) + " at offset " +
              std::to_string(out.ref.offset) + " is impossible");
  return out;
}

std::string record_problem(const chunk_hash& hash, const pack_ref& ref, std::string_view record) {
  if (record.size() != ref.length)
    return std::to_string(record.size()) + " bytes where the record at offset " +
           std::to_string(ref.offset) + " has " + std::to_string(ref.length);
  std::string why = record_header_problem(record.data(), ref.length);
  if (!why.empty()) return why + " at offset " + std::to_string(ref.offset);
  if (std::memcmp(record.data() + 8, hash.bytes.data(), chunk_hash::k_size) != 0)
    return "the record at offset " + std::to_string(ref.offset) + " is of another chunk";
  if (get_le(record.data() + 48, 8) != stored_checksum(record.substr(k_pack_record_header_size)))
    return "the payload at offset " + std::to_string(ref.offset) +
           " does not match its record's checksum";
  return {};
}

}  // namespace densefs::store
