#include "codec/czip.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace densefs::codec::czip {
namespace {

// Header field offsets: docs/format.md, "Fixed header".
constexpr std::size_t k_off_version = 8;
constexpr std::size_t k_off_flags = 10;
constexpr std::size_t k_off_header_size = 12;
constexpr std::size_t k_off_original_size = 16;
constexpr std::size_t k_off_czip_size = 24;
constexpr std::size_t k_off_chunk_count = 32;
constexpr std::size_t k_off_array_offset = 40;
constexpr std::size_t k_off_array_size = 48;
constexpr std::size_t k_off_hash_format = 56;
constexpr std::size_t k_off_hash_size = 57;
constexpr std::size_t k_off_codec = 58;
constexpr std::size_t k_off_encryption = 59;
constexpr std::size_t k_off_chunker = 60;
constexpr std::size_t k_off_chunker_min = 64;
constexpr std::size_t k_off_chunker_avg = 68;
constexpr std::size_t k_off_chunker_max = 72;
constexpr std::size_t k_off_scrypt_log2_n = 76;
constexpr std::size_t k_off_scrypt_r = 77;
constexpr std::size_t k_off_scrypt_p = 78;
constexpr std::size_t k_off_salt = 80;
constexpr std::size_t k_off_unique_chunks = 96;
constexpr std::size_t k_off_payload_size = 104;
constexpr std::size_t k_off_original_hash = 112;
constexpr std::size_t k_off_czip_hash = 144;
constexpr std::size_t k_off_array_hash = 176;
constexpr std::size_t k_off_crc = 252;

constexpr std::uint16_t k_flag_footer = 1;
// Header byte 60 (docs/format.md): how the chunks were cut.
constexpr std::uint8_t k_chunker_fixed = 0;
constexpr std::uint8_t k_chunker_cdc = 1;
constexpr std::uint8_t k_chunker_source = 2;
constexpr std::uint8_t k_hash_format_sha256 = 1;

// Chunk array entry field offsets: docs/format.md, "Chunk array".
constexpr std::size_t k_entry_original_offset = 0;
constexpr std::size_t k_entry_czip_offset = 8;
constexpr std::size_t k_entry_original_size = 16;
constexpr std::size_t k_entry_stored_size = 20;
constexpr std::size_t k_entry_codec = 24;
constexpr std::size_t k_entry_plain_hash = 32;
constexpr std::size_t k_entry_stored_hash = 64;

// A stored chunk is never larger than its plain bytes (encode_chunk stores
// raw when a codec does not shrink) plus the encryption overhead; the slack
// leaves room for codecs that cannot promise that.
constexpr std::size_t k_max_stored_size = k_max_chunk_size + 64 * 1024;

constexpr std::string_view k_array_aad_prefix = "densefs czip v1 chunk array";

// Pieces read when hashing the czip body in verify().
constexpr std::size_t k_scan_piece = std::size_t{1} << 20;

void put_le(std::string& buf, std::size_t offset, std::uint64_t value, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) buf[offset + i] = static_cast<char>(value >> (8 * i));
}

std::uint64_t get_le(std::string_view buf, std::size_t offset, std::size_t size) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < size; ++i)
    v |= std::uint64_t{static_cast<unsigned char>(buf[offset + i])} << (8 * i);
  return v;
}

void put_digest(std::string& buf, std::size_t offset, const sha256_digest& d) {
  std::memcpy(buf.data() + offset, d.data(), d.size());
}

sha256_digest get_digest(std::string_view buf, std::size_t offset) {
  sha256_digest d;
  std::memcpy(d.data(), buf.data() + offset, d.size());
  return d;
}

// CRC-32 (IEEE 802.3, reflected, as zlib's crc32()), so anyone can check a
// header with a stock tool.
std::uint32_t crc32(std::string_view bytes) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (char ch : bytes) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string chunk_name(std::size_t index, const chunk_entry& e) {
  return "chunk " + std::to_string(index) + " (original offset " +
         std::to_string(e.original_offset) + ")";
}

