#!/usr/bin/env bash
# What a metadata dump costs against a cold walk of the same volume
# (docs/backup.md; issue target: a dump within 2x of a cold walk), and that
# a dump + load gives the volume back exactly. A tree (default: the
# /usr/share copy that tests/bench/targets.sh prepares) is copied into an
# embedded volume with rsync -aHAX; then, ROUNDS times, each after dropping
# the page cache and with nothing mounted:
#   walk   mount, `find MNT -printf '%s'` (every entry listed and stat'ed), unmount
#   dump   densefs dump STORE FILE
#   load   densefs load FILE NEW (its packs hard-linked in: a load never
#          writes packs)
# the median of each kept, with the dump's and the load's peak memory
# (/usr/bin/time). Then the last load is checked: fsck, and rsync -aHAXc
# between the two mounts finds nothing (content, hard links, xattrs, ACLs).
# With DENSEFS_BENCH_MIGRATE=1 the volume is then migrated to PostgreSQL +
# S3 (a private PostgreSQL 15 and radosgw: tests/mount/postgres_lib.sh,
# s3_lib.sh) and back, with nothing mounted, each copy timed, fsck'd and
# compared with rsync -aHAXc against the original.
# Not a test: a measurement; needs root and /dev/fuse; run it alone.
# Usage: tests/bench/dump_bench.sh [path/to/densefs] [TREE] [ROUNDS]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tree=$(realpath "${2:-/var/tmp/densefs-targets/input/tree}")
rounds=${3:-3}
# shellcheck source=../mount/mount_lib.sh
source "$repo/tests/mount/mount_lib.sh" "${1:-$repo/build/tools/densefs}" "$repo"
[[ -d $tree ]] || fail "no tree at $tree (tests/bench/targets.sh prepares it, or give TREE)"

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
# seconds CMD...: runs CMD, prints its wall seconds.
seconds() {
  local start
  start=$(now)
  "$@" >/dev/null
  elapsed "$start" "$(now)"
  echo
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# peak_kib CMD...: runs CMD under /usr/bin/time, prints its peak RSS in KiB.
peak_kib() {
  /usr/bin/time -f '%M' -o "$work/time.out" "$@" >/dev/null
  cat "$work/time.out"
}

store=$work/store
mnt=$work/mnt
mkdir -p "$mnt" "$work/copy"
"$densefs" mkfs "$store" >/dev/null
mount_densefs "$store" "$mnt"
start=$(now)
rsync -aHAX "$tree/" "$mnt/"
umount_densefs "$mnt"
entries=$(find "$tree" | wc -l)
echo "volume: $tree, $entries entries, copied in $(elapsed "$start" "$(now)") s"

walk() {
  mount_densefs "$store" "$mnt"
  find "$mnt" -printf '%s\n' | wc -l
  umount_densefs "$mnt"
}
load_fresh() {
  rm -rf "$work/loaded"
  mkdir "$work/loaded"
  cp -al "$store/packs" "$work/loaded/"
  "$densefs" load "$work/meta.dump" "$work/loaded"
}
for r in $(seq 1 "$rounds"); do
  drop_caches
  seconds walk >>"$work/walk.s"
  drop_caches
  seconds "$densefs" dump "$store" "$work/meta.dump" >>"$work/dump.s"
  drop_caches
  seconds load_fresh >>"$work/load.s"
  echo "round $r: walk $(tail -n1 "$work/walk.s") s, dump $(tail -n1 "$work/dump.s") s, load $(tail -n1 "$work/load.s") s"
done
dump_kib=$(peak_kib "$densefs" dump "$store" "$work/meta.dump")
rm -rf "$work/loaded"
mkdir "$work/loaded"
cp -al "$store/packs" "$work/loaded/"
load_kib=$(peak_kib "$densefs" load "$work/meta.dump" "$work/loaded")

walk_s=$(median <"$work/walk.s")
dump_s=$(median <"$work/dump.s")
load_s=$(median <"$work/load.s")
"$densefs" fsck "$work/loaded" >"$work/fsck.out" || {
  cat "$work/fsck.out"
  fail "fsck of the loaded volume failed"
}
mount_densefs "$store" "$mnt"
mount_densefs "$work/loaded" "$work/copy"
differences=$(rsync -aHAXc --dry-run --itemize-changes "$mnt/" "$work/copy/" | wc -l)
umount_densefs "$work/copy"
umount_densefs "$mnt"
[[ $differences == 0 ]] || fail "the loaded volume differs from the dumped one in $differences entries"

printf 'the dump: %s bytes; peak memory: dump %s MiB, load %s MiB\n' \
  "$(stat -c %s "$work/meta.dump")" $((dump_kib / 1024)) $((load_kib / 1024))
printf 'median of %s: cold walk %s s, dump %s s (%.2fx the walk), load %s s; fsck clean, rsync -aHAXc: no difference\n' \
  "$rounds" "$walk_s" "$dump_s" "$(awk -v a="$dump_s" -v b="$walk_s" 'BEGIN { print a / b }')" "$load_s"

if [[ ${DENSEFS_BENCH_MIGRATE:-0} == 1 ]]; then
  # shellcheck source=../mount/postgres_lib.sh
  source "$repo/tests/mount/postgres_lib.sh"
  # shellcheck source=../mount/s3_lib.sh
  source "$repo/tests/mount/s3_lib.sh"
  pg_createdb migrated
  # compare LABEL STORE: fsck clean and no difference from the original.
  compare() {
    "$densefs" fsck "$2" >"$work/fsck.out" || {
      cat "$work/fsck.out"
      fail "$1: fsck failed"
    }
    mount_densefs "$store" "$mnt"
    mount_densefs "$2" "$work/copy"
    local n
    n=$(rsync -aHAXc --dry-run --itemize-changes "$mnt/" "$work/copy/" | wc -l)
    umount_densefs "$work/copy"
    umount_densefs "$mnt"
    [[ $n == 0 ]] || fail "$1: $n entries differ from the original"
  }
  to_s=$(seconds "$densefs" migrate "$store" "$work/pgvol" --meta "$(pg_conninfo migrated)" \
    --data "s3://densefs-bench/migrated?endpoint=$S3_ENDPOINT")
  compare "migrated to PostgreSQL + S3" "$work/pgvol"
  back_s=$(seconds "$densefs" migrate "$work/pgvol" "$work/back")
  compare "migrated back" "$work/back"
  printf 'migrate to PostgreSQL + S3 %s s, back %s s; both fsck clean, rsync -aHAXc: no difference\n' \
    "$to_s" "$back_s"
fi
