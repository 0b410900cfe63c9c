#!/usr/bin/env bash
# A tree written and read back through three mounts side by side in one run
# (docs/scale-out.md, "Measured"): the embedded store, and a scale-out
# volume (records in PostgreSQL, packs in S3: a private PostgreSQL 15 and a
# private radosgw on loopback, tests/mount/postgres_lib.sh and s3_lib.sh).
# Rows: the copy in (cp -a of TREE and of one BIG_MB file of /usr/lib
# bytes, then densefs sync), a cold read (remounted, page cache dropped;
# the scale-out volume with its local cache deleted too, so every record
# comes from S3), a read with the local cache warm (remounted, page cache
# dropped, cache kept), each for the tree and for the big file, and the
# stored bytes of both. The read rows start once the idle re-encoder has
# nothing queued (the gzip files' deflate codec is applied there, even with
# ingest=strong): a read during that pass measures the re-encoder beside it
# and files not yet in their final codec. Each read row runs ROUNDS times,
# alternating the order, the median kept. Last, the S3 requests the
# scale-out mount sent (densefs stats: object_requests): PUTs per GB
# written by the copy, GETs per GB read by a cold read. Not a test: a
# measurement; needs root and /dev/fuse.
# Usage: tests/bench/scale_out_io.sh [path/to/densefs] [TREE] [ROUNDS]
#   TREE  default /usr/share/doc; env BIG_MB (default 256)
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
big_mb=${BIG_MB:-256}
# The big file: real bytes (libraries and the like), as the other benchmarks.
find /usr/lib -type f -size +64k -print0 2>/dev/null | sort -z | xargs -0 cat 2>/dev/null |
  head -c "$((big_mb << 20))" >"$work/big.bin" || true
mkdir -p "$work/embedded.mnt" "$work/scale-out.mnt"
"$densefs" mkfs "$work/embedded.store" >/dev/null
pg_createdb bench
"$densefs" mkfs --meta "$(pg_conninfo bench)" --data "s3://bench/vol?endpoint=$S3_ENDPOINT" \
  "$work/scale-out.store" >/dev/null

# ingest=strong: every file gets its policy codec at write time, except
# the gzip files' deflate codec, which only the idle re-encoder applies
# (docs/policy.md); the copy rows wait for it.
mount_kind() { mount_densefs "$work/$1.store" "$work/$1.mnt" -o ingest=strong; }
umount_kind() { umount_densefs "$work/$1.mnt"; }
timed() {
  local start
  start=$(now)
  "$@" >/dev/null
  elapsed "$start" "$(now)"
}
read_all_tree() { tar -C "$1/tree" -cf - . | cat >/dev/null; }

# Waits until the mount's idle re-encoder has nothing queued (at most 20
# minutes); prints the seconds it took.
reencoded() {
  local start=$SECONDS
  until [[ $("$densefs" stats "$1" --json | jq .pending_recompress) == 0 ]]; do
    ((SECONDS - start < 1200)) || fail "the re-encoder of $1 did not finish in 20 minutes"
    sleep 1
  done
  echo $((SECONDS - start))
}

declare -A copy idle stored
for k in "${kinds[@]}"; do
  mount_kind "$k"
  copy[$k]=$(timed bash -c "cp -a '$tree' '$work/$k.mnt/tree' && cp '$work/big.bin' '$work/$k.mnt/' &&
    '$densefs' sync '$work/$k.mnt'")
  idle[$k]=$(reencoded "$work/$k.mnt")
  stats=$("$densefs" stats "$work/$k.mnt" --json)
  stored[$k]=$(jq .stored_bytes <<<"$stats")
  [[ $k == embedded ]] || puts=$(jq .object_requests.put <<<"$stats")
  umount_kind "$k"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
read_big() { cat "$1/big.bin" >/dev/null; }
# One read after a remount with the page cache dropped; ROW names the runs.
read_row() {
  local k=$1 row=$2 what=$3
  sync
  echo 3 >/proc/sys/vm/drop_caches
  mount_kind "$k"
  runs[$row.$k]+=" $(timed "$what" "$work/$k.mnt")"
  [[ $k == embedded ]] ||
    gets[$row]+=" $("$densefs" stats "$work/$k.mnt" --json | jq .object_requests.get)"
  umount_kind "$k"
}
declare -A runs gets
for ((r = 0; r < rounds; r++)); do
  order=("${kinds[@]}")
  ((r % 2 == 0)) || order=("${kinds[1]}" "${kinds[0]}")
  for k in "${order[@]}"; do
    rm -rf "$work/$k.store/cache"
    read_row "$k" cold read_all_tree
    read_row "$k" warm read_all_tree
    rm -rf "$work/$k.store/cache"
    read_row "$k" cold_big read_big
    read_row "$k" warm_big read_big
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "-" }'; }
row() { # LABEL EMBEDDED SCALE-OUT
  printf '%-44s %11ss %11ss %10s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"
}
read_median() { # ROW KIND
  # shellcheck disable=SC2086 # the runs are words
  median ${runs[$1.$2]}
}
echo "tree: $tree ($(du -sb "$tree" | cut -f1) bytes) and a ${big_mb} MiB file, $rounds rounds (median)"
printf '%-44s %12s %12s %10s\n' row embedded scale-out ratio
row "cp -a + densefs sync" "${copy[embedded]}" "${copy[scale-out]}"
row "idle re-encoder done after the copy" "${idle[embedded]}" "${idle[scale-out]}"
for r in cold warm cold_big warm_big; do
  case $r in
    cold) label="read the tree, cold (scale-out: from S3)" ;;
    warm) label="read the tree, local cache warm" ;;
    cold_big) label="read the big file, cold (from S3)" ;;
    warm_big) label="read the big file, local cache warm" ;;
  esac
  row "$label" "$(read_median "$r" embedded)" "$(read_median "$r" scale-out)"
done
printf '%-44s %12s %12s %10s\n' "stored bytes" "${stored[embedded]}" "${stored[scale-out]}" \
  "$(ratio "${stored[embedded]}" "${stored[scale-out]}")"
tree_bytes=$(du -sb "$tree" | cut -f1)
big_bytes=$((big_mb << 20))
# shellcheck disable=SC2086 # the runs are words
awk -v p="$puts" -v w="$((tree_bytes + big_bytes))" -v t="$tree_bytes" -v b="$big_bytes" \
  -v gt="$(median ${gets[cold]})" -v gb="$(median ${gets[cold_big]})" 'BEGIN {
  printf "S3 requests (scale-out): %d PUT for the copy, %.0f per GB written; GET per GB read cold: %.0f (the tree), %.0f (the big file)\n",
    p, p / (w / 1e9), gt / (t / 1e9), gb / (b / 1e9) }'
