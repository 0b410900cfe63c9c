// Private to codec/: the small interface every codec implements, and the
// factories codec_registry.cpp lists. Callers outside codec/ use codec.h.
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "codec/codec.h"

namespace densefs::codec::detail {

// Decoders refuse plain sizes above this before allocating anything: chunks
// are at most 4 MiB, so a larger size can only come from a corrupt record.
inline constexpr std::size_t k_max_plain_size = 64u << 20;

class chunk_codec {
 public:
  virtual ~chunk_codec() = default;

  virtual codec_id id() const = 0;
  virtual std::string_view name() const = 0;

  // Returns the encoded bytes, or nothing when the result would not be
  // smaller than `max_stored` bytes (the "not worth it" signal: the caller
  // then stores the chunk raw). Throws codec_error on a real failure.
  virtual bool encode(std::string_view plain, const codec_options& options, std::size_t max_stored,
                      std::string& out) const = 0;

  // Decodes untrusted bytes into exactly plain_size bytes or throws
  // codec_error. plain_size is already checked against k_max_plain_size.
  virtual std::string decode(std::string_view stored, std::size_t plain_size) const = 0;

  // Applies one "key=value" of a spec such as "zstd:level=9"; throws
  // codec_error naming the key when it is unknown or the value is bad.
  virtual void apply_option(std::string_view key, std::string_view value,
                            codec_options& options) const = 0;
  // The "key=value" options of the canonical spec for `options` (after the
  // codec name, each preceded by ':').
  virtual std::string format_options(const codec_options& options) const = 0;
};

// Thrown by an encoder whose codec does not take this input (Lepton and a
// JPEG it cannot recompress, or a failure inside the Rust library while
// encoding): encode_chunk() then falls back to zstd instead of failing the
// write. Bad options stay plain codec_errors.
class codec_rejected : public codec_error {
 public:
  using codec_error::codec_error;
};

// The registry's one instance of codec `id` (codec_registry.cpp); throws
// codec_error for an id this build does not know. encode() and decode() are
// const and thread-safe (contexts are per thread inside each codec).
const chunk_codec& find_or_throw(codec_id id);

// One factory per codec (one .cpp each).
std::unique_ptr<chunk_codec> make_raw_codec();
std::unique_ptr<chunk_codec> make_zstd_codec();
std::unique_ptr<chunk_codec> make_broccoli_codec();
std::unique_ptr<chunk_codec> make_lepton_codec();
std::unique_ptr<chunk_codec> make_deflate_codec();
std::unique_ptr<chunk_codec> make_lepton_file_codec();
std::unique_ptr<chunk_codec> make_lepton_member_codec();

// Bounded decoders for decode_any_size(): at most max_plain_size bytes out.
std::string broccoli_decode_any_size(std::string_view stored, std::size_t max_plain_size);
std::string lepton_decode_any_size(std::string_view stored, std::size_t max_plain_size);
std::string deflate_decode_any_size(std::string_view stored, std::size_t max_plain_size);
// lepton_jpeg threads per JPEG (set_lepton_threads; lepton_file.cpp uses it too).
unsigned lepton_thread_count();

// zstd contexts reused per thread by the codecs that compress with zstd
// (zstd, deflate): creating one costs more than compressing a small chunk,
// and chunks are encoded on a worker pool. Callers reset the parameters
// they set (ZSTD_reset_session_and_parameters) and pass dictionaries per
// call, so nothing leaks from one codec into the other.
ZSTD_CCtx* thread_zstd_cctx();
ZSTD_DCtx* thread_zstd_dctx();

// Shared helpers for option values; throw codec_error naming `key`.
int parse_int_option(std::string_view key, std::string_view value);
double parse_double_option(std::string_view key, std::string_view value);

// The min_savings option every compressing codec takes: a fraction in
// [0, 1) (1 would mean "never compress"; the raw codec says that).
double parse_min_savings(std::string_view codec, std::string_view value);
// ":min_savings=V" for a canonical spec, or "" when it is the default.
std::string format_min_savings(const codec_options& options);

// LEB128 lengths inside payloads (deflate's): 7 bits a byte, low first.
inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Takes a varint from the front of `in`; throws codec_error naming `what`
// (the payload) when it is truncated or longer than 64 bits.
inline std::uint64_t get_varint(std::string_view& in, std::string_view what) {
  std::uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) throw codec_error(std::string(what) + " payload is truncated (in a length)");
    const auto byte = static_cast<std::uint8_t>(in[0]);
    in.remove_prefix(1);
    v |= std::uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) return v;
  }
  throw codec_error(std::string(what) + " payload has a length longer than 64 bits");
}

// Throws codec_error unless a decoder produced exactly the expected size.
void check_decoded_size(std::string_view codec, std::size_t got, std::size_t expected);

// The options of a spec, NAME[:KEY=VALUE]* (codec and chunker specs; ':'
// separates options because specs travel inside comma-separated mount
// options): calls `option(key, value)` for each, in order. `kind` names the
// spec in errors ("codec", "chunker").
void for_each_spec_option(
    std::string_view spec, std::string_view kind,
    const std::function<void(std::string_view key, std::string_view value)>& option);

}  // namespace densefs::codec::detail
