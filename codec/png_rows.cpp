// PNG rows <-> lossless JPEG XL (png_rows.h). The filters PNG applies to
// each row (RFC 2083 section 6) are undone to get the samples, which JPEG
// XL's lossless mode stores in about 25-37% fewer bytes than the PNG's
// deflate (docs/codecs.md); the decoder applies the recorded filters again,
// which gives the filtered bytes back exactly because a PNG filter is a
// fixed function of the samples.
#include "codec/png_rows.h"

#include <jxl/decode.h>
#include <jxl/encode.h>
#include <zstd.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "codec/codec_impl.h"
#include "codec/isolated_call.h"

namespace densefs::codec::detail {
namespace {

// How the filter types are kept (packed byte 0). Frozen numbers.
enum class filter_coding : std::uint8_t {
  raw = 0,       // one byte per row
  one_type = 1,  // every row has the same filter: that one byte
  zstd = 2,      // a varint length, then a zstd frame of one byte per row
};

// JPEG XL is asked for images up to this many pixels (2048 x 2048), and a
// decoder refuses larger ones before it allocates: a forged header cannot
// make it try.
constexpr std::uint64_t k_max_pixels = std::uint64_t{4} << 20;
// Up to this many pixels (512 x 512) effort 9, the slowest and smallest,
// above it effort 7. Measured on 264 PNGs of a desktop suite (docs/codecs.md):
// effort 9 throughout saves 31.9% of their bytes in 85 s of CPU, effort 9 up
// to 64 Kpx and 8 above 28.2% in 58 s, effort 7 throughout 22.4% in 24 s:
// at effort 7 most icons no longer beat zstd. Encoding runs in the
// background re-encoder only; decoding costs about the same at every effort.
constexpr std::uint64_t k_max_pixels_effort_9 = std::uint64_t{1} << 18;
// Below this many, effort 7 too: libjxl 0.7 fails its own checks at effort 8
// and 9 on some images of a few pixels (26 of 784 small test images, none
// above 26 pixels), where effort cannot save much anyway.
constexpr std::uint64_t k_min_pixels_effort_9 = 64;
constexpr int k_filter_zstd_level = 19;
// An encoding that takes longer than this is given up (the largest images
// take about 10 s at effort 7 on the 2-core VM).
constexpr std::chrono::seconds k_encode_cpu_limit{120};

struct layout {
  unsigned channels = 0;          // samples per pixel
  bool alpha = false;             // the last channel is alpha
  unsigned sample_bytes = 0;      // in the pixel buffer: 1, or 2 (16-bit, big-endian)
  std::size_t row_bytes = 0;      // a filtered row without its filter byte
  std::size_t filter_unit = 0;    // bytes per complete pixel, at least 1
  std::uint64_t pixel_bytes = 0;  // the whole pixel buffer
};

std::optional<layout> layout_of(const png_image_header& h) {
  layout l;
  switch (h.color) {
    case 0:
    case 3:
      l.channels = 1;
      break;
    case 2:
      l.channels = 3;
      break;
    case 4:
      l.channels = 2;
      break;
    case 6:
      l.channels = 4;
      break;
    default:
      return std::nullopt;
  }
  // RFC 2083 section 4.1.1: the depths each colour type allows.
  const unsigned d = h.depth;
  const bool depth_ok = d == 8 || (d == 16 && h.color != 3) ||
                        ((d == 1 || d == 2 || d == 4) && (h.color == 0 || h.color == 3));
  if (!depth_ok || h.width == 0 || h.height == 0) return std::nullopt;
  l.alpha = h.color == 4 || h.color == 6;
  l.sample_bytes = d == 16 ? 2 : 1;
  const std::uint64_t row_bits = std::uint64_t{h.width} * l.channels * d;
  l.row_bytes = static_cast<std::size_t>((row_bits + 7) / 8);
  l.filter_unit = std::max<std::size_t>(1, l.channels * d / 8);
  // At most 2^64 / 2^3: width and height are 32-bit, channels times
  // sample bytes at most 8, so this cannot wrap.
  l.pixel_bytes = std::uint64_t{h.width} * h.height * l.channels * l.sample_bytes;
  return l;
}

std::uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return static_cast<std::uint8_t>(a);
  return static_cast<std::uint8_t>(pb <= pc ? b : c);
}

std::uint8_t predict(std::uint8_t filter, std::uint8_t a, std::uint8_t b, std::uint8_t c) {
  switch (filter) {
    case 1:
      return a;
    case 2:
      return b;
    case 3:
      return static_cast<std::uint8_t>((unsigned{a} + b) / 2);
    case 4:
      return paeth(a, b, c);
    default:
      return 0;
  }
}

// Applies (`unfilter` false) or undoes (true) the filter of every row:
// filtered[i] = raw[i] - predict(raw neighbours). `raw` holds the
// unfiltered rows back to back (no filter bytes) in both directions.
void run_filters(bool unfilter, const std::uint8_t* filters, const layout& l, std::uint32_t height,
                 std::uint8_t* filtered_rows, std::uint8_t* raw) {
  const std::vector<std::uint8_t> zero_row(l.row_bytes, 0);
  const std::size_t bpp = l.filter_unit;
  for (std::uint32_t y = 0; y < height; ++y) {
    std::uint8_t* f = filtered_rows + std::size_t{y} * (l.row_bytes + 1) + 1;
    std::uint8_t* cur = raw + std::size_t{y} * l.row_bytes;
    const std::uint8_t* prev = y == 0 ? zero_row.data() : cur - l.row_bytes;
    const std::uint8_t type = filters[y];
    for (std::size_t i = 0; i < l.row_bytes; ++i) {
      const std::uint8_t a = i >= bpp ? cur[i - bpp] : 0;
      const std::uint8_t c = i >= bpp ? prev[i - bpp] : 0;
      const std::uint8_t p = predict(type, a, prev[i], c);
      if (unfilter) {
        cur[i] = static_cast<std::uint8_t>(f[i] + p);
      } else {
        f[i] = static_cast<std::uint8_t>(cur[i] - p);
      }
    }
  }
}

// Rows of 1, 2 or 4-bit samples widened to a byte each (JPEG XL has no
// packed samples), and back. Widening fails when a row's padding bits are
// not zero: PNG leaves them unspecified, and they could not come back.
bool widen(const std::uint8_t* raw, const png_image_header& h, const layout& l,
           std::uint8_t* samples) {
  const unsigned d = h.depth;
  const unsigned mask = (1u << d) - 1;
  for (std::uint32_t y = 0; y < h.height; ++y) {
    const std::uint8_t* row = raw + std::size_t{y} * l.row_bytes;
    std::size_t bit = 0;
    for (std::uint32_t x = 0; x < h.width; ++x, bit += d) {
      *samples++ = static_cast<std::uint8_t>((row[bit / 8] >> (8 - d - bit % 8)) & mask);
    }
    if (bit % 8 != 0 && (row[bit / 8] & (0xffu >> (bit % 8))) != 0) return false;
  }
  return true;
}

// The inverse of widen; a sample above the depth's range is corrupt input.
void narrow(const std::uint8_t* samples, const png_image_header& h, const layout& l,
            std::uint8_t* raw) {
  const unsigned d = h.depth;
  for (std::uint32_t y = 0; y < h.height; ++y) {
    std::uint8_t* row = raw + std::size_t{y} * l.row_bytes;
    std::size_t bit = 0;
    for (std::uint32_t x = 0; x < h.width; ++x, bit += d) {
      const std::uint8_t s = *samples++;
      if (s >> d) throw codec_error("deflate: PNG rows: a sample above its bit depth");
      row[bit / 8] = static_cast<std::uint8_t>(row[bit / 8] | (s << (8 - d - bit % 8)));
    }
  }
}

JxlPixelFormat pixel_format(const layout& l) {
  return JxlPixelFormat{l.channels, l.sample_bytes == 2 ? JXL_TYPE_UINT16 : JXL_TYPE_UINT8,
                        JXL_BIG_ENDIAN, 0};
}

struct encoder_deleter {
  void operator()(JxlEncoder* e) const { JxlEncoderDestroy(e); }
};
struct decoder_deleter {
  void operator()(JxlDecoder* d) const { JxlDecoderDestroy(d); }
};

// A bare JPEG XL codestream of the samples, lossless; nothing when libjxl
// refuses them.
std::optional<std::string> jxl_encode(std::string_view samples, const png_image_header& h,
                                      const layout& l) {
  const std::unique_ptr<JxlEncoder, encoder_deleter> enc(JxlEncoderCreate(nullptr));
  if (!enc || JxlEncoderUseContainer(enc.get(), JXL_FALSE) != JXL_ENC_SUCCESS) return std::nullopt;
  JxlBasicInfo info;
  JxlEncoderInitBasicInfo(&info);
  info.xsize = h.width;
  info.ysize = h.height;
  info.bits_per_sample = l.sample_bytes * 8;
  info.exponent_bits_per_sample = 0;
  // The samples as they are, no colour conversion: what makes it lossless.
  info.uses_original_profile = JXL_TRUE;
  info.num_color_channels = l.channels >= 3 ? 3 : 1;
  if (l.alpha) {
    info.num_extra_channels = 1;
    info.alpha_bits = info.bits_per_sample;
    info.alpha_exponent_bits = 0;
  }
  if (JxlEncoderSetBasicInfo(enc.get(), &info) != JXL_ENC_SUCCESS) return std::nullopt;
  JxlColorEncoding colour;
  JxlColorEncodingSetToSRGB(&colour, info.num_color_channels == 1 ? JXL_TRUE : JXL_FALSE);
  if (JxlEncoderSetColorEncoding(enc.get(), &colour) != JXL_ENC_SUCCESS) return std::nullopt;
  JxlEncoderFrameSettings* frame = JxlEncoderFrameSettingsCreate(enc.get(), nullptr);
  const std::uint64_t pixels = std::uint64_t{h.width} * h.height;
  const int effort = pixels >= k_min_pixels_effort_9 && pixels <= k_max_pixels_effort_9 ? 9 : 7;
  if (!frame || JxlEncoderSetFrameLossless(frame, JXL_TRUE) != JXL_ENC_SUCCESS ||
      JxlEncoderFrameSettingsSetOption(frame, JXL_ENC_FRAME_SETTING_EFFORT, effort) !=
          JXL_ENC_SUCCESS ||
      // Colours under fully transparent pixels are bytes of the PNG too.
      JxlEncoderFrameSettingsSetOption(frame, JXL_ENC_FRAME_SETTING_KEEP_INVISIBLE, 1) !=
          JXL_ENC_SUCCESS) {
    return std::nullopt;
  }
  const JxlPixelFormat format = pixel_format(l);
  if (JxlEncoderAddImageFrame(frame, &format, samples.data(), samples.size()) != JXL_ENC_SUCCESS) {
    return std::nullopt;
  }
  JxlEncoderCloseInput(enc.get());
  std::string out(4096 + samples.size() / 4, '\0');
  std::size_t used = 0;
  while (true) {
    auto* next = reinterpret_cast<std::uint8_t*>(out.data()) + used;
    std::size_t avail = out.size() - used;
    const JxlEncoderStatus st = JxlEncoderProcessOutput(enc.get(), &next, &avail);
    used = static_cast<std::size_t>(next - reinterpret_cast<std::uint8_t*>(out.data()));
    if (st == JXL_ENC_SUCCESS) break;
    if (st != JXL_ENC_NEED_MORE_OUTPUT) return std::nullopt;
    out.resize(out.size() * 2);
  }
  out.resize(used);
  return out;
}

std::string jxl_decode(std::string_view code, const png_image_header& h, const layout& l) {
  const auto bad = [](const std::string& why) { return codec_error("deflate: PNG rows: " + why); };
  const std::unique_ptr<JxlDecoder, decoder_deleter> dec(JxlDecoderCreate(nullptr));
  if (!dec) throw bad("cannot create a JPEG XL decoder");
  if (JxlDecoderSubscribeEvents(dec.get(), JXL_DEC_BASIC_INFO | JXL_DEC_FULL_IMAGE) !=
          JXL_DEC_SUCCESS ||
      JxlDecoderSetKeepOrientation(dec.get(), JXL_TRUE) != JXL_DEC_SUCCESS ||
      JxlDecoderSetInput(dec.get(), reinterpret_cast<const std::uint8_t*>(code.data()),
                         code.size()) != JXL_DEC_SUCCESS) {
    throw bad("cannot set up the JPEG XL decoder");
  }
  JxlDecoderCloseInput(dec.get());
  const JxlPixelFormat format = pixel_format(l);
  std::string samples;
  bool have_image = false;
  while (true) {
    switch (JxlDecoderProcessInput(dec.get())) {
      case JXL_DEC_BASIC_INFO: {
        // Checked before the decoder allocates the image: its size must be
        // the one the payload's header (already bounded) says.
        JxlBasicInfo info;
        if (JxlDecoderGetBasicInfo(dec.get(), &info) != JXL_DEC_SUCCESS) throw bad("no basic info");
        const std::uint32_t colour = l.channels >= 3 ? 3 : 1;
        if (info.xsize != h.width || info.ysize != h.height || info.have_animation ||
            info.bits_per_sample != l.sample_bytes * 8 || info.num_color_channels != colour ||
            info.num_extra_channels != (l.alpha ? 1u : 0u)) {
          throw bad("the JPEG XL image is not the one the payload describes");
        }
        break;
      }
      case JXL_DEC_NEED_IMAGE_OUT_BUFFER: {
        std::size_t size = 0;
        if (have_image ||
            JxlDecoderImageOutBufferSize(dec.get(), &format, &size) != JXL_DEC_SUCCESS ||
            size != l.pixel_bytes) {
          throw bad("unexpected JPEG XL image buffer");
        }
        samples.assign(size, '\0');
        if (JxlDecoderSetImageOutBuffer(dec.get(), &format, samples.data(), samples.size()) !=
            JXL_DEC_SUCCESS) {
          throw bad("cannot set the JPEG XL image buffer");
        }
        break;
      }
      case JXL_DEC_FULL_IMAGE:
        have_image = true;
        break;
      case JXL_DEC_SUCCESS:
        if (!have_image) throw bad("the JPEG XL codestream has no image");
        return samples;
      default:
        throw bad("corrupt JPEG XL codestream");
    }
  }
}

std::string pack_filters(const std::string& filters) {
  std::string out;
  bool one = true;
  for (char f : filters) one = one && f == filters[0];
  if (one) {
    out.push_back(static_cast<char>(filter_coding::one_type));
    out.push_back(filters[0]);
    return out;
  }
  std::string frame(ZSTD_compressBound(filters.size()), '\0');
  const std::size_t n = ZSTD_compress(frame.data(), frame.size(), filters.data(), filters.size(),
                                      k_filter_zstd_level);
  if (!ZSTD_isError(n) && n < filters.size()) {
    out.push_back(static_cast<char>(filter_coding::zstd));
    put_varint(out, n);
    out.append(frame.data(), n);
  } else {
    out.push_back(static_cast<char>(filter_coding::raw));
    out.append(filters);
  }
  return out;
}

std::string unpack_filters(std::string_view& in, std::uint32_t height) {
  if (in.empty()) throw codec_error("deflate: PNG rows are truncated (no filter types)");
  const auto coding = static_cast<filter_coding>(in[0]);
  in.remove_prefix(1);
  std::string filters;
  switch (coding) {
    case filter_coding::one_type:
      if (in.empty()) throw codec_error("deflate: PNG rows are truncated (filter type)");
      filters.assign(height, in[0]);
      in.remove_prefix(1);
      break;
    case filter_coding::raw:
      if (in.size() < height) throw codec_error("deflate: PNG rows are truncated (filter types)");
      filters.assign(in.substr(0, height));
      in.remove_prefix(height);
      break;
    case filter_coding::zstd: {
      const std::uint64_t n = get_varint(in, "deflate: PNG rows");
      if (n > in.size()) throw codec_error("deflate: PNG rows are truncated (filter types)");
      filters.assign(height, '\0');
      const std::size_t got =
          ZSTD_decompressDCtx(thread_zstd_dctx(), filters.data(), filters.size(), in.data(), n);
      if (ZSTD_isError(got) || got != height) {
        throw codec_error("deflate: PNG rows: corrupt filter types");
      }
      in.remove_prefix(n);
      break;
    }
    default:
      throw codec_error("deflate: PNG rows: unknown filter coding " +
                        std::to_string(static_cast<unsigned>(coding)));
  }
  for (char f : filters) {
    if (static_cast<std::uint8_t>(f) > 4) throw codec_error("deflate: PNG rows: bad filter type");
  }
  return filters;
}

}  // namespace

