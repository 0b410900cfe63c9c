#!/usr/bin/env bash
# What encryption at rest costs (docs/encryption.md; issue target: write
# 1 GiB and read it cold within 1.15x of an unencrypted volume, stored size
# within 0.5%). Side by side, ROUNDS times, alternating, each on a new
# embedded volume with default mkfs and mount (and a key file):
#   write  cp big.bin (1 GiB of real /usr/lib bytes, tests/bench/targets.sh
#          prepares it) into the mount, then `densefs sync`
#   read   unmount, drop the page cache, mount, cat the file to /dev/null
#   stored the pack files' bytes after the write
# medians kept. With DENSEFS_BENCH_TREE=1, also `rsync -a` of the /usr/share
# copy (many small files) once per variant, timed, and its stored bytes.
# Not a test: a measurement; needs root and /dev/fuse; run it alone.
# Usage: tests/bench/encryption_bench.sh [path/to/densefs] [INPUT_DIR] [ROUNDS]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
input=$(realpath "${2:-/var/tmp/densefs-targets/input}")
rounds=${3:-3}
# shellcheck source=../mount/mount_lib.sh
source "$repo/tests/mount/mount_lib.sh" "${1:-$repo/build/tools/densefs}" "$repo"
[[ -f $input/big.bin ]] || fail "no big.bin in $input (tests/bench/targets.sh prepares it)"

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
key=$work/key
head -c 32 /dev/urandom >"$key"
chmod 600 "$key"
mnt=$work/mnt
mkdir -p "$mnt"

# new_volume VARIANT: a fresh store for VARIANT (plain or encrypted).
new_volume() {
  rm -rf "$work/store"
  if [[ $1 == encrypted ]]; then
    "$densefs" mkfs "$work/store" --encrypt --key-file "$key" >/dev/null
  else
    "$densefs" mkfs "$work/store" >/dev/null
  fi
}
mount_variant() {
  if [[ $1 == encrypted ]]; then
    mount_densefs "$work/store" "$mnt" -o "key_file=$key"
  else
    mount_densefs "$work/store" "$mnt"
  fi
}
pack_bytes() { find "$work/store/packs" -name '*.pack' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }

for r in $(seq 1 "$rounds"); do
  for v in plain encrypted; do
    new_volume "$v"
    drop_caches
    mount_variant "$v"
    start=$(now)
    cp "$input/big.bin" "$mnt/big.bin"
    "$densefs" sync "$mnt" >/dev/null
    { elapsed "$start" "$(now)"; echo; } >>"$work/$v.write"
    umount_densefs "$mnt"
    pack_bytes >>"$work/$v.stored"
    drop_caches
    mount_variant "$v"
    start=$(now)
    cat "$mnt/big.bin" >/dev/null
    { elapsed "$start" "$(now)"; echo; } >>"$work/$v.read"
    umount_densefs "$mnt"
    echo "round $r $v: write $(tail -n1 "$work/$v.write") s, read cold $(tail -n1 "$work/$v.read") s, stored $(tail -n1 "$work/$v.stored") B"
  done
done

if [[ ${DENSEFS_BENCH_TREE:-0} == 1 ]]; then
  [[ -d $input/tree ]] || fail "no tree in $input"
  for v in plain encrypted; do
    new_volume "$v"
    drop_caches
    mount_variant "$v"
    start=$(now)
    rsync -a "$input/tree/" "$mnt/"
    "$densefs" sync "$mnt" >/dev/null
    { elapsed "$start" "$(now)"; echo; } >"$work/$v.tree"
    umount_densefs "$mnt"
    pack_bytes >"$work/$v.tree_stored"
    du -sb --exclude=packs "$work/store" | cut -f1 >"$work/$v.tree_meta"
    echo "tree $v: rsync -a $(cat "$work/$v.tree") s, packs $(cat "$work/$v.tree_stored") B, database $(cat "$work/$v.tree_meta") B"
  done
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b / a }'; }
echo
echo "| 1 GiB of /usr/lib bytes, median of $rounds | unencrypted | encrypted | encrypted / unencrypted |"
echo "|---|---|---|---|"
for m in write read stored; do
  p=$(median <"$work/plain.$m")
  e=$(median <"$work/encrypted.$m")
  echo "| $m | $p | $e | $(ratio "$p" "$e")x |"
done
if [[ ${DENSEFS_BENCH_TREE:-0} == 1 ]]; then
  echo "| tree: rsync -a (s) | $(cat "$work/plain.tree") | $(cat "$work/encrypted.tree") | $(ratio "$(cat "$work/plain.tree")" "$(cat "$work/encrypted.tree")")x |"
  echo "| tree: pack bytes | $(cat "$work/plain.tree_stored") | $(cat "$work/encrypted.tree_stored") | $(ratio "$(cat "$work/plain.tree_stored")" "$(cat "$work/encrypted.tree_stored")")x |"
  echo "| tree: database bytes | $(cat "$work/plain.tree_meta") | $(cat "$work/encrypted.tree_meta") | $(ratio "$(cat "$work/plain.tree_meta")" "$(cat "$work/encrypted.tree_meta")")x |"
fi
