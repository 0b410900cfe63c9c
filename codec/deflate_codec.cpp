// deflate: lossless recompression of deflate streams (gzip files, PNG
// files, zip files). preflate-rs (Rust, codec/rust) inflates each stream
// and records what rebuilds its exact bytes; everything else of the
// container (gzip headers, trailers, padding, zip headers) is kept as it
// is. The plain text is stored by what it is: a PNG image's rows as pixels
// in lossless JPEG XL (png_rows.h), a JPEG member of a zip with Lepton,
// the rest (text) with zstd -19, optionally primed with a dictionary built
// into densefs. Payload layout: docs/format.md, "Deflate payloads".
//
// A chunk is taken only when it is a whole gzip file (the fixed chunker
// gives a file up to 4 MiB as one chunk); anything else is refused and
// encode_chunk() falls back. Like Lepton, every encoding is decoded and
// compared before it is admitted, and the codec runs only in the background
// re-encoder: preflate analyses ~3 MB/s of plain text per core.
#include <zstd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/codec_impl.h"
#include "codec/png_rows.h"
#include "codec/rust/rust_result.h"

namespace densefs::codec::detail {

// codec/dict/man_pages_v1.zdict, embedded by codec/CMakeLists.txt.
extern const unsigned char k_deflate_dict_man_pages_v1[];
extern const std::size_t k_deflate_dict_man_pages_v1_size;

namespace {

// 1: the plain text is all text. 2 (this build's): a segment table says
// how each range of the plain text is stored, and the skeleton may nest.
constexpr std::uint8_t k_payload_version_text = 1;
constexpr std::uint8_t k_payload_version_segments = 2;

// How the plain text is stored (payload byte 1). Frozen numbers.
enum class plain_coding : std::uint8_t {
  raw = 0,
  zstd = 1,
  zstd_dict_man_pages_v1 = 2,
};

// zstd -19: the plain text is encoded once, in the background, and read
// often; level 19 decodes as fast as level 3.
constexpr int k_plain_zstd_level = 19;

// A dictionary helps only small inputs (its content is what a small file
// has not seen yet); above this the encoder does not try it.
constexpr std::size_t k_dict_max_plain = 1u << 20;

std::string zstd_failure(std::string_view what, std::size_t code) {
  return "deflate: zstd " + std::string(what) + ": " + ZSTD_getErrorName(code);
}

struct cdict_deleter {
  void operator()(ZSTD_CDict* d) const { ZSTD_freeCDict(d); }
};
struct ddict_deleter {
  void operator()(ZSTD_DDict* d) const { ZSTD_freeDDict(d); }
};

// Digested once: loading a 110 KB dictionary per call would cost more than
// compressing a man page.
const ZSTD_CDict* man_pages_cdict() {
  static const std::unique_ptr<ZSTD_CDict, cdict_deleter> d{ZSTD_createCDict(
      k_deflate_dict_man_pages_v1, k_deflate_dict_man_pages_v1_size, k_plain_zstd_level)};
  if (!d) throw codec_error("deflate: cannot load the built-in zstd dictionary");
  return d.get();
}

const ZSTD_DDict* man_pages_ddict() {
  static const std::unique_ptr<ZSTD_DDict, ddict_deleter> d{
      ZSTD_createDDict(k_deflate_dict_man_pages_v1, k_deflate_dict_man_pages_v1_size)};
  if (!d) throw codec_error("deflate: cannot load the built-in zstd dictionary");
  return d.get();
}

// One zstd frame without the content size or dictionary id (the payload
// has both), with or without the built-in dictionary.
std::string zstd_plain(std::string_view plain, const ZSTD_CDict* dict) {
  ZSTD_CCtx* cctx = thread_zstd_cctx();
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  for (const auto& [param, value] :
       {std::pair{ZSTD_c_compressionLevel, k_plain_zstd_level},
        std::pair{ZSTD_c_contentSizeFlag, 0}, std::pair{ZSTD_c_checksumFlag, 0},
        std::pair{ZSTD_c_dictIDFlag, 0}}) {
    const std::size_t rc = ZSTD_CCtx_setParameter(cctx, param, value);
    if (ZSTD_isError(rc)) throw codec_error(zstd_failure("setting a parameter", rc));
  }
  if (dict) {
    const std::size_t rc = ZSTD_CCtx_refCDict(cctx, dict);
    if (ZSTD_isError(rc)) throw codec_error(zstd_failure("loading the dictionary", rc));
  }
  std::string out(ZSTD_compressBound(plain.size()), '\0');
  const std::size_t n = ZSTD_compress2(cctx, out.data(), out.size(), plain.data(), plain.size());
  if (ZSTD_isError(n)) throw codec_error(zstd_failure("compressing the plain text", n));
  out.resize(n);
  return out;
}

// How a range of the plain text is stored (payload version 2). Frozen numbers.
enum class segment_coding : std::uint8_t {
  text = 0,      // in the zstd frame of all text, in order
  png_rows = 1,  // png_rows.h: filter types and lossless JPEG XL
  lepton = 2,    // a whole JPEG file (a zip member) with Lepton
};

struct segment {
  segment_coding coding = segment_coding::text;
  std::size_t plain_size = 0;
  png_image_header png;     // png_rows only
  std::string_view packed;  // png_rows and lepton
};

// What densefs_rs_deflate_split returns: u64 LE skeleton length, skeleton,
// u64 LE segment table length, segment table, plain text. The segment
// table (Split::segment_table in codec/rust) gives a kind per range.
struct split_container {
  std::string_view skeleton;
  bool nested = false;            // the skeleton has ops payload version 1 cannot hold
  std::vector<segment> segments;  // packed empty: the kinds, to be coded
  std::string_view plain;
};

std::uint64_t take_u64(std::string_view& b) {
  std::uint64_t n = 0;
  if (b.size() < 8) throw codec_error("deflate: short split result");
  std::memcpy(&n, b.data(), 8);  // little-endian on every target we build for
  b.remove_prefix(8);
  return n;
}

split_container parse_split(std::string_view b) {
  split_container s;
  const std::uint64_t skeleton = take_u64(b);
  if (skeleton > b.size()) throw codec_error("deflate: bad split result");
  s.skeleton = b.substr(0, skeleton);
  b.remove_prefix(skeleton);
  const std::uint64_t table_size = take_u64(b);
  if (table_size > b.size() || table_size == 0) throw codec_error("deflate: bad split result");
  std::string_view table = b.substr(0, table_size);
  s.plain = b.substr(table_size);
  s.nested = table[0] != 0;
  table.remove_prefix(1);
  std::size_t covered = 0;
  for (std::uint64_t n = get_varint(table, "deflate split"); n > 0; --n) {
    if (table.empty()) throw codec_error("deflate: bad split result");
    segment seg;
    const auto kind = static_cast<std::uint8_t>(table[0]);
    table.remove_prefix(1);
    seg.plain_size = get_varint(table, "deflate split");
    if (kind == 1) {
      seg.coding = segment_coding::png_rows;
      seg.png.width = static_cast<std::uint32_t>(get_varint(table, "deflate split"));
      seg.png.height = static_cast<std::uint32_t>(get_varint(table, "deflate split"));
      if (table.size() < 2) throw codec_error("deflate: bad split result");
      seg.png.depth = static_cast<std::uint8_t>(table[0]);
      seg.png.color = static_cast<std::uint8_t>(table[1]);
      table.remove_prefix(2);
    } else if (kind == 2) {
      seg.coding = segment_coding::lepton;
    }
    covered += seg.plain_size;
    s.segments.push_back(seg);
  }
  if (covered != s.plain.size()) throw codec_error("deflate: bad split result");
  return s;
}

// The plain text's packing: the best zstd frame (with or without the
// built-in dictionary) or the bytes as they are.
struct packed_text {
  plain_coding coding = plain_coding::zstd;
  std::string bytes;
};

packed_text pack_text(std::string_view text) {
  packed_text p{plain_coding::zstd, zstd_plain(text, nullptr)};
  if (text.size() <= k_dict_max_plain) {
    std::string with_dict = zstd_plain(text, man_pages_cdict());
    if (with_dict.size() < p.bytes.size()) {
      p.bytes = std::move(with_dict);
      p.coding = plain_coding::zstd_dict_man_pages_v1;
    }
  }
  if (p.bytes.size() >= text.size()) p = {plain_coding::raw, std::string(text)};
  return p;
}

// A picture's range packed by its own coder, or nothing when the coder
// does not take it or does not beat zstd -19 on it. Each packing is
// decoded and compared here, so a picture the coder gets wrong costs only
// its own range, not the whole file's recompression.
std::optional<std::string> pack_picture(const segment& seg, std::string_view plain) {
  if (seg.coding == segment_coding::png_rows) {
    auto packed = png_rows_encode(plain, seg.png);
    if (packed && packed->size() < zstd_plain(plain, nullptr).size()) return packed;
    return std::nullopt;
  }
  if (seg.coding == segment_coding::lepton) {
    const chunk_codec& lepton = find_or_throw(codec_id::lepton);
    std::string out;
    try {
      if (!lepton.encode(plain, codec_options{}, plain.size(), out)) return std::nullopt;
      if (lepton.decode(out, plain.size()) != plain) return std::nullopt;
    } catch (const codec_error&) {
      return std::nullopt;
    }
    return out;
  }
  return std::nullopt;
}

class deflate_codec final : public chunk_codec {
 public:
  codec_id id() const override { return codec_id::deflate; }
  std::string_view name() const override { return "deflate"; }

