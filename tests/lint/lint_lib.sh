# shellcheck shell=bash
# Sourced by the tests/lint/*_test.sh scripts.

# Prints the path of a tool: on PATH, or where tools/setup.sh installs it.
find_tool() {
  local name=$1 dir
  if command -v "$name" 2>/dev/null; then return 0; fi
  for dir in "${DENSEFS_TOOLS_DIR:-/opt/densefs-tools}/venv/bin" "${CARGO_HOME:-${HOME:-/root}/.cargo}/bin"; do
    if [[ -x $dir/$name ]]; then
      echo "$dir/$name"
      return 0
    fi
  done
  return 1
}

# A missing tool fails the test when tools/setup.sh installed the tools
# (DENSEFS_REQUIRE_TOOLS=1), and skips it with the reason otherwise.
missing_tool() {
  if [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]]; then
    echo "FAIL: $1 is not installed (tools/setup.sh test installs it)" >&2
    exit 1
  fi
  echo "SKIP: $1 is not installed; run tools/setup.sh test to install it" >&2
  exit 77
}