std::string encode_entries(const std::vector<chunk_entry>& entries) {
  std::string out(entries.size() * k_entry_size, '\0');
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const chunk_entry& e = entries[i];
    const std::size_t base = i * k_entry_size;
    put_le(out, base + k_entry_original_offset, e.original_offset, 8);
    put_le(out, base + k_entry_czip_offset, e.czip_offset, 8);
    put_le(out, base + k_entry_original_size, e.original_size, 4);
    put_le(out, base + k_entry_stored_size, e.stored_size, 4);
    out[base + k_entry_codec] = static_cast<char>(e.codec);
    put_digest(out, base + k_entry_plain_hash, e.plain_hash);
    put_digest(out, base + k_entry_stored_hash, e.stored_hash);
  }
  return out;
}

}  // namespace

// --- chunker -----------------------------------------------------------------

std::string chunker_name(const std::optional<chunker_spec>& chunker) {
  return chunker ? format_chunker_spec(*chunker) : "source";
}

// --- header --------------------------------------------------------------------

std::string encode_header(const header& h) {
  std::string out(k_header_size, '\0');
  std::memcpy(out.data(), k_magic.data(), k_magic.size());
  put_le(out, k_off_version, k_version, 2);
  put_le(out, k_off_flags, h.footer ? k_flag_footer : 0, 2);
  put_le(out, k_off_header_size, k_header_size, 4);
  put_le(out, k_off_original_size, h.original_size, 8);
  put_le(out, k_off_czip_size, h.czip_size, 8);
  put_le(out, k_off_chunk_count, h.chunk_count, 8);
  put_le(out, k_off_array_offset, h.chunk_array_offset, 8);
  put_le(out, k_off_array_size, h.chunk_array_size, 8);
  out[k_off_hash_format] = static_cast<char>(k_hash_format_sha256);
  out[k_off_hash_size] = static_cast<char>(k_hash_size);
  out[k_off_codec] = static_cast<char>(h.codec);
  out[k_off_encryption] = static_cast<char>(h.encryption);
  if (!h.chunker) {
    out[k_off_chunker] = static_cast<char>(k_chunker_source);  // sizes stay 0
  } else if (h.chunker->how == chunker_spec::kind::fixed) {
    out[k_off_chunker] = static_cast<char>(k_chunker_fixed);
    for (const std::size_t off : {k_off_chunker_min, k_off_chunker_avg, k_off_chunker_max})
      put_le(out, off, h.chunker->fixed_size, 4);
  } else {
    out[k_off_chunker] = static_cast<char>(k_chunker_cdc);
    put_le(out, k_off_chunker_min, h.chunker->cdc.min_size, 4);
    put_le(out, k_off_chunker_avg, h.chunker->cdc.avg_size, 4);
    put_le(out, k_off_chunker_max, h.chunker->cdc.max_size, 4);
  }
  out[k_off_scrypt_log2_n] = static_cast<char>(h.scrypt.log2_n);
  out[k_off_scrypt_r] = static_cast<char>(h.scrypt.r);
  out[k_off_scrypt_p] = static_cast<char>(h.scrypt.p);
  std::memcpy(out.data() + k_off_salt, h.salt.data(), h.salt.size());
  put_le(out, k_off_unique_chunks, h.unique_chunk_count, 8);
  put_le(out, k_off_payload_size, h.payload_size, 8);
  put_digest(out, k_off_original_hash, h.original_hash);
  put_digest(out, k_off_czip_hash, h.czip_hash);
  put_digest(out, k_off_array_hash, h.chunk_array_hash);
  put_le(out, k_off_crc, crc32(std::string_view(out).substr(0, k_off_crc)), 4);
  return out;
}

