#include "fs/posix_acl.h"

#include <sys/stat.h>

#include <charconv>

namespace densefs::fs::posix_acl {
namespace {

std::uint16_t load16(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<std::uint16_t>(b[0] | (b[1] << 8));
}

std::uint32_t load32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
         (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
}

void store16(std::string& out, std::uint16_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>(v >> 8);
}

void store32(std::string& out, std::uint32_t v) {
  for (int shift = 0; shift < 32; shift += 8) out += static_cast<char>((v >> shift) & 0xff);
}

// The order posix_acl_valid requires, as a state machine over the tags.
bool valid(const acl& a) {
  enum { want_user_obj, in_users, in_groups, want_other, done } state = want_user_obj;
  bool named = false;
  for (const entry& e : a) {
    if (e.perm & ~k_perm_bits) return false;
    switch (e.tag) {
      case k_user_obj:
        if (state != want_user_obj) return false;
        state = in_users;
        break;
      case k_user:
        // -1 is no one's id: the kernel maps no uid or gid to it.
        if (state != in_users || e.id == k_undefined_id) return false;
        named = true;
        break;
      case k_group_obj:
        if (state != in_users) return false;
        state = in_groups;
        break;
      case k_group:
        if (state != in_groups || e.id == k_undefined_id) return false;
        named = true;
        break;
      case k_mask:
        if (state != in_groups) return false;
        state = want_other;
        break;
      case k_other:
        if (state != want_other && !(state == in_groups && !named)) return false;
        state = done;
        break;
      default:
        return false;
    }
  }
  return state == done;
}

entry* find(acl& a, std::uint16_t tag) {
  for (entry& e : a)
    if (e.tag == tag) return &e;
  return nullptr;
}

}  // namespace

std::optional<acl> parse(std::string_view bytes) {
  if (bytes.size() < k_header_bytes) return std::nullopt;
  if (load32(bytes.data()) != k_version) return std::nullopt;
  const std::size_t body = bytes.size() - k_header_bytes;
  if (body % k_entry_bytes != 0) return std::nullopt;
  const std::size_t count = body / k_entry_bytes;
  // An empty ACL is never sent (the kernel removes the xattr instead); the
  // smallest valid one has the owner, group and other entries.
  if (count < 3 || count > k_max_entries) return std::nullopt;
  acl a;
  a.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const char* p = bytes.data() + k_header_bytes + i * k_entry_bytes;
    entry e{load16(p), load16(p + 2), load32(p + 4)};
    if (e.tag != k_user && e.tag != k_group) e.id = k_undefined_id;
    a.push_back(e);
  }
  if (!valid(a)) return std::nullopt;
  return a;
}

std::string serialize(const acl& a) {
  std::string out;
  out.reserve(k_header_bytes + a.size() * k_entry_bytes);
  store32(out, k_version);
  for (const entry& e : a) {
    store16(out, e.tag);
    store16(out, e.perm);
    store32(out, (e.tag == k_user || e.tag == k_group) ? e.id : k_undefined_id);
  }
  return out;
}

acl from_mode(mode_t mode) {
  return {
      {k_user_obj, static_cast<std::uint16_t>((mode >> 6) & 07), k_undefined_id},
      {k_group_obj, static_cast<std::uint16_t>((mode >> 3) & 07), k_undefined_id},
      {k_other, static_cast<std::uint16_t>(mode & 07), k_undefined_id},
  };
}

