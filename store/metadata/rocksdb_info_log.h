// Where RocksDB's own diagnostics go: densefs's log (stderr in the
// foreground, syslog/journal for a mounted daemon), never a file in the
// store. RocksDB's default writes an info LOG into the store directory at
// every open (~100 KB, most of it a dump of every option, which OPTIONS-*
// already holds) and keeps earlier ones as LOG.old.*: on a small store that
// was more than a point of its savings, and it grew with every mount,
// `densefs stats` and `densefs gc` (issue 39).
//
// Errors are kept: they are what an operator needs (a failed background
// job, a corrupt file). The rest is not: flush and compaction notices,
// periodic statistics and the option dump of every open, and warnings too,
// which are notices here (a write stall, "SST file opened without unique
// ID" at every open of a store made by RocksDB 6, which would be a line on
// every `densefs fsck` of such a store). What they said is not reported
// elsewhere yet: RocksDB's stall and compaction counters are not in
// `densefs stats --json`.
#pragma once

#include <rocksdb/env.h>

#include <cstdarg>
#include <memory>

namespace densefs::store {

class rocksdb_info_log final : public rocksdb::Logger {
 public:
  // ERROR: the level RocksDB filters with before it formats anything.
  rocksdb_info_log();

  using rocksdb::Logger::Logv;
  void LogHeader(const char* format, va_list ap) override;
  void Logv(const char* format, va_list ap) override;
  void Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) override;

 private:
  // One error line (the level filtered it already).
  static void log_line(const char* format, va_list ap);
};

std::shared_ptr<rocksdb::Logger> make_rocksdb_info_log();

}  // namespace densefs::store
