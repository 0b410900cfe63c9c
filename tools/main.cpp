// The densefs executable: everything lives in densefs_tools so tests can run
// the same code in-process.
#include <unistd.h>

#include <iostream>

#include "tools/tool_main.h"

int main(int argc, char** argv) {
  const densefs::tools::tool_io io{std::cout, std::cerr, ::isatty(STDOUT_FILENO) == 1};
  return densefs::tools::densefs_main(argc, argv, io);
}
