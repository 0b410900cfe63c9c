// The one exception-to-errno funnel at the FUSE boundary. Every operation
// body runs inside run_op; on success the body has replied, on failure
// run_op replies with the errno once and logs unexpected failures once.
#pragma once

#include <cerrno>
#include <new>
#include <string>
#include <string_view>

#include "codec/codec.h"
#include "fs/filesystem.h"
#include "store/error.h"
#include "store/log.h"

namespace densefs::fs {

// Inside a catch block: the errno of the exception being handled, logged
// unless it is one an operation answers with on purpose (fs_error).
inline int error_of_current_exception(const char* op) {
  try {
    throw;
  } catch (const fs_error& e) {
    return e.error_number();
  } catch (const store::store_error& e) {
    log_error(std::string(op) + ": " + e.what());
    return e.error_number();
  } catch (const codec::codec_error& e) {
    log_error(std::string(op) + ": " + e.what());
    return EIO;
  } catch (const std::bad_alloc&) {
    log_error(std::string(op) + ": out of memory");
    return ENOMEM;
  } catch (const std::exception& e) {
    log_error(std::string(op) + ": " + e.what());
    return EIO;
  }
}

template <typename Body>
void run_op(fuse_req_t req, const char* op, Body&& body) {
  int error = 0;
  try {
    body();
    return;
  } catch (...) {
    error = error_of_current_exception(op);
  }
  fuse_reply_err(req, error);
}

inline bool is_posix_acl(std::string_view name) {
  return name == posix_acl::k_access_name || name == posix_acl::k_default_name;
}

// system.* names other than the ACLs: nfs4_acl, richacl... that nothing here
// would enforce.
inline bool is_unsupported_system(std::string_view name) {
  return name.substr(0, 7) == "system." && !is_posix_acl(name);
}

// Replies to a getxattr or listxattr with `value`: its size to a size
// query (`size` 0), else the value, or ERANGE when it does not fit.
inline void reply_value(fuse_req_t req, std::string_view value, std::size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    throw fs_error(ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

}  // namespace densefs::fs
