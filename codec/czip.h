// CZIP: a single-file container of one byte stream, cut into chunks, each
// unique chunk stored once (compressed, optionally convergently encrypted),
// with a chunk array for random access. The byte layout is specified in
// docs/format.md ("CZIP container (version 1)"); docs/czip.md is the user
// side. No I/O here: the writer writes to a czip::byte_sink and the reader
// reads from a czip::byte_source, both implemented by the caller (tools/).
//
// Layout: [fixed header][chunk payloads][chunk array] when the output is
// seekable (the header is written last, over a zeroed placeholder), or
// [chunk payloads][chunk array][fixed header as a trailer] for a pipe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/chunker.h"
#include "codec/codec.h"
#include "codec/czip_crypto.h"

namespace densefs::codec::czip {

inline constexpr std::uint16_t k_version = 1;
inline constexpr std::size_t k_header_size = 256;
inline constexpr std::size_t k_entry_size = 96;
inline constexpr std::size_t k_hash_size = 32;
// "\x89CZIP\r\n\x1a": the high byte and the CR LF / ^Z catch text-mode and
// 7-bit mangling, as PNG's signature does.
inline constexpr std::string_view k_magic{
    "\x89"
    "CZIP\r\n\x1a",
    8};
// Every chunk holds at most this much plain data (the store's chunk size).
inline constexpr std::size_t k_max_chunk_size = k_cdc_max_chunk;

// Corrupt, truncated or unsupported czip data, or a failure while writing
// one. The message says what is wrong and, for a chunk, which one; callers
// prefix the file name.
class czip_error : public codec_error {
 public:
  using codec_error::codec_error;
};

enum class encryption_scheme : std::uint8_t {
  none = 0,
  // Convergent AES-256-GCM per chunk, chunk array sealed with AES-256-GCM
  // under scrypt(passphrase): docs/format.md.
  convergent_aes256gcm_scrypt = 1,
};

// The fixed header (also the trailer in footer mode), decoded.
struct header {
  bool footer = false;  // the header is a trailer at the end of the file
  std::uint64_t original_size = 0;
  std::uint64_t czip_size = 0;
  std::uint64_t chunk_count = 0;
  std::uint64_t chunk_array_offset = 0;
  std::uint64_t chunk_array_size = 0;
  codec_id codec = codec_id::zstd;  // the codec asked for; chunks may be raw
  encryption_scheme encryption = encryption_scheme::none;
  // The writer's chunker (header byte 60: 0 fixed, 1 CDC), or nothing when
  // the caller cut the chunks (byte 2, "source": writer::write_chunk, e.g.
  // a densefs file's own extents).
  std::optional<chunker_spec> chunker;
  scrypt_params scrypt{0, 0, 0};  // zero unless encrypted
  kdf_salt salt{};
  std::uint64_t unique_chunk_count = 0;
  std::uint64_t payload_size = 0;  // bytes of stored chunk payloads
  sha256_digest original_hash{};   // zero when encrypted (it is in the sealed array)
  sha256_digest czip_hash{};       // of every file byte outside the fixed header
  sha256_digest chunk_array_hash{};

  bool encrypted() const { return encryption != encryption_scheme::none; }
  // Where chunk payloads start: after the header in header mode, 0 in footer mode.
  std::uint64_t body_offset() const { return footer ? 0 : k_header_size; }
};

// Exactly k_header_size bytes, CRC included.
std::string encode_header(const header& h);
// Checks magic, version, CRC and field ranges (not the file size: see
// reader). Throws czip_error.
header decode_header(std::string_view bytes);

struct chunk_entry {
  std::uint64_t original_offset = 0;
  std::uint64_t czip_offset = 0;
  std::uint32_t original_size = 0;
  std::uint32_t stored_size = 0;
  codec_id codec = codec_id::raw;
  sha256_digest plain_hash{};   // SHA-256 of the plain chunk (when encrypted: its key)
  sha256_digest stored_hash{};  // SHA-256 of the stored bytes
};

// Where the writer's bytes go.
class byte_sink {
 public:
  virtual ~byte_sink() = default;
  virtual void write(std::string_view bytes) = 0;
  // True when write_at works: the writer then puts the header at the front.
  virtual bool seekable() const = 0;
  // Overwrites bytes already written (only the header placeholder).
  virtual void write_at(std::uint64_t offset, std::string_view bytes) = 0;
};

// Where the reader's bytes come from: random access over a known size.
class byte_source {
 public:
  virtual ~byte_source() = default;
  virtual std::uint64_t size() const = 0;
  // Exactly n bytes at offset (the reader checks ranges first); a short
  // read throws.
  virtual void read_at(std::uint64_t offset, char* out, std::size_t n) const = 0;
};

// "fixed", "fixed:size=64", "cdc:min=8K:avg=32K:max=128K" (codec/chunker.h),
// or "source" for chunks cut by the caller.
std::string chunker_name(const std::optional<chunker_spec>& chunker);

struct writer_options {
  // Used by write(); default cdc:min=8K:avg=32K:max=128K.
  chunker_spec chunker = chunker_spec::content_defined();
  codec_options codec;  // default zstd level 3, raw when it does not shrink
  // Set: encrypt, with the chunk array sealed under scrypt(passphrase).
  std::optional<std::string> passphrase;
  scrypt_params scrypt;
  // Fixed salt for reproducible output (golden tests); random when unset.
  std::optional<kdf_salt> salt;
};

// Progress: bytes done so far, and the total when known (0 otherwise).
using progress_fn = std::function<void(std::uint64_t done, std::uint64_t total)>;

// Packs one stream. Memory: one chunk of plain data plus, per chunk, its
// array entry (96 B) and a dedup index entry: about 3 MiB per GiB of input
// with the default chunker.
class writer {
 public:
  writer(byte_sink& out, const writer_options& options);
  // Appends `data` (any piece size) to the stream, cut by the chunker.
  void write(std::string_view data);
  // Appends one chunk whose boundaries the caller chose (1 B .. 4 MiB),
  // encoded with options.codec; the header then records the chunker as
  // "source". A writer takes either write() or write_chunk(), not both.
  void write_chunk(std::string_view plain);
  // The same for a chunk the caller already holds encoded with `codec` (a
  // densefs store's payload): `encoded` becomes the payload as it is
  // (sealed when encrypting), not encoded again. `plain` is its decoding
  // (for the original's hash) and `plain_hash` its SHA-256, which the
  // caller vouches for (the store names chunks by it; every reader checks
  // it again).
  void write_chunk(std::string_view plain, const sha256_digest& plain_hash, codec_id codec,
                   std::string_view encoded);
  // Writes the last chunk, the chunk array and the header or trailer.
  // Returns the final header. The writer is done afterwards.
  header finish();

