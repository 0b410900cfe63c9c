// The per-type codec policy: the built-in table, the '/'-separated override
// grammar, and its canonical form.
//
// Codec specs inside a policy are parsed and formatted by the codec registry
// (parse_codec_spec / format_codec_spec), so a policy accepts exactly the
// options each codec accepts. One exception: the built-in table names
// Lepton and Broccoli, which a build may lack (they are Rust code linked in
// separately). For those two frozen ids only, when the registry does not
// know them, this file reads and writes the spec keys codec.h documents
// (broccoli: quality, window; both: min_savings), so the default policy can
// still be formatted, stored and parsed back; encoding with such a codec
// then fails with "unknown codec id" where the chunk is written.
#include "codec/policy.h"

#include <charconv>
#include <string>

namespace densefs::codec {
namespace {

constexpr std::string_view k_default_entry = "default";

std::string_view builtin_codec_name(codec_id id) {
  switch (id) {
    case codec_id::raw:
      return "raw";
    case codec_id::zstd:
      return "zstd";
    case codec_id::broccoli:
      return "broccoli";
    case codec_id::lepton:
      return "lepton";
  }
  return {};
}

std::string format_double(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

int parse_int(std::string_view key, std::string_view value, int lo, int hi,
              std::string_view codec) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size() || v < lo ||
      v > hi) {
    throw codec_error(std::string(codec) + " option " + std::string(key) + "=" +
                      std::string(value) + " is not an integer in " + std::to_string(lo) + ".." +
                      std::to_string(hi));
  }
  return v;
}

double parse_min_savings(std::string_view value, std::string_view codec) {
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size() ||
      !(v >= 0.0 && v < 1.0)) {
    throw codec_error(std::string(codec) + " option min_savings=" + std::string(value) +
                      " is outside [0, 1)");
  }
  return v;
}

// Lepton or Broccoli in a build without them (see the file comment).
codec_options parse_absent_codec_spec(codec_id id, std::string_view spec) {
  const std::string_view name = builtin_codec_name(id);
  codec_options options;
  options.preferred = id;
  std::string_view rest = spec.substr(name.size());
  while (!rest.empty()) {
    rest.remove_prefix(1);  // ':'
    const auto next = rest.find(':');
    const std::string_view token = rest.substr(0, next);
    const auto eq = token.find('=');
    if (token.empty() || eq == std::string_view::npos || eq == 0) {
      throw codec_error("bad option '" + std::string(token) + "' in codec spec '" +
                        std::string(spec) + "' (expected key=value)");
    }
    const std::string_view key = token.substr(0, eq);
    const std::string_view value = token.substr(eq + 1);
    if (key == "min_savings") {
      options.min_savings = parse_min_savings(value, name);
    } else if (id == codec_id::broccoli && key == "quality") {
      options.broccoli_quality = parse_int(key, value, 0, 11, name);
    } else if (id == codec_id::broccoli && key == "window") {
      options.broccoli_window = parse_int(key, value, 10, 24, name);
    } else {
      throw codec_error("codec " + std::string(name) + " has no option '" + std::string(key) + "'");
    }
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next);
  }
  return options;
}

codec_options parse_entry_codec(std::string_view spec) {
  const std::string_view name = spec.substr(0, spec.find(':'));
  for (const auto id : {codec_id::broccoli, codec_id::lepton}) {
    if (name == builtin_codec_name(id) && !is_known_codec(static_cast<std::uint8_t>(id))) {
      return parse_absent_codec_spec(id, spec);
    }
  }
  return parse_codec_spec(spec);
}

std::string format_entry_codec(const codec_options& o) {
  if (is_known_codec(static_cast<std::uint8_t>(o.preferred))) return format_codec_spec(o);
  std::string s(builtin_codec_name(o.preferred));
  if (s.empty()) {
    throw codec_error("cannot format a policy naming unknown codec id " +
                      std::to_string(static_cast<unsigned>(o.preferred)));
  }
  if (o.preferred == codec_id::broccoli) {
    s += ":quality=" + std::to_string(o.broccoli_quality) +
         ":window=" + std::to_string(o.broccoli_window);
  }
  if (o.min_savings != codec_options{}.min_savings)
    s += ":min_savings=" + format_double(o.min_savings);
  return s;
}

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
          p.for_type(*t) = parse_entry_codec(entry.substr(eq + 1));
        } else {
          p.by_type.fill(parse_entry_codec(entry));
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
  std::string s;
  for (std::size_t i = 0; i < p.by_type.size(); ++i) {
    if (i > 0) s += '/';
    s += file_type_name(static_cast<file_type>(i));
    s += '=';
    s += format_entry_codec(p.by_type[i]);
  }
  return s;
}

}  // namespace densefs::codec