header decode_header(std::string_view bytes) {
  if (bytes.size() < k_header_size) throw czip_error("truncated header");
  if (bytes.substr(0, k_magic.size()) != k_magic) throw czip_error("not a czip file (bad magic)");
  const auto version = get_le(bytes, k_off_version, 2);
  if (version > k_version)
    throw czip_error("CZIP version " + std::to_string(version) +
                     " is newer than this densefs reads (" + std::to_string(k_version) + ")");
  if (version == 0) throw czip_error("bad CZIP version 0");
  const auto stored_crc = static_cast<std::uint32_t>(get_le(bytes, k_off_crc, 4));
  if (stored_crc != crc32(bytes.substr(0, k_off_crc)))
    throw czip_error("header CRC mismatch (corrupt header)");
  // From here on the header is as written; what follows catches writers
  // that disagree with this reader, not bit rot.
  const auto flags = get_le(bytes, k_off_flags, 2);
  if ((flags & ~std::uint64_t{k_flag_footer}) != 0)
    throw czip_error("unknown header flags " + std::to_string(flags));
  if (get_le(bytes, k_off_header_size, 4) != k_header_size)
    throw czip_error("header size " + std::to_string(get_le(bytes, k_off_header_size, 4)) +
                     ", expected " + std::to_string(k_header_size));
  if (static_cast<std::uint8_t>(bytes[k_off_hash_format]) != k_hash_format_sha256 ||
      static_cast<std::uint8_t>(bytes[k_off_hash_size]) != k_hash_size)
    throw czip_error("unknown hash format " +
                     std::to_string(static_cast<std::uint8_t>(bytes[k_off_hash_format])) +
                     " (only 1, SHA-256 with 32-byte hashes, is known)");
  header h;
  h.footer = (flags & k_flag_footer) != 0;
  h.original_size = get_le(bytes, k_off_original_size, 8);
  h.czip_size = get_le(bytes, k_off_czip_size, 8);
  h.chunk_count = get_le(bytes, k_off_chunk_count, 8);
  h.chunk_array_offset = get_le(bytes, k_off_array_offset, 8);
  h.chunk_array_size = get_le(bytes, k_off_array_size, 8);
  h.codec = static_cast<codec_id>(bytes[k_off_codec]);
  const auto encryption = static_cast<std::uint8_t>(bytes[k_off_encryption]);
  if (encryption > static_cast<std::uint8_t>(encryption_scheme::convergent_aes256gcm_scrypt))
    throw czip_error("unknown encryption scheme " + std::to_string(encryption));
  h.encryption = static_cast<encryption_scheme>(encryption);
  const auto chunker = static_cast<std::uint8_t>(bytes[k_off_chunker]);
  const auto chunker_min = static_cast<std::size_t>(get_le(bytes, k_off_chunker_min, 4));
  if (chunker == k_chunker_fixed) {
    h.chunker = chunker_spec::fixed(chunker_min);
  } else if (chunker == k_chunker_cdc) {
    h.chunker = chunker_spec::content_defined(
        {chunker_min, static_cast<std::size_t>(get_le(bytes, k_off_chunker_avg, 4)),
         static_cast<std::size_t>(get_le(bytes, k_off_chunker_max, 4))});
  } else if (chunker != k_chunker_source) {
    throw czip_error("unknown chunker kind " + std::to_string(chunker));
  }
  h.scrypt.log2_n = static_cast<std::uint8_t>(bytes[k_off_scrypt_log2_n]);
  h.scrypt.r = static_cast<std::uint8_t>(bytes[k_off_scrypt_r]);
  h.scrypt.p = static_cast<std::uint8_t>(bytes[k_off_scrypt_p]);
  if (h.encrypted()) {
    try {
      validate(h.scrypt);
    } catch (const codec_error& e) {
      throw czip_error(std::string("refusing the header's key derivation cost: ") + e.what());
    }
  }
  std::memcpy(h.salt.data(), bytes.data() + k_off_salt, h.salt.size());
  h.unique_chunk_count = get_le(bytes, k_off_unique_chunks, 8);
  h.payload_size = get_le(bytes, k_off_payload_size, 8);
  h.original_hash = get_digest(bytes, k_off_original_hash);
  h.czip_hash = get_digest(bytes, k_off_czip_hash);
  h.chunk_array_hash = get_digest(bytes, k_off_array_hash);
  return h;
}

std::string sealed_array_aad(const header& h) {
  std::string aad(k_array_aad_prefix);
  aad.resize(aad.size() + 16);
  put_le(aad, k_array_aad_prefix.size(), h.original_size, 8);
  put_le(aad, k_array_aad_prefix.size() + 8, h.chunk_count, 8);
  return aad;
}

// --- writer --------------------------------------------------------------------