std::optional<std::size_t> png_rows_size(const png_image_header& h, std::size_t max_rows) {
  const auto l = layout_of(h);
  // Row length times height, refused before it could wrap.
  if (!l || std::uint64_t{l->row_bytes} + 1 > max_rows / h.height) return std::nullopt;
  return static_cast<std::size_t>(std::uint64_t{h.height} * (l->row_bytes + 1));
}

std::optional<std::string> png_rows_encode(std::string_view rows, const png_image_header& h) {
  const auto l = layout_of(h);
  if (!l || rows.size() != png_rows_size(h, rows.size()) ||
      std::uint64_t{h.width} * h.height > k_max_pixels) {
    return std::nullopt;
  }
  std::string filters(h.height, '\0');
  for (std::uint32_t y = 0; y < h.height; ++y) {
    filters[y] = rows[std::size_t{y} * (l->row_bytes + 1)];
    if (static_cast<std::uint8_t>(filters[y]) > 4) return std::nullopt;
  }
  std::string raw(std::size_t{h.height} * l->row_bytes, '\0');
  // Unfiltering only reads the rows.
  run_filters(true, reinterpret_cast<const std::uint8_t*>(filters.data()), *l, h.height,
              const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(rows.data())),
              reinterpret_cast<std::uint8_t*>(raw.data()));
  std::string samples;
  if (h.depth < 8) {
    samples.assign(l->pixel_bytes, '\0');
    if (!widen(reinterpret_cast<const std::uint8_t*>(raw.data()), h, *l,
               reinterpret_cast<std::uint8_t*>(samples.data()))) {
      return std::nullopt;
    }
  } else {
    samples = std::move(raw);
  }
  // In a child process: libjxl's encoder stops the process on some images
  // (isolated_call.h).
  auto code = call_isolated([&] { return jxl_encode(samples, h, *l); }, k_encode_cpu_limit);
  if (!code) return std::nullopt;
  std::string packed = pack_filters(filters);
  packed.append(*code);
  if (packed.size() >= rows.size()) return std::nullopt;
  try {
    if (png_rows_decode(packed, h) != rows) return std::nullopt;
  } catch (const codec_error&) {
    return std::nullopt;
  }
  return packed;
}

