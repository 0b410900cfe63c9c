#!/usr/bin/env bash
# docs/examples/*.mount pass `systemd-analyze verify` without a warning
# (it exits 0 on unknown keys, so any line naming the unit counts), and a
# misnamed copy is rejected, which shows the verifier really checks.
# usage: systemd_unit_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: systemd_unit_test.sh SOURCE_DIR}
# shellcheck source=lint_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lint_lib.sh"

analyze=$(find_tool systemd-analyze) || missing_tool "systemd-analyze (Debian systemd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

units=("$src"/docs/examples/*.mount)
[[ -e ${units[0]} ]] || { echo "FAIL: no docs/examples/*.mount unit" >&2; exit 1; }

cp "${units[0]}" "$tmp/misnamed.mount"
if "$analyze" verify "$tmp/misnamed.mount" >/dev/null 2>&1; then
  echo "FAIL: systemd-analyze accepted a mount unit whose name does not match Where=" >&2
  exit 1
fi

status=0
for unit in "${units[@]}"; do
  name=$(basename "$unit")
  where=$(sed -n 's/^Where=//p' "$unit")
  expected=$(systemd-escape --path --suffix=mount "$where")
  if [[ $name != "$expected" ]]; then
    echo "FAIL: $name mounts $where and must be named $expected" >&2
    status=1
  fi
  out=$("$analyze" verify "$unit" 2>&1) || { echo "$out" >&2; echo "FAIL: $name" >&2; status=1; continue; }
  if grep -F "$name" <<<"$out" >&2; then
    echo "FAIL: systemd-analyze verify warns about $name" >&2
    status=1
    continue
  fi
  echo "OK: $name"
done
exit $status
