// POSIX ACLs as the kernel hands them to a FUSE file system: the bytes of
// the system.posix_acl_access and system.posix_acl_default xattrs (the
// "version 2" xattr format of include/uapi/linux/posix_acl_xattr.h), and the
// rules ext4 applies with them (fs/posix_acl.c): the mode an access ACL
// implies, chmod rewriting the ACL, and what a new inode inherits from its
// directory's default ACL. The kernel evaluates ACLs in its permission
// checks (FUSE_CAP_POSIX_ACL); densefs keeps them and the mode in step.
//
// Pure functions of bytes and modes, no I/O: the value comes from a
// setxattr request, so it is untrusted and every length is checked.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace densefs::fs::posix_acl {

inline constexpr std::string_view k_access_name = "system.posix_acl_access";
inline constexpr std::string_view k_default_name = "system.posix_acl_default";

// The xattr format: a little-endian u32 version, then entries of
// {u16 tag, u16 perm, u32 id}, little-endian.
inline constexpr std::uint32_t k_version = 2;
inline constexpr std::size_t k_header_bytes = 4;
inline constexpr std::size_t k_entry_bytes = 8;
// The kernel reads an ACL back for its permission checks into one page
// (fs/fuse/acl.c) and refuses to set a larger one (E2BIG): (4096 - 4) / 8.
inline constexpr std::size_t k_max_entries = 511;
// The id of the entries that name no one (owner, owning group, mask, other).
inline constexpr std::uint32_t k_undefined_id = 0xffffffffu;

enum tag : std::uint16_t {
  k_user_obj = 0x01,
  k_user = 0x02,
  k_group_obj = 0x04,
  k_group = 0x08,
  k_mask = 0x10,
  k_other = 0x20,
};

// Permission bits of an entry: read 4, write 2, execute 1.
inline constexpr std::uint16_t k_perm_bits = 07;

struct entry {
  std::uint16_t tag;
  std::uint16_t perm;
  std::uint32_t id;  // a uid or gid for k_user and k_group, else k_undefined_id
  bool operator==(const entry&) const = default;
};

using acl = std::vector<entry>;

// Decodes and checks an ACL as the kernel's posix_acl_valid does: version 2,
// whole entries, at least one, permissions within rwx, one owner entry
// first, named users, the owning group, named groups, a mask (required
// when there are named entries), one other entry last. Nothing: invalid
// (EINVAL to the caller).
std::optional<acl> parse(std::string_view bytes);

// The xattr bytes of `a` (entries in their order; ids of unnamed entries
// written as k_undefined_id, as the kernel does).
std::string serialize(const acl& a);

// The ACL a mode alone stands for: owner, owning group and other entries.
acl from_mode(mode_t mode);

// posix_acl_equiv_mode: `mode` with its rwx bits taken from `a` (the group
// bits from the mask if there is one). Returns true if `a` says nothing the
// mode cannot (no named entries and no mask), so it need not be stored.
bool equivalent_mode(const acl& a, mode_t& mode);

// posix_acl_chmod: after a chmod to `mode`, the owner, other, and mask
// entries (or owning-group entry without a mask) take its rwx bits.
void apply_chmod(acl& a, mode_t mode);

// posix_acl_create for a new inode whose directory has `default_acl`: the
// requested `mode` is narrowed by the ACL's owner, other, and mask (or
// owning group) entries, and those entries by the mode. Returns the access
// ACL to store, or nothing if it would be equivalent to the mode.
std::optional<acl> inherit(const acl& default_acl, mode_t& mode);

// What the kernel's in_group_or_capable asks of a caller: in the group
// (fsgid or a supplementary group), or holding CAP_FSETID.
struct caller_credentials {
  gid_t fsgid = 0;
  std::vector<gid_t> groups;
  bool cap_fsetid = false;
  bool in_group_or_capable(gid_t gid) const;
};

// The "Groups:" and "CapEff:" lines of a /proc/PID/status text. Nothing if
// either is missing or malformed.
std::optional<caller_credentials> parse_proc_status(std::string_view status, gid_t fsgid);

}  // namespace densefs::fs::posix_acl
