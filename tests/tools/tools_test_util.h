// Running the densefs CLI in-process and checking what a user would see.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"
#include "tools/tool_main.h"

namespace densefs::tools::testing {

struct cli_result {
  int status = -1;
  std::string out;
  std::string err;
};

inline cli_result run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const tool_io io{out, err, false};
  cli_result r;
  r.status = densefs_main(args, io);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// An error is exactly one line "densefs: <what>: <why>".
inline ::testing::AssertionResult is_one_error_line(const std::string& err) {
  const auto newlines = std::count(err.begin(), err.end(), '\n');
  if (err.rfind("densefs: ", 0) != 0 || newlines != 1 || err.back() != '\n') {
    return ::testing::AssertionFailure() << "not one 'densefs: ' line: '" << err << "'";
  }
  return ::testing::AssertionSuccess();
}

using test::temp_dir;

// Whole files, for tests that write inputs and read outputs of the CLI.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::filesystem::path& p, const std::string& data) {
  std::ofstream(p, std::ios::binary) << data;
}

}  // namespace densefs::tools::testing
