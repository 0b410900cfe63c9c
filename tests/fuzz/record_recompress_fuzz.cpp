// Recompress queue values ("recompress/" + hash -> the writing inode):
// untrusted bytes from RocksDB, decoded or rejected with store_error(EIO);
// what decodes re-encodes byte for byte.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "store/error.h"
#include "store/records.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  chunk_hash hash;
  hash.bytes.fill(0xab);
  try {
    const std::uint64_t ino = decode_recompress(hash, value);
    FUZZ_CHECK(encode_recompress(ino) == value);
  } catch (const store_error& e) {
    FUZZ_CHECK(e.error_number() == EIO);
  }
  return 0;
}
