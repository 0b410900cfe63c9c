#!/usr/bin/env bash
# A tree written and read back through three mounts side by side in one run
# (docs/scale-out.md, "Measured"): the embedded store, and a scale-out
# volume (records in PostgreSQL, packs in S3: a private PostgreSQL 15 and a
# private radosgw on loopback, tests/mount/postgres_lib.sh and s3_lib.sh).
# Rows: the copy in (cp -a, then densefs sync), a cold read (remounted,
# page cache dropped; the scale-out volume with its local cache deleted too,
# so every record comes from S3), a read with the local cache warm
# (remounted, page cache dropped, cache kept), and the stored bytes of
# both. Each read row runs ROUNDS times, alternating the order, the median
# kept. Not a test: a measurement; needs root and /dev/fuse.
# Usage: tests/bench/scale_out_io.sh [path/to/densefs] [TREE] [ROUNDS]
#   TREE  default /usr/share/doc
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tree=${2:-/usr/share/doc}
rounds=${3:-3}
# shellcheck source=../mount/mount_lib.sh
source "$repo/tests/mount/mount_lib.sh" "${1:-$repo/build/tools/densefs}" "$repo"
# shellcheck source=../mount/postgres_lib.sh
source "$repo/tests/mount/postgres_lib.sh"
# shellcheck source=../mount/s3_lib.sh
source "$repo/tests/mount/s3_lib.sh"

kinds=(embedded scale-out)
mkdir -p "$work/embedded.mnt" "$work/scale-out.mnt"
"$densefs" mkfs "$work/embedded.store" >/dev/null
pg_createdb bench
"$densefs" mkfs --meta "$(pg_conninfo bench)" --data "s3://bench/vol?endpoint=$S3_ENDPOINT" \
  "$work/scale-out.store" >/dev/null

# ingest=strong: every file gets its policy codec at write time, so the
# stored bytes do not depend on how far the idle re-encoder got.
mount_kind() { mount_densefs "$work/$1.store" "$work/$1.mnt" -o ingest=strong; }
umount_kind() { umount_densefs "$work/$1.mnt"; }
timed() {
  local start
  start=$(now)
  "$@" >/dev/null
  elapsed "$start" "$(now)"
}
read_all() { tar -C "$1" -cf - . | cat >/dev/null; }

declare -A copy cold warm stored
for k in "${kinds[@]}"; do
  mount_kind "$k"
  copy[$k]=$(timed bash -c "cp -a '$tree' '$work/$k.mnt/tree' && '$densefs' sync '$work/$k.mnt'")
  stored[$k]=$("$densefs" stats "$work/$k.mnt" --json | jq .stored_bytes)
  umount_kind "$k"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
declare -A cold_runs warm_runs
for ((r = 0; r < rounds; r++)); do
  order=("${kinds[@]}")
  ((r % 2 == 0)) || order=("${kinds[1]}" "${kinds[0]}")
  for k in "${order[@]}"; do
    rm -rf "$work/$k.store/cache"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    mount_kind "$k"
    cold_runs[$k]+=" $(timed read_all "$work/$k.mnt/tree")"
    umount_kind "$k"
    echo 3 >/proc/sys/vm/drop_caches
    mount_kind "$k"
    warm_runs[$k]+=" $(timed read_all "$work/$k.mnt/tree")"
    umount_kind "$k"
  done
done
for k in "${kinds[@]}"; do
  # shellcheck disable=SC2086 # the runs are words
  cold[$k]=$(median ${cold_runs[$k]})
  # shellcheck disable=SC2086
  warm[$k]=$(median ${warm_runs[$k]})
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", b / a }'; }
echo "tree: $tree ($(du -sb "$tree" | cut -f1) bytes), $rounds rounds (median)"
printf '%-38s %12s %12s %10s\n' row embedded scale-out ratio
printf '%-38s %11ss %11ss %10s\n' "cp -a + densefs sync" "${copy[embedded]}" "${copy[scale-out]}" \
  "$(ratio "${copy[embedded]}" "${copy[scale-out]}")"
printf '%-38s %11ss %11ss %10s\n' "read all, cold (scale-out: from S3)" "${cold[embedded]}" \
  "${cold[scale-out]}" "$(ratio "${cold[embedded]}" "${cold[scale-out]}")"
printf '%-38s %11ss %11ss %10s\n' "read all, local cache warm" "${warm[embedded]}" \
  "${warm[scale-out]}" "$(ratio "${warm[embedded]}" "${warm[scale-out]}")"
printf '%-38s %12s %12s %10s\n' "stored bytes" "${stored[embedded]}" "${stored[scale-out]}" \
  "$(ratio "${stored[embedded]}" "${stored[scale-out]}")"
