// The errno of the store_error `f` throws, and its message when asked; 0
// when it throws none. For tests that expect a failure by its errno.
#pragma once

#include <string>

#include "store/error.h"

namespace densefs::test {

template <class F>
int error_of(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const store::store_error& e) {
    if (message) *message = e.what();
    return e.error_number();
  }
  return 0;
}

}  // namespace densefs::test
