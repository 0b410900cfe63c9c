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

#include <zstd.h>

#include "codec/codec_impl.h"

namespace densefs::codec {
namespace {

using detail::chunk_codec;

struct registry {
  // Index: codec id. Reserved ids without an implementation stay empty.
  std::array<std::unique_ptr<chunk_codec>, k_codec_count> by_id;

  registry() {
    add(detail::make_raw_codec());
    add(detail::make_zstd_codec());
    add(detail::make_broccoli_codec());
    add(detail::make_lepton_codec());
    add(detail::make_deflate_codec());
    add(detail::make_lepton_file_codec());
    add(detail::make_lepton_member_codec());
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

}  // namespace

namespace detail {

const chunk_codec& find_or_throw(codec_id id) {
  if (const auto* c = find(static_cast<std::uint8_t>(id))) return *c;
  throw codec_error("unknown codec id " + std::to_string(static_cast<unsigned>(id)));
}

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

double parse_min_savings(std::string_view codec, std::string_view value) {
  const double v = parse_double_option("min_savings", value);
  if (!(v >= 0.0 && v < 1.0)) {
    throw codec_error(std::string(codec) + " option min_savings=" + std::string(value) +
                      " is outside [0, 1)");
  }
  return v;
}

std::string format_min_savings(const codec_options& options) {
  if (options.min_savings == codec_options{}.min_savings) return {};
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, options.min_savings);
  return ":min_savings=" + std::string(buf, end);
}

void check_decoded_size(std::string_view codec, std::size_t got, std::size_t expected) {
  if (got != expected) {
    throw codec_error(std::string(codec) + " chunk decoded to " + std::to_string(got) +
                      " bytes, expected " + std::to_string(expected));
  }
}

}  // namespace detail

using detail::find_or_throw;

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
  if (is_lepton_file_codec(*id)) {
    throw codec_error("codec '" + std::string(name) +
                      "' is made by the store for JPEGs of several chunks; use 'lepton'");
  }
  const auto& c = find_or_throw(*id);

