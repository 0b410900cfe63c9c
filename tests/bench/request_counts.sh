#!/usr/bin/env bash
# FUSE requests per file for the workloads users run on a tree: rsync -a,
# cp -a, tar -x into a fresh mount, then a walk, a tar -c of the whole tree
# (reads every file) and the same read again warm, each after a remount
# where the kernel's caches must be cold. The daemon counts requests by kind
# ("requests" in `densefs stats MNT --json`); this prints the difference
# around each workload, divided by the tree's entries. Not a test (a
# measurement for docs/read-path.md, "Requests per file"); needs root.
# Usage: tests/bench/request_counts.sh [path/to/densefs] [TREE] [WORK_DIR] [-- MOUNT_OPTIONS]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
densefs=$(realpath "${1:-$repo/build/tools/densefs}")
tree=$(realpath "${2:-/usr/share/doc}")
work=${3:-/var/tmp/densefs-requests}
shift $(($# > 3 ? 3 : $#))
[[ ${1:-} == -- ]] && shift
mount_options=${1:-}

entries=$(find "$tree" | wc -l)
mnt=$work/mnt
store=$work/store
tarball=$work/tree.tar

mounted() { mountpoint -q "$mnt"; }
mount_fresh() {
  if mounted; then "$densefs" umount "$mnt"; fi
  rm -rf "$store" && mkdir -p "$mnt"
  "$densefs" mkfs "$store" >/dev/null
  "$densefs" mount "$store" "$mnt" ${mount_options:+-o "$mount_options"}
}
remount() {
  "$densefs" umount "$mnt"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  "$densefs" mount "$store" "$mnt" ${mount_options:+-o "$mount_options"}
}
counts() { "$densefs" stats "$mnt" --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin).get("requests", {})))'; }
cleanup() { if mounted; then "$densefs" umount "$mnt" || true; fi; }
trap cleanup EXIT

mkdir -p "$work"
[[ -f $tarball ]] || tar -C "$(dirname "$tree")" -cf "$tarball" "$(basename "$tree")"

results=()
# One workload: NAME then the command; the counts come from one stats call
# before and one after (each stats call itself costs a few requests, which
# are subtracted: measured around an empty workload).
measure() {
  local name=$1 before after
  shift
  before=$(counts)
  "$@"
  after=$(counts)
  results+=("$name	$before	$after")
}

mount_fresh
measure "(stats calls only)" true
measure "rsync -a" rsync -a "$tree/" "$mnt/rsync/"
measure "cp -a" cp -a "$tree" "$mnt/cp"
measure "tar -x" tar -C "$mnt" --one-top-level=tar -xf "$tarball"
remount
measure "walk cold (find -ls)" sh -c "find '$mnt/cp' -ls >/dev/null"
measure "walk warm (find -ls)" sh -c "find '$mnt/cp' -ls >/dev/null"
remount
# Through cat: GNU tar reads no file contents when its output is /dev/null.
measure "read all cold (tar -c)" sh -c "tar -C '$mnt' -cf - cp | cat >/dev/null"
measure "read all warm (tar -c)" sh -c "tar -C '$mnt' -cf - cp | cat >/dev/null"

printf '%s\n' "${results[@]}" | python3 -c '
import json, sys
entries = int(sys.argv[1])
rows = [line.rstrip("\n").split("\t") for line in sys.stdin if line.strip()]
base = {}
print(f"tree: {sys.argv[2]} ({entries} entries); requests per entry, by kind")
for name, before, after in rows:
    b, a = json.loads(before), json.loads(after)
    d = {k: a.get(k, 0) - b.get(k, 0) - base.get(k, 0) for k in a}
    if name.startswith("(stats"):
        base = {k: v for k, v in d.items() if v > 0}
        continue
    d = {k: v for k, v in d.items() if v > 0}
    total = sum(d.values())
    kinds = ", ".join(f"{k} {v / entries:.2f}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))
    print(f"{name:24s} {total / entries:6.2f}  ({kinds})")
' "$entries" "$tree"
