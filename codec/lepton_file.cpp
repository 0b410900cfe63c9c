// Lepton file and Lepton member payloads (codec/lepton_file.h). Layouts in
// docs/format.md, "Lepton file payloads"; all integers little-endian.
#include "codec/lepton_file.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "codec/codec_impl.h"
#include "codec/rust/rust_result.h"

namespace densefs::codec {
namespace {

constexpr std::string_view k_file_magic = "DLF\x01";    // "lepton file" payload
constexpr std::string_view k_member_magic = "DLM\x01";  // "lepton member" payload
// magic, version, name_size, reserved u16, chunk_size u32, file_size u64,
// file_checksum u64, chunk_count u32, reserved u32.
constexpr std::size_t k_file_header = 4 + 1 + 1 + 2 + 4 + 8 + 8 + 4 + 4;
// magic, version, name_size, reserved u16, index u32, plain_size u32.
constexpr std::size_t k_member_header = 4 + 1 + 1 + 2 + 4 + 4;

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, sizeof(T));
}

template <typename T>
T get(std::string_view in, std::size_t at) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(static_cast<std::uint8_t>(in[at + i])) << (8 * i);
  return v;
}

std::uint64_t chunk_count_for(std::uint64_t file_size, std::uint32_t chunk_size) {
  return (file_size + chunk_size - 1) / chunk_size;
}

std::uint64_t checksum(std::string_view s) {
  return XXH3_64bits(s.data(), s.size());
}

// The whole JPEG from a Lepton file, refusing to make more than max_out bytes.
std::string lepton_decode(std::string_view lepton, std::size_t max_out) {
  return detail::lepton_decode_any_size(lepton, max_out);
}

}  // namespace

std::uint32_t lepton_file_view::chunk_plain_size(std::size_t i) const {
  const std::uint64_t begin = std::uint64_t{chunk_size} * i;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(chunk_size, file_size - begin));
}

lepton_file_encoding encode_lepton_file(std::string_view jpeg, std::uint32_t chunk_size,
                                        std::span<const std::string> chunk_names,
                                        double min_savings) {
  if (chunk_size == 0) throw codec_error("lepton file: chunk size 0");
  if (jpeg.empty() || jpeg.size() > k_lepton_file_max_bytes) {
    throw codec_error("lepton file: a JPEG of " + std::to_string(jpeg.size()) + " bytes (1 to " +
                      std::to_string(k_lepton_file_max_bytes) + " allowed)");
  }
  if (chunk_names.size() != chunk_count_for(jpeg.size(), chunk_size) ||
      chunk_names.size() > k_lepton_file_max_chunks) {
    throw codec_error("lepton file: " + std::to_string(chunk_names.size()) + " chunk names for " +
                      std::to_string(jpeg.size()) + " bytes");
  }
  const std::size_t name_size = chunk_names.front().size();
  for (const std::string& n : chunk_names) {
    if (n.size() != name_size || name_size == 0 || name_size > 255)
      throw codec_error("lepton file: chunk names must all be 1 to 255 bytes, the same size");
  }

  lepton_file_encoding result;
  const detail::rust_result enc(densefs_rs_lepton_encode(detail::rust_bytes(jpeg), jpeg.size(),
                                                         detail::lepton_thread_count()));
  if (!enc.ok()) {
    result.refusal = enc.error();
    return result;
  }
  // lepton_jpeg can write a file that decodes to different bytes without an
  // error (FIELD-NOTES): decode and compare before admitting it.
  try {
    if (lepton_decode(enc.bytes(), jpeg.size()) != jpeg) {
      result.refusal = "lepton: the encoding does not decode to the JPEG";
      return result;
    }
  } catch (const codec_error& e) {
    result.refusal = std::string("lepton: the encoding does not decode: ") + e.what();
    return result;
  }

  std::string out;
  out.reserve(k_file_header + chunk_names.size() * name_size + enc.bytes().size());
  out.append(k_file_magic);
  put<std::uint8_t>(out, k_lepton_file_version);
  put<std::uint8_t>(out, static_cast<std::uint8_t>(name_size));
  put<std::uint16_t>(out, 0);
  put<std::uint32_t>(out, chunk_size);
  put<std::uint64_t>(out, jpeg.size());
  put<std::uint64_t>(out, checksum(jpeg));
  put<std::uint32_t>(out, static_cast<std::uint32_t>(chunk_names.size()));
  put<std::uint32_t>(out, 0);
  for (const std::string& n : chunk_names) out.append(n);
  out.append(enc.bytes());

  // The member payloads of the other chunks are small but not free: count
  // them so min_savings compares what the store will hold.
  const std::size_t members = (chunk_names.size() - 1) * (k_member_header + name_size);
  const double limit = static_cast<double>(jpeg.size()) * (1.0 - min_savings);
  if (static_cast<double>(out.size() + members) > limit) {
    result.refusal = "lepton: saves less than min_savings";
    return result;
  }
  result.payload = std::move(out);
  return result;
}

