#!/usr/bin/env bash
# Stores made by earlier builds keep mounting: the format-1 golden store
# (tests/store/golden/store-v1.tar.gz, fixed-width records) is mounted with
# the binary under test, read through the kernel, written, remounted and
# checked with gc and fsck, next to a store mkfs makes now (format 3, compact
# records) that gets the same treatment. What this build writes into the old
# store keeps the old store's encoding (docs/format.md, "Compatibility").
# usage: old_format_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

golden=$src/tests/store/golden/store-v1.tar.gz
[[ -f $golden ]] || fail "golden store $golden is missing"
tar -xzf "$golden" -C "$work" || fail "cannot unpack $golden"
old=$work/store
new=$work/new
mnt=$work/mnt
mkdir -p "$mnt"
"$densefs" mkfs "$new" >/dev/null || fail "densefs mkfs $new failed"

format_of() {
  sed -n 's/^format_version=//p' "$1/FORMAT"
}
[[ $(format_of "$old") == 1 ]] || fail "the golden store is not format 1: $(format_of "$old")"
[[ $(format_of "$new") == 3 ]] || fail "mkfs made format $(format_of "$new"), expected 3"

# The content of big.bin in the golden store: 1 MiB of numbered lines, a
# 1 MiB hole, the same 1 MiB again (tests/store/golden_store_test.cpp).
# (A file cut with truncate, not a pipe into head: under pipefail the
# writer's SIGPIPE would fail the test.)
text=$work/golden.txt
awk 'BEGIN { for (i = 0; i < 80000; i++) print "golden line " i }' >"$text"
truncate -s 1048576 "$text"
expected=$work/big.expected
{
  cat "$text"
  head -c 1048576 /dev/zero
  cat "$text"
} >"$expected"

# A small tree of many small files, as in /usr/share/man: what the compact
# records are for.
tree=$work/tree
mkdir -p "$tree/d1" "$tree/d2"
for i in $(seq 1 200); do
  printf 'small file %d\n' "$i" >"$tree/d$((i % 2 + 1))/f$i"
done
ln -s d1/f2 "$tree/link"
touch -d '2001-02-03 04:05:06.789' "$tree/d1/f2"

# The golden store was built record by record, not through a mount: its
# root's link count misses "sub" (fsck --repair fixes that, writing into the
# format-1 store too) and it lists an orphan without an inode (a mount drops
# it). What fsck reports after the first mount (all but the first line, which
# counts records) must be "clean", and again after writing.
"$densefs" fsck --repair "$old" >/dev/null 2>&1 || true
problems() {
  "$densefs" fsck "$1" 2>&1 | tail -n +2 || true
}

for store in "$old" "$new"; do
  mount_densefs "$store" "$mnt"
  if [[ $store == "$old" ]]; then
    [[ $(cat "$mnt/hello.txt") == "hello, densefs" ]] || fail "hello.txt of the old store reads wrong"
    cmp "$mnt/big.bin" "$expected" || fail "big.bin of the old store reads wrong"
    [[ $(readlink "$mnt/link") == hello.txt ]] || fail "the old store's symlink reads wrong"
    [[ $(stat -c %a "$mnt/sub") == 750 ]] || fail "the old store's directory mode reads wrong"
  fi
  "$densefs" umount "$mnt" || fail "densefs umount ($store) failed"
  baseline=$(problems "$store")
  [[ $baseline == clean ]] || fail "fsck of $store before writing: $baseline"

  mount_densefs "$store" "$mnt"
  cp -a "$tree" "$mnt/tree" || fail "cp -a into $store failed"
  # Garbage for gc: chunks of a deleted file, small (inline) and large.
  head -c 100000 /dev/urandom >"$mnt/garbage"
  echo "$store" >"$mnt/garbage-small"
  rm "$mnt/garbage" "$mnt/garbage-small"
  "$densefs" umount "$mnt" || fail "densefs umount ($store) failed"
  "$densefs" gc "$store" >/dev/null || fail "densefs gc $store failed"

  after=$(problems "$store")
  [[ $after == clean ]] || fail "writing into $store made fsck find: $after"
  mount_densefs "$store" "$mnt"
  diff -r "$tree" "$mnt/tree" || fail "the tree written into $store reads back different"
  [[ $(stat -c %y "$mnt/tree/d1/f2") == "$(stat -c %y "$tree/d1/f2")" ]] ||
    fail "mtime of a file in $store did not survive the remount"
  [[ $(readlink "$mnt/tree/link") == d1/f2 ]] || fail "symlink in $store reads wrong"
  if [[ $store == "$old" ]]; then
    cmp "$mnt/big.bin" "$expected" || fail "big.bin of the old store reads wrong after writing"
  fi
  "$densefs" umount "$mnt" || fail "densefs umount ($store) failed"
done

# The old store is still format 1 after this build wrote into it.
[[ $(format_of "$old") == 1 ]] || fail "writing changed the old store's format to $(format_of "$old")"
echo "PASS: format 1 and format 3 stores mount, read and write"
