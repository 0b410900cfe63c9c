// Errors raised by the store. Each carries the errno that the FUSE boundary
// replies with (EIO for corruption, ENOSPC for a full disk, ...) and a
// message with context: what failed, on which chunk/inode/file, and why.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

namespace densefs::store {

// The text of an errno value, for messages ("No space left on device").
inline std::string errno_text(int e) {
  return std::strerror(e);
}

class store_error : public std::runtime_error {
 public:
  store_error(int error_number, const std::string& what)
      : std::runtime_error(what), errno_(error_number) {}
  int error_number() const { return errno_; }

 private:
  int errno_;
};

}  // namespace densefs::store
