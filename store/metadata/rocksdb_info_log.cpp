#include "store/metadata/rocksdb_info_log.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "store/log.h"

namespace densefs::store {

rocksdb_info_log::rocksdb_info_log() : rocksdb::Logger(rocksdb::InfoLogLevel::ERROR_LEVEL) {}

// The option dump of every open: OPTIONS-* holds the same.
void rocksdb_info_log::LogHeader(const char*, va_list) {}

// A line without a level (RocksDB's old interface) is informational.
void rocksdb_info_log::Logv(const char* format, va_list ap) {
  Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
}

void rocksdb_info_log::Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
  // Nothing may throw into RocksDB (rocksdb/env.h): a line that cannot be
  // logged is dropped.
  try {
    log_line(format, ap);
  } catch (...) {
  }
}

void rocksdb_info_log::log_line(const char* format, va_list ap) {
  char buf[1024];
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(buf, sizeof buf, format, copy);
  va_end(copy);
  if (n < 0) return;
  std::string line = "rocksdb: ";
  // A longer line (a stats dump) is cut: the log takes lines, not reports.
  line.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
  while (!line.empty() && line.back() == '\n') line.pop_back();
  log_error(line);
}

std::shared_ptr<rocksdb::Logger> make_rocksdb_info_log() {
  return std::make_shared<rocksdb_info_log>();
}

}  // namespace densefs::store