  bool encode(std::string_view plain, const codec_options&, std::size_t max_stored,
              std::string& out) const override {
    const rust_result r(densefs_rs_deflate_split(rust_bytes(plain), plain.size()));
    // Not gzip, truncated, a bomb past the cap, a stream preflate cannot
    // predict, a panic: all "this codec does not take the chunk".
    if (!r.ok()) throw codec_rejected(r.error());
    split_container s = parse_split(r.bytes());

    // Pictures first; what their coders do not take joins the text.
    std::string text;
    std::vector<std::string> pictures;
    std::vector<segment> coded;
    std::size_t at = 0;
    for (segment seg : s.segments) {
      const std::string_view range = s.plain.substr(at, seg.plain_size);
      at += seg.plain_size;
      std::optional<std::string> packed = pack_picture(seg, range);
      if (packed) {
        pictures.push_back(std::move(*packed));
        coded.push_back(seg);
        continue;
      }
      text.append(range);
      if (!coded.empty() && coded.back().coding == segment_coding::text) {
        coded.back().plain_size += seg.plain_size;
      } else {
        coded.push_back(segment{segment_coding::text, seg.plain_size, {}, {}});
      }
    }
    const packed_text packed = pack_text(text);

    std::string payload;
    const bool segments = s.nested || !pictures.empty();
    payload.push_back(
        static_cast<char>(segments ? k_payload_version_segments : k_payload_version_text));
    payload.push_back(static_cast<char>(packed.coding));
    put_varint(payload, s.skeleton.size());
    payload.append(s.skeleton);
    if (segments) {
      put_varint(payload, coded.size());
      std::size_t picture = 0;
      for (const segment& seg : coded) {
        payload.push_back(static_cast<char>(seg.coding));
        put_varint(payload, seg.plain_size);
        if (seg.coding == segment_coding::text) continue;
        if (seg.coding == segment_coding::png_rows) {
          put_varint(payload, seg.png.width);
          put_varint(payload, seg.png.height);
          payload.push_back(static_cast<char>(seg.png.depth));
          payload.push_back(static_cast<char>(seg.png.color));
        }
        put_varint(payload, pictures[picture].size());
        payload.append(pictures[picture++]);
      }
    }
    put_varint(payload, text.size());
    payload.append(packed.bytes);
    if (payload.size() > max_stored) return false;
    out = std::move(payload);
    return true;
  }

