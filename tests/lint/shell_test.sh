#!/usr/bin/env bash
# The project's shell scripts (setup, CI, docker entrypoint, shell tests)
# pass shellcheck. A script with a known defect is checked first, so a
# checker that accepts anything cannot make this test pass.
# usage: shell_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: shell_test.sh SOURCE_DIR}
# shellcheck source=lint_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lint_lib.sh"

shellcheck=$(find_tool shellcheck) || missing_tool "shellcheck (Debian shellcheck)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck disable=SC2016 # the $1 is for the checked script, unexpanded
printf '#!/bin/bash\nrm -rf $1/*\n' >"$tmp/bad.sh"
if "$shellcheck" "$tmp/bad.sh" >/dev/null 2>&1; then
  echo "FAIL: $shellcheck accepted an unquoted rm -rf \$1/*" >&2
  exit 1
fi

cd "$src"
scripts=(.ci/run)
while IFS= read -r -d '' f; do scripts+=("$f"); done < <(
  find tools docker tests -name '*.sh' -print0 | sort -z)
echo "shellcheck ${scripts[*]}"
"$shellcheck" --external-sources --source-path=SCRIPTDIR "${scripts[@]}"
echo "shell scripts OK"
