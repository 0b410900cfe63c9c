// What the codec tests share beyond test data (tests/random_bytes.h).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"

namespace densefs::codec::testing {

// The hostile-input tests of codec `id`: the derived fixture's SetUp puts a
// chunk in plain_ and its encoding with `id` in stored_; the tests feed the
// decoder damaged copies of stored_.
template <codec_id id>
class damaged_chunk_test : public ::testing::Test {
 protected:
  // Every outcome must be codec_error or exactly plain_.size() bytes;
  // returns how many were errors.
  int count_errors(const std::vector<std::string>& inputs) {
    int errors = 0;
    for (const auto& bad : inputs) {
      try {
        const std::string out = decode_chunk(id, bad, plain_.size());
        EXPECT_EQ(out.size(), plain_.size());
      } catch (const codec_error&) {
        ++errors;
      }
    }
    return errors;
  }

  std::string plain_;
  std::string stored_;
};

// Asserts that parse(spec) throws a codec_error whose message contains
// `token`: every spec parser names the part it rejects.
template <class Parse>
void expect_spec_rejected(Parse parse, std::string_view spec, std::string_view token) {
  try {
    parse(spec);
    ADD_FAILURE() << "'" << spec << "' was accepted";
  } catch (const codec_error& e) {
    EXPECT_NE(std::string(e.what()).find(token), std::string::npos)
        << "error for '" << spec << "' does not name '" << token << "': " << e.what();
  }
}

}  // namespace densefs::codec::testing
