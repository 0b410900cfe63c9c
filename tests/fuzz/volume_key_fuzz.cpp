// An encrypted volume's key inputs (store/crypto/volume_key.h): the meta
// row `volume_key` (stored bytes: a dump, a damaged or hostile database)
// and a key file's bytes. The first input byte picks which. A record
// decodes or is refused with store_error (EIO damaged, EPROTONOSUPPORT a
// newer version), never with a cost beyond the bounds; what decodes
// re-encodes byte for byte, and a cheap one is unwrapped with a secret
// that is not its own (nullopt, no crash). A key file gives a secret of
// 8..4096 bytes, or EINVAL.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

#include "store/crypto/volume_key.h"
#include "store/error.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    try {
      const wrapped_volume_key k = decode_wrapped_key(input);
      FUZZ_CHECK(k.cost.log2_n >= k_min_key_log2_n && k.cost.log2_n <= k_max_key_log2_n);
      FUZZ_CHECK((std::uint64_t{128} * k.cost.r << k.cost.log2_n) <= k_max_key_memory);
      FUZZ_CHECK(encode_wrapped_key(k) == input);
      // Deriving is the expensive part: only the cheapest costs, per input.
      if (k.cost.log2_n <= 11 && k.cost.r <= 8 && k.cost.p <= 2)
        FUZZ_CHECK(!unwrap_master_key(k, "not the secret of any seed"));
    } catch (const store_error& e) {
      FUZZ_CHECK(e.error_number() == EIO || e.error_number() == EPROTONOSUPPORT);
    }
  } else {
    try {
      const std::string secret = parse_key_file(input, "fuzz input");
      FUZZ_CHECK(secret.size() >= k_min_secret_size && secret.size() <= k_max_key_file_size);
      FUZZ_CHECK(input.starts_with(secret));
    } catch (const store_error& e) {
      FUZZ_CHECK(e.error_number() == EINVAL);
    }
  }
  return 0;
}
