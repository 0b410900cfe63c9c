// One codec's decoders on untrusted stored bytes, through the codec registry
// (Lepton and Broccoli through the Rust C ABI in codec/rust). Built once per
// codec: FUZZ_CODEC is raw, zstd, broccoli or lepton (tests/fuzz/CMakeLists.txt).
//
// Input: 3 bytes of plain size (little-endian, at most one 4 MiB chunk),
// 3 bytes of a bound for decode_any_size, then the stored bytes.
// Properties: decode_chunk returns exactly plain_size bytes or throws
// codec_error; decode_any_size never returns more than its bound.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::codec;

namespace {

constexpr std::size_t k_max_chunk = 4u << 20;  // store/records.h k_chunk_size

std::size_t u24(const std::uint8_t* p) {
  return p[0] | (std::size_t{p[1]} << 8) | (std::size_t{p[2]} << 16);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 6) return 0;
  const std::size_t plain_size = u24(data) % (k_max_chunk + 1);
  const std::size_t bound = u24(data + 3) % (k_max_chunk + 1);
  const std::string_view stored(reinterpret_cast<const char*>(data) + 6, size - 6);
  try {
    const std::string plain = decode_chunk(codec_id::FUZZ_CODEC, stored, plain_size);
    FUZZ_CHECK(plain.size() == plain_size);
  } catch (const codec_error&) {
  }
  try {
    const std::string plain = decode_any_size(codec_id::FUZZ_CODEC, stored, bound);
    FUZZ_CHECK(plain.size() <= bound);
  } catch (const codec_error&) {
  }
  return 0;
}
