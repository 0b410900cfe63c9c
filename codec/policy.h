// The codec policy: which codec (with which options) each file type is
// stored with. A readable table, fixed at mkfs (store settings) and
// overridable per mount (-o codec=...).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "codec/chunker.h"
#include "codec/classify.h"
#include "codec/codec.h"

namespace densefs::codec {

struct policy {
  // Index: file_type number.
  std::array<codec_options, k_file_type_count> by_type;
  // How each type's data is cut into chunks (index: file_type number).
  std::array<chunker_spec, k_file_type_count> chunking;

  const codec_options& for_type(file_type t) const;
  codec_options& for_type(file_type t);
  const chunker_spec& chunker_for(file_type t) const;
  chunker_spec& chunker_for(file_type t);
  bool operator==(const policy&) const;
};

// The built-in table (docs/policy.md says why):
//   jpeg                      -> lepton,        fixed (the whole file, up to 4 MiB)
//   gzip, zip, png            -> deflate,       fixed (the whole file, up to 4 MiB)
//   image, video, audio       -> raw,           fixed
//   archive                   -> raw,           cdc (default sizes)
//   text, document            -> broccoli,      cdc:min=256K:avg=1M:max=4M
//   database, other, executable, unknown
//                             -> zstd:level=3,  cdc (default sizes)
policy default_policy();

// Grammar (entries separated by '/', applied left to right on top of the
// built-in table; '/' because specs travel inside comma-separated mount
// options and ':' already separates codec options):
//   SPEC   := ENTRY ('/' ENTRY)*
//   ENTRY  := "default"            the built-in table (codecs and chunkers)
//           | HOW                  every type (e.g. "zstd:level=9", "raw", "+fixed")
//           | TYPE '=' HOW         one type (e.g. "text=broccoli:quality=9")
//   HOW    := CODEC_SPEC                   the codec; the chunker stays
//           | CODEC_SPEC '+' CHUNKER_SPEC  both
//           | '+' CHUNKER_SPEC             the chunker; the codec stays
// CHUNKER_SPEC is parse_chunker_spec's grammar ("fixed", "cdc:avg=64K").
// Examples: "default", "zstd:level=3" (everything zstd: what stores made
// before per-type policies persisted), "default/jpeg=zstd/text=zstd:level=9",
// "database=zstd+cdc:avg=16K", "+fixed" (the 4 MiB grid for every type).
// Unknown types, codecs, chunkers or options throw codec_error naming the token.
policy parse_policy(std::string_view spec);

// The canonical spec: the codecs, every type listed in file_type order, e.g.
// "unknown=zstd:level=3/other=zstd:level=3/jpeg=lepton/...", or just the
// codec spec ("zstd:level=3") when every type uses the same codec; then the
// chunkers that differ from the built-in table, "/+fixed" when one chunker
// applies to every type, else "/TYPE=+CHUNKER" per differing type.
// Round-trips through parse_policy().
std::string format_policy(const policy& p);

// Fast ingest (-o ingest=fast, docs/policy.md): the codec a chunk is stored
// with at write time when its policy codec is `target`, so that a write
// costs a fast zstd pass and the background re-encoder (fs/recompressor.h)
// brings the chunk to `target` when the store is idle. Nothing when
// `target` is already about as fast (raw, zstd level 1 or below) or is
// Lepton or Deflate, which have their own background path.
// Measured on this 2-core VM (docs/policy.md): Broccoli q5 costs ~300 us of
// CPU for a 2 KB file where zstd -1 costs ~6 us.
std::optional<codec_options> fast_ingest_options(const codec_options& target);

}  // namespace densefs::codec
