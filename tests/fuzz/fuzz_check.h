// Shared bits of the libFuzzer targets: a check that aborts (libFuzzer then
// saves the input as a crasher), whatever a failed check means.
#pragma once

#include <cstdio>
#include <cstdlib>

// A violated property (round trip, size bound): abort so libFuzzer records
// the input. Unlike assert() it stays on in release builds.
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
