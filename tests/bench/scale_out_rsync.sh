#!/usr/bin/env bash
# rsync -a of a tree onto the embedded store and onto a scale-out volume
# (records in PostgreSQL, packs in S3: a private PostgreSQL 15 on a unix
# socket with fsync off and a private radosgw on loopback,
# tests/mount/postgres_lib.sh and s3_lib.sh) side by side in one run
# (docs/scale-out.md, "Round trips"). Each round copies the tree into a
# new directory of each mount, alternating which goes first, then `densefs
# sync`; the median of ROUNDS is kept. Rows: rsync alone, rsync then sync
# (everything durable), and the pack objects in S3 after the first round
# (which stores the tree's chunks; later rounds find them stored) per GB
# of the tree, and after all of them, and the PUT requests the first copy
# took (densefs stats: object_requests).
# Not a test: a measurement; needs root and /dev/fuse.
# Usage: tests/bench/scale_out_rsync.sh [path/to/densefs] [TREE] [ROUNDS]
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
command -v rsync >/dev/null || missing_tool rsync

kinds=(embedded scale-out)
bucket="densefs-rsync-bench"
mkdir -p "$work/embedded.mnt" "$work/scale-out.mnt"
"$densefs" mkfs "$work/embedded.store" >/dev/null
pg_createdb bench
"$densefs" mkfs --meta "$(pg_conninfo bench)" --data "s3://$bucket/vol?endpoint=$S3_ENDPOINT" \
  "$work/scale-out.store" >/dev/null
for k in "${kinds[@]}"; do mount_densefs "$work/$k.store" "$work/$k.mnt"; done

timed() {
  local start
  start=$(now)
  "$@" >/dev/null
  elapsed "$start" "$(now)"
}
# The pack objects under vol/packs/ and their bytes: "COUNT BYTES".
pack_objects() {
  local xml=$work/list.xml token="" count=0 bytes=0 query
  for (( ; ; )); do
    query="list-type=2&max-keys=1000&prefix=vol%2Fpacks%2F"
    [[ -z $token ]] || query+="&continuation-token=$(jq -rn --arg t "$token" '$t|@uri')"
    s3_curl -sf -o "$xml" "$S3_ENDPOINT/$bucket?$query" || fail "listing s3://$bucket/vol/packs/ failed"
    count=$((count + $(grep -o '<Key>' "$xml" | wc -l)))
    bytes=$((bytes + $({ grep -o '<Size>[0-9]*</Size>' "$xml" || true; } | tr -dc '0-9\n' |
      awk '{ s += $1 } END { print s + 0 }')))
    grep -q '<IsTruncated>true</IsTruncated>' "$xml" || break
    token=$(grep -o '<NextContinuationToken>[^<]*' "$xml" | sed 's/.*>//')
  done
  echo "$count $bytes"
}

declare -A rsync_s synced_s
for ((r = 0; r < rounds; r++)); do
  order=("${kinds[@]}")
  ((r % 2 == 0)) || order=("${kinds[1]}" "${kinds[0]}")
  for k in "${order[@]}"; do
    sync
    echo 3 >/proc/sys/vm/drop_caches
    start=$(now)
    rsync -a "$tree/" "$work/$k.mnt/r$r/"
    middle=$(now)
    "$densefs" sync "$work/$k.mnt" >/dev/null
    rsync_s[$k]+=" $(elapsed "$start" "$middle")"
    synced_s[$k]+=" $(elapsed "$start" "$(now)")"
  done
  if ((r == 0)); then
    read -r first_objects first_bytes < <(pack_objects)
    first_puts=$("$densefs" stats "$work/scale-out.mnt" --json | jq .object_requests.put)
  fi
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "-" }'; }
row() { printf '%-34s %11s %11s %8s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
tree_bytes=$(du -sb "$tree" | cut -f1)
files=$(find "$tree" -type f | wc -l)
echo "tree: $tree ($tree_bytes bytes, $files files), $rounds rounds (median), seconds"
printf '%-34s %11s %11s %8s\n' row embedded scale-out ratio
# shellcheck disable=SC2086 # the runs are words
row "rsync -a" "$(median ${rsync_s[embedded]})" "$(median ${rsync_s[scale-out]})"
# shellcheck disable=SC2086
row "rsync -a, then densefs sync" "$(median ${synced_s[embedded]})" "$(median ${synced_s[scale-out]})"
read -r objects _ < <(pack_objects)
awk -v n="$first_objects" -v b="$first_bytes" -v t="$tree_bytes" -v all="$objects" -v p="$first_puts" 'BEGIN {
  printf "pack objects in S3 after the first copy: %d, %.1f MB (%.0f KB each), %.0f per GB of the tree; after every round: %d\n",
    n, b / 1e6, n ? b / n / 1e3 : 0, n / (t / 1e9), all
  printf "PUT requests of the first copy (densefs stats): %d, %.0f per GB of the tree\n", p, p / (t / 1e9) }'
