// Inode record values (versions 1 and 2 fixed, 3 compact): untrusted bytes from RocksDB.
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
  inode_record r;
  try {
    r = decode_inode(42, value);
  } catch (const store_error& e) {
    FUZZ_CHECK(e.error_number() == EIO);  // corruption is EIO, nothing else
    return 0;
  }
  FUZZ_CHECK(r.ino == 42);
  const std::string encoded = encode_inode(r);
  if (value[0] == 3) {
    // One encoding per record, also for the compact one.
    FUZZ_CHECK(encode_inode(r, record_encoding::compact) == value);
  } else if (value[0] == 2) {
    // One encoding per record: the current version re-encodes byte for byte.
    FUZZ_CHECK(encoded == value);
  } else {
    // A version 1 value re-encodes as version 2 with the same fields.
    FUZZ_CHECK(decode_inode(42, encoded) == r);
  }
  return 0;
}
