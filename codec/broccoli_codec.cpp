// broccoli: Brotli made by Dropbox's Rust `brotli` crate in its catable,
// appendable form with the magic-number header (codec/rust). Each stored
// chunk is one complete brotli stream that stock `brotli -d` decodes, and any
// sequence of them joins into one stream without recompression
// (concat_broccoli), so an export of a file is a byte copy plus a join.
#include <string>

#include "codec/codec_impl.h"
#include "codec/rust/rust_result.h"

namespace densefs::codec::detail {
namespace {

void check_quality(int q) {
  if (q < 0 || q > 11) {
    throw codec_error("broccoli quality " + std::to_string(q) + " is outside 0..11");
  }
}

void check_window(int w) {
  if (w < 10 || w > 24) {
    throw codec_error("broccoli window " + std::to_string(w) + " is outside 10..24");
  }
}

class broccoli_codec final : public chunk_codec {
 public:
  codec_id id() const override { return codec_id::broccoli; }
  std::string_view name() const override { return "broccoli"; }

  bool encode(std::string_view plain, const codec_options& options, std::size_t max_stored,
              std::string& out) const override {
    check_quality(options.broccoli_quality);
    check_window(options.broccoli_window);
    if (max_stored == 0) return false;
    const rust_result r(densefs_rs_broccoli_compress(
        rust_bytes(plain), plain.size(), options.broccoli_quality, options.broccoli_window));
    if (!r.ok()) throw codec_rejected(r.error());
    if (r.bytes().size() > max_stored) return false;
    out.assign(r.bytes());
    return true;
  }

  std::string decode(std::string_view stored, std::size_t plain_size) const override {
    std::string out = broccoli_decode_any_size(stored, plain_size);
    check_decoded_size("broccoli", out.size(), plain_size);
    return out;
  }

  void apply_option(std::string_view key, std::string_view value,
                    codec_options& options) const override {
    if (key == "quality") {
      const int q = parse_int_option(key, value);
      check_quality(q);
      options.broccoli_quality = q;
    } else if (key == "window") {
      const int w = parse_int_option(key, value);
      check_window(w);
      options.broccoli_window = w;
    } else if (key == "min_savings") {
      options.min_savings = parse_min_savings("broccoli", value);
    } else {
      throw codec_error("codec broccoli has no option '" + std::string(key) + "'");
    }
  }

  // Like zstd's level, quality and window are always listed; min_savings
  // only when it is not the default.
  std::string format_options(const codec_options& options) const override {
    std::string s = ":quality=" + std::to_string(options.broccoli_quality) +
                    ":window=" + std::to_string(options.broccoli_window);
    s += format_min_savings(options);
    return s;
  }
};

}  // namespace

std::string broccoli_decode_any_size(std::string_view stored, std::size_t max_plain_size) {
  const rust_result r(
      densefs_rs_broccoli_decompress(rust_bytes(stored), stored.size(), max_plain_size));
  if (!r.ok()) throw codec_error(r.error());
  return std::string(r.bytes());
}

std::unique_ptr<chunk_codec> make_broccoli_codec() {
  return std::make_unique<broccoli_codec>();
}

}  // namespace densefs::codec::detail

namespace densefs::codec {

std::string concat_broccoli(const std::vector<std::string_view>& pieces) {
  std::vector<const std::uint8_t*> ptrs;
  std::vector<std::size_t> lens;
  ptrs.reserve(pieces.size());
  lens.reserve(pieces.size());
  for (const auto p : pieces) {
    ptrs.push_back(detail::rust_bytes(p));
    lens.push_back(p.size());
  }
  const detail::rust_result r(densefs_rs_broccoli_concat(ptrs.data(), lens.data(), pieces.size()));
  if (!r.ok()) throw codec_error(r.error());
  return std::string(r.bytes());
}

}  // namespace densefs::codec