lepton_file_view parse_lepton_file(std::string_view p) {
  if (!is_lepton_file_payload(p)) throw codec_error("lepton file payload: bad magic");
  if (p.size() < k_file_header) throw codec_error("lepton file payload: truncated header");
  if (get<std::uint8_t>(p, 4) != k_lepton_file_version) {
    throw codec_error("lepton file payload: version " + std::to_string(get<std::uint8_t>(p, 4)) +
                      " (this build reads " + std::to_string(k_lepton_file_version) + ")");
  }
  lepton_file_view v;
  v.name_size = get<std::uint8_t>(p, 5);
  v.chunk_size = get<std::uint32_t>(p, 8);
  v.file_size = get<std::uint64_t>(p, 12);
  v.file_checksum = get<std::uint64_t>(p, 20);
  const std::uint32_t count = get<std::uint32_t>(p, 28);
  if (get<std::uint16_t>(p, 6) != 0 || get<std::uint32_t>(p, 32) != 0)
    throw codec_error("lepton file payload: reserved bytes set");
  if (v.name_size == 0 || v.chunk_size == 0 || v.file_size == 0 ||
      v.file_size > k_lepton_file_max_bytes || count > k_lepton_file_max_chunks ||
      count != chunk_count_for(v.file_size, v.chunk_size)) {
    throw codec_error("lepton file payload: inconsistent sizes");
  }
  const std::size_t names_end = k_file_header + std::size_t{count} * v.name_size;
  if (p.size() <= names_end) throw codec_error("lepton file payload: truncated");
  v.chunk_names.reserve(count);
  for (std::size_t i = 0; i < count; ++i)
    v.chunk_names.push_back(p.substr(k_file_header + i * v.name_size, v.name_size));
  v.lepton = p.substr(names_end);
  return v;
}

std::string decode_lepton_file(const lepton_file_view& file) {
  std::string jpeg = lepton_decode(file.lepton, file.file_size);
  if (jpeg.size() != file.file_size) {
    throw codec_error("lepton file decoded to " + std::to_string(jpeg.size()) +
                      " bytes, expected " + std::to_string(file.file_size));
  }
  if (checksum(jpeg) != file.file_checksum)
    throw codec_error("lepton file: the decoded JPEG does not match its checksum");
  return jpeg;
}

std::string_view lepton_file_chunk(const lepton_file_view& file, std::string_view decoded,
                                   std::size_t i) {
  if (i >= file.chunk_count() || decoded.size() != file.file_size)
    throw codec_error("lepton file: no chunk " + std::to_string(i));
  return decoded.substr(std::size_t{file.chunk_size} * i, file.chunk_plain_size(i));
}

