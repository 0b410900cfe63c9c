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
  const auto i = static_cast<std::size_t>(t);
  return by_type[i < by_type.size() ? i : static_cast<std::size_t>(file_type::unknown)];
}

codec_options& policy::for_type(file_type t) {
  const auto i = static_cast<std::size_t>(t);
  return by_type[i < by_type.size() ? i : static_cast<std::size_t>(file_type::unknown)];
}

bool policy::operator==(const policy& other) const {
  for (std::size_t i = 0; i < by_type.size(); ++i) {
    if (!same_options(by_type[i], other.by_type[i])) return false;
  }
  return true;
}

policy default_policy() {
  policy p;
  // Every option except the codec keeps its codec_options default (zstd
  // level 3, broccoli q5 w22, min_savings 0.03).
  p.by_type.fill(with_codec(codec_id::zstd));  // unknown, other, executable
  p.for_type(file_type::jpeg) = with_codec(codec_id::lepton);
  for (const auto t : {file_type::image, file_type::video, file_type::audio, file_type::archive}) {
    p.for_type(t) = with_codec(codec_id::raw);
  }
  for (const auto t : {file_type::text, file_type::document, file_type::database}) {
    p.for_type(t) = with_codec(codec_id::broccoli);
  }
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
        // TYPE=CODEC_SPEC has its '=' before any ':'; a bare codec spec has
        // '=' only inside its options ("zstd:level=3").
        const auto eq = entry.find('=');
        const auto colon = entry.find(':');
        if (eq != std::string_view::npos && (colon == std::string_view::npos || eq < colon)) {
          const std::string_view type_name = entry.substr(0, eq);
          const auto t = file_type_from_name(type_name);
          if (!t) throw codec_error("unknown file type '" + std::string(type_name) + "'");
          p.for_type(*t) = parse_codec_spec(entry.substr(eq + 1));
        } else {
          p.by_type.fill(parse_codec_spec(entry));
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

std::string format_policy(const policy& p) {
  // One codec for everything reads best as just that codec (and is what
  // stores made before per-type policies persisted).
  bool uniform = true;
  for (const codec_options& o : p.by_type) uniform = uniform && same_options(o, p.by_type[0]);
  if (uniform) return format_codec_spec(p.by_type[0]);
  std::string s;
  for (std::size_t i = 0; i < p.by_type.size(); ++i) {
    if (i > 0) s += '/';
    s += file_type_name(static_cast<file_type>(i));
    s += '=';
    s += format_codec_spec(p.by_type[i]);
  }
  return s;
}

}  // namespace densefs::codec