writer::writer(byte_sink& out, const writer_options& options)
    : out_(out), options_(options), footer_(!out.seekable()) {
  if (options_.chunker.how == chunker_spec::kind::cdc) {
    cdc_.emplace(options_.chunker.cdc);  // validates
  } else if (options_.chunker.fixed_size < k_cdc_min_chunk ||
             options_.chunker.fixed_size > k_max_chunk_size) {
    throw codec_error("czip: fixed chunk size " + std::to_string(options_.chunker.fixed_size) +
                      " is outside 64 B .. 4 MiB");
  }
  if (options_.passphrase) {
    if (options_.passphrase->empty()) throw codec_error("czip: empty passphrase");
    validate(options_.scrypt);
    if (!options_.salt) options_.salt = random_salt();
  }
  if (!footer_) {
    // A placeholder without the magic: an interrupted pack never looks like
    // a valid czip.
    out_.write(std::string(k_header_size, '\0'));
    position_ = k_header_size;
  }
}

void writer::write(std::string_view data) {
  if (finished_) throw czip_error("write after finish");
  if (source_chunks_) throw czip_error("write after write_chunk");
  if (!streamed_) {
    streamed_ = true;
    pending_.reserve(cdc_ ? options_.chunker.cdc.max_size : options_.chunker.fixed_size);
  }
  while (!data.empty()) {
    std::optional<std::size_t> cut;
    if (cdc_) {
      cut = cdc_->feed(data);
    } else {
      const std::size_t room = options_.chunker.fixed_size - pending_.size();
      if (data.size() >= room) cut = room;
    }
    if (!cut) {
      pending_.append(data);
      return;
    }
    pending_.append(data.substr(0, *cut));
    data.remove_prefix(*cut);
    emit_chunk(pending_);
    pending_.clear();
  }
}

void writer::begin_source_chunk(std::string_view plain) {
  if (finished_) throw czip_error("write_chunk after finish");
  if (streamed_) throw czip_error("write_chunk after write");
  if (plain.empty() || plain.size() > k_max_chunk_size)
    throw czip_error("write_chunk: a chunk of " + std::to_string(plain.size()) +
                     " bytes (1 B .. 4 MiB)");
  source_chunks_ = true;
}

void writer::write_chunk(std::string_view plain) {
  begin_source_chunk(plain);
  emit_chunk(plain);
}

void writer::write_chunk(std::string_view plain, const sha256_digest& plain_hash, codec_id codec,
                         std::string_view encoded) {
  begin_source_chunk(plain);
  if (encoded.empty()) throw czip_error("write_chunk: empty encoded chunk");
  const pre_encoded e{plain_hash, codec, encoded};
  emit_chunk(plain, &e);
}

void writer::write_body(std::string_view bytes) {
  czip_hash_.update(bytes);
  out_.write(bytes);
  position_ += bytes.size();
}

void writer::emit_chunk(std::string_view plain, const pre_encoded* given) {
  chunk_entry e;
  e.original_offset = original_size_;
  e.original_size = static_cast<std::uint32_t>(plain.size());
  e.plain_hash = given ? given->plain_hash : sha256_of(plain);
  original_hash_.update(plain);
  original_size_ += plain.size();

  if (const auto it = first_entry_of_.find(e.plain_hash); it != first_entry_of_.end()) {
    // Stored once: a duplicate points at the first copy's payload.
    const chunk_entry& first = entries_[it->second];
    e.czip_offset = first.czip_offset;
    e.stored_size = first.stored_size;
    e.codec = first.codec;
    e.stored_hash = first.stored_hash;
    entries_.push_back(e);
    return;
  }
  // A reused encoding is written from the caller's buffer, not copied.
  std::string owned;
  std::string_view stored;
  if (given) {
    e.codec = given->codec;
    stored = given->bytes;
  } else {
    encoded_chunk encoded = encode_chunk(plain, options_.codec);
    e.codec = encoded.codec;
    owned = std::move(encoded.bytes);
    stored = owned;
  }
  if (options_.passphrase) {
    owned = seal_chunk(e.plain_hash, e.codec, e.original_size, stored);
    stored = owned;
    e.stored_hash = sha256_of(stored);
  } else {
    // A raw chunk's stored bytes are its plain bytes: no second hash.
    e.stored_hash = e.codec == codec_id::raw ? e.plain_hash : sha256_of(stored);
  }
  e.czip_offset = position_;
  e.stored_size = static_cast<std::uint32_t>(stored.size());
  write_body(stored);
  payload_size_ += stored.size();
  first_entry_of_.emplace(e.plain_hash, entries_.size());
  entries_.push_back(e);
}

