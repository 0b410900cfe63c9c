// What one commit tells a volume's other clients (PostgreSQL NOTIFY on a
// scale-out volume). The text is a format: docs/format.md, "Change
// notices", specifies it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace densefs::store {

// What a commit on another client changed, for a follower's caches
// (volume_membership::watch). `everything`: notices may have been missed or
// one was too long to list; drop every cached record.
struct change_notice {
  bool everything = false;
  std::vector<std::uint64_t> inodes;  // attributes, data, extents or xattrs
  std::vector<std::pair<std::uint64_t, std::string>> entries;  // parent, name
  // Sessions (their ids) of followers that just mounted and wait for the
  // writer to answer (volume_membership::begin), and the writer's answers.
  std::vector<std::string> sessions_started;
  std::vector<std::string> sessions_answered;
  // The session of the shared writer whose commit sent it ("" otherwise):
  // a writer skips its own commits' notices.
  std::string writer;
};

// The text a commit of `inodes` and `entries` sends, and its decoding
// (nullopt: not a notice this build reads, which the caller treats as
// `everything`). Decoding takes untrusted text: every token is checked.
std::string encode_change_notice(const change_notice& c);
std::optional<change_notice> decode_change_notice(std::string_view text);

}  // namespace densefs::store
