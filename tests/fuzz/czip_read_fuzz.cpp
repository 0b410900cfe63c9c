// The CZIP container reader (codec/czip.h) on an untrusted file, from a
// memory buffer through the public read API: header or trailer, chunk array,
// chunk payloads, encrypted (passphrase "fuzz") or not.
//
// Input: a mode byte, then the file. Mode bit 0 set: before reading, the
// harness repairs the checksums a mutation breaks first (chunk array SHA-256,
// czip_size, header CRC) so the fuzzer gets past them into the chunk array
// and the payloads; bit 0 clear: the bytes as they are.
// Properties: opening and reading either work or throw codec_error; reads
// return exactly the original size; verify() never throws.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "codec/czip.h"
#include "codec/czip_crypto.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::codec;
using namespace densefs::codec::czip;

namespace {

class memory_source : public byte_source {
 public:
  explicit memory_source(std::string_view data) : data_(data) {}
  std::uint64_t size() const override { return data_.size(); }
  void read_at(std::uint64_t offset, char* out, std::size_t n) const override {
    // The reader checks ranges first: a read past the end is its bug.
    FUZZ_CHECK(offset <= data_.size() && n <= data_.size() - offset);
    std::memcpy(out, data_.data() + offset, n);
  }

 private:
  std::string_view data_;
};

// Header field offsets (docs/format.md, "CZIP container").
constexpr std::size_t k_off_czip_size = 24;
constexpr std::size_t k_off_array_offset = 40;
constexpr std::size_t k_off_array_size = 48;
constexpr std::size_t k_off_array_hash = 176;
constexpr std::size_t k_off_crc = 252;

std::uint64_t get_le(const std::string& s, std::size_t off, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t{static_cast<std::uint8_t>(s[off + i])} << (8 * i);
  return v;
}
void put_le(std::string& s, std::size_t off, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s[off + i] = static_cast<char>(v >> (8 * i));
}

std::uint32_t crc32(std::string_view bytes) {
  std::uint32_t c = 0xffffffff;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320 & (0u - (c & 1)));
  }
  return ~c;
}

void repair_header_at(std::string& file, std::size_t at) {
  if (file.size() < k_header_size || file.compare(at, k_magic.size(), k_magic) != 0) return;
  put_le(file, at + k_off_czip_size, file.size(), 8);
  const std::uint64_t offset = get_le(file, at + k_off_array_offset, 8);
  const std::uint64_t size = get_le(file, at + k_off_array_size, 8);
  if (offset <= file.size() && size <= file.size() - offset) {
    const sha256_digest d = sha256_of(std::string_view(file).substr(offset, size));
    std::memcpy(file.data() + at + k_off_array_hash, d.data(), d.size());
  }
  put_le(file, at + k_off_crc, crc32(std::string_view(file).substr(at, k_off_crc)), 4);
}

// scrypt at the cost a header asks for would make each run take seconds:
// the fuzzer keeps to cheap parameters (validate() bounds the real ones).
bool cheap_kdf(const std::string& file) {
  for (const std::size_t at : {std::size_t{0}, file.size() - k_header_size}) {
    try {
      const header h = decode_header(std::string_view(file).substr(at, k_header_size));
      if (h.encrypted() && (h.scrypt.log2_n > 12 || h.scrypt.r > 8 || h.scrypt.p > 1)) return false;
    } catch (const czip_error&) {
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    repair_header_at(file, 0);
    if (file.size() >= k_header_size) repair_header_at(file, file.size() - k_header_size);
  }
  if (file.size() >= k_header_size && !cheap_kdf(file)) return 0;

  const memory_source source(file);
  reader_options options;
  if (data[0] & 2) options.passphrase = "fuzz";
  try {
    const reader r(source, options);
    const header& h = r.info();
    FUZZ_CHECK(h.czip_size == file.size());
    if (!r.has_chunks()) {
      FUZZ_CHECK(h.encrypted());
      return 0;
    }
    std::uint64_t total = 0;
    r.read(0, h.original_size, [&](std::string_view piece) { total += piece.size(); });
    FUZZ_CHECK(total == h.original_size);
    // A read from the middle, clipped at the end.
    total = 0;
    const std::uint64_t from = h.original_size / 3;
    r.read(from, h.original_size, [&](std::string_view piece) { total += piece.size(); });
    FUZZ_CHECK(total == h.original_size - from);
  } catch (const codec_error&) {
    // czip_error, or czip_auth_error for a wrong passphrase or a corrupt
    // sealed chunk array (both are codec_errors).
  }
  // verify() reports, it does not throw for what it finds (after opening).
  try {
    const reader r(source, options);
    const verify_report report = r.verify();
    FUZZ_CHECK(report.errors.size() <= verify_report::k_max_reported_errors);
    FUZZ_CHECK(report.errors.size() <= report.error_count);
  } catch (const codec_error&) {
  }
  return 0;
}
