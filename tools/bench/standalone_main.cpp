// densefs-bench: the harness alone (cmake -DDENSEFS_BENCH_ONLY=ON), for
// machines without FUSE, RocksDB or Rust, e.g. macOS to measure APFS.
#include <unistd.h>

#include <iostream>

#include "tools/tool_main.h"

int main(int argc, char** argv) {
  const densefs::tools::tool_io io{std::cout, std::cerr, ::isatty(STDOUT_FILENO) == 1};
  std::vector<std::string> args(argv + 1, argv + argc);
  return densefs::tools::bench_main(args, io);
}
