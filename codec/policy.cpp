// The per-type codec policy: the built-in table, the '/'-separated override
// grammar, and its canonical form.
//
// Codec specs inside a policy are parsed and formatted by the codec registry
// (parse_codec_spec / format_codec_spec), so a policy accepts exactly the
// options each codec accepts and has one canonical form per codec.
#include "codec/policy.h"

#include <string>

namespace densefs::codec {
namespace {

constexpr std::string_view k_default_entry = "default";

bool same_options(const codec_options& a, const codec_options& b) {
  return a.preferred == b.preferred && a.zstd_level == b.zstd_level &&
         a.broccoli_quality == b.broccoli_quality && a.broccoli_window == b.broccoli_window &&
         a.min_savings == b.min_savings;
}

// Text and documents get larger chunks: Broccoli (Brotli) needs context,
// and edited documents are rarely large (docs/policy.md has the figures).
chunker_spec document_chunker() {
  cdc_options o;
  o.min_size = std::size_t{256} << 10;
  o.avg_size = std::size_t{1} << 20;
  o.max_size = std::size_t{4} << 20;
  return chunker_spec::content_defined(o);
}

std::array<chunker_spec, k_file_type_count> default_chunking() {
  return default_policy().chunking;
}

constexpr std::size_t k_min_policy_chunk = 1024;

// HOW := CODEC_SPEC ['+' CHUNKER_SPEC] | '+' CHUNKER_SPEC, applied to one
// type's entries.
void apply_how(std::string_view how, codec_options& codec, chunker_spec& chunker) {
  const auto plus = how.find('+');
  const std::string_view codec_part = how.substr(0, plus);
  if (plus == std::string_view::npos || !codec_part.empty()) codec = parse_codec_spec(codec_part);
  if (plus == std::string_view::npos) return;
  const chunker_spec c = parse_chunker_spec(how.substr(plus + 1));
  // Every chunk costs an extent and an index record (~100 bytes) in the
  // store: chunks far below the default would spend more on metadata than
  // dedup can save (docs/chunking.md), so a store's policy has a floor that
  // czip containers (same parser) do not need.
  const std::size_t smallest = c.how == chunker_spec::kind::fixed ? c.fixed_size : c.cdc.min_size;
  if (smallest < k_min_policy_chunk) {
    throw codec_error("chunks below " + std::to_string(k_min_policy_chunk) +
                      " bytes are not allowed in a store's policy ('" +
                      std::string(how.substr(plus + 1)) + "')");
  }
  chunker = c;
}

std::size_t type_index(file_type t) {
  const auto i = static_cast<std::size_t>(t);
  return i < k_file_type_count ? i : static_cast<std::size_t>(file_type::unknown);
}

codec_options with_codec(codec_id id) {
  codec_options o;
  o.preferred = id;
  return o;
}

}  // namespace

// A type number this build does not know (an inode written by a newer
// build) gets the `unknown` entry: it is "not classified" as far as this
// build can tell.
const codec_options& policy::for_type(file_type t) const {
  return by_type[type_index(t)];
}
codec_options& policy::for_type(file_type t) {
  return by_type[type_index(t)];
}
const chunker_spec& policy::chunker_for(file_type t) const {
  return chunking[type_index(t)];
}
chunker_spec& policy::chunker_for(file_type t) {
  return chunking[type_index(t)];
}

bool policy::operator==(const policy& other) const {
  for (std::size_t i = 0; i < by_type.size(); ++i) {
    if (!same_options(by_type[i], other.by_type[i])) return false;
  }
  return chunking == other.chunking;
}

policy default_policy() {
  policy p;
  // Every option except the codec keeps its codec_options default (zstd
  // level 3, broccoli q5 w22, min_savings 0.03).
  p.by_type.fill(with_codec(codec_id::zstd));  // unknown, other, executable
  p.for_type(file_type::jpeg) = with_codec(codec_id::lepton);
  p.for_type(file_type::gzip) = with_codec(codec_id::deflate);
  p.for_type(file_type::zip) = with_codec(codec_id::deflate);
  p.for_type(file_type::png) = with_codec(codec_id::deflate);
  for (const auto t : {file_type::image, file_type::video, file_type::audio, file_type::archive}) {
    p.for_type(t) = with_codec(codec_id::raw);
  }
  for (const auto t : {file_type::text, file_type::document}) {
    p.for_type(t) = with_codec(codec_id::broccoli);
  }
  // Content-defined chunks find shared bytes at shifted offsets (versions,
  // backups, images, tars); the 4 MiB grid is kept where every file is its
  // own content and a whole-file codec wants all of it (docs/chunking.md).
  p.chunking.fill(chunker_spec::content_defined());
  for (const auto t : {file_type::jpeg, file_type::image, file_type::video, file_type::audio,
                       file_type::gzip, file_type::zip, file_type::png}) {
    p.chunker_for(t) = chunker_spec::fixed();
  }
  for (const auto t : {file_type::text, file_type::document}) p.chunker_for(t) = document_chunker();
  return p;
}

policy parse_policy(std::string_view spec) {
  if (spec.empty()) throw codec_error("empty codec policy");
  policy p = default_policy();
  std::string_view rest = spec;
  while (true) {
    const auto slash = rest.find('/');
    const std::string_view entry = rest.substr(0, slash);
    try {
      if (entry.empty()) throw codec_error("empty entry");
      if (entry == k_default_entry) {
        p = default_policy();
      } else {
        // TYPE=HOW has its '=' before any ':'; a bare HOW has '=' only
        // inside its options ("zstd:level=3", "+cdc:avg=64K").
        const auto eq = entry.find('=');
        const auto colon = entry.find(':');
        if (eq != std::string_view::npos && (colon == std::string_view::npos || eq < colon)) {
          const std::string_view type_name = entry.substr(0, eq);
          const auto t = file_type_from_name(type_name);
          if (!t) throw codec_error("unknown file type '" + std::string(type_name) + "'");
          apply_how(entry.substr(eq + 1), p.for_type(*t), p.chunker_for(*t));
        } else {
          for (std::size_t i = 0; i < k_file_type_count; ++i)
            apply_how(entry, p.by_type[i], p.chunking[i]);
        }
      }
    } catch (const codec_error& e) {
      throw codec_error(std::string(e.what()) + " in policy entry '" + std::string(entry) +
                        "' of '" + std::string(spec) + "'");
    }
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  return p;
}

std::optional<codec_options> fast_ingest_options(const codec_options& target) {
  // zstd -1 against the stronger codecs: about 2x faster than zstd -3 on
  // the bench's mixed tar, 50x faster than Broccoli q5 on small text.
  constexpr int k_fast_zstd_level = 1;
  const bool slower = target.preferred == codec_id::broccoli ||
                      (target.preferred == codec_id::zstd && target.zstd_level > k_fast_zstd_level);
  if (!slower) return std::nullopt;
  codec_options fast;
  fast.preferred = codec_id::zstd;
  fast.zstd_level = k_fast_zstd_level;
  fast.min_savings = target.min_savings;
  return fast;
}

std::string format_policy(const policy& p) {
  // One codec for everything reads best as just that codec (and is what
  // stores made before per-type policies persisted).
  bool uniform = true;
  for (const codec_options& o : p.by_type) uniform = uniform && same_options(o, p.by_type[0]);
  std::string s;
  if (uniform) {
    s = format_codec_spec(p.by_type[0]);
  } else {
    for (std::size_t i = 0; i < p.by_type.size(); ++i) {
      if (i > 0) s += '/';
      s += file_type_name(static_cast<file_type>(i));
      s += '=';
      s += format_codec_spec(p.by_type[i]);
    }
  }
  // Chunkers only where they differ from the built-in table, so stores made
  // before chunkers were part of the policy keep their exact string.
  const auto defaults = default_chunking();
  if (p.chunking == defaults) return s;
  bool one_chunker = true;
  for (const chunker_spec& c : p.chunking) one_chunker = one_chunker && c == p.chunking[0];
  if (one_chunker) return s + "/+" + format_chunker_spec(p.chunking[0]);
  for (std::size_t i = 0; i < p.chunking.size(); ++i) {
    if (p.chunking[i] == defaults[i]) continue;
    s += '/';
    s += file_type_name(static_cast<file_type>(i));
    s += "=+";
    s += format_chunker_spec(p.chunking[i]);
  }
  return s;
}

}  // namespace densefs::codec