header writer::finish() {
  if (finished_) throw czip_error("finish called twice");
  if (!pending_.empty()) {
    emit_chunk(pending_);
    pending_.clear();
  }
  finished_ = true;

  header h;
  h.footer = footer_;
  h.original_size = original_size_;
  h.chunk_count = entries_.size();
  h.codec = options_.codec.preferred;
  if (!source_chunks_) h.chunker = options_.chunker;
  h.unique_chunk_count = first_entry_of_.size();
  h.payload_size = payload_size_;
  const sha256_digest original_hash = original_hash_.finish();

  std::string array = encode_entries(entries_);
  if (options_.passphrase) {
    h.encryption = encryption_scheme::convergent_aes256gcm_scrypt;
    h.scrypt = options_.scrypt;
    h.salt = *options_.salt;
    // The original's hash would confirm a guessed file: it is sealed too.
    array.insert(0, reinterpret_cast<const char*>(original_hash.data()), original_hash.size());
    const aes_key key = derive_array_key(*options_.passphrase, h.salt, h.scrypt);
    array = seal_array(key, array, sealed_array_aad(h));
  } else {
    h.original_hash = original_hash;
  }
  h.chunk_array_offset = position_;
  h.chunk_array_size = array.size();
  h.chunk_array_hash = sha256_of(array);
  write_body(array);
  h.czip_hash = czip_hash_.finish();
  h.czip_size = position_ + (footer_ ? k_header_size : 0);
  if (footer_) {
    out_.write(encode_header(h));
  } else {
    out_.write_at(0, encode_header(h));
  }
  return h;
}

// --- reader --------------------------------------------------------------------

namespace {

std::string read_bytes(const byte_source& in, std::uint64_t offset, std::size_t n) {
  std::string out(n, '\0');
  if (n > 0) in.read_at(offset, out.data(), n);
  return out;
}

// The header of a czip of `size` bytes: at the front (header mode) or the
// back (footer mode).
header locate_header(const byte_source& in, std::uint64_t size) {
  if (size < k_header_size)
    throw czip_error("truncated or not a czip file: " + std::to_string(size) +
                     " bytes, a czip has at least " + std::to_string(k_header_size));
  // A footer-mode file can start with a valid header-mode header: its first
  // chunk stored raw may be the start of another czip (a czip packed into a
  // czip). So both ends are decoded, and a header whose czip_size is the
  // file's size wins; otherwise the one found (its size check then reports
  // the truncation), or the front's error.
  std::optional<header> front_header, back_header;
  std::optional<czip_error> front_error, back_error;
  const std::string front = read_bytes(in, 0, k_header_size);
  if (front.starts_with(k_magic)) {
    try {
      front_header = decode_header(front);
      if (front_header->footer) {
        front_header.reset();
        front_error = czip_error("the header at the front is flagged as a trailer (corrupt)");
      }
    } catch (const czip_error& e) {
      front_error = e;
    }
  }
  const std::string back = read_bytes(in, size - k_header_size, k_header_size);
  if (back.starts_with(k_magic)) {
    try {
      back_header = decode_header(back);
      if (!back_header->footer) {
        back_header.reset();
        back_error = czip_error("the trailer is not flagged as a trailer (corrupt)");
      }
    } catch (const czip_error& e) {
      back_error = e;
    }
  }
  if (front_header && front_header->czip_size == size) return *front_header;
  if (back_header && back_header->czip_size == size) return *back_header;
  if (front_header) return *front_header;
  if (back_header) return *back_header;
  if (front_error) throw *front_error;
  if (back_error) throw *back_error;
  throw czip_error(
      "not a czip file, or truncated (no CZIP header at the start, no trailer at the end)");
}

}  // namespace

