// Lepton file and member payloads (codec/lepton_file.h) on untrusted bytes.
// Input: the stored bytes of either kind. Properties: parsing throws
// codec_error or gives a view whose names and Lepton file lie inside the
// payload; decoding gives exactly file_size bytes whose chunks have the
// declared sizes, or throws codec_error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "codec/lepton_file.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::codec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view stored(reinterpret_cast<const char*>(data), size);
  try {
    const lepton_member m = parse_lepton_member(stored);
    FUZZ_CHECK(m.index > 0 && m.plain_size > 0 && !m.first_chunk.empty());
    FUZZ_CHECK(encode_lepton_member(m) == stored);
  } catch (const codec_error&) {
  }
  try {
    const lepton_file_view v = parse_lepton_file(stored);
    FUZZ_CHECK(v.file_size <= k_lepton_file_max_bytes && !v.lepton.empty());
    FUZZ_CHECK(v.lepton.data() + v.lepton.size() == stored.data() + stored.size());
    const std::string jpeg = decode_lepton_file(v);
    FUZZ_CHECK(jpeg.size() == v.file_size);
    std::size_t total = 0;
    for (std::size_t i = 0; i < v.chunk_count(); ++i) total += lepton_file_chunk(v, jpeg, i).size();
    FUZZ_CHECK(total == jpeg.size());
  } catch (const codec_error&) {
  }
  return 0;
}
