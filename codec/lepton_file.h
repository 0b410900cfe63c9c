// Lepton on a whole JPEG that spans several chunks (densefs issue 14).
//
// lepton_jpeg 0.5.8 encodes and decodes only whole JPEGs: its thread
// handoffs (the Huffman handover words of the Lepton paper, §3.4) split the
// scan at luma rows it chooses itself, and neither encode_lepton nor
// decode_lepton takes a byte range or a start offset (the C++ Lepton's
// -start/-trunc has no equivalent). A JPEG larger than one chunk therefore
// gets one Lepton encoding of the whole file, stored as the payload of its
// first chunk (a "lepton file" payload, below); each later chunk's payload
// is a small "lepton member" payload naming the first chunk and its own
// index. Decoding any chunk decodes the whole file once, and every chunk of
// it can go to the decoded-chunk cache. Chunks stay at most chunk_size of
// logical bytes and are still named by their own plain content, so dedup
// of identical photos and partial overwrites (a new chunk, stored on its
// own) work as before. docs/format.md, "Lepton file payloads", specifies
// both layouts; docs/codecs.md has the measurements.
//
// Pure transforms, no I/O: resolving a member's first chunk is the store's
// job. Chunk names are opaque bytes here (the store's SHA-256 chunk
// hashes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::codec {

inline constexpr std::uint8_t k_lepton_file_version = 1;

// The largest JPEG encoded as one Lepton file. One decode holds the Lepton
// payload, the whole JPEG and lepton_jpeg's working set (measured ~200 MiB
// for an 18-megapixel photo; images wider or taller than 8192 pixels are
// refused anyway), so this bounds the memory of one decode to about
// 2 x 64 MiB plus lepton_jpeg's own. Larger JPEGs keep per-chunk encoding.
inline constexpr std::uint64_t k_lepton_file_max_bytes = 64ull << 20;

// The most chunks a Lepton file may name. The store's own have at most 16
// (64 MiB in 4 MiB chunks); the bound keeps a forged payload with a tiny
// chunk size from making the parser list (and a read hash) millions.
inline constexpr std::uint32_t k_lepton_file_max_chunks = 1024;

// A parsed "lepton file" payload. The views point into the payload.
struct lepton_file_view {
  std::uint32_t chunk_size = 0;
  std::uint64_t file_size = 0;
  std::uint64_t file_checksum = 0;  // XXH3-64 of the whole JPEG
  std::size_t name_size = 0;
  std::vector<std::string_view> chunk_names;  // one per chunk, in file order
  std::string_view lepton;                    // one Lepton file: the whole JPEG

  std::size_t chunk_count() const { return chunk_names.size(); }
  // Plain bytes of chunk i (chunk_size, or less for the last one).
  std::uint32_t chunk_plain_size(std::size_t i) const;
};

// What encode_lepton_file() returns: the payload, or why there is none.
struct lepton_file_encoding {
  std::optional<std::string> payload;
  std::string refusal;  // when !payload: Lepton refused, did not verify, or saved too little
};

// Encodes the whole of `jpeg` as one Lepton file and wraps it with the
// names of its chunks (`chunk_names[i]` names bytes [i*chunk_size,
// (i+1)*chunk_size) of `jpeg`; all names have the same size, 1..255 bytes).
// Verify before admit: the Lepton file is decoded and compared with `jpeg`
// before it is returned. No payload when Lepton refuses the JPEG, when the
// encoding does not verify, or when the payload does not save at least
// `min_savings` of jpeg.size(). Throws codec_error on bad arguments (name
// count or sizes, chunk_size 0, a JPEG over k_lepton_file_max_bytes).
lepton_file_encoding encode_lepton_file(std::string_view jpeg, std::uint32_t chunk_size,
                                        std::span<const std::string> chunk_names,
                                        double min_savings);

// Parses a "lepton file" payload (untrusted). Throws codec_error naming what
// is wrong: magic, version, sizes that do not add up, truncation.
lepton_file_view parse_lepton_file(std::string_view payload);

// Decodes a parsed payload into the whole JPEG: exactly file_size bytes
// whose XXH3-64 matches, else codec_error (never wrong bytes).
std::string decode_lepton_file(const lepton_file_view& file);

// Chunk i of a decoded file.
std::string_view lepton_file_chunk(const lepton_file_view& file, std::string_view decoded,
                                   std::size_t i);

// A "lepton member" payload: chunk `index` (>= 1) of the Lepton file stored
// as the payload of chunk `first_chunk`; `plain_size` is this chunk's size.
struct lepton_member {
  std::string first_chunk;  // the first chunk's name
  std::uint32_t index = 0;
  std::uint32_t plain_size = 0;
};

std::string encode_lepton_member(const lepton_member& m);
// Parses (untrusted); throws codec_error.
lepton_member parse_lepton_member(std::string_view payload);

// Whether stored bytes start like each payload kind (its magic number).
bool is_lepton_file_payload(std::string_view stored);
bool is_lepton_member_payload(std::string_view stored);

}  // namespace densefs::codec