bool equivalent_mode(const acl& a, mode_t& mode) {
  mode_t bits = 0;
  bool equivalent = true;
  for (const entry& e : a) {
    switch (e.tag) {
      case k_user_obj:
        bits |= static_cast<mode_t>(e.perm & 07) << 6;
        break;
      case k_group_obj:
        bits |= static_cast<mode_t>(e.perm & 07) << 3;
        break;
      case k_other:
        bits |= e.perm & 07;
        break;
      case k_mask:
        // After the owning group in a valid ACL: the mask is what the
        // group bits show. A mask alone still keeps the ACL (it holds the
        // owning group's own bits), as in the kernel's posix_acl_equiv_mode.
        bits = (bits & ~static_cast<mode_t>(S_IRWXG)) | (static_cast<mode_t>(e.perm & 07) << 3);
        equivalent = false;
        break;
      default:
        equivalent = false;
    }
  }
  mode = (mode & ~static_cast<mode_t>(S_IRWXU | S_IRWXG | S_IRWXO)) | bits;
  return equivalent;
}

void apply_chmod(acl& a, mode_t mode) {
  for (entry& e : a) {
    if (e.tag == k_user_obj) e.perm = (mode >> 6) & 07;
    if (e.tag == k_other) e.perm = mode & 07;
  }
  entry* group = find(a, k_mask);
  if (!group) group = find(a, k_group_obj);
  if (group) group->perm = (mode >> 3) & 07;  // a valid ACL has one
}

std::optional<acl> inherit(const acl& default_acl, mode_t& mode) {
  acl a = default_acl;
  bool equivalent = true;
  entry* group = nullptr;
  for (entry& e : a) {
    switch (e.tag) {
      case k_user_obj:
        e.perm &= (mode >> 6) & 07;
        mode &= ~static_cast<mode_t>(S_IRWXU) | (static_cast<mode_t>(e.perm) << 6);
        break;
      case k_other:
        e.perm &= mode & 07;
        mode &= ~static_cast<mode_t>(S_IRWXO) | e.perm;
        break;
      case k_group_obj:
        if (!group) group = &e;
        break;
      case k_mask:
        group = &e;
        equivalent = false;
        break;
      default:
        equivalent = false;
    }
  }
  if (group) {
    group->perm &= (mode >> 3) & 07;
    mode &= ~static_cast<mode_t>(S_IRWXG) | (static_cast<mode_t>(group->perm) << 3);
  }
  if (equivalent) return std::nullopt;
  return a;
}

bool caller_credentials::in_group_or_capable(gid_t gid) const {
  if (cap_fsetid || fsgid == gid) return true;
  for (gid_t g : groups)
    if (g == gid) return true;
  return false;
}

std::optional<caller_credentials> parse_proc_status(std::string_view status, gid_t fsgid) {
  caller_credentials c;
  c.fsgid = fsgid;
  bool have_groups = false;
  bool have_caps = false;
  while (!status.empty()) {
    const std::size_t end = status.find('\n');
    std::string_view line = status.substr(0, end);
    status = end == std::string_view::npos ? std::string_view{} : status.substr(end + 1);
    const auto value_of = [&](std::string_view key) -> std::optional<std::string_view> {
      if (line.substr(0, key.size()) != key) return std::nullopt;
      return line.substr(key.size());
    };
    if (auto v = value_of("Groups:")) {
      have_groups = true;
      std::string_view rest = *v;
      for (;;) {
        while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
          rest.remove_prefix(1);
        if (rest.empty()) break;
        gid_t g = 0;
        auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), g);
        if (ec != std::errc{}) return std::nullopt;
        c.groups.push_back(g);
        rest.remove_prefix(static_cast<std::size_t>(p - rest.data()));
      }
    } else if (auto v = value_of("CapEff:")) {
      std::string_view hex = *v;
      while (!hex.empty() && (hex.front() == ' ' || hex.front() == '\t')) hex.remove_prefix(1);
      std::uint64_t caps = 0;
      auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), caps, 16);
      if (ec != std::errc{} || p == hex.data()) return std::nullopt;
      constexpr int k_cap_fsetid = 4;  // linux/capability.h
      c.cap_fsetid = (caps >> k_cap_fsetid) & 1;
      have_caps = true;
    }
  }
  if (!have_groups || !have_caps) return std::nullopt;
  return c;
}

}  // namespace densefs::fs::posix_acl
