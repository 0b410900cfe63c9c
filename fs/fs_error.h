// A POSIX error to reply with; not logged (ENOENT, EEXIST... are normal).
// run_op (ops_common.h) turns it into the reply.
#pragma once

#include <stdexcept>

namespace densefs::fs {

class fs_error : public std::runtime_error {
 public:
  explicit fs_error(int error_number) : std::runtime_error("fs error"), errno_(error_number) {}
  int error_number() const { return errno_; }

 private:
  int errno_;
};

}  // namespace densefs::fs
