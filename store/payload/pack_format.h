// The bytes of pack files and of the pack index (docs/format.md, "Pack
// files"): what every pack home (pack_home.h) and pack_store share, with no
// I/O. Everything that parses takes untrusted bytes: lengths are checked
// against the bounds below before anything is allocated or read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "store/hash.h"
#include "store/payload/payload_store.h"

namespace densefs::store {

// Payloads at least this big go to packs; smaller ones are RocksDB values.
// Below it an inline value is cheaper than a pack record's 64-byte header,
// its 17-byte index entry and a separate read. It was 4096 (the blob
// design's threshold) until the metadata backup: that copies every table,
// so an inline payload is on disk twice, and a store of small files (PNG
// icons, 163 of 264 under 4 KiB) spent 12% of its size on the second copy
// (docs/codecs.md). A payload in a pack is also named by its record, which
// fsck can index again when the payloads table is lost.
inline constexpr std::uint64_t k_min_pack_payload = 256;
// A pack is closed once it reaches this size (the next record starts a new
// one), so compaction rewrites at most about this much at a time.
inline constexpr std::uint64_t k_default_pack_size_cap = 64u << 20;
inline constexpr std::uint64_t k_pack_header_size = 32;
inline constexpr std::uint64_t k_pack_record_header_size = 64;
// Upper bound for a stored payload (a 4 MiB chunk's encoding, with room for
// codecs that expand): lengths read from untrusted bytes are checked
// against it before anything is allocated.
inline constexpr std::uint64_t k_max_pack_payload = (8u << 20) + (1u << 20);
// A lepton_file payload holds a whole JPEG of up to 64 MiB
// (codec::k_lepton_file_max_bytes), Lepton-encoded, so it saves at least
// min_savings: records of that codec may be this large.
inline constexpr std::uint64_t k_max_lepton_file_pack_payload = (64u << 20) + (1u << 20);
inline constexpr std::uint64_t max_pack_payload(codec::codec_id codec) {
  return codec == codec::codec_id::lepton_file ? k_max_lepton_file_pack_payload
                                               : k_max_pack_payload;
}

// Where a pack record is: pack id, offset of the record header, and the
// record's whole length (header + payload).
struct pack_ref {
  std::uint32_t pack = 0;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
  bool operator==(const pack_ref&) const = default;
};

// A record found by scanning a pack file.
struct pack_record_info {
  chunk_hash hash;
  codec::codec_id codec = codec::codec_id::raw;
  std::uint32_t plain_size = 0;
  std::uint32_t stored_size = 0;
  std::uint64_t checksum = 0;  // XXH3 of the payload, from the header
  bool payload_ok = false;     // the payload's XXH3 matches the header's
  pack_ref where;
};

// Values of the payloads table in a pack store.
std::string encode_inline_payload(std::string_view stored);
std::string encode_pack_ref(const pack_ref& ref);
struct payload_value {
  std::optional<std::string_view> inline_bytes;  // set for inline payloads
  pack_ref ref;                                  // otherwise
};
// Throws store_error(EIO) naming the chunk for a value that does not decode.
payload_value decode_payload_value(const chunk_hash& hash, std::string_view value);

std::string pack_file_name(std::uint32_t id);    // "00000001.pack"
std::string pack_object_name(std::uint32_t id);  // "packs/00000001.pack"
// The pack id of an object named like pack_object_name(), or nullopt.
std::optional<std::uint32_t> pack_id_of_object(std::string_view name);
// Pack ids of the files in `dir` named like pack_file_name(), ascending.
std::vector<std::uint32_t> list_pack_files(const std::filesystem::path& dir);

// The 32-byte header a pack file starts with.
std::string pack_header(std::uint32_t id);
// Writes the 64-byte header of the record of `stored` to `h`.
void write_record_header(char* h, const chunk_hash& hash, const payload_meta& meta,
                         std::string_view stored);
// Why the record header at `h` (64 bytes) is not valid, or empty. `length`
// is the record's whole length as the index expects it; 0 to skip that check.
std::string record_header_problem(const char* h, std::uint64_t length);
// Why `record` (header and payload) is not the record of `hash` that `ref`
// names, with a payload matching its checksum; empty when it is.
std::string record_problem(const chunk_hash& hash, const pack_ref& ref, std::string_view record);
// Parses one pack's bytes (the whole file or object): every record to `fn`,
// everything that does not parse to `bad`, naming `label`.
void scan_pack_bytes(std::uint32_t id, const std::string& label, std::string_view bytes,
                     const std::function<void(const pack_record_info&)>& fn,
                     const std::function<void(const std::string&)>& bad);

// Little-endian integers of `bytes` bytes, as every pack structure stores them.
void put_le(char* p, std::uint64_t v, int bytes);
std::uint64_t get_le(const char* p, int bytes);

}  // namespace densefs::store
