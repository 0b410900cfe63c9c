// deflate: lossless recompression of deflate streams (today: gzip files).
// preflate-rs (Rust, codec/rust) inflates each stream and records what
// rebuilds its exact bytes; the plain text is then stored with zstd -19,
// optionally primed with a dictionary built into densefs, and everything
// else of the container (gzip headers, trailers, padding) is kept as it is.
// Payload layout: docs/format.md, "Deflate payloads".
//
// A chunk is taken only when it is a whole gzip file (the fixed chunker
// gives a file up to 4 MiB as one chunk); anything else is refused and
// encode_chunk() falls back. Like Lepton, every encoding is decoded and
// compared before it is admitted, and the codec runs only in the background
// re-encoder: preflate analyses ~3 MB/s of plain text per core.
#include <zstd.h>

#include <cstring>
#include <memory>
#include <string>

#include "codec/codec_impl.h"
#include "codec/rust/rust_result.h"

namespace densefs::codec::detail {

// codec/dict/man_pages_v1.zdict, embedded by codec/CMakeLists.txt.
extern const unsigned char k_deflate_dict_man_pages_v1[];
extern const std::size_t k_deflate_dict_man_pages_v1_size;

namespace {

constexpr std::uint8_t k_payload_version = 1;

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

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

std::uint64_t get_varint(std::string_view& in) {
  std::uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) throw codec_error("deflate payload is truncated (in a length)");
    const auto byte = static_cast<std::uint8_t>(in[0]);
    in.remove_prefix(1);
    v |= std::uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) return v;
  }
  throw codec_error("deflate payload has a length longer than 64 bits");
}

// What densefs_rs_deflate_split returns: u64 LE skeleton length, skeleton,
// plain text.
struct split_container {
  std::string_view skeleton;
  std::string_view plain;
};

split_container parse_split(std::string_view b) {
  std::uint64_t n = 0;
  if (b.size() < 8) throw codec_error("deflate: short split result");
  std::memcpy(&n, b.data(), 8);  // little-endian on every target we build for
  if (n > b.size() - 8) throw codec_error("deflate: bad split result");
  return {b.substr(8, n), b.substr(8 + n)};
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
    const split_container s = parse_split(r.bytes());

    plain_coding coding = plain_coding::zstd;
    std::string packed = zstd_plain(s.plain, nullptr);
    if (s.plain.size() <= k_dict_max_plain) {
      std::string with_dict = zstd_plain(s.plain, man_pages_cdict());
      if (with_dict.size() < packed.size()) {
        packed = std::move(with_dict);
        coding = plain_coding::zstd_dict_man_pages_v1;
      }
    }
    if (packed.size() >= s.plain.size()) {
      coding = plain_coding::raw;
      packed.assign(s.plain);
    }

    std::string payload;
    payload.push_back(static_cast<char>(k_payload_version));
    payload.push_back(static_cast<char>(coding));
    put_varint(payload, s.skeleton.size());
    payload.append(s.skeleton);
    put_varint(payload, s.plain.size());
    payload.append(packed);
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
  if (version != k_payload_version) {
    throw codec_error("deflate payload version " + std::to_string(version) +
                      " is not known to this build");
  }
  if (coding != plain_coding::raw && coding != plain_coding::zstd &&
      coding != plain_coding::zstd_dict_man_pages_v1) {
    throw codec_error("deflate payload has unknown plain coding " +
                      std::to_string(static_cast<unsigned>(coding)));
  }
  const std::uint64_t skeleton_size = get_varint(in);
  if (skeleton_size > in.size()) throw codec_error("deflate payload is truncated (skeleton)");
  const std::string_view skeleton = in.substr(0, skeleton_size);
  in.remove_prefix(skeleton_size);
  const std::uint64_t plain_size = get_varint(in);
  // Refused before anything is allocated: the encoder never stores more
  // plain text than the cap for a chunk of this size.
  const std::size_t cap = densefs_rs_deflate_plain_cap(max_plain_size);
  if (plain_size > cap) {
    throw codec_error("deflate payload claims " + std::to_string(plain_size) +
                      " plain bytes, more than the " + std::to_string(cap) +
                      " a chunk of at most " + std::to_string(max_plain_size) + " bytes may hold");
  }
  const std::string plain = unpack_plain(coding, in, plain_size);
  const rust_result r(densefs_rs_deflate_join(rust_bytes(skeleton), skeleton.size(),
                                              rust_bytes(plain), plain.size(), max_plain_size));
  if (!r.ok()) throw codec_error(r.error());
  return std::string(r.bytes());
}

std::unique_ptr<chunk_codec> make_deflate_codec() {
  return std::make_unique<deflate_codec>();
}

}  // namespace densefs::codec::detail
