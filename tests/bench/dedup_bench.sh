#!/usr/bin/env bash
# Dedup through a real mount (not a test; compare the rows of one run): the
# two tar versions of make_versions.sh are copied into a fresh store, v1 then
# v2, under each chunking policy. Reports what v2 added (new unique plain
# bytes and new stored bytes, as a share of v2's size), the store after both,
# the copy times, and checks both files read back exactly.
# Usage: tests/bench/dedup_bench.sh [path/to/densefs] [WORK_DIR] [POLICY...]
#   POLICY: a -o codec= spec (docs/policy.md); default: "default" (v1.tar is
#   "other": zstd + cdc avg 32K), "+fixed" (the 4 MiB grid), "+cdc:avg=16K",
#   "+cdc:avg=64K".
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
densefs=$(realpath "${1:-$repo/build/tools/densefs}")
work=${2:-/var/tmp/densefs-cdc-bench}
shift $(($# > 2 ? 2 : $#))
policies=("$@")
((${#policies[@]})) || policies=(default +fixed +cdc:min=4K:avg=16K:max=64K +cdc:min=16K:avg=64K:max=256K)

"$repo/tests/bench/make_versions.sh" "$work"
v1=$work/v1.tar
v2=$work/v2.tar
v1_size=$(stat -c %s "$v1")
v2_size=$(stat -c %s "$v2")

field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
seconds() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); echo "$e - $s" | bc; }
pct() { echo "scale=2; 100 * $1 / $2" | bc; }

printf '%-32s %9s %9s %10s %10s %9s %9s %8s %8s %s\n' policy "v1 chunks" "v2 chunks" \
  "v2 new%" "v2 stored%" "v1 ratio" "total%" "cp v1 s" "cp v2 s" check
for policy in "${policies[@]}"; do
  d=$work/mount-run
  fusermount3 -u "$d/mnt" 2>/dev/null || true
  rm -rf "$d" && mkdir -p "$d/mnt"
  "$densefs" mkfs "$d/store" >/dev/null
  "$densefs" mount "$d/store" "$d/mnt" -o "codec=$policy"
  t1=$(seconds dd if="$v1" of="$d/mnt/v1.tar" bs=1M conv=fsync status=none)
  s1=$("$densefs" stats "$d/mnt" --json)
  t2=$(seconds dd if="$v2" of="$d/mnt/v2.tar" bs=1M conv=fsync status=none)
  s2=$("$densefs" stats "$d/mnt" --json)
  chunks1=$(field chunks <<<"$s1")
  chunks2=$(field chunks <<<"$s2")
  plain1=$(field unique_plain_bytes <<<"$s1")
  plain2=$(field unique_plain_bytes <<<"$s2")
  stored1=$(field stored_bytes <<<"$s1")
  stored2=$(field stored_bytes <<<"$s2")
  check=ok
  cmp -s "$v1" "$d/mnt/v1.tar" && cmp -s "$v2" "$d/mnt/v2.tar" || check=MISMATCH
  printf '%-32s %9s %9s %10s %10s %9s %9s %8.2f %8.2f %s\n' "$policy" "$chunks1" \
    "$((chunks2 - chunks1))" "$(pct $((plain2 - plain1)) "$v2_size")" \
    "$(pct $((stored2 - stored1)) "$v2_size")" "$(pct "$stored1" "$v1_size")" \
    "$(pct "$stored2" $((v1_size + v2_size)))" "$t1" "$t2" "$check"
  "$densefs" umount "$d/mnt"
done
echo "v2 new% = unique plain bytes v2 added, of v2; v2 stored% = stored bytes v2 added, of v2;"
echo "v1 ratio = stored after v1, of v1; total% = stored after both, of v1 + v2 (chunk payloads only)"
