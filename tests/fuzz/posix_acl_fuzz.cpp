// POSIX ACL xattr bytes (fs/posix_acl.cpp): what a setxattr of
// system.posix_acl_access or _default hands densefs, and what it reads back
// from the store to inherit or chmod.
//
// Properties: parse never crashes or reads out of bounds; what it accepts
// serializes back to bytes that parse to the same ACL and has at most
// k_max_entries entries; the mode rules keep a valid ACL valid and touch
// only the rwx bits of a mode.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fs/posix_acl.h"
#include "tests/fuzz/fuzz_check.h"

using namespace densefs::fs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto acl = posix_acl::parse(bytes);
  if (!acl) return 0;
  FUZZ_CHECK(acl->size() <= posix_acl::k_max_entries);
  const auto again = posix_acl::parse(posix_acl::serialize(*acl));
  FUZZ_CHECK(again && *again == *acl);

  // A mode from the input's first bytes, with type and special bits.
  const mode_t mode = S_IFREG | ((size > 1 ? (data[0] | (data[1] << 8)) : 0) & 07777);
  constexpr mode_t k_rwx = S_IRWXU | S_IRWXG | S_IRWXO;
  mode_t m = mode;
  posix_acl::equivalent_mode(*acl, m);
  FUZZ_CHECK((m & ~k_rwx) == (mode & ~k_rwx));

  auto chmodded = *acl;
  posix_acl::apply_chmod(chmodded, mode);
  FUZZ_CHECK(posix_acl::parse(posix_acl::serialize(chmodded)));
  m = S_IFREG;
  posix_acl::equivalent_mode(chmodded, m);
  FUZZ_CHECK((m & k_rwx) == (mode & k_rwx));  // chmod then the ACL's mode: the chmod

  m = mode;
  const auto inherited = posix_acl::inherit(*acl, m);
  FUZZ_CHECK((m & ~k_rwx) == (mode & ~k_rwx));
  FUZZ_CHECK((m & k_rwx & ~mode) == 0);  // only narrows
  if (inherited) {
    FUZZ_CHECK(posix_acl::parse(posix_acl::serialize(*inherited)));
    mode_t from_acl = 0;
    posix_acl::equivalent_mode(*inherited, from_acl);
    FUZZ_CHECK((from_acl & k_rwx) == (m & k_rwx));  // the ACL and the mode agree
  }
  return 0;
}
