// Running the densefs CLI in-process and checking what a user would see.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

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

// A fresh directory removed with everything in it at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "densefs-tools-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace densefs::tools::testing
