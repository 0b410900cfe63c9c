// Content-defined chunking (FastCDC-style gear hashing with normalized
// chunking). Pure: no I/O, no allocation per byte. docs/chunking.md has the
// algorithm, the measurements behind the defaults, and the versioning rule.
//
// Chunk boundaries decide what dedups across files and stores, so the gear
// table and the cut rule are frozen: version k_cdc_version. Changing either
// (even "just" the seed) is a new version, never an edit of this one;
// tests/codec/chunker_test.cpp pins golden cut points to catch accidents.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::codec {

// The version of the cut rule and gear table below. Persist it next to
// anything that relies on boundaries being reproducible.
inline constexpr std::uint32_t k_cdc_version = 1;

// The largest chunk any CDC configuration may produce: the fixed-grid chunk
// size, so a CDC chunk never exceeds what the store and codecs already take.
inline constexpr std::size_t k_cdc_max_chunk = std::size_t{4} << 20;

// The smallest accepted min_size. Below the 64-byte gear window a boundary
// would depend on fewer bytes than the hash can see.
inline constexpr std::size_t k_cdc_min_chunk = 64;

// Defaults: avg 32 KiB with min = avg/4 and max = 4*avg, chosen by
// tests/bench/cdc_bench.sh (docs/chunking.md): the same total space as 16 KiB
// on two versions of a tar, with half the chunks (metadata, index size).
struct cdc_options {
  // No boundary before min_size bytes: bounds metadata per byte stored, and
  // the bytes skipped are not hashed at all (FastCDC's cut-point skipping).
  std::size_t min_size = std::size_t{8} << 10;
  // The target mean, a power of two: decides the two masks.
  std::size_t avg_size = std::size_t{32} << 10;
  // A chunk that reaches max_size is cut there regardless of content.
  std::size_t max_size = std::size_t{128} << 10;

  bool operator==(const cdc_options&) const = default;
};

// Throws codec_error naming the bad value unless
// k_cdc_min_chunk <= min_size < avg_size < max_size <= k_cdc_max_chunk and
// avg_size is a power of two.
void validate(const cdc_options& options);

// Grammar: "cdc" [":" KEY "=" SIZE]*, KEY one of min, avg, max; SIZE a
// decimal byte count with an optional K or M suffix (binary: 64K = 65536).
// Keys not given keep their defaults. E.g. "cdc:min=16K:avg=64K:max=256K".
// The result is validated; errors are codec_error naming the token.
cdc_options parse_cdc_spec(std::string_view spec);
// The canonical spec, all three keys, largest exact suffix:
// "cdc:min=16K:avg=64K:max=256K". parse_cdc_spec(format_cdc_spec(o)) == o.
std::string format_cdc_spec(const cdc_options& options);

// The 256 gear values of version k_cdc_version (splitmix64, fixed seed; see
// chunker.cpp). Exposed so tests can pin them.
const std::array<std::uint64_t, 256>& cdc_gear_table();

// Whole-buffer API: the end offset of every chunk of `data`, ascending; the
// last one is data.size(). Empty data has no chunks. Every chunk is within
// [min_size, max_size] except the last, which may be shorter.
std::vector<std::size_t> cut_points(std::string_view data, const cdc_options& options);

// Streaming API for data that arrives in pieces (a sequential write): the
// same boundaries as cut_points() over the concatenation, whatever the
// piece sizes. Constant state; no allocation.
//
//   cdc_chunker c(options);
//   for each piece:
//     while (auto n = c.feed(piece)) { chunk ends after n bytes of piece;
//                                      piece.remove_prefix(*n); }
//   at end of file: if (auto last = c.finish()) { last chunk is *last bytes }
// How a policy cuts a file type's data into chunks (docs/policy.md, the
// "+CHUNKER" part of an entry). The file system stages writes in 4 MiB
// slots (docs/design.md) and cuts each slot with this.
struct chunker_spec {
  enum class kind : std::uint8_t {
    fixed,  // every `fixed_size` bytes (the 4 MiB default: one chunk per slot)
    cdc,    // content-defined, with `cdc`
  };
  kind how = kind::cdc;
  std::size_t fixed_size = k_cdc_max_chunk;
  cdc_options cdc;

  static chunker_spec fixed(std::size_t size = k_cdc_max_chunk) { return {kind::fixed, size, {}}; }
  static chunker_spec content_defined(const cdc_options& o = {}) {
    return {kind::cdc, k_cdc_max_chunk, o};
  }
  bool operator==(const chunker_spec&) const = default;
};

// Grammar: "fixed" [":size=" SIZE] | a cdc spec (parse_cdc_spec). A fixed
// size is any byte count from k_cdc_min_chunk (64) to 4M (SIZE as in the
// cdc grammar: "64", "5000", "64K"). A size that does not divide 4 MiB still
// works in the file system: each 4 MiB slot is cut on its own, so the last
// chunk of a full slot is shorter. Errors are codec_error naming the token.
chunker_spec parse_chunker_spec(std::string_view spec);
// "fixed" (4 MiB), "fixed:size=64K", "fixed:size=5000", or
// format_cdc_spec(). Round-trips.
std::string format_chunker_spec(const chunker_spec& spec);

// The end offset of every chunk of `data` (a slot's bytes) under `spec`,
// ascending; the last is data.size(). Empty data has no chunks.
//
// `before` is what precedes `data` in the file (the end of the previous
// slot; chunk_context_bytes() of it is enough). A content-defined cut inside
// `data` is then where one stream over before + data would cut, so the
// chunks of consecutive slots line up with one stream's, and a shifted copy
// finds them again; `data` still starts a chunk. Fixed chunking ignores it.
std::vector<std::size_t> chunk_ends(std::string_view data, const chunker_spec& spec,
                                    std::string_view before = {});
// How many bytes of `before` chunk_ends uses: two maximal chunks, so that
// the chunker has fallen back onto the stream's cut points at data's start,
// but at most one 4 MiB slot (k_cdc_max_chunk): a slot is cut with the end
// of the one before it, staged or committed, and nothing further back.
// 0 for fixed chunking.
std::size_t chunk_context_bytes(const chunker_spec& spec);

class cdc_chunker {
 public:
  // Validates `options` (codec_error).
  explicit cdc_chunker(const cdc_options& options);

  // Scans `data`, the bytes that follow everything fed so far. If a chunk
  // ends inside it, returns how many bytes of `data` belong to that chunk
  // (1..data.size()) and starts a new chunk after them; call again with the
  // rest. Otherwise consumes all of `data` and returns nullopt.
  std::optional<std::size_t> feed(std::string_view data);

  // End of the data: the size of the last chunk, nullopt if there is no
  // pending byte. Resets the chunker for a new file.
  std::optional<std::size_t> finish();

  // Bytes of the current, unfinished chunk seen so far.
  std::size_t pending() const { return pos_; }

 private:
  cdc_options options_;
  std::uint64_t mask_small_;  // below avg_size: more bits, fewer cuts
  std::uint64_t mask_large_;  // from avg_size on: fewer bits, more cuts
  std::size_t pos_ = 0;       // bytes of the current chunk consumed
  std::uint64_t hash_ = 0;    // gear hash since min_size of this chunk
};

}  // namespace densefs::codec
