#include "store/dump/dump_stream.h"

#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "store/error.h"
#include "store/payload/pack_format.h"

namespace densefs::store {
namespace {

constexpr char k_magic[8] = {'D', 'F', 'S', 'D', 'U', 'M', 'P', '\0'};
constexpr std::uint8_t k_frame_records = 1;
constexpr std::uint8_t k_frame_end = 2;
constexpr std::size_t k_end_body_bytes = 8 * (k_table_count + 2);

// Little-endian fields, as pack files write theirs (pack_format.h).
void put_u32(char* at, std::uint32_t v) {
  put_le(at, v, 4);
}
void put_u64(char* at, std::uint64_t v) {
  put_le(at, v, 8);
}
std::uint32_t get_u32(const char* at) {
  return static_cast<std::uint32_t>(get_le(at, 4));
}
std::uint64_t get_u64(const char* at) {
  return get_le(at, 8);
}
void append_u32(std::string& out, std::uint32_t v) {
  char b[4];
  put_u32(b, v);
  out.append(b, 4);
}
std::uint64_t xxh3(std::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

// The 28-byte header of a frame whose body is `body`.
std::string frame_header(std::uint8_t kind, std::uint8_t t, std::uint32_t count,
                         std::string_view body) {
  std::string h(k_dump_frame_header_bytes, '\0');
  h[0] = static_cast<char>(kind);
  h[1] = static_cast<char>(t);
  put_u32(h.data() + 4, count);
  put_u32(h.data() + 8, static_cast<std::uint32_t>(body.size()));
  put_u64(h.data() + 12, xxh3(body));
  put_u64(h.data() + 20, xxh3(std::string_view(h.data(), 20)));
  return h;
}

}  // namespace

// XXH3-64 of every byte of the stream before the end frame.
struct dump_running_hash {
  XXH3_state_t* state = XXH3_createState();
  dump_running_hash() {
    if (!state) throw std::bad_alloc();
    XXH3_64bits_reset(state);
  }
  ~dump_running_hash() { XXH3_freeState(state); }
  dump_running_hash(const dump_running_hash&) = delete;
  dump_running_hash& operator=(const dump_running_hash&) = delete;
  void update(std::string_view bytes) { XXH3_64bits_update(state, bytes.data(), bytes.size()); }
  std::uint64_t digest() const { return XXH3_64bits_digest(state); }
};

dump_writer::dump_writer(std::ostream& out, std::string name, const dump_header& header)
    : out_(out), name_(std::move(name)), hash_(std::make_shared<dump_running_hash>()) {
  std::string h(k_dump_header_bytes, '\0');
  std::memcpy(h.data(), k_magic, 8);
  put_u32(h.data() + 8, k_dump_format_version);
  put_u32(h.data() + 12, header.store_format_version);
  put_u64(h.data() + 16, static_cast<std::uint64_t>(header.dumped_at));
  h[24] = static_cast<char>(header.payloads == payload_backend::pack ? 1 : 0);
  h[25] = static_cast<char>(header.from_postgres ? 1 : 0);
  put_u64(h.data() + 56, xxh3(std::string_view(h.data(), 56)));
  write(h);
}

void dump_writer::write(std::string_view bytes) {
  out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out_)
    throw store_error(errno != 0 ? errno : EIO,
                      "cannot write the dump to " + name_ + ": " + std::strerror(errno));
  hash_->update(bytes);
  bytes_ += bytes.size();
}

void dump_writer::add(table t, std::string_view key, std::string_view value) {
  const int ti = static_cast<int>(t);
  if (ti < last_table_ || (ti == last_table_ && key <= last_key_) || key.empty() ||
      key.size() > k_dump_max_key_bytes)
    throw std::logic_error("dump_writer::add: records out of order or a bad key");
  if (value.size() > k_dump_max_frame_bytes - 8 - key.size())
    throw store_error(EFBIG, "a record of " + std::to_string(value.size()) +
                                 " bytes is too large for a dump (table " + table_name(t) + ")");
  if (ti != body_table_ || body_.size() + 8 + key.size() + value.size() > k_dump_frame_target_bytes)
    flush_frame();
  body_table_ = ti;
  last_table_ = ti;
  last_key_.assign(key);
  append_u32(body_, static_cast<std::uint32_t>(key.size()));
  body_.append(key);
  append_u32(body_, static_cast<std::uint32_t>(value.size()));
  body_.append(value);
  ++body_records_;
  ++totals_.records[ti];
}

void dump_writer::flush_frame() {
  if (body_records_ == 0) return;
  write(
      frame_header(k_frame_records, static_cast<std::uint8_t>(body_table_), body_records_, body_));
  write(body_);
  ++totals_.frames;
  body_.clear();
  body_records_ = 0;
}

dump_totals dump_writer::finish() {
  flush_frame();
  std::string body(k_end_body_bytes, '\0');
  for (std::size_t i = 0; i < k_table_count; ++i) put_u64(body.data() + 8 * i, totals_.records[i]);
  put_u64(body.data() + 8 * k_table_count, totals_.frames);
  put_u64(body.data() + 8 * (k_table_count + 1), hash_->digest());
  write(frame_header(k_frame_end, 0, 0, body));
  write(body);
  out_.flush();
  if (!out_) throw store_error(EIO, "cannot write the dump to " + name_);
  totals_.bytes = bytes_;
  return totals_;
}

dump_reader::dump_reader(std::istream& in, std::string name)
    : in_(in), name_(std::move(name)), hash_(std::make_shared<dump_running_hash>()) {
  char h[k_dump_header_bytes];
  const auto got = in_.read(h, sizeof h).gcount();
  if (got < 8 || std::memcmp(h, k_magic, 8) != 0)
    throw store_error(EINVAL, name_ + " is not a densefs metadata dump (made by `densefs dump`)");
  if (static_cast<std::size_t>(got) < sizeof h)
    damaged(static_cast<std::uint64_t>(got), "the header is cut short");
  const std::uint32_t version = get_u32(h + 8);
  if (get_u64(h + 56) != xxh3(std::string_view(h, 56)))
    damaged(0, "the header's checksum is wrong");
  if (version > k_dump_format_version || version == 0)
    throw store_error(EPROTONOSUPPORT, name_ + " is a version-" + std::to_string(version) +
                                           " dump; this densefs reads versions up to " +
                                           std::to_string(k_dump_format_version) +
                                           " (load it with a newer densefs)");
  header_.store_format_version = get_u32(h + 12);
  header_.dumped_at = static_cast<std::int64_t>(get_u64(h + 16));
  const auto backend = static_cast<unsigned char>(h[24]);
  const auto engine = static_cast<unsigned char>(h[25]);
  if (backend > 1 || engine > 1) damaged(24, "unknown payload backend or engine");
  for (std::size_t i = 26; i < 56; ++i)
    if (h[i] != 0) damaged(i, "reserved header bytes are not zero");
  if (header_.store_format_version == 0 || header_.store_format_version > k_format_version)
    throw store_error(EPROTONOSUPPORT, name_ + " holds a store of format " +
                                           std::to_string(header_.store_format_version) +
                                           "; this densefs knows formats 1 to " +
                                           std::to_string(k_format_version));
  header_.payloads = backend == 1 ? payload_backend::pack : payload_backend::blob;
  header_.from_postgres = engine == 1;
  hash_->update(std::string_view(h, sizeof h));
  bytes_ = sizeof h;
}

void dump_reader::damaged(std::uint64_t at, const std::string& why) const {
  throw store_error(EINVAL, name_ + " is damaged at byte " + std::to_string(at) + ": " + why +
                                " (use another copy of the dump)");
}

bool dump_reader::read_exactly(char* to, std::size_t n) {
  const auto got = static_cast<std::size_t>(in_.read(to, static_cast<std::streamsize>(n)).gcount());
  if (got == 0 && n > 0) return false;
  if (got < n)
    throw store_error(EINVAL, name_ + " is truncated at byte " + std::to_string(bytes_ + got) +
                                  ": the dump did not finish (use another copy, or dump again)");
  bytes_ += n;
  return true;
}

bool dump_reader::next_frame() {
  frame_start_ = bytes_;
  char h[k_dump_frame_header_bytes];
  if (!read_exactly(h, sizeof h))
    throw store_error(EINVAL, name_ + " is truncated at byte " + std::to_string(bytes_) +
                                  ": it has no end frame (the dump did not finish; use another "
                                  "copy, or dump again)");
  if (get_u64(h + 20) != xxh3(std::string_view(h, 20)))
    damaged(frame_start_, "a frame header's checksum is wrong");
  const auto kind = static_cast<unsigned char>(h[0]);
  const auto t = static_cast<unsigned char>(h[1]);
  const std::uint32_t count = get_u32(h + 4);
  const std::uint32_t length = get_u32(h + 8);
  if (h[2] != 0 || h[3] != 0) damaged(frame_start_, "reserved frame bytes are not zero");
  if (kind == k_frame_end) {
    if (t != 0 || count != 0 || length != k_end_body_bytes)
      damaged(frame_start_, "a malformed end frame");
  } else if (kind == k_frame_records) {
    if (t >= k_table_count) damaged(frame_start_, "unknown table " + std::to_string(t));
    if (static_cast<int>(t) < last_table_) damaged(frame_start_, "tables out of order");
    if (count == 0 || length > k_dump_max_frame_bytes || length / 8 < count)
      damaged(frame_start_, "a frame of " + std::to_string(count) + " records in " +
                                std::to_string(length) + " bytes");
  } else {
    damaged(frame_start_, "unknown frame kind " + std::to_string(kind));
  }
  const std::uint64_t stream_hash = hash_->digest();  // before the end frame
  hash_->update(std::string_view(h, sizeof h));
  body_.resize(length);
  if (!read_exactly(body_.data(), length))
    throw store_error(EINVAL, name_ + " is truncated at byte " + std::to_string(bytes_) +
                                  ": a frame's body is missing (the dump did not finish; use "
                                  "another copy, or dump again)");
  if (get_u64(h + 12) != xxh3(body_)) damaged(frame_start_, "a frame's checksum is wrong");
  hash_->update(body_);
  if (kind == k_frame_end) {
    const char* b = body_.data();
    for (std::size_t i = 0; i < k_table_count; ++i) {
      totals_.records[i] = get_u64(b + 8 * i);
      if (totals_.records[i] != seen_records_[i])
        damaged(frame_start_, std::string("the end frame counts ") +
                                  std::to_string(totals_.records[i]) + " records of table " +
                                  table_name(static_cast<table>(i)) + ", the dump holds " +
                                  std::to_string(seen_records_[i]));
    }
    totals_.frames = get_u64(b + 8 * k_table_count);
    if (totals_.frames != frames_)
      damaged(frame_start_, "the end frame counts " + std::to_string(totals_.frames) +
                                " frames, the dump holds " + std::to_string(frames_));
    if (get_u64(b + 8 * (k_table_count + 1)) != stream_hash)
      damaged(frame_start_, "the checksum of the whole dump is wrong");
    if (in_.peek() != std::char_traits<char>::eof()) damaged(bytes_, "bytes follow the end frame");
    totals_.bytes = bytes_;
    return false;
  }
  ++frames_;
  body_table_ = static_cast<table>(t);
  if (static_cast<int>(t) != last_table_) last_key_.clear();
  last_table_ = t;
  body_pos_ = 0;
  body_left_ = count;
  return true;
}

std::optional<dump_reader::record> dump_reader::next() {
  if (ended_) return std::nullopt;
  if (body_left_ == 0) {
    if (body_pos_ != body_.size()) damaged(frame_start_, "a frame holds bytes after its records");
    if (!next_frame()) {
      ended_ = true;
      return std::nullopt;
    }
  }
  const auto field = [&](std::size_t max, bool may_be_empty) {
    if (body_.size() - body_pos_ < 4) damaged(frame_start_, "a record passes its frame's end");
    const std::uint32_t n = get_u32(body_.data() + body_pos_);
    body_pos_ += 4;
    if (n > body_.size() - body_pos_ || n > max || (n == 0 && !may_be_empty))
      damaged(frame_start_, "a record's length is out of range");
    const std::string_view bytes(body_.data() + body_pos_, n);
    body_pos_ += n;
    return bytes;
  };
  const std::string_view key = field(k_dump_max_key_bytes, false);
  const std::string_view value = field(k_dump_max_frame_bytes, true);
  if (!last_key_.empty() && key <= std::string_view(last_key_))
    damaged(frame_start_, "keys out of order");
  last_key_.assign(key);
  --body_left_;
  ++seen_records_[static_cast<std::size_t>(body_table_)];
  return record{body_table_, key, value};
}

}  // namespace densefs::store