reader::reader(const byte_source& in, const reader_options& options) : in_(in) {
  const std::uint64_t size = in_.size();
  header_ = locate_header(in_, size);
  const header& h = header_;
  if (h.czip_size != size)
    throw czip_error(h.czip_size > size
                         ? "truncated: the header says " + std::to_string(h.czip_size) +
                               " bytes, the file has " + std::to_string(size)
                         : "the header says " + std::to_string(h.czip_size) +
                               " bytes, the file has " + std::to_string(size) +
                               " (trailing garbage)");
  const std::uint64_t body_begin = h.body_offset();
  const std::uint64_t body_end = h.footer ? size - k_header_size : size;
  // Everything is checked against the file size before any allocation, so a
  // corrupt count or length can never ask for more memory than the file has.
  if (h.chunk_array_offset < body_begin || h.chunk_array_offset > body_end ||
      h.chunk_array_size != body_end - h.chunk_array_offset)
    throw czip_error("chunk array [" + std::to_string(h.chunk_array_offset) + ", +" +
                     std::to_string(h.chunk_array_size) + ") is not at the end of the body");
  const std::uint64_t sealed_overhead = h.encrypted() ? k_hash_size + k_gcm_tag_size : 0;
  if (h.chunk_count > h.chunk_array_size / k_entry_size ||
      h.chunk_array_size != h.chunk_count * k_entry_size + sealed_overhead)
    throw czip_error("chunk array size " + std::to_string(h.chunk_array_size) + " does not match " +
                     std::to_string(h.chunk_count) + " chunks");
  if ((h.original_size == 0) != (h.chunk_count == 0) ||
      h.original_size > h.chunk_count * k_max_chunk_size)
    throw czip_error("original size " + std::to_string(h.original_size) + " does not fit " +
                     std::to_string(h.chunk_count) + " chunks");
  if (h.unique_chunk_count > h.chunk_count || h.payload_size != h.chunk_array_offset - body_begin)
    throw czip_error("payload size or unique chunk count does not match the layout");

  std::string array = read_bytes(in_, h.chunk_array_offset, h.chunk_array_size);
  if (sha256_of(array) != h.chunk_array_hash)
    throw czip_error("chunk array hash mismatch (corrupt chunk array)");
  if (h.encrypted()) {
    if (!options.passphrase) return;  // header only
    const aes_key key = derive_array_key(*options.passphrase, h.salt, h.scrypt);
    array = open_array(key, array, sealed_array_aad(h));
    original_hash_ = get_digest(array, 0);
    array.erase(0, k_hash_size);
  } else {
    original_hash_ = h.original_hash;
  }

  entries_.resize(h.chunk_count);
  std::uint64_t next_offset = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    chunk_entry& e = entries_[i];
    const std::string_view raw = std::string_view(array).substr(i * k_entry_size, k_entry_size);
    e.original_offset = get_le(raw, k_entry_original_offset, 8);
    e.czip_offset = get_le(raw, k_entry_czip_offset, 8);
    e.original_size = static_cast<std::uint32_t>(get_le(raw, k_entry_original_size, 4));
    e.stored_size = static_cast<std::uint32_t>(get_le(raw, k_entry_stored_size, 4));
    e.codec = static_cast<codec_id>(raw[k_entry_codec]);
    e.plain_hash = get_digest(raw, k_entry_plain_hash);
    e.stored_hash = get_digest(raw, k_entry_stored_hash);
    const std::string name = "chunk " + std::to_string(i);
    if (e.original_offset != next_offset)
      throw czip_error(name + ": original offset " + std::to_string(e.original_offset) +
                       ", expected " + std::to_string(next_offset));
    if (e.original_size == 0 || e.original_size > k_max_chunk_size)
      throw czip_error(name + ": original size " + std::to_string(e.original_size) +
                       " outside 1 .. 4 MiB");
    if (e.stored_size == 0 || e.stored_size > k_max_stored_size || e.czip_offset < body_begin ||
        e.czip_offset > h.chunk_array_offset ||
        e.stored_size > h.chunk_array_offset - e.czip_offset)
      throw czip_error(name + ": stored range [" + std::to_string(e.czip_offset) + ", +" +
                       std::to_string(e.stored_size) + ") is outside the payload area");
    if (!is_known_codec(static_cast<std::uint8_t>(e.codec)))
      throw czip_error(name + ": unknown codec id " +
                       std::to_string(static_cast<unsigned>(e.codec)));
    next_offset += e.original_size;
  }
  if (next_offset != h.original_size)
    throw czip_error("chunks add up to " + std::to_string(next_offset) +
                     " bytes, the header says " + std::to_string(h.original_size));
  has_chunks_ = true;
}

std::optional<sha256_digest> reader::original_hash() const {
  return original_hash_;
}

void reader::need_chunks() const {
  if (!has_chunks_) throw czip_error("encrypted czip: the passphrase is needed to read it");
}

