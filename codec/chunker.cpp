// FastCDC-style content-defined chunking, version 1 (k_cdc_version).
//
// Frozen parts (changing any of them changes boundaries, so it is a new
// version): the gear table (splitmix64 from k_gear_seed), the hash update
// h = (h << 1) + gear[byte] starting from 0 at min_size, the masks (the
// log2(avg) + 2 and log2(avg) - 2 bits just below the top bit), the switch
// from the small to the large mask at avg_size, and the forced cut at
// max_size. docs/chunking.md explains each choice.
#include "codec/chunker.h"

#include <algorithm>
#include <bit>
#include <charconv>

#include "codec/codec.h"
#include "codec/codec_impl.h"

namespace densefs::codec {
namespace {

// "densefs1" in ASCII: the seed of the version-1 gear table.
constexpr std::uint64_t k_gear_seed = 0x64656e7365667331;

// splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed, public-domain
// generator, so anyone can regenerate the table from the seed.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

constexpr std::array<std::uint64_t, 256> make_gear_table() {
  std::array<std::uint64_t, 256> t{};
  std::uint64_t state = k_gear_seed;
  for (auto& v : t) v = splitmix64(state);
  return t;
}

constexpr std::array<std::uint64_t, 256> k_gear = make_gear_table();

// k_gear shifted left once, for the two-bytes-per-step loop in scan().
constexpr std::array<std::uint64_t, 256> make_gear_shifted() {
  std::array<std::uint64_t, 256> t{};
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = k_gear[i] << 1;
  return t;
}

constexpr std::array<std::uint64_t, 256> k_gear_shifted = make_gear_shifted();

// `bits` ones ending just below bit 63. With h = (h << 1) + gear[b], bit k of
// h depends on the last k + 1 bytes only, so high bits see the widest window
// (bit 62: 63 bytes). Bit 63 is left out so that mask << 1 still fits, which
// keeps the two-bytes-per-step loop below exact.
constexpr std::uint64_t mask_of(unsigned bits) {
  return ((std::uint64_t{1} << bits) - 1) << (63 - bits);
}

// Scans p[i, end) with mask `m`, continuing hash `h`. Returns the offset just
// after the first byte where (h & m) == 0, or `end` with found == false.
//
// Two bytes per step (FastCDC 2020's "rolling two bytes"): with
// k_gear_shifted[b] = gear[b] << 1, the hash after byte p[i] shifted left once is
// (h << 2) + g2[p[i]], so testing it against m << 1 is testing the hash
// after p[i] against m. The dependency chain is then three operations per
// two bytes instead of four.
inline std::size_t scan(const unsigned char* p, std::size_t i, std::size_t end, std::uint64_t& h,
                        std::uint64_t m, bool& found) {
  const std::uint64_t m2 = m << 1;
  std::uint64_t x = h;
  for (; i + 2 <= end; i += 2) {
    const std::uint64_t y = (x << 2) + k_gear_shifted[p[i]];
    if ((y & m2) == 0) {
      h = (x << 1) + k_gear[p[i]];
      found = true;
      return i + 1;
    }
    x = y + k_gear[p[i + 1]];
    if ((x & m) == 0) {
      h = x;
      found = true;
      return i + 2;
    }
  }
  if (i < end) {
    x = (x << 1) + k_gear[p[i]];
    ++i;
    if ((x & m) == 0) {
      h = x;
      found = true;
      return i;
    }
  }
  h = x;
  found = false;
  return end;
}

bool is_power_of_two(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

std::string size_text(std::size_t v) {
  if (v != 0 && v % (std::size_t{1} << 20) == 0) return std::to_string(v >> 20) + "M";
  if (v != 0 && v % (std::size_t{1} << 10) == 0) return std::to_string(v >> 10) + "K";
  return std::to_string(v);
}

std::size_t parse_size(std::string_view key, std::string_view value) {
  std::size_t v = 0;
  const char* const first = value.data();
  const char* const last = value.data() + value.size();
  const auto [end, ec] = std::from_chars(first, last, v);
  std::size_t shift = 0;
  if (end + 1 == last && (*end == 'K' || *end == 'k')) shift = 10;
  if (end + 1 == last && (*end == 'M' || *end == 'm')) shift = 20;
  const bool suffix_ok = end == last || shift != 0;
  if (value.empty() || end == first || ec != std::errc{} || !suffix_ok ||
      v > (std::size_t{1} << 40)) {
    throw codec_error("option " + std::string(key) + "=" + std::string(value) +
                      " is not a size (bytes, or a number with K or M)");
  }
  return v << shift;
}

}  // namespace

void validate(const cdc_options& o) {
  const auto bad = [](const char* key, std::size_t v, const std::string& why) {
    throw codec_error("cdc " + std::string(key) + "=" + std::to_string(v) + " " + why);
  };
  if (o.min_size < k_cdc_min_chunk) {
    bad("min", o.min_size, "is below " + std::to_string(k_cdc_min_chunk) + " bytes");
  }
  if (!is_power_of_two(o.avg_size)) bad("avg", o.avg_size, "is not a power of two");
  if (o.avg_size <= o.min_size) {
    bad("avg", o.avg_size, "is not above min=" + std::to_string(o.min_size));
  }
  if (o.max_size <= o.avg_size) {
    bad("max", o.max_size, "is not above avg=" + std::to_string(o.avg_size));
  }
  if (o.max_size > k_cdc_max_chunk) {
    bad("max", o.max_size, "is above " + std::to_string(k_cdc_max_chunk) + " bytes (4M)");
  }
}

// Same ':'-separated KEY=VALUE grammar as parse_codec_spec (for_each_spec_option),
// so a chunker spec can travel inside comma-separated mount options.
cdc_options parse_cdc_spec(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name != "cdc") {
    throw codec_error("unknown chunker '" + std::string(name) + "' in chunker spec '" +
                      std::string(spec) + "' (expected cdc)");
  }
  cdc_options o;
  detail::for_each_spec_option(spec, "chunker", [&](std::string_view key, std::string_view value) {
    if (key == "min") {
      o.min_size = parse_size(key, value);
    } else if (key == "avg") {
      o.avg_size = parse_size(key, value);
    } else if (key == "max") {
      o.max_size = parse_size(key, value);
    } else {
      throw codec_error("unknown option '" + std::string(key) + "' in chunker spec '" +
                        std::string(spec) + "' (cdc takes min, avg, max)");
    }
  });
  validate(o);
  return o;
}

std::string format_cdc_spec(const cdc_options& o) {
  return "cdc:min=" + size_text(o.min_size) + ":avg=" + size_text(o.avg_size) +
         ":max=" + size_text(o.max_size);
}

const std::array<std::uint64_t, 256>& cdc_gear_table() {
  return k_gear;
}

cdc_chunker::cdc_chunker(const cdc_options& options) : options_(options) {
  validate(options_);
  // Normalized chunking, level 2: 2 bits stricter than log2(avg) below avg,
  // 2 bits looser from avg on, which pulls chunk sizes towards avg.
  const auto avg_bits = static_cast<unsigned>(std::countr_zero(options_.avg_size));
  mask_small_ = mask_of(avg_bits + 2);
  mask_large_ = mask_of(avg_bits - 2);
}

std::optional<std::size_t> cdc_chunker::feed(std::string_view data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const std::size_t n = data.size();
  std::size_t i = 0;
  // Cut-point skipping: the first min_size bytes are neither hashed nor cut.
  if (pos_ < options_.min_size) {
    const std::size_t skip = std::min(n, options_.min_size - pos_);
    i = skip;
    pos_ += skip;
    if (pos_ < options_.min_size) return std::nullopt;
  }
  bool found = false;
  if (pos_ < options_.avg_size) {
    const std::size_t end = i + std::min(n - i, options_.avg_size - pos_);
    const std::size_t j = scan(p, i, end, hash_, mask_small_, found);
    pos_ += j - i;
    i = j;
    if (!found && pos_ < options_.avg_size) return std::nullopt;
  }
  if (!found) {
    const std::size_t end = i + std::min(n - i, options_.max_size - pos_);
    const std::size_t j = scan(p, i, end, hash_, mask_large_, found);
    pos_ += j - i;
    i = j;
    if (!found && pos_ < options_.max_size) return std::nullopt;
  }
  // A content boundary, or max_size reached.
  pos_ = 0;
  hash_ = 0;
  return i;
}

std::optional<std::size_t> cdc_chunker::finish() {
  const std::size_t last = pos_;
  pos_ = 0;
  hash_ = 0;
  if (last == 0) return std::nullopt;
  return last;
}

std::vector<std::size_t> cut_points(std::string_view data, const cdc_options& options) {
  return chunk_ends(data, chunker_spec::content_defined(options));
}

chunker_spec parse_chunker_spec(std::string_view spec) {
  const std::string_view name = spec.substr(0, spec.find(':'));
  if (name == "cdc") return chunker_spec::content_defined(parse_cdc_spec(spec));
  if (name != "fixed") {
    throw codec_error("unknown chunker '" + std::string(name) + "' in chunker spec '" +
                      std::string(spec) + "' (expected fixed or cdc)");
  }
  chunker_spec c = chunker_spec::fixed();
  if (name.size() == spec.size()) return c;
  const std::string_view option = spec.substr(name.size() + 1);
  if (!option.starts_with("size=")) {
    throw codec_error("bad option '" + std::string(option) + "' in chunker spec '" +
                      std::string(spec) + "' (fixed takes size=SIZE)");
  }
  c.fixed_size = parse_size("size", option.substr(5));
  if (c.fixed_size < k_cdc_min_chunk || c.fixed_size > k_cdc_max_chunk) {
    throw codec_error("fixed size=" + std::string(option.substr(5)) + " is outside " +
                      std::to_string(k_cdc_min_chunk) + " bytes .. 4M");
  }
  return c;
}

std::string format_chunker_spec(const chunker_spec& spec) {
  if (spec.how == chunker_spec::kind::cdc) return format_cdc_spec(spec.cdc);
  if (spec.fixed_size == k_cdc_max_chunk) return "fixed";
  return "fixed:size=" + size_text(spec.fixed_size);
}

std::size_t chunk_context_bytes(const chunker_spec& spec) {
  return spec.how == chunker_spec::kind::cdc ? std::min(2 * spec.cdc.max_size, k_cdc_max_chunk) : 0;
}

std::vector<std::size_t> chunk_ends(std::string_view data, const chunker_spec& spec,
                                    std::string_view before) {
  if (spec.how == chunker_spec::kind::cdc) {
    // Run the chunker over the context first; its state at data's start is
    // then the stream's (a cut resets it, so only the bytes since the last
    // cut in `before` matter).
    before = before.substr(before.size() - std::min(before.size(), chunk_context_bytes(spec)));
    cdc_chunker c(spec.cdc);
    while (!before.empty()) {
      const auto n = c.feed(before);
      if (!n) break;
      before.remove_prefix(*n);
    }
    std::vector<std::size_t> cuts;
    cuts.reserve(data.size() / spec.cdc.avg_size + 1);
    std::size_t offset = 0;
    while (offset < data.size()) {
      const auto n = c.feed(data.substr(offset));
      if (!n) break;
      offset += *n;
      cuts.push_back(offset);
    }
    if (offset < data.size()) cuts.push_back(data.size());
    return cuts;
  }
  std::vector<std::size_t> ends;
  for (std::size_t end = spec.fixed_size; end < data.size(); end += spec.fixed_size)
    ends.push_back(end);
  if (!data.empty()) ends.push_back(data.size());
  return ends;
}

}  // namespace densefs::codec
