#include "store/snapshot/registry.h"

#include <nlohmann/json.hpp>

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

constexpr std::size_t k_head = 1 + 8 + 8 + 1;  // version, next_ino, created, state

void put_le64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(v >> (8 * i));
}

std::uint64_t get_le64(std::string_view b) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
  return v;
}

}  // namespace

std::string snapshot_key(std::uint64_t id) {
  std::string out(k_snapshot_prefix);
  for (int i = 7; i >= 0; --i) out += static_cast<char>(id >> (8 * i));
  return out;
}

std::string encode_snapshot(const snapshot_record& r) {
  std::string out(1, '\x01');
  put_le64(out, r.next_ino);
  put_le64(out, static_cast<std::uint64_t>(r.created));
  out += static_cast<char>(r.state);
  out += r.name;
  return out;
}

snapshot_record decode_snapshot(std::uint64_t id, std::string_view value, std::string_view what) {
  if (value.size() <= k_head || value[0] != '\x01' ||
      static_cast<unsigned char>(value[17]) > static_cast<unsigned char>(snapshot_state::deleting))
    throw store_error(EIO, "corrupt record of " + std::string(what) +
                               " (a damaged volume: densefs fsck names what else is)");
  snapshot_record r;
  r.id = id;
  r.next_ino = get_le64(value.substr(1));
  r.created = static_cast<std::int64_t>(get_le64(value.substr(9)));
  r.state = static_cast<snapshot_state>(value[17]);
  r.name = std::string(value.substr(k_head));
  return r;
}

std::string encode_snapshot_id(std::uint64_t id) {
  std::string out;
  put_le64(out, id);
  return out;
}

std::uint64_t decode_snapshot_id(std::string_view value, std::string_view what) {
  if (value.size() != 8) throw store_error(EIO, "corrupt " + std::string(what) + " record");
  return get_le64(value);
}

std::vector<snapshot_record> read_snapshots(const metadata_engine& e) {
  std::vector<snapshot_record> out;
  scan_options o;
  e.scan(table::meta, prefix_range(std::string(k_snapshot_prefix)), o, "the snapshots",
         [&](std::string_view key, std::string_view value) {
           if (key.size() != k_snapshot_prefix.size() + 8)
             throw store_error(EIO, "a damaged snapshot record key");
           std::uint64_t id = 0;
           for (const char c : key.substr(k_snapshot_prefix.size()))
             id = (id << 8) | static_cast<unsigned char>(c);
           out.push_back(decode_snapshot(id, value, "snapshot " + std::to_string(id)));
           return true;
         });
  return out;
}

std::optional<snapshot_record> find_snapshot(const metadata_engine& e, std::string_view name) {
  for (snapshot_record& r : read_snapshots(e))
    if (r.name == name) return std::move(r);
  return std::nullopt;
}

std::string to_json(const snapshot_record& r) {
  return nlohmann::json{{"id", r.id},
                        {"name", r.name},
                        {"created", r.created},
                        {"state", r.state == snapshot_state::live ? "live" : "deleting"},
                        {"next_ino", r.next_ino}}
      .dump();
}

std::vector<snapshot_record> snapshots_from_json(std::string_view array) {
  std::vector<snapshot_record> out;
  try {
    for (const nlohmann::json& j : nlohmann::json::parse(array)) {
      snapshot_record r;
      r.id = j.at("id").get<std::uint64_t>();
      r.name = j.at("name").get<std::string>();
      r.created = j.at("created").get<std::int64_t>();
      r.state = j.at("state").get<std::string>() == "live" ? snapshot_state::live
                                                           : snapshot_state::deleting;
      r.next_ino = j.at("next_ino").get<std::uint64_t>();
      out.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw store_error(EIO, std::string("a list of snapshots that does not read: ") + e.what());
  }
  return out;
}

void check_snapshot_name(std::string_view name) {
  if (name.empty() || name.size() > 255)
    throw store_error(EINVAL, "a snapshot name has 1 to 255 bytes");
  if (name == "." || name == "..")
    throw store_error(EINVAL, "a snapshot cannot be named \".\" or \"..\"");
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos)
    throw store_error(EINVAL, "a snapshot name has no '/' (it is a directory under .snapshots)");
}

}  // namespace densefs::store
