#!/usr/bin/env bash
# The "fast" issue's targets, side by side with ext4 in one run (not a test:
# about 15 minutes; compare ratios, the machine is shared). Prepares the
# inputs once (a copy of all of /usr/share, a 1 GiB big.bin from /usr/lib
# and /usr/share, the JPEG corpus), makes a fresh store and an ext4
# directory on the same disk, runs `densefs bench` on both, prints the table
# and checks it with targets.py. Needs root (cold rows drop caches).
# Usage: tests/bench/targets.sh [path/to/densefs] [WORK_DIR] [-- MOUNT_OPTIONS [MKFS_OPTIONS]]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
densefs=$(realpath "${1:-$repo/build/tools/densefs}")
work=${2:-/var/tmp/densefs-targets}
shift $(($# > 2 ? 2 : $#))
[[ ${1:-} == -- ]] && shift
mount_options=${1:-}
mkfs_options=${2:-}

input=$work/input
if [[ ! -f $input/big.bin ]]; then
  rm -rf "$input"
  "$densefs" bench --prepare "$input" --size 1G --big-size 1G \
    --jpeg "$repo/../shared/corpus/jpeg"
fi
run=$work/run
if mountpoint -q "$run/mnt" 2>/dev/null; then "$densefs" umount "$run/mnt"; fi
rm -rf "$run" && mkdir -p "$run/ext4" "$run/mnt"
# shellcheck disable=SC2086  # MKFS_OPTIONS are words
"$densefs" mkfs $mkfs_options "$run/store" >/dev/null
"$densefs" mount "$run/store" "$run/mnt" ${mount_options:+-o "$mount_options"}
trap '"$densefs" umount "$run/mnt" || true' EXIT
"$densefs" bench --input "$input" --procs 1,2,4 --target "ext4=$run/ext4" \
  --target "densefs=$run/mnt" --save-json "$work/run.json" --svg "$work/run.svg" |
  tee "$work/run.txt"
echo
python3 "$repo/tests/bench/targets.py" "$work/run.json" | tee "$work/targets.txt"
