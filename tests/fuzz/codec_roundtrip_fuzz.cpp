// One codec's encoder and decoder: encode -> decode == input, through the
// codec registry. Built once per codec: FUZZ_CODEC is raw, zstd, broccoli or
// lepton (tests/fuzz/CMakeLists.txt).
//
// Input: 3 option bytes (zstd level, brotli quality and window, whether the
// "not worth it" guard applies), then the plain chunk. For broccoli, the
// chunk is also cut in two, both halves encoded and joined with
// concat_broccoli, which must decode to the whole.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::codec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  codec_options o;
  o.preferred = codec_id::FUZZ_CODEC;
  o.zstd_level = data[0] % 23 - 3;        // -3 .. 19
  o.broccoli_quality = data[1] % 12;      // 0 .. 11
  o.broccoli_window = 10 + data[2] % 15;  // 10 .. 24
  o.min_savings = (data[2] & 0x80) ? 0.0 : 0.03;
  const std::string_view plain(reinterpret_cast<const char*>(data) + 3, size - 3);

  const encoded_chunk e = encode_chunk(plain, o);
  // The preferred codec, raw ("not worth it"), or zstd after a fallback.
  FUZZ_CHECK(e.codec == o.preferred || e.codec == codec_id::raw ||
             (e.fell_back_from && e.codec == codec_id::zstd));
  // Brotli takes any input: a Broccoli encoding that fails its verification
  // is an encoder bug the fallback would hide.
  if (codec_id::FUZZ_CODEC == codec_id::broccoli) FUZZ_CHECK(!e.fell_back_from);
  FUZZ_CHECK(decode_chunk(e.codec, e.bytes, plain.size()) == plain);
  FUZZ_CHECK(decode_any_size(e.codec, e.bytes, plain.size()) == plain);

  if (codec_id::FUZZ_CODEC == codec_id::broccoli && plain.size() >= 2) {
    const std::size_t cut = data[0] % plain.size();
    o.min_savings = -1.0;  // always broccoli: concat needs broccoli pieces
    const encoded_chunk a = encode_chunk(plain.substr(0, cut), o);
    const encoded_chunk b = encode_chunk(plain.substr(cut), o);
    if (a.codec == codec_id::broccoli && b.codec == codec_id::broccoli) {
      const std::string joined = concat_broccoli({a.bytes, b.bytes});
      FUZZ_CHECK(decode_any_size(codec_id::broccoli, joined, plain.size()) == plain);
    }
  }
  return 0;
}
