// The bytes of a metadata dump (`densefs dump`, docs/format.md "Metadata
// dumps"): a volume's records, table by table in key order, in checksummed
// frames after a fixed header, closed by an end frame that counts and
// checksums everything before it. This file knows only the stream; what
// goes into it and how a volume is rebuilt from it is store/dump/dump.h.
//
// The reader treats the stream as untrusted: every length is checked
// before it is used, memory stays within one frame (at most
// k_dump_max_frame_bytes), and a damaged, truncated or reordered stream is
// refused with one line naming the byte where it went wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "store/metadata/metadata_engine.h"
#include "store/records.h"

namespace densefs::store {

inline constexpr std::uint32_t k_dump_format_version = 1;
inline constexpr std::size_t k_dump_header_bytes = 64;
inline constexpr std::size_t k_dump_frame_header_bytes = 28;
// A frame's body: records are gathered up to 1 MiB; a larger record (a
// blob store's payload, up to 65 MiB) is a frame of its own.
inline constexpr std::size_t k_dump_frame_target_bytes = 1u << 20;
inline constexpr std::size_t k_dump_max_frame_bytes = 80u << 20;
inline constexpr std::size_t k_dump_max_key_bytes = 1024;

// XXH3-64 of every byte of a stream before its end frame (dump_stream.cpp).
struct dump_running_hash;

struct dump_header {
  std::uint32_t store_format_version = 0;  // of the volume dumped
  std::int64_t dumped_at = 0;              // unix seconds
  payload_backend payloads = payload_backend::pack;
  bool from_postgres = false;  // the records came from PostgreSQL (formats 5, 6)
};

// What a finished stream holds, from its end frame.
struct dump_totals {
  std::uint64_t records[k_table_count] = {};
  std::uint64_t frames = 0;
  std::uint64_t bytes = 0;  // of the whole stream
};

class dump_writer {
 public:
  // Writes the header. Failures of `out` throw store_error naming `name`.
  dump_writer(std::ostream& out, std::string name, const dump_header& header);
  // Records in table order (table's enum order), keys strictly ascending
  // within a table; anything else is a bug (std::logic_error).
  void add(table t, std::string_view key, std::string_view value);
  // The last frame and the end frame, then a flush of `out`.
  dump_totals finish();
  std::uint64_t bytes_written() const { return bytes_; }

 private:
  void write(std::string_view bytes);
  void flush_frame();

  std::ostream& out_;
  std::string name_;
  std::string body_;
  std::uint32_t body_records_ = 0;
  int body_table_ = -1;
  int last_table_ = -1;
  std::string last_key_;
  dump_totals totals_;
  std::uint64_t bytes_ = 0;
  std::shared_ptr<struct dump_running_hash> hash_;
};

class dump_reader {
 public:
  // Reads and checks the header: store_error(EINVAL) "not a densefs
  // dump", EPROTONOSUPPORT for a newer dump version.
  dump_reader(std::istream& in, std::string name);
  const dump_header& header() const { return header_; }

  struct record {
    table t;
    std::string_view key;    // valid until the next call
    std::string_view value;  // valid until the next call
  };
  // The next record; nullopt after the end frame has been read and checked
  // (counts, the whole stream's checksum, nothing after it). A damaged or
  // truncated stream throws store_error(EINVAL) with one line.
  std::optional<record> next();
  const dump_totals& totals() const { return totals_; }  // after next() gave nullopt
  std::uint64_t bytes_read() const { return bytes_; }

 private:
  [[noreturn]] void damaged(std::uint64_t at, const std::string& why) const;
  bool read_exactly(char* to, std::size_t n);  // false: clean end of input before any byte
  bool next_frame();

  std::istream& in_;
  std::string name_;
  dump_header header_;
  std::string body_;
  std::size_t body_pos_ = 0;
  std::uint32_t body_left_ = 0;
  table body_table_ = table::meta;
  std::uint64_t frame_start_ = 0;
  int last_table_ = -1;
  std::string last_key_;
  dump_totals totals_;
  std::uint64_t seen_records_[k_table_count] = {};
  std::uint64_t frames_ = 0;
  std::uint64_t bytes_ = 0;
  bool ended_ = false;
  std::shared_ptr<struct dump_running_hash> hash_;
};

}  // namespace densefs::store
