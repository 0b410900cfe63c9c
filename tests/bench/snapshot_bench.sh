#!/usr/bin/env bash
# What snapshots cost (docs/backup.md, "Snapshots"; the issue's targets):
#   1. create and delete on a volume of 200,000 files (tests/bench/
#      scale_files.py), embedded and, with DENSEFS_BENCH_POSTGRES=1, in a
#      private PostgreSQL 15 (tests/mount/postgres_lib.sh): three snapshots,
#      1% of the files rewritten between them, each create and delete timed
#      through the mount (target: < 1 s each);
#   2. space: seven "nights" of TREE, 1% of its files changed each night,
#      rsync'd in and snapshotted, against a volume holding the last night
#      alone: stored chunk bytes and disk bytes (after gc) against the
#      last night's plus the chunks only the snapshots keep (target: <=
#      1.1x);
#   3. normal operations with 10 snapshots kept: `densefs bench` (write
#      and read rows) on two volumes holding the same TREE, one with 10
#      snapshots taken between its changes, side by side (target: within
#      5%).
# Not a test: a measurement; needs root and /dev/fuse; run it alone.
# DENSEFS_BENCH_PARTS (default 1,2,3) picks the parts; DENSEFS_BENCH_SWAP=1
# puts the volume with snapshots first in part 3 (the baseline column), to
# see what the order of the two targets does to the figures.
# Usage: tests/bench/snapshot_bench.sh [path/to/densefs] [TREE] [BENCH_INPUT]
#   TREE: default the /usr/share copy tests/bench/targets.sh prepares;
#   BENCH_INPUT: `densefs bench --prepare` output (default: a small one made
#   here from /usr/share/doc).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tree=$(realpath "${2:-/var/tmp/densefs-targets/input/tree}")
bench_input=${3:-}
# shellcheck source=../mount/mount_lib.sh
source "$repo/tests/mount/mount_lib.sh" "${1:-$repo/build/tools/densefs}" "$repo"
[[ -d $tree ]] || fail "no tree at $tree (tests/bench/targets.sh prepares it, or give TREE)"

