// The codec policy: which codec (with which options) each file type is
// stored with. A readable table, fixed at mkfs (store settings) and
// overridable per mount (-o codec=...).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "codec/classify.h"
#include "codec/codec.h"

namespace densefs::codec {

struct policy {
  // Index: file_type number.
  std::array<codec_options, k_file_type_count> by_type;

  const codec_options& for_type(file_type t) const;
  codec_options& for_type(file_type t);
  bool operator==(const policy&) const;
};

// The built-in table:
//   jpeg                             -> lepton
//   image, video, audio, archive     -> raw (already compressed)
//   text, document, database         -> broccoli
//   other, executable, unknown       -> zstd:level=3
policy default_policy();

// Grammar (entries separated by '/', applied left to right on top of the
// built-in table; '/' because specs travel inside comma-separated mount
// options and ':' already separates codec options):
//   SPEC   := ENTRY ('/' ENTRY)*
//   ENTRY  := "default"            the built-in table
//           | CODEC_SPEC           every type uses this codec (e.g. "zstd:level=9", "raw")
//           | TYPE '=' CODEC_SPEC  one type (e.g. "text=broccoli:quality=9")
// Examples: "default", "zstd:level=3" (everything zstd: what stores made
// before per-type policies persisted), "default/jpeg=zstd/text=zstd:level=9".
// Unknown types, codecs or options throw codec_error naming the token.
policy parse_policy(std::string_view spec);

// The canonical spec: every type listed, in file_type order, e.g.
// "unknown=zstd:level=3/other=zstd:level=3/jpeg=lepton/...", or just the
// codec spec ("zstd:level=3") when every type uses the same codec.
// Round-trips through parse_policy().
std::string format_policy(const policy& p);

}  // namespace densefs::codec
