// zstd: the default codec. One frame per chunk, content size in the frame
// header, no zstd checksum (the store checks an XXH3 of the stored bytes).
#include <zstd.h>
#include <zstd_errors.h>

#include <cstring>
#include <string>

#include "codec/codec_impl.h"

namespace densefs::codec::detail {
namespace {

struct cctx_deleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct dctx_deleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

}  // namespace

ZSTD_CCtx* thread_zstd_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, cctx_deleter> ctx{ZSTD_createCCtx()};
  if (!ctx) throw codec_error("zstd: cannot allocate a compression context");
  return ctx.get();
}

ZSTD_DCtx* thread_zstd_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, dctx_deleter> ctx{ZSTD_createDCtx()};
  if (!ctx) throw codec_error("zstd: cannot allocate a decompression context");
  return ctx.get();
}

namespace {

std::string zstd_failure(std::string_view what, std::size_t code) {
  return "zstd: " + std::string(what) + ": " + ZSTD_getErrorName(code);
}

void check_level(int level) {
  if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel()) {
    throw codec_error("zstd level " + std::to_string(level) + " is outside " +
                      std::to_string(ZSTD_minCLevel()) + ".." + std::to_string(ZSTD_maxCLevel()));
  }
}

class zstd_codec final : public chunk_codec {
 public:
  codec_id id() const override { return codec_id::zstd; }
  std::string_view name() const override { return "zstd"; }

  bool encode(std::string_view plain, const codec_options& options, std::size_t max_stored,
              std::string& out) const override {
    check_level(options.zstd_level);
    if (max_stored == 0) return false;
    ZSTD_CCtx* cctx = thread_zstd_cctx();
    // reset also drops parameters a previous failed call may have left.
    ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    std::size_t rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options.zstd_level);
    if (ZSTD_isError(rc)) throw codec_error(zstd_failure("setting the level", rc));
    rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    if (ZSTD_isError(rc)) throw codec_error(zstd_failure("setting the content size flag", rc));
    rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
    if (ZSTD_isError(rc)) throw codec_error(zstd_failure("setting the checksum flag", rc));

    // The output buffer is only as large as a worthwhile result: zstd stops
    // with dstSize_tooSmall as soon as it overflows, which is the cheap
    // "not worth it" answer for incompressible data.
    out.resize(max_stored);
    rc = ZSTD_compress2(cctx, out.data(), out.size(), plain.data(), plain.size());
    if (ZSTD_isError(rc)) {
      if (ZSTD_getErrorCode(rc) == ZSTD_error_dstSize_tooSmall) {
        out.clear();
        return false;
      }
      throw codec_error(
          zstd_failure("compressing a " + std::to_string(plain.size()) + "-byte chunk", rc));
    }
    out.resize(rc);
    return true;
  }

  std::string decode(std::string_view stored, std::size_t plain_size) const override {
    // Exactly one zstd frame, nothing before or after it. A skippable frame
    // or a second frame would otherwise decode "successfully".
    if (stored.size() < 4) {
      throw codec_error("zstd chunk is truncated (" + std::to_string(stored.size()) + " bytes)");
    }
    std::uint32_t magic = 0;
    std::memcpy(&magic, stored.data(), 4);  // little-endian on every target we build for
    if (magic != ZSTD_MAGICNUMBER) throw codec_error("zstd chunk has no zstd frame header");

    const std::size_t frame_size = ZSTD_findFrameCompressedSize(stored.data(), stored.size());
    if (ZSTD_isError(frame_size)) throw codec_error(zstd_failure("corrupt frame", frame_size));
    if (frame_size != stored.size()) {
      throw codec_error("zstd chunk has " + std::to_string(stored.size() - frame_size) +
                        " bytes after its frame");
    }

    const unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
    if (content == ZSTD_CONTENTSIZE_ERROR)
      throw codec_error("zstd chunk has a corrupt frame header");
    if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != plain_size) {
      throw codec_error("zstd chunk decodes to " + std::to_string(content) + " bytes, expected " +
                        std::to_string(plain_size));
    }

    // The destination is exactly plain_size: a frame that would produce more
    // fails with dstSize_tooSmall instead of growing anything.
    std::string out(plain_size, '\0');
    ZSTD_DCtx* dctx = thread_zstd_dctx();
    const std::size_t got =
        ZSTD_decompressDCtx(dctx, out.data(), out.size(), stored.data(), stored.size());
    if (ZSTD_isError(got)) throw codec_error(zstd_failure("corrupt chunk", got));
    check_decoded_size("zstd", got, plain_size);
    return out;
  }

  void apply_option(std::string_view key, std::string_view value,
                    codec_options& options) const override {
    if (key == "level") {
      const int level = parse_int_option(key, value);
      check_level(level);
      options.zstd_level = level;
    } else if (key == "min_savings") {
      options.min_savings = parse_min_savings("zstd", value);
    } else {
      throw codec_error("codec zstd has no option '" + std::string(key) + "'");
    }
  }

  std::string format_options(const codec_options& options) const override {
    std::string s = ":level=" + std::to_string(options.zstd_level);
    s += format_min_savings(options);
    return s;
  }
};

}  // namespace

std::unique_ptr<chunk_codec> make_zstd_codec() {
  return std::make_unique<zstd_codec>();
}

}  // namespace densefs::codec::detail
