// RocksDB's diagnostics reach densefs's log: errors as lines of their own,
// nothing else (store/metadata/rocksdb_info_log.h).
#include "store/metadata/rocksdb_info_log.h"

#include <gtest/gtest.h>
#include <rocksdb/env.h>

#include <string>

namespace densefs::store {
namespace {

std::string logged(rocksdb::InfoLogLevel level, const char* text) {
  const auto logger = make_rocksdb_info_log();
  ::testing::internal::CaptureStderr();
  rocksdb::Log(level, logger, "%s %d", text, 7);
  return ::testing::internal::GetCapturedStderr();
}

TEST(rocksdb_info_log, errors_are_logged_as_lines) {
  EXPECT_EQ(logged(rocksdb::InfoLogLevel::ERROR_LEVEL, "Corruption"),
            "densefs: error: rocksdb: Corruption 7\n");
  EXPECT_EQ(logged(rocksdb::InfoLogLevel::FATAL_LEVEL, "Fatal"),
            "densefs: error: rocksdb: Fatal 7\n");
}

TEST(rocksdb_info_log, notices_warnings_and_the_option_dump_are_not) {
  // What every open of a store made by RocksDB 6 says (the golden store).
  EXPECT_EQ(logged(rocksdb::InfoLogLevel::WARN_LEVEL,
                   "At least one SST file opened without unique ID to verify:"),
            "");
  EXPECT_EQ(logged(rocksdb::InfoLogLevel::WARN_LEVEL, "Stalling writes"), "");
  EXPECT_EQ(logged(rocksdb::InfoLogLevel::INFO_LEVEL, "Flushing memtable"), "");
  EXPECT_EQ(logged(rocksdb::InfoLogLevel::DEBUG_LEVEL, "debug"), "");
  EXPECT_EQ(logged(rocksdb::InfoLogLevel::HEADER_LEVEL, "Options.max_open_files"), "");
  const auto logger = make_rocksdb_info_log();
  ::testing::internal::CaptureStderr();
  rocksdb::Header(logger, "%s", "Options.write_buffer_size");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(rocksdb_info_log, a_long_line_is_cut_not_overrun) {
  const std::string text(5000, 'y');
  const std::string out = logged(rocksdb::InfoLogLevel::ERROR_LEVEL, text.c_str());
  EXPECT_EQ(out.rfind("densefs: error: rocksdb: yyy", 0), 0u);
  EXPECT_LT(out.size(), 1100u);
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace densefs::store
