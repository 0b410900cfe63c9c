// Chunker specs (mount option -o codec=...+CHUNKER, czip --chunker): user
// input. Input: the spec, a NUL byte, then data to cut with it.
// Properties: a spec parses or throws codec_error; what parses formats to a
// canonical spec that parses back equal; the cuts obey the spec (ascending,
// ending at the data's size, within the sizes), and the streaming CDC cuts
// the same data, fed in pieces, at the same places.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/chunker.h"
#include "codec/codec.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::codec;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view bytes = nul == std::string_view::npos ? "" : input.substr(nul + 1);

  chunker_spec spec;
  try {
    spec = parse_chunker_spec(text);
  } catch (const codec_error&) {
    return 0;
  }
  const std::string canonical = format_chunker_spec(spec);
  FUZZ_CHECK(parse_chunker_spec(canonical) == spec);
  FUZZ_CHECK(format_chunker_spec(parse_chunker_spec(canonical)) == canonical);
  if (spec.how == chunker_spec::kind::cdc) {
    FUZZ_CHECK(parse_cdc_spec(format_cdc_spec(spec.cdc)) == spec.cdc);
  }

  const std::vector<std::size_t> ends = chunk_ends(bytes, spec);
  FUZZ_CHECK(bytes.empty() == ends.empty());
  if (!ends.empty()) FUZZ_CHECK(ends.back() == bytes.size());
  const std::size_t max =
      spec.how == chunker_spec::kind::fixed ? spec.fixed_size : spec.cdc.max_size;
  std::size_t start = 0;
  for (std::size_t i = 0; i < ends.size(); ++i) {
    FUZZ_CHECK(ends[i] > start);
    FUZZ_CHECK(ends[i] - start <= max);
    if (spec.how == chunker_spec::kind::cdc && i + 1 < ends.size())
      FUZZ_CHECK(ends[i] - start >= spec.cdc.min_size);
    start = ends[i];
  }

  if (spec.how == chunker_spec::kind::cdc) {
    // The streaming chunker over pieces of 1, 2, 3, ... bytes.
    cdc_chunker c(spec.cdc);
    std::vector<std::size_t> streamed;
    std::size_t offset = 0;
    std::string_view rest = bytes;
    for (std::size_t piece_size = 1; !rest.empty(); ++piece_size) {
      std::string_view piece = rest.substr(0, piece_size);
      rest.remove_prefix(piece.size());
      while (auto n = c.feed(piece)) {
        offset += *n;
        streamed.push_back(offset);
        piece.remove_prefix(*n);
      }
      offset += piece.size();
    }
    if (auto last = c.finish())
      streamed.push_back(streamed.empty() ? *last : streamed.back() + *last);
    FUZZ_CHECK(streamed == ends);
  }
  return 0;
}
