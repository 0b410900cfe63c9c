// The codec list (names <-> frozen ids), the option-spec grammar, and the
// encode/decode dispatch.
//
// Codecs are listed here explicitly rather than self-registering from static
// initialisers: in a static library the linker drops object files nothing
// references, which would silently unregister a codec.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <memory>
#include <string>

#include "codec/codec_impl.h"

namespace densefs::codec {
namespace {

using detail::chunk_codec;

struct registry {
  // Index: codec id. Reserved ids without an implementation stay empty.
  std::array<std::unique_ptr<chunk_codec>, 4> by_id;

  registry() {
    add(detail::make_raw_codec());
    add(detail::make_zstd_codec());
  }

  void add(std::unique_ptr<chunk_codec> c) {
    const auto i = static_cast<std::size_t>(c->id());
    by_id[i] = std::move(c);
  }
};

const registry& the_registry() {
  static const registry r;
  return r;
}

const chunk_codec* find(std::uint8_t id) {
  const auto& r = the_registry();
  return id < r.by_id.size() ? r.by_id[id].get() : nullptr;
}

const chunk_codec& find_or_throw(codec_id id) {
  if (const auto* c = find(static_cast<std::uint8_t>(id))) return *c;
  throw codec_error("unknown codec id " + std::to_string(static_cast<unsigned>(id)));
}

}  // namespace

namespace detail {

int parse_int_option(std::string_view key, std::string_view value) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size()) {
    throw codec_error("option " + std::string(key) + "=" + std::string(value) +
                      " is not an integer");
  }
  return v;
}

double parse_double_option(std::string_view key, std::string_view value) {
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size() ||
      !std::isfinite(v)) {
    throw codec_error("option " + std::string(key) + "=" + std::string(value) + " is not a number");
  }
  return v;
}

}  // namespace detail

std::string codec_name(codec_id id) {
  if (const auto* c = find(static_cast<std::uint8_t>(id))) return std::string(c->name());
  return "unknown(" + std::to_string(static_cast<unsigned>(id)) + ")";
}

std::optional<codec_id> codec_from_name(std::string_view name) {
  for (const auto& c : the_registry().by_id) {
    if (c && c->name() == name) return c->id();
  }
  return std::nullopt;
}

bool is_known_codec(std::uint8_t id) {
  return find(id) != nullptr;
}

// Grammar: NAME [":" KEY "=" VALUE]*, e.g. "zstd", "zstd:level=9",
// "zstd:level=9:min_savings=0.05". ':' separates options because specs travel
// inside comma-separated mount options (-o codec=zstd:level=9,ro).
codec_options parse_codec_spec(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name.empty()) throw codec_error("empty codec name in codec spec '" + std::string(spec) + "'");
  const auto id = codec_from_name(name);
  if (!id) throw codec_error("unknown codec '" + std::string(name) + "'");
  const auto& c = find_or_throw(*id);

  codec_options options;
  options.preferred = *id;
  if (colon == std::string_view::npos) return options;

  std::string_view rest = spec.substr(colon + 1);
  while (true) {
    const auto next = rest.find(':');
    const std::string_view token = rest.substr(0, next);
    const auto eq = token.find('=');
    if (token.empty() || eq == std::string_view::npos || eq == 0) {
      throw codec_error("bad option '" + std::string(token) + "' in codec spec '" +
                        std::string(spec) + "' (expected key=value)");
    }
    c.apply_option(token.substr(0, eq), token.substr(eq + 1), options);
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  return options;
}

std::string format_codec_spec(const codec_options& options) {
  const auto& c = find_or_throw(options.preferred);
  return std::string(c.name()) + c.format_options(options);
}

encoded_chunk encode_chunk(std::string_view plain, const codec_options& options) {
  if (plain.size() > detail::k_max_plain_size) {
    throw codec_error("chunk of " + std::to_string(plain.size()) + " bytes is too large to encode");
  }
  const auto& c = find_or_throw(options.preferred);
  encoded_chunk result;
  if (options.preferred != codec_id::raw && !plain.empty()) {
    // Worth keeping only when it saves at least min_savings of the chunk,
    // and always at least one byte.
    const double savings = std::clamp(options.min_savings, 0.0, 1.0);
    auto limit =
        static_cast<std::size_t>(std::floor(static_cast<double>(plain.size()) * (1.0 - savings)));
    limit = std::min(limit, plain.size() - 1);
    if (c.encode(plain, options, limit, result.bytes)) {
      result.codec = options.preferred;
      return result;
    }
  }
  result.codec = codec_id::raw;
  result.bytes.assign(plain);
  return result;
}

std::string decode_chunk(codec_id codec, std::string_view stored, std::size_t plain_size) {
  const auto& c = find_or_throw(codec);
  if (plain_size > detail::k_max_plain_size) {
    throw codec_error(std::string(c.name()) + " chunk claims " + std::to_string(plain_size) +
                      " plain bytes, more than any chunk can hold");
  }
  return c.decode(stored, plain_size);
}

}  // namespace densefs::codec
