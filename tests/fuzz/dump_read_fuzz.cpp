// Metadata dumps (`densefs load`, store/dump/dump_stream.h): untrusted
// bytes from a file. Every input is read to its end or refused with
// store_error (EINVAL: damaged, truncated, not a dump; EPROTONOSUPPORT: a
// newer version), never more than one frame in memory; what reads whole
// has keys in order within each table, tables in order, and counts that
// match its end frame.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "store/dump/dump_stream.h"
#include "store/error.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    dump_reader reader(in, "fuzz input");
    int last_table = -1;
    std::string last_key;
    std::uint64_t counts[k_table_count] = {};
    while (const auto r = reader.next()) {
      const int t = static_cast<int>(r->t);
      FUZZ_CHECK(t >= last_table && t < static_cast<int>(k_table_count));
      FUZZ_CHECK(!r->key.empty() && r->key.size() <= k_dump_max_key_bytes);
      if (t == last_table) FUZZ_CHECK(r->key > last_key);
      last_table = t;
      last_key.assign(r->key);
      ++counts[t];
    }
    for (std::size_t i = 0; i < k_table_count; ++i)
      FUZZ_CHECK(reader.totals().records[i] == counts[i]);
    FUZZ_CHECK(reader.bytes_read() == size);
  } catch (const store_error& e) {
    FUZZ_CHECK(e.error_number() == EINVAL || e.error_number() == EPROTONOSUPPORT);
  }
  return 0;
}
