#!/usr/bin/env bash
# Before and after in one run: ext4, btrfs compress-force=zstd:3 (when it can
# be made), densefs built from an earlier commit and densefs under test, side
# by side in one `densefs bench` (not a test; the machine is shared, so
# compare ratios from one run). Inputs are the ones tests/bench/targets.sh
# prepares (made here if missing). Needs root (cold rows, the loop device).
# Usage: tests/bench/compare.sh BASE_DENSEFS NEW_DENSEFS [WORK_DIR] [-- BENCH_ARGS...]
#   e.g. tests/bench/compare.sh /work/base/build/tools/densefs build/tools/densefs \
#          /var/tmp/densefs-compare -- --workloads write,read,walk --procs 1,2,4
# BASE_OPTS and NEW_OPTS (environment) are -o options for the two mounts.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[[ $# -ge 2 ]] || {
  echo "usage: $0 BASE_DENSEFS NEW_DENSEFS [WORK_DIR] [-- BENCH_ARGS...]" >&2
  exit 2
}
base=$(realpath "$1")
new=$(realpath "$2")
work=${3:-/var/tmp/densefs-compare}
shift $(($# > 3 ? 3 : $#))
[[ ${1:-} == -- ]] && shift

input=/var/tmp/densefs-targets/input
if [[ ! -f $input/big.bin ]]; then
  rm -rf "$input"
  "$new" bench --prepare "$input" --size 1G --big-size 1G --jpeg "$repo/../shared/corpus/jpeg"
fi
cleanup() {
  for m in "$work/base/mnt" "$work/new/mnt"; do
    if mountpoint -q "$m"; then "$new" umount "$m" || true; fi
  done
  if mountpoint -q "$work/btrfs"; then umount "$work/btrfs" || true; fi
  rm -f "$work/btrfs.img"
}
cleanup
trap cleanup EXIT
rm -rf "$work" && mkdir -p "$work/ext4" "$work/btrfs" "$work/base/mnt" "$work/new/mnt"

# shellcheck source=tests/bench/btrfs_peer.sh
source "$repo/tests/bench/btrfs_peer.sh"
btrfs_peer "$work/btrfs" "$work/btrfs.img"

"$base" mkfs "$work/base/store" >/dev/null
"$base" mount "$work/base/store" "$work/base/mnt" ${BASE_OPTS:+-o "$BASE_OPTS"}
"$new" mkfs "$work/new/store" >/dev/null
"$new" mount "$work/new/store" "$work/new/mnt" ${NEW_OPTS:+-o "$NEW_OPTS"}
"$new" bench --input "$input" "$@" --target "ext4=$work/ext4" "${peers[@]}" \
  --target "before=$work/base/mnt" --target "densefs=$work/new/mnt" \
  --save-json "$work/run.json" | tee "$work/run.txt"