 private:
  struct pre_encoded {
    const sha256_digest& plain_hash;
    codec_id codec;
    std::string_view bytes;
  };
  void emit_chunk(std::string_view plain, const pre_encoded* encoded = nullptr);
  void begin_source_chunk(std::string_view plain);
  void write_body(std::string_view bytes);

  byte_sink& out_;
  writer_options options_;
  bool footer_;
  std::optional<cdc_chunker> cdc_;
  bool streamed_ = false;       // write() was used
  bool source_chunks_ = false;  // write_chunk() was used
  std::string pending_;         // plain bytes of the chunk being cut
  std::uint64_t position_ = 0;  // bytes written to out_
  std::uint64_t original_size_ = 0;
  std::uint64_t payload_size_ = 0;
  sha256_stream original_hash_;
  sha256_stream czip_hash_;
  std::vector<chunk_entry> entries_;
  struct digest_hasher {
    std::size_t operator()(const sha256_digest& d) const {
      std::size_t v;
      __builtin_memcpy(&v, d.data(), sizeof v);  // already uniformly random
      return v;
    }
  };
  std::unordered_map<sha256_digest, std::size_t, digest_hasher> first_entry_of_;
  bool finished_ = false;
};

struct reader_options {
  // Needed to read an encrypted czip's chunks; without it, only the header
  // is available (info) and verify checks the file hash alone.
  std::optional<std::string> passphrase;
};

struct verify_report {
  bool content_checked = false;  // false: encrypted and no passphrase given
  std::uint64_t chunks_checked = 0;
  std::uint64_t bytes_checked = 0;  // original bytes decoded and hashed
  std::uint64_t error_count = 0;
  std::vector<std::string> errors;  // the first k_max_reported_errors
  static constexpr std::size_t k_max_reported_errors = 20;
  bool ok() const { return error_count == 0; }
};

// Opens a czip: validates the header (magic, version, CRC, every length and
// offset against the file size) and the chunk array (hash, contiguous
// original offsets, payload ranges) before anything else. Every read
// decodes a chunk and checks its SHA-256: wrong bytes are never returned.
class reader {
 public:
  // Throws czip_error (czip_auth_error for a wrong passphrase).
  reader(const byte_source& in, const reader_options& options);

  const header& info() const { return header_; }
  // The original file's SHA-256 (for an encrypted czip, from the sealed
  // array), or nothing when encrypted and opened without a passphrase.
  std::optional<sha256_digest> original_hash() const;
  // Whether the chunks can be read (false: encrypted, no passphrase).
  bool has_chunks() const { return has_chunks_; }
  const std::vector<chunk_entry>& chunks() const { return entries_; }

  // Original bytes [offset, offset + length), clipped to the original size,
  // in pieces of at most one chunk. Throws czip_error.
  void read(std::uint64_t offset, std::uint64_t length,
            const std::function<void(std::string_view)>& out) const;
  void unpack(const std::function<void(std::string_view)>& out,
              const progress_fn& progress = {}) const;
  // Checks everything: every chunk's stored hash, decoding and content hash,
  // the whole original's hash, and the whole czip's hash. Does not throw for
  // what it finds; it reports.
  verify_report verify(const progress_fn& progress = {}) const;

  // The plain bytes of chunk `index`, checked against its hash.
  std::string chunk(std::size_t index) const;

 private:
  void need_chunks() const;
  std::string read_stored(std::size_t index) const;
  std::string decode_stored(std::size_t index, std::string_view stored) const;

  const byte_source& in_;
  header header_;
  std::vector<chunk_entry> entries_;
  std::optional<sha256_digest> original_hash_;
  bool has_chunks_ = false;
};

// The associated data of the sealed chunk array (docs/format.md).
std::string sealed_array_aad(const header& h);

}  // namespace densefs::codec::czip
