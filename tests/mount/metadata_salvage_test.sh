#!/usr/bin/env bash
# One flipped byte in each file of a store's RocksDB database, one at a
# time (issue 38, "metadata damage never loses the volume"): plain fsck
# refuses with a line naming `fsck --repair`, `fsck --repair` salvages
# (docs/fsck.md, "Damaged metadata"), and the store mounts again. A file
# then reads exact or fails with an error, never with other bytes; flips in
# the manifest and CURRENT cost nothing, and neither do flips in table files,
# which come back from the store's metadata backup (docs/fsck.md); the
# damaged originals are kept. Prints COUNTS.
# usage: metadata_salvage_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

tree=$work/tree
mkdir -p "$tree"
# A small tree of text and random bytes, some files below 4 KiB (their
# payloads live in the database, not in packs).
for i in $(seq 1 12); do
  head -c $((i * 900)) /dev/urandom >"$tree/small$i"
  seq 1 $((i * 4000)) >"$tree/text$i"
done
mkdir -p "$tree/sub/deeper"
cp "$src/README.md" "$tree/sub/deeper/readme"

original=$work/original
mkdir -p "$original/mnt"
"$densefs" mkfs "$original/store" >/dev/null || fail "densefs mkfs failed"
mount_densefs "$original/store" "$original/mnt"
cp -a "$tree/." "$original/mnt/"
umount_densefs "$original/mnt"
nfiles=$(find "$tree" -type f | wc -l)
# The clean unmount backed every live table up, and only those.
for f in "$original"/store/*.sst; do
  cmp -s "$f" "$original/store/metadata-backup/$(basename "$f")" ||
    fail "metadata-backup has no copy of $(basename "$f") after a clean unmount"
done
[[ $(find "$original/store/metadata-backup" -type f | wc -l) -eq $(find "$original/store" -maxdepth 1 -name '*.sst' | wc -l) ]] ||
  fail "metadata-backup keeps copies of tables that are gone: $(ls "$original/store/metadata-backup")"

flip() {  # flip FILE [OFFSET]: one byte of FILE (default: its middle), XOR 0x55
  python3 - "$1" "${2:-}" <<'PY'
import os, sys
p = sys.argv[1]
n = os.path.getsize(p)
at = int(sys.argv[2]) if sys.argv[2] else n // 2
with open(p, "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0x55]))
PY
}

trials=0
opened=0
whole_volumes=0
wrong=()
# trial NAME [OFFSET]: one flip in a fresh copy of the store, then fsck,
# fsck --repair, a mount and every file read.
trial() {
  local name=$1 offset=${2:-} label exact
  label=$name${offset:+ at $offset}
  trials=$((trials + 1))
  copy=$work/copy
  rm -rf "$copy"
  cp -a "$original" "$copy"
  flip "$copy/store/$name" "$offset"
  if "$densefs" fsck "$copy/store" >"$work/fsck.out" 2>&1; then
    echo "$label: plain fsck finds nothing wrong (the byte is in a part no read checks)"
  elif grep -q "is damaged" "$work/fsck.out" && ! grep -q "fsck --repair" "$work/fsck.out"; then
    fail "$label: plain fsck does not name the fix: $(cat "$work/fsck.out")"
  fi
  "$densefs" fsck --repair "$copy/store" >"$work/repair.out" 2>&1 || true
  if grep -q "salvaged it" "$work/repair.out"; then
    ls "$copy/store"/metadata-before-salvage-*/"$name" >/dev/null 2>&1 ||
      fail "$label: the damaged original was not kept"
  fi
  if ! "$densefs" mount "$copy/store" "$copy/mnt" 2>"$work/mount.err"; then
    echo "$label: does not mount after fsck --repair: $(cat "$work/mount.err")"
    return 0
  fi
  opened=$((opened + 1))
  exact=0
  while IFS= read -r -d '' file; do
    rel=${file#"$tree"/}
    if cmp -s "$file" "$copy/mnt/$rel" 2>/dev/null; then
      exact=$((exact + 1))
    elif [[ -e $copy/mnt/$rel ]] && cat "$copy/mnt/$rel" >/dev/null 2>&1; then
      wrong+=("$label: $rel reads other bytes")
    fi
  done < <(find "$tree" -type f -print0)
  umount_densefs "$copy/mnt"
  ((exact == nfiles)) && whole_volumes=$((whole_volumes + 1))
  echo "$label: $(grep -c 'set aside' "$work/repair.out" || true) salvage(s), $exact of $nfiles files exact"
  case $name in
    MANIFEST-* | CURRENT)
      ((exact == nfiles)) || fail "$label: a damaged $name cost files ($exact of $nfiles exact)"
      ;;
    *.sst)
      # The store was closed cleanly, so its metadata backup holds a copy of
      # every table: a damaged one comes back whole.
      if [[ -z $offset ]] && ((exact != nfiles)); then
        cat "$work/repair.out" >&2
        fail "$label: the metadata backup did not give the table back ($exact of $nfiles exact)"
      fi
      ;;
  esac
}

# The middle byte of each file.
metadata_files=()
for f in "$original"/store/*.sst "$original"/store/*.log "$original"/store/MANIFEST-* "$original"/store/CURRENT; do
  [[ -s $f ]] && metadata_files+=("$(basename "$f")")
done
for name in "${metadata_files[@]}"; do
  trial "$name"
done
# DENSEFS_SALVAGE_TRIALS=N more, each at a random offset of a random file
# (docs/testing.md: the 200-trial sweep; too slow for CI).
RANDOM=${DENSEFS_SALVAGE_SEED:-1}
for _ in $(seq 1 "${DENSEFS_SALVAGE_TRIALS:-0}"); do
  name=${metadata_files[RANDOM % ${#metadata_files[@]}]}
  size=$(stat -c %s "$original/store/$name")
  trial "$name" $(((RANDOM * 32768 + RANDOM) % size))
done
((${#wrong[@]} == 0)) || fail "wrong bytes after a salvage: ${wrong[*]}"
((opened == trials)) || fail "$((trials - opened)) of $trials damaged stores do not mount after fsck --repair"
echo "COUNTS: metadata_salvage trials=$trials opened=$opened whole=$whole_volumes"
