#!/usr/bin/env bash
# A store whose records live in PostgreSQL (`densefs mkfs --meta`,
# docs/scale-out.md), used as a user would: a private PostgreSQL 15 server
# (postgres_lib.sh), mkfs, mount, a tree copied in with rsync -aHAX and
# checked with rsync -c and diff -r, renames, links, xattrs and unlinks,
# stats naming the engine, a second mount of the volume refused (one writer
# per volume), unmount and fsck clean, a remount that reads the
# same bytes, kill -9 of the daemon after an fsync (the fsync'd file exact,
# fsck clean), the server restarted under the mount (writes go on), gc, and
# the errors a user meets: a password in the
# connection string, a database that is not empty, the server down.
# usage: postgres_store_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"
# A server of its own: this test restarts it (not the phase's shared one).
pg_private=1
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"

command -v rsync >/dev/null || missing_tool rsync
command -v jq >/dev/null || missing_tool jq

store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"
pg_createdb vol1
meta=$(pg_conninfo vol1)

# --- mkfs: what it refuses, then a store.
if out=$("$densefs" mkfs --meta "$meta password=hunter2" "$work/refused" 2>&1); then
  fail "mkfs took a connection string with a password"
fi
[[ $out == *"password"* && $out != *hunter2* ]] ||
  fail "mkfs with a password: expected one line about the password, without it: $out"
[[ $(wc -l <<<"$out") -eq 1 ]] || fail "mkfs with a password printed more than one line: $out"

"$densefs" mkfs --meta "$meta" "$store" >/dev/null || fail "densefs mkfs --meta failed"
grep -q "^postgresql=$meta\$" "$store/FORMAT" || fail "FORMAT does not name the database"
[[ $(stat -c %a "$store") == 700 ]] || fail "the store directory is not private (0700)"
# The database now holds a store: a second mkfs into it is refused.
if out=$("$densefs" mkfs --meta "$meta" "$work/second" 2>&1); then
  fail "a second mkfs into the same database succeeded"
fi
echo "second mkfs: $out"
# No RocksDB files in the directory: the records are in the database.
[[ ! -e $store/CURRENT ]] || fail "a RocksDB database was made in $store"

# --- a tree in and out.
mount_densefs "$store" "$mnt"
# One writer per volume: a copy of the store directory names the same
# database, and its mount is refused while this one has the volume.
mkdir -p "$work/copy" "$work/mnt2"
cp -a "$store/." "$work/copy/"
if out=$("$densefs" mount "$work/copy" "$work/mnt2" 2>&1); then
  fail "a second mount of one PostgreSQL volume succeeded"
fi
[[ $out == *"in use"* ]] || fail "a second mount of the volume: expected \"in use\": $out"
echo "second mount of the volume: $out"
data=$work/data
make_tree "$data" 3000000

rsync -aHAX "$data/" "$mnt/data/" || fail "rsync -aHAX into the mount failed"
check_tree "after rsync" "$data" "$mnt/data"

# Renames, a replacing rename, unlinks, a directory removed.
mv "$mnt/data/text.txt" "$mnt/data/dir/moved.txt"
mv "$data/text.txt" "$data/dir/moved.txt"
printf 'new content\n' >"$mnt/data/tmp.$$"
mv "$mnt/data/tmp.$$" "$mnt/data/random.bin"
printf 'new content\n' >"$data/random.bin"
# The two writes may straddle a second: the copy's mtime is what compares.
touch -r "$mnt/data/random.bin" "$data/random.bin"
rm -r "$mnt/data/docs"
rm -r "$data/docs"
check_tree "after renames and unlinks" "$data" "$mnt/data"

stats=$("$densefs" stats "$mnt" --json) || fail "densefs stats --json failed"
[[ $(jq -r .metadata_engine <<<"$stats") == postgresql ]] ||
  fail "stats does not name the engine: $(jq -c '{metadata_engine, metadata_location}' <<<"$stats")"
location=$(jq -r .metadata_location <<<"$stats")
echo "stats: records in $location; stored $(jq -r .stored_bytes <<<"$stats") of $(jq -r .logical_bytes <<<"$stats") bytes"
"$densefs" stats "$mnt" | grep -q '^records: postgresql' || fail "densefs stats does not print the engine"

# --- unmount, fsck, remount.
umount_densefs "$mnt"
"$densefs" fsck "$store" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck of the unmounted store failed"
}
mount_densefs "$store" "$mnt"
check_tree "after a remount" "$data" "$mnt/data"

# --- kill -9 after an fsync: the fsync'd file is exact after a remount.
head -c 6000000 /dev/urandom >"$work/durable.bin"
dd if="$work/durable.bin" of="$mnt/durable.bin" bs=1M conv=fsync status=none ||
  fail "writing durable.bin failed"
# More writes in flight when the daemon dies.
start_flood "$mnt"
pid=$(daemon_pid "$store")
kill_daemon "$pid" "$mnt"
"$densefs" fsck "$store" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck after kill -9 failed"
}
mount_densefs "$store" "$mnt"
cmp "$work/durable.bin" "$mnt/durable.bin" || fail "the fsync'd file differs after kill -9"
rm -rf "$mnt/flood"
check_tree "after kill -9" "$data" "$mnt/data"

# --- the server restarted under a mount: writes go on once it is back (the
# daemon reconnects and takes the volume's lock again).
pg_stop fast
pg_start
head -c 2000000 /dev/urandom >"$work/after-restart.bin"
cp "$work/after-restart.bin" "$mnt/after-restart.bin" || fail "writing after a server restart failed"
"$densefs" sync "$mnt" >/dev/null || fail "densefs sync after a server restart failed"
cmp "$work/after-restart.bin" "$mnt/after-restart.bin" || fail "after-restart.bin reads back wrong"
mkdir "$mnt/after-restart-dir" || fail "mkdir after a server restart failed"
rmdir "$mnt/after-restart-dir" || fail "rmdir after a server restart failed"

# --- gc while mounted, then the server down: a clear error, nothing lost.
"$densefs" gc "$store" >/dev/null || fail "densefs gc of a mounted store failed"
umount_densefs "$mnt"
pg_stop fast
if out=$("$densefs" mount "$store" "$mnt" 2>&1); then
  fail "mount succeeded with the PostgreSQL server down"
fi
[[ $(wc -l <<<"$out") -eq 1 ]] || fail "mount with the server down printed more than one line: $out"
echo "mount with the server down: $out"
pg_start
mount_densefs "$store" "$mnt"
check_tree "after the server came back" "$data" "$mnt/data"
cmp "$work/durable.bin" "$mnt/durable.bin" || fail "durable.bin differs at the end"
cmp "$work/after-restart.bin" "$mnt/after-restart.bin" || fail "after-restart.bin differs at the end"
umount_densefs "$mnt"
"$densefs" fsck "$store" >/dev/null 2>&1 || fail "fsck at the end failed"
echo "PASS: a PostgreSQL store took rsync, renames, kill -9, gc and a server restart"
