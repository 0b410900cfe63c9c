#!/usr/bin/env bash
# FUSE over io_uring against /dev/fuse: the same densefs mounted with
# -o transport=device and -o transport=uring in turn, ROUNDS rounds, a fresh
# store each time (not a test: a minute or two; compare the two columns of
# one run, the machine is shared). Rows: rsync -a of TREE into the mount
# (page cache dropped first), cp -a of it and sync, tar -c of the rsync copy
# (its pages are cold: written, not read) and again warm, a find -ls.
# Needs root (drop_caches) and a densefs built with libfuse 3.18 on a kernel
# whose fuse enable_uring parameter is on (docs/read-path.md).
# Usage: tests/bench/transport.sh [path/to/densefs] [TREE] [ROUNDS]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
densefs=$(realpath "${1:-$repo/build/tools/densefs}")
tree=${2:-/usr/share/doc}
rounds=${3:-3}
work=/var/tmp/densefs-transport
[[ $(id -u) -eq 0 ]] || {
  echo "transport.sh: needs root (drops the page cache)" >&2
  exit 1
}

now() { date +%s.%N; }
cleanup() {
  if mountpoint -q "$work/mnt" 2>/dev/null; then "$densefs" umount "$work/mnt" || true; fi
}
trap cleanup EXIT

# One round on one transport: prints the row's seconds.
round() {
  local transport=$1 t0 t1 t2 t3 t4 t5
  cleanup
  rm -rf "$work" && mkdir -p "$work/mnt"
  "$densefs" mkfs "$work/store" >/dev/null
  "$densefs" mount "$work/store" "$work/mnt" -o "transport=$transport"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  t0=$(now)
  rsync -a "$tree/" "$work/mnt/rsync/"
  t1=$(now)
  cp -a "$tree" "$work/mnt/cp"
  sync
  t2=$(now)
  tar -c -C "$work/mnt" rsync | cat >/dev/null
  t3=$(now)
  tar -c -C "$work/mnt" rsync | cat >/dev/null
  t4=$(now)
  find "$work/mnt" -ls >/dev/null
  t5=$(now)
  "$densefs" umount "$work/mnt"
  awk -v t="$transport" -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v e="$t4" -v f="$t5" \
    'BEGIN { printf "%-7s rsync %6.2f  cp+sync %6.2f  tar cold %6.2f  tar warm %6.2f  find %6.2f\n",
             t, b - a, c - b, d - c, e - d, f - e }'
}

echo "densefs: $densefs; tree: $tree; $rounds rounds"
for ((i = 1; i <= rounds; i++)); do
  round device
  round uring
done
rm -rf "$work"
