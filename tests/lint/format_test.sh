#!/usr/bin/env bash
# Every C++ source follows .clang-format. A badly formatted file is checked
# first, so a formatter that accepts anything cannot make this test pass.
# usage: format_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: format_test.sh SOURCE_DIR}
# shellcheck source=lint_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lint_lib.sh"

clang_format=$(find_tool clang-format) || missing_tool "clang-format (Debian clang-format)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cp "$src/.clang-format" "$tmp/"
printf 'int  main( ){return 0 ;}\n' >"$tmp/bad.cpp"
if "$clang_format" --dry-run --Werror "$tmp/bad.cpp" >/dev/null 2>&1; then
  echo "FAIL: $clang_format accepted a badly formatted file" >&2
  exit 1
fi

cd "$src"
# Our own sources; third_party/ keeps its upstream's formatting.
mapfile -t files < <(git ls-files '*.cpp' '*.h' ':!third_party' 2>/dev/null ||
  find codec store fs tools tests -name '*.cpp' -o -name '*.h')
"$clang_format" --dry-run --Werror "${files[@]}"
echo "${#files[@]} C++ files formatted"
