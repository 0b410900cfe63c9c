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
  find tools docker tests packaging -name '*.sh' -print0 | sort -z)
echo "shellcheck ${scripts[*]}"
"$shellcheck" --external-sources --source-path=SCRIPTDIR "${scripts[@]}"
# CI's driver runs under pipefail: a `| head` (or `grep -q`, `grep -m`) that
# stops reading kills its writer with SIGPIPE once the output outgrows a
# pipe buffer, and the exit 141 fails the run. This ended a CI run whose
# tests had all passed, when the list of test times passed 64 KiB.
early_exit='\|[[:space:]]*(head|grep[[:space:]]+(-[a-zA-Z]*[qm]|--quiet|--max-count))'
# shellcheck disable=SC2016 # the $(...) is the checked text, unexpanded
printf 'x=$(seq 100000 | head -n 1)\n' >"$tmp/sigpipe.sh"
if ! grep -qE "$early_exit" "$tmp/sigpipe.sh"; then
  echo "FAIL: the early-exit pattern does not match \`seq | head\`" >&2
  exit 1
fi
if grep -nE "$early_exit" tools/setup.sh .ci/run | grep -v '# reads little:'; then
  echo "FAIL: tools/setup.sh or .ci/run pipes into a reader that stops early (above); use awk 'NR <= N' or sed -n, which read all input, or end the line with '# reads little: WHY'" >&2
  exit 1
fi
echo "shell scripts OK"