std::string png_rows_decode(std::string_view packed, const png_image_header& h) {
  const auto l = layout_of(h);
  if (!l || std::uint64_t{h.width} * h.height > k_max_pixels) {
    throw codec_error("deflate: PNG rows of an image this build never packs (" +
                      std::to_string(h.width) + "x" + std::to_string(h.height) + ", depth " +
                      std::to_string(h.depth) + ", colour type " + std::to_string(h.color) + ")");
  }
  std::string_view in = packed;
  const std::string filters = unpack_filters(in, h.height);
  std::string samples = jxl_decode(in, h, *l);
  std::string raw;
  if (h.depth < 8) {
    raw.assign(std::size_t{h.height} * l->row_bytes, '\0');
    narrow(reinterpret_cast<const std::uint8_t*>(samples.data()), h, *l,
           reinterpret_cast<std::uint8_t*>(raw.data()));
  } else {
    raw = std::move(samples);
  }
  std::string rows(std::size_t{h.height} * (l->row_bytes + 1), '\0');
  for (std::uint32_t y = 0; y < h.height; ++y)
    rows[std::size_t{y} * (l->row_bytes + 1)] = filters[y];
  run_filters(false, reinterpret_cast<const std::uint8_t*>(filters.data()), *l, h.height,
              reinterpret_cast<std::uint8_t*>(rows.data()),
              reinterpret_cast<std::uint8_t*>(raw.data()));
  return rows;
}

}  // namespace densefs::codec::detail
