// Codec policy specs (mount option -o codec=..., mkfs --codec): user input.
// Properties: a spec parses or throws codec_error; what parses formats to a
// canonical spec that parses back to the same policy and formats the same.
// Also the codec spec grammar on its own (parse_codec_spec).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "codec/policy.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::codec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  try {
    const policy p = parse_policy(spec);
    const std::string canonical = format_policy(p);
    const policy again = parse_policy(canonical);
    FUZZ_CHECK(again == p);
    FUZZ_CHECK(format_policy(again) == canonical);
  } catch (const codec_error&) {
  }
  try {
    const codec_options o = parse_codec_spec(spec);
    const std::string canonical = format_codec_spec(o);
    FUZZ_CHECK(format_codec_spec(parse_codec_spec(canonical)) == canonical);
  } catch (const codec_error&) {
  }
  return 0;
}
