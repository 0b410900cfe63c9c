// Directory entry values: untrusted bytes from RocksDB. A value decodes or is rejected
// with store_error(EIO); what decodes re-encodes byte for byte (one encoding
// per record, so a corrupted value can never pass as another valid one).
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
  try {
    const auto r = decode_dirent(value);
    // The version byte names the encoding (1 fixed, 2 compact).
    const auto e = value[0] == 1 ? record_encoding::fixed : record_encoding::compact;
    FUZZ_CHECK(encode_dirent(r, e) == value);
  } catch (const store_error& e) {
    FUZZ_CHECK(e.error_number() == EIO);
  }
  return 0;
}
