// What a test needs from the machine it runs on (the JPEG corpus, a tool,
// /dev/fuse), and what it does when that is missing: under
// DENSEFS_REQUIRE_TOOLS=1 (tools/setup.sh test, so CI) it fails, so that a
// run cannot go green by skipping; by hand it skips, saying why.
// Shared by the unit and the mount tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace densefs::test {

// The checkout the tests were built from (a generated source of each test
// binary: tests/CMakeLists.txt).
const char* source_dir();

// Whether a missing tool, corpus or device fails the test.
inline bool tools_required() {
  const char* v = std::getenv("DENSEFS_REQUIRE_TOOLS");
  return v != nullptr && std::string(v) == "1";
}

// A folder of the shared test corpus (`jpeg`, ...): DENSEFS_CORPUS_DIR/kind
// (tools/setup.sh finds the corpus and sets it), else ../shared/corpus/kind
// beside the checkout.
inline std::filesystem::path corpus_dir(const std::string& kind) {
  if (const char* dir = std::getenv("DENSEFS_CORPUS_DIR"); dir != nullptr && *dir != '\0')
    return std::filesystem::path(dir) / kind;
  return std::filesystem::path(source_dir()) / ".." / "shared" / "corpus" / kind;
}

}  // namespace densefs::test

// In a test body or SetUp (a void function), for something the machine
// lacks: fails under DENSEFS_REQUIRE_TOOLS=1, else skips. `why` is what a
// stream takes: DENSEFS_SKIP_UNLESS_REQUIRED("no corpus at " << dir).
#define DENSEFS_SKIP_UNLESS_REQUIRED(why)                                        \
  do {                                                                           \
    if (::densefs::test::tools_required()) {                                     \
      GTEST_FAIL() << why << " (DENSEFS_REQUIRE_TOOLS=1: a skip would hide it)"; \
    } else {                                                                     \
      GTEST_SKIP() << why;                                                       \
    }                                                                            \
  } while (0)