  codec_options options;
  options.preferred = *id;
  detail::for_each_spec_option(spec, "codec", [&](std::string_view key, std::string_view value) {
    c.apply_option(key, value, options);
  });
  return options;
}

void detail::for_each_spec_option(
    std::string_view spec, std::string_view kind,
    const std::function<void(std::string_view key, std::string_view value)>& option) {
  const auto colon = spec.find(':');
  if (colon == std::string_view::npos) return;
  std::string_view rest = spec.substr(colon + 1);
  while (true) {
    const auto next = rest.find(':');
    const std::string_view token = rest.substr(0, next);
    const auto eq = token.find('=');
    if (token.empty() || eq == std::string_view::npos || eq == 0) {
      throw codec_error("bad option '" + std::string(token) + "' in " + std::string(kind) +
                        " spec '" + std::string(spec) + "' (expected key=value)");
    }
    option(token.substr(0, eq), token.substr(eq + 1));
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
}

std::string format_codec_spec(const codec_options& options) {
  const auto& c = find_or_throw(options.preferred);
  return std::string(c.name()) + c.format_options(options);
}

namespace {

// FF D8 FF: a JPEG SOI marker followed by another marker. The same test as
// classify.h's starts_like_jpeg(), kept local so the codec list does not
// depend on the classifier.
bool looks_like_jpeg(std::string_view b) {
  return b.size() >= 3 && b[0] == '\xff' && b[1] == '\xd8' && b[2] == '\xff';
}

// 1F 8B 08 (a gzip member header with the deflate method, classify.h's
// starts_like_gzip(), kept local for the same reason), the PNG signature or
// a zip local header: the only chunks the deflate codec takes.
bool looks_like_deflate_container(std::string_view b) {
  return (b.size() >= 3 && b[0] == '\x1f' && b[1] == '\x8b' && b[2] == '\x08') ||
         b.starts_with("\x89PNG\r\n\x1a\n") || b.starts_with("PK\x03\x04");
}

// Codecs whose encoders run in the Rust library: their output is decoded and
// compared with the input before it is admitted.
bool needs_verification(codec_id id) {
  return id == codec_id::lepton || id == codec_id::broccoli || id == codec_id::deflate;
}

// The largest stored size worth keeping: it must save at least min_savings
// of the chunk, and always at least one byte.
std::size_t worthwhile_limit(std::size_t plain_size, double min_savings) {
  const double savings = std::clamp(min_savings, 0.0, 1.0);
  const auto limit =
      static_cast<std::size_t>(std::floor(static_cast<double>(plain_size) * (1.0 - savings)));
  return std::min(limit, plain_size - 1);
}

// Encodes with `c`, or stores raw when that is not worth it.
encoded_chunk encode_or_raw(const chunk_codec& c, std::string_view plain,
                            const codec_options& options) {
  encoded_chunk result;
  if (c.id() != codec_id::raw && !plain.empty() &&
      c.encode(plain, options, worthwhile_limit(plain.size(), options.min_savings), result.bytes)) {
    result.codec = c.id();
    return result;
  }
  result.codec = codec_id::raw;
  result.bytes.assign(plain);
  return result;
}

}  // namespace

encoded_chunk encode_chunk(std::string_view plain, const codec_options& options) {
  if (plain.size() > detail::k_max_plain_size) {
    throw codec_error("chunk of " + std::to_string(plain.size()) + " bytes is too large to encode");
  }
  const auto& c = find_or_throw(options.preferred);
  if (!needs_verification(options.preferred) || plain.empty()) {
    return encode_or_raw(c, plain, options);
  }

  // Verify before admit, and fall back to zstd when the preferred codec
  // does not take the chunk.
  std::string reason;
  if (options.preferred == codec_id::lepton && !looks_like_jpeg(plain)) {
    reason = "not a JPEG (no FF D8 FF at the start)";
  } else if (options.preferred == codec_id::deflate && !looks_like_deflate_container(plain)) {
    reason = "not a gzip file, a PNG or a zip (no gzip, PNG or zip signature at the start)";
  } else {
    try {
      encoded_chunk e = encode_or_raw(c, plain, options);
      if (e.codec == codec_id::raw && options.preferred == codec_id::broccoli) {
        return e;  // not worth it: zstd would not do better than brotli
      }
      if (e.codec == codec_id::raw) {
        reason = codec_name(options.preferred) + " saved less than min_savings";
      } else {
        try {
          if (c.decode(e.bytes, plain.size()) == plain) return e;
          reason = codec_name(options.preferred) + " encoding decodes to different bytes";
        } catch (const codec_error& err) {
          reason = codec_name(options.preferred) + " encoding does not decode: " + err.what();
        }
      }
    } catch (const detail::codec_rejected& err) {
      reason = err.what();
    }
  }
  codec_options fallback = options;
  fallback.preferred = codec_id::zstd;
  encoded_chunk result = encode_or_raw(find_or_throw(codec_id::zstd), plain, fallback);
  result.fell_back_from = options.preferred;
  result.fallback_reason = std::move(reason);
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

namespace {

// Any number of zstd frames back to back (what `zstd` writes, and what
// `cat a.zst b.zst` makes), skippable frames included, at most `max` bytes.
std::string zstd_decode_any_size(std::string_view stored, std::size_t max) {
  struct dctx_deleter {
    void operator()(ZSTD_DStream* d) const { ZSTD_freeDStream(d); }
  };
  const std::unique_ptr<ZSTD_DStream, dctx_deleter> ds(ZSTD_createDStream());
  if (!ds) throw codec_error("zstd: cannot allocate a decompression context");
  if (stored.empty()) throw codec_error("zstd stream is empty (no frame)");
  std::string out;
  ZSTD_inBuffer in{stored.data(), stored.size(), 0};
  std::size_t last = 0;
  std::string buf(std::min<std::size_t>(max + 1, ZSTD_DStreamOutSize()), '\0');
  while (in.pos < in.size) {
    ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
    last = ZSTD_decompressStream(ds.get(), &ob, &in);
    if (ZSTD_isError(last)) {
      throw codec_error(std::string("zstd: corrupt stream: ") + ZSTD_getErrorName(last));
    }
    if (ob.pos > max - out.size()) {
      throw codec_error("zstd stream decodes to more than " + std::to_string(max) + " bytes");
    }
    out.append(buf.data(), ob.pos);
    if (ob.pos == 0 && in.pos == in.size) break;
  }
  // Input consumed: drain what the decoder still holds.
  while (last != 0) {
    ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
    last = ZSTD_decompressStream(ds.get(), &ob, &in);
    if (ZSTD_isError(last)) {
      throw codec_error(std::string("zstd: corrupt stream: ") + ZSTD_getErrorName(last));
    }
    if (ob.pos > max - out.size()) {
      throw codec_error("zstd stream decodes to more than " + std::to_string(max) + " bytes");
    }
    out.append(buf.data(), ob.pos);
    if (ob.pos == 0 && last != 0) throw codec_error("zstd stream is truncated");
  }
  return out;
}

}  // namespace

std::string decode_any_size(codec_id codec, std::string_view stored, std::size_t max_plain_size) {
  switch (codec) {
    case codec_id::raw:
      if (stored.size() > max_plain_size) {
        throw codec_error("raw stream of " + std::to_string(stored.size()) +
                          " bytes is larger than " + std::to_string(max_plain_size));
      }
      return std::string(stored);
    case codec_id::zstd:
      return zstd_decode_any_size(stored, max_plain_size);
    case codec_id::broccoli:
      return detail::broccoli_decode_any_size(stored, max_plain_size);
    case codec_id::lepton:
      return detail::lepton_decode_any_size(stored, max_plain_size);
    case codec_id::deflate:
      return detail::deflate_decode_any_size(stored, max_plain_size);
    case codec_id::lepton_file:
    case codec_id::lepton_member:
      break;  // store payloads, not standalone streams
  }
  throw codec_error("unknown codec id " + std::to_string(static_cast<unsigned>(codec)));
}

}  // namespace densefs::codec