# seconds CMD...: runs CMD, prints its wall seconds.
seconds() {
  local start
  start=$(now)
  "$@" >/dev/null
  elapsed "$start" "$(now)"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
stat_field() { "$densefs" stats "$1" --json | sed -n "s/.*\"$2\": *\\([0-9]*\\).*/\\1/p" | head -n 1; }
# rewrite_percent ROOT NIGHT: about 1% of ROOT's files get a line appended.
rewrite_percent() {
  local i=0 f
  while IFS= read -r -d '' f; do
    ((i++ % 100 == $2)) && printf 'night %s\n' "$2" >>"$f"
  done < <(find "$1" -type f -print0 | sort -z)
  return 0
}

# --- 1. create and delete at 200,000 files ---
create_delete() {
  local label=$1 store=$2 mnt=$3 k creates=() deletes=()
  mount_densefs "$store" "$mnt"
  python3 "$repo/tests/bench/scale_files.py" create "$mnt/files" 200000 >/dev/null
  "$densefs" sync "$mnt" >/dev/null
  for k in 1 2 3; do
    creates+=("$(seconds "$densefs" snapshot create "$mnt" "s$k")")
    for f in "$mnt"/files/d/000"$k"/f*; do printf 'round %s\n' "$k" >"$f"; done
    for f in "$mnt"/files/big/f000"$k"*; do printf 'round %s\n' "$k" >"$f"; done
    "$densefs" sync "$mnt" >/dev/null
  done
  for k in 2 1 3; do deletes+=("$(seconds "$densefs" snapshot delete "$mnt" "s$k")"); done
  umount_densefs "$mnt"
  printf '%-24s create %s s (median of 3; %s)  delete %s s (median of 3; %s)\n' "$label" \
    "$(printf '%s\n' "${creates[@]}" | median)" "${creates[*]}" \
    "$(printf '%s\n' "${deletes[@]}" | median)" "${deletes[*]}"
}
parts=,${DENSEFS_BENCH_PARTS:-1,2,3},
mkdir -p "$work/mnt"
if [[ $parts == *,1,* ]]; then
"$densefs" mkfs "$work/scale" >/dev/null
create_delete "embedded, 200k files" "$work/scale" "$work/mnt"
fi
if [[ $parts == *,1,* && ${DENSEFS_BENCH_POSTGRES:-0} == 1 ]]; then
  # shellcheck source=../mount/postgres_lib.sh
  source "$repo/tests/mount/postgres_lib.sh"
  pg_createdb snapbench
  "$densefs" mkfs "$work/pgscale" --meta "$(pg_conninfo snapbench)" >/dev/null
  create_delete "PostgreSQL, 200k files" "$work/pgscale" "$work/mnt"
fi

# --- 2. the space of seven nightly snapshots ---
cp -a "$tree" "$work/tree"
if [[ $parts == *,2,* ]]; then
"$densefs" mkfs "$work/nightly" >/dev/null
mount_densefs "$work/nightly" "$work/mnt"
rsync -aHAX "$work/tree/" "$work/mnt/"
for night in 1 2 3 4 5 6 7; do
  rewrite_percent "$work/tree" "$night"
  rsync -aHAX --delete "$work/tree/" "$work/mnt/"
  "$densefs" snapshot create "$work/mnt" "night-$night" >/dev/null
done
umount_densefs "$work/mnt"
"$densefs" mkfs "$work/last" >/dev/null
mount_densefs "$work/last" "$work/mnt"
rsync -aHAX "$work/tree/" "$work/mnt/"
umount_densefs "$work/mnt"
# Both re-encoded to the end (the background re-encoder had days on the
# nightly volume, minutes on the other), then collected.
for v in nightly last; do
  "$densefs" recompress "$work/$v" >/dev/null
  "$densefs" gc "$work/$v" >/dev/null
done
stored_7=$(stat_field "$work/nightly" stored_bytes)
disk_7=$(stat_field "$work/nightly" disk_bytes)
only=$(stat_field "$work/nightly" snapshot_only_bytes)
stored_1=$(stat_field "$work/last" stored_bytes)
disk_1=$(stat_field "$work/last" disk_bytes)
awk -v s7="$stored_7" -v d7="$disk_7" -v o="$only" -v s1="$stored_1" -v d1="$disk_1" 'BEGIN {
  printf "7 nightly snapshots: chunks %d B, disk %d B; the last night alone: chunks %d B, disk %d B; chunks only the snapshots keep: %d B\n", s7, d7, s1, d1, o
  printf "  chunks %.3fx (last night + changed chunks), disk %.3fx\n", s7 / (s1 + o), d7 / (d1 + o)
}'
fi

# --- 3. normal operations with 10 snapshots kept ---
[[ $parts == *,3,* ]] || exit 0
if [[ -z $bench_input ]]; then
  bench_input=$work/input
  "$densefs" bench --prepare "$bench_input" --size 150M --big-size 256M --source /usr/share/doc \
    --jpeg "$repo/../shared/corpus/jpeg" >/dev/null
fi
for v in none snap10; do
  "$densefs" mkfs "$work/$v" >/dev/null
  mkdir -p "$work/m-$v"
  mount_densefs "$work/$v" "$work/m-$v"
  rsync -aHAX "$work/tree/" "$work/m-$v/"
done
for k in $(seq 1 10); do
  rewrite_percent "$work/tree" "$k"
  for v in none snap10; do rsync -aHAX --delete "$work/tree/" "$work/m-$v/"; done
  "$densefs" snapshot create "$work/m-snap10" "s$k" >/dev/null
done
targets=(--target "none=$work/m-none" --target "snap10=$work/m-snap10")
if [[ ${DENSEFS_BENCH_SWAP:-0} == 1 ]]; then
  targets=(--target "snap10=$work/m-snap10" --target "none=$work/m-none")
fi
"$densefs" bench --input "$bench_input" --workloads write,read --procs 1,2 "${targets[@]}" |
  tee "$work/bench.txt"
for v in none snap10; do umount_densefs "$work/m-$v"; done