std::string reader::read_stored(std::size_t index) const {
  const chunk_entry& e = entries_.at(index);
  return read_bytes(in_, e.czip_offset, e.stored_size);
}

std::string reader::decode_stored(std::size_t index, std::string_view stored) const {
  const chunk_entry& e = entries_[index];
  std::string opened;
  if (header_.encrypted()) {
    try {
      opened = open_chunk(e.plain_hash, e.codec, e.original_size, stored);
    } catch (const czip_auth_error&) {
      throw czip_error(chunk_name(index, e) + ": decryption failed (corrupt stored bytes)");
    }
    stored = opened;
  }
  std::string plain;
  try {
    plain = decode_chunk(e.codec, stored, e.original_size);
  } catch (const codec_error& err) {
    throw czip_error(chunk_name(index, e) + ": cannot decode: " + err.what());
  }
  if (sha256_of(plain) != e.plain_hash)
    throw czip_error(chunk_name(index, e) + ": content hash mismatch");
  return plain;
}

std::string reader::chunk(std::size_t index) const {
  need_chunks();
  return decode_stored(index, read_stored(index));
}

void reader::read(std::uint64_t offset, std::uint64_t length,
                  const std::function<void(std::string_view)>& out) const {
  need_chunks();
  if (offset >= header_.original_size || length == 0) return;
  const std::uint64_t end = offset + std::min(length, header_.original_size - offset);
  // The last chunk that starts at or before `offset`.
  auto it = std::upper_bound(
      entries_.begin(), entries_.end(), offset,
      [](std::uint64_t value, const chunk_entry& e) { return value < e.original_offset; });
  for (std::size_t i = static_cast<std::size_t>(it - entries_.begin()) - 1;
       i < entries_.size() && entries_[i].original_offset < end; ++i) {
    const chunk_entry& e = entries_[i];
    const std::string plain = chunk(i);
    const std::uint64_t from = std::max(offset, e.original_offset) - e.original_offset;
    const std::uint64_t to = std::min(end, e.original_offset + e.original_size) - e.original_offset;
    out(std::string_view(plain).substr(from, to - from));
  }
}

void reader::unpack(const std::function<void(std::string_view)>& out,
                    const progress_fn& progress) const {
  need_chunks();
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    out(chunk(i));
    if (progress)
      progress(entries_[i].original_offset + entries_[i].original_size, header_.original_size);
  }
}

verify_report reader::verify(const progress_fn& progress) const {
  verify_report report;
  const auto fail = [&](std::string what) {
    if (report.errors.size() < verify_report::k_max_reported_errors)
      report.errors.push_back(std::move(what));
    ++report.error_count;
  };
  const std::uint64_t body_begin = header_.body_offset();
  const std::uint64_t body_end =
      header_.footer ? header_.czip_size - k_header_size : header_.czip_size;
  const std::uint64_t total = (body_end - body_begin) + (has_chunks_ ? header_.original_size : 0);
  std::uint64_t done = 0;

  // The whole file, byte for byte: what a storage provider can check
  // without the passphrase.
  sha256_stream czip_hash;
  for (std::uint64_t at = body_begin; at < body_end;) {
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(k_scan_piece, body_end - at));
    czip_hash.update(read_bytes(in_, at, n));
    at += n;
    done += n;
    if (progress) progress(done, total);
  }
  if (czip_hash.finish() != header_.czip_hash) fail("czip file hash mismatch");

  report.content_checked = has_chunks_;
  if (!has_chunks_) return report;
  sha256_stream original;
  bool original_complete = true;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const chunk_entry& e = entries_[i];
    try {
      const std::string stored = read_stored(i);
      if (sha256_of(stored) != e.stored_hash)
        throw czip_error(chunk_name(i, e) + ": stored bytes hash mismatch");
      original.update(decode_stored(i, stored));
      report.bytes_checked += e.original_size;
    } catch (const czip_error& err) {
      fail(err.what());
      original_complete = false;
    }
    ++report.chunks_checked;
    done += e.original_size;
    if (progress) progress(done, total);
  }
  const sha256_digest whole = original.finish();
  if (original_complete && original_hash_ && whole != *original_hash_)
    fail("original file hash mismatch");
  return report;
}

}  // namespace densefs::codec::czip
