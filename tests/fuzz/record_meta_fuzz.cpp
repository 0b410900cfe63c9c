// The other values in the meta column family (next_ino, orphan markers) and
// the big-endian integers read back from keys: untrusted bytes from RocksDB,
// decoded or rejected with store_error(EIO). The first byte picks the
// decoder, the rest is the value.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "store/error.h"
#include "store/records.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view value(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0:
        FUZZ_CHECK(encode_next_ino(decode_next_ino(value)) == value);
        break;
      case 1:
        check_orphan(7, value);
        FUZZ_CHECK(encode_orphan() == value);
        break;
      case 2: {
        const std::uint64_t v = decode_u64_be(value);
        // inode_key is "the integer, big-endian": the inverse of decode_u64_be.
        FUZZ_CHECK(inode_key(v) == value);
        break;
      }
    }
  } catch (const store_error& e) {
    FUZZ_CHECK(e.error_number() == EIO);
  }
  return 0;
}