  std::string decode(std::string_view stored, std::size_t plain_size) const override {
    std::string out = deflate_decode_any_size(stored, plain_size);
    check_decoded_size("deflate", out.size(), plain_size);
    return out;
  }

  void apply_option(std::string_view key, std::string_view value,
                    codec_options& options) const override {
    if (key == "min_savings") {
      options.min_savings = parse_min_savings("deflate", value);
    } else {
      throw codec_error("codec deflate has no option '" + std::string(key) + "'");
    }
  }

  std::string format_options(const codec_options& options) const override {
    return format_min_savings(options);
  }
};

// The plain text of a payload: exactly `size` bytes decoded from `packed`.
std::string unpack_plain(plain_coding coding, std::string_view packed, std::size_t size) {
  if (coding == plain_coding::raw) {
    if (packed.size() != size) {
      throw codec_error("deflate payload holds " + std::to_string(packed.size()) +
                        " plain bytes, its header says " + std::to_string(size));
    }
    return std::string(packed);
  }
  // Exactly one frame: a second one would otherwise decode too.
  const std::size_t frame = ZSTD_findFrameCompressedSize(packed.data(), packed.size());
  if (ZSTD_isError(frame)) throw codec_error(zstd_failure("corrupt plain text", frame));
  if (frame != packed.size()) throw codec_error("deflate payload has bytes after its zstd frame");
  // Decoded in one pass straight into exactly `size` bytes: no window
  // buffer, and a frame that would produce more fails with dstSize_tooSmall.
  std::string plain(size, '\0');
  ZSTD_DCtx* dctx = thread_zstd_dctx();
  const std::size_t got =
      coding == plain_coding::zstd_dict_man_pages_v1
          ? ZSTD_decompress_usingDDict(dctx, plain.data(), plain.size(), packed.data(),
                                       packed.size(), man_pages_ddict())
          : ZSTD_decompressDCtx(dctx, plain.data(), plain.size(), packed.data(), packed.size());
  if (ZSTD_isError(got)) throw codec_error(zstd_failure("corrupt plain text", got));
  if (got != size) {
    throw codec_error("deflate payload's plain text decodes to " + std::to_string(got) +
                      " bytes, its header says " + std::to_string(size));
  }
  return plain;
}

}  // namespace

std::string deflate_decode_any_size(std::string_view stored, std::size_t max_plain_size) {
  std::string_view in = stored;
  if (in.size() < 2) throw codec_error("deflate payload is truncated (no header)");
  const auto version = static_cast<std::uint8_t>(in[0]);
  const auto coding = static_cast<plain_coding>(in[1]);
  in.remove_prefix(2);
  if (version != k_payload_version_text && version != k_payload_version_segments) {
    throw codec_error("deflate payload version " + std::to_string(version) +
                      " is not known to this build");
  }
  if (coding != plain_coding::raw && coding != plain_coding::zstd &&
      coding != plain_coding::zstd_dict_man_pages_v1) {
    throw codec_error("deflate payload has unknown plain coding " +
                      std::to_string(static_cast<unsigned>(coding)));
  }
  const std::uint64_t skeleton_size = get_varint(in, "deflate");
  if (skeleton_size > in.size()) throw codec_error("deflate payload is truncated (skeleton)");
  const std::string_view skeleton = in.substr(0, skeleton_size);
  in.remove_prefix(skeleton_size);
  // Every size is checked against the cap before anything is allocated:
  // the encoder never stores more plain text than the cap for a chunk of
  // this size.
  const std::size_t cap = densefs_rs_deflate_plain_cap(max_plain_size);
  const auto too_much = [&](std::uint64_t claimed) {
    return codec_error("deflate payload claims " + std::to_string(claimed) +
                       " plain bytes, more than the " + std::to_string(cap) +
                       " a chunk of at most " + std::to_string(max_plain_size) + " bytes may hold");
  };
  std::vector<segment> segments;
  std::uint64_t total = 0;
  std::uint64_t text_total = 0;
  if (version == k_payload_version_segments) {
    const std::uint64_t count = get_varint(in, "deflate");
    if (count > in.size()) throw codec_error("deflate payload is truncated (segments)");
    for (std::uint64_t i = 0; i < count; ++i) {
      if (in.empty()) throw codec_error("deflate payload is truncated (segments)");
      segment seg;
      seg.coding = static_cast<segment_coding>(in[0]);
      in.remove_prefix(1);
      const std::uint64_t size = get_varint(in, "deflate");
      if (size > cap - total) throw too_much(total + size);
      // The encoder never writes an empty segment or two text segments in a
      // row: a forged table of them could only cost memory.
      if (size == 0 || (seg.coding == segment_coding::text && !segments.empty() &&
                        segments.back().coding == segment_coding::text)) {
        throw codec_error("deflate payload has an empty segment or two text segments in a row");
      }
      seg.plain_size = size;
      total += size;
      if (seg.coding == segment_coding::text) {
        text_total += size;
        segments.push_back(seg);
        continue;
      }
      if (seg.coding == segment_coding::png_rows) {
        const std::uint64_t width = get_varint(in, "deflate");
        const std::uint64_t height = get_varint(in, "deflate");
        if (in.size() < 2 || width > UINT32_MAX || height > UINT32_MAX) {
          throw codec_error("deflate payload has a bad PNG image header");
        }
        seg.png = {static_cast<std::uint32_t>(width), static_cast<std::uint32_t>(height),
                   static_cast<std::uint8_t>(in[0]), static_cast<std::uint8_t>(in[1])};
        in.remove_prefix(2);
        if (png_rows_size(seg.png, cap) != seg.plain_size) {
          throw codec_error("deflate payload's PNG rows do not match their image header");
        }
      } else if (seg.coding != segment_coding::lepton) {
        throw codec_error("deflate payload has unknown segment coding " +
                          std::to_string(static_cast<unsigned>(seg.coding)));
      }
      const std::uint64_t packed = get_varint(in, "deflate");
      if (packed > in.size()) throw codec_error("deflate payload is truncated (a picture)");
      seg.packed = in.substr(0, packed);
      in.remove_prefix(packed);
      segments.push_back(seg);
    }
  }
  const std::uint64_t text_size = get_varint(in, "deflate");
  if (version == k_payload_version_text) {
    // All of the plain text is this text: no segments to assemble.
    if (text_size > cap) throw too_much(text_size);
  } else if (text_size != text_total) {
    throw codec_error("deflate payload's text is " + std::to_string(text_size) +
                      " bytes, its segments say " + std::to_string(text_total));
  }
  const std::string text = unpack_plain(coding, in, text_size);
  std::string plain_buffer;
  std::string_view plain = text;
  if (version == k_payload_version_segments) {
    plain_buffer.reserve(total);
    std::size_t text_at = 0;
    for (const segment& seg : segments) {
      switch (seg.coding) {
        case segment_coding::text:
          plain_buffer.append(text, text_at, seg.plain_size);
          text_at += seg.plain_size;
          break;
        case segment_coding::png_rows:
          plain_buffer.append(png_rows_decode(seg.packed, seg.png));
          break;
        case segment_coding::lepton:
          plain_buffer.append(find_or_throw(codec_id::lepton).decode(seg.packed, seg.plain_size));
          break;
      }
    }
    plain = plain_buffer;
  }
  const rust_result r(densefs_rs_deflate_join(rust_bytes(skeleton), skeleton.size(),
                                              rust_bytes(plain), plain.size(), max_plain_size));
  if (!r.ok()) throw codec_error(r.error());
  return std::string(r.bytes());
}

std::unique_ptr<chunk_codec> make_deflate_codec() {
  return std::make_unique<deflate_codec>();
}

}  // namespace densefs::codec::detail
