// Test-only fault injection under the store: a RocksDB FileSystemWrapper
// (RocksDB's own pattern for its fault tests) through which every file the
// store's database reads or writes goes. Off unless DENSEFS_FAULT_INJECTION
// is set in the environment of the process that opens the store; see
// docs/testing.md. Never set it on a store that matters.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace rocksdb {
class Env;
}

namespace densefs::store {

// DENSEFS_FAULT_INJECTION=KIND[:key=value]...
//   KIND   read_eio (reads of open files), write_eio (appends and syncs
//          fail) or write_stall (appends and syncs wait while the file
//          `while=` names exists: a commit stalls, reads go on)
//   files= all (default), blob (*.blob), sst (*.sst), wal (*.log)
//   after= matching calls that succeed before the first failure (default 0)
//   count= failures, then the fault clears (default: never clears)
//   p=     probability that a matching call fails, (0, 1] (default 1)
//   seed=  seed of that choice (default 1)
//   while= write_stall's flag file (an absolute path without colons)
struct fault_spec {
  enum class kind { read_eio, write_eio, write_stall } what = kind::read_eio;
  enum class files { all, blob, sst, wal } which = files::all;
  std::uint64_t after = 0;
  std::uint64_t count = std::numeric_limits<std::uint64_t>::max();
  double probability = 1.0;
  std::uint64_t seed = 1;
  std::string while_exists;
};

// Strict: an unknown kind or key, a repeated key or a bad number throws
// store_error(EINVAL) naming it.
fault_spec parse_fault_spec(std::string_view text);

// The Env to open the store's database with: nullptr (RocksDB's default)
// when DENSEFS_FAULT_INJECTION is unset or empty. Made once per process and
// kept for its life (RocksDB needs the Env to outlive every DB using it);
// its creation logs one line. Throws store_error(EINVAL) on a bad spec.
rocksdb::Env* fault_injection_env();

}  // namespace densefs::store