std::string encode_lepton_member(const lepton_member& m) {
  if (m.first_chunk.empty() || m.first_chunk.size() > 255 || m.index == 0 || m.plain_size == 0)
    throw codec_error("lepton member: bad arguments");
  std::string out;
  out.append(k_member_magic);
  put<std::uint8_t>(out, k_lepton_file_version);
  put<std::uint8_t>(out, static_cast<std::uint8_t>(m.first_chunk.size()));
  put<std::uint16_t>(out, 0);
  put<std::uint32_t>(out, m.index);
  put<std::uint32_t>(out, m.plain_size);
  out.append(m.first_chunk);
  return out;
}

lepton_member parse_lepton_member(std::string_view p) {
  if (!is_lepton_member_payload(p)) throw codec_error("lepton member payload: bad magic");
  if (p.size() < k_member_header) throw codec_error("lepton member payload: truncated header");
  if (get<std::uint8_t>(p, 4) != k_lepton_file_version) {
    throw codec_error("lepton member payload: version " + std::to_string(get<std::uint8_t>(p, 4)));
  }
  const std::size_t name_size = get<std::uint8_t>(p, 5);
  lepton_member m;
  m.index = get<std::uint32_t>(p, 8);
  m.plain_size = get<std::uint32_t>(p, 12);
  if (get<std::uint16_t>(p, 6) != 0 || name_size == 0 || m.index == 0 || m.plain_size == 0 ||
      p.size() != k_member_header + name_size) {
    throw codec_error("lepton member payload: inconsistent sizes");
  }
  m.first_chunk = std::string(p.substr(k_member_header));
  return m;
}

bool is_lepton_file_payload(std::string_view stored) {
  return stored.starts_with(k_file_magic);
}

bool is_lepton_member_payload(std::string_view stored) {
  return stored.starts_with(k_member_magic);
}

}  // namespace densefs::codec

namespace densefs::codec::detail {
namespace {

// The registry entries of the two payload kinds: names for records, stats
// and errors, and a decoder for what can be decoded alone. The store makes
// these payloads per file (encode_lepton_file), never per chunk.
class lepton_file_codec_base : public chunk_codec {
 public:
  bool encode(std::string_view, const codec_options&, std::size_t, std::string&) const override {
    throw codec_error(std::string(name()) + " payloads are made per JPEG by the store");
  }
  void apply_option(std::string_view key, std::string_view, codec_options&) const override {
    throw codec_error("codec " + std::string(name()) + " has no option '" + std::string(key) + "'");
  }
  std::string format_options(const codec_options&) const override { return {}; }
};

class lepton_file_codec final : public lepton_file_codec_base {
 public:
  codec_id id() const override { return codec_id::lepton_file; }
  std::string_view name() const override { return "lepton_file"; }
  // The first chunk alone: the whole JPEG is decoded and checked, chunk 0
  // returned. (The store's read path also publishes the other chunks.)
  std::string decode(std::string_view stored, std::size_t plain_size) const override {
    const lepton_file_view f = parse_lepton_file(stored);
    if (f.chunk_plain_size(0) != plain_size) {
      throw codec_error("lepton file: first chunk is " + std::to_string(f.chunk_plain_size(0)) +
                        " bytes, expected " + std::to_string(plain_size));
    }
    const std::string jpeg = decode_lepton_file(f);
    return std::string(lepton_file_chunk(f, jpeg, 0));
  }
};

class lepton_member_codec final : public lepton_file_codec_base {
 public:
  codec_id id() const override { return codec_id::lepton_member; }
  std::string_view name() const override { return "lepton_member"; }
  std::string decode(std::string_view stored, std::size_t) const override {
    parse_lepton_member(stored);  // a damaged member says so first
    throw codec_error("a lepton member decodes only through its first chunk (the store's read)");
  }
};

}  // namespace

std::unique_ptr<chunk_codec> make_lepton_file_codec() {
  return std::make_unique<lepton_file_codec>();
}
std::unique_ptr<chunk_codec> make_lepton_member_codec() {
  return std::make_unique<lepton_member_codec>();
}

}  // namespace densefs::codec::detail
