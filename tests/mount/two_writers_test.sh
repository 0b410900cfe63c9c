#!/usr/bin/env bash
# Two writers of one scale-out volume (docs/scale-out.md, "Several
# writers"): records in a private PostgreSQL 15, packs in a private Ceph
# radosgw, writer A mounted `-o shared` from the mkfs directory, writer B
# `-o shared` by the database's URI from a client directory of its own
# (another machine's view). Checked: a file closed on one is whole at the
# next open on the other, both ways; both create files and directories in
# one directory at once and every name, link count and byte is there on
# both; a name created on both at once is made by exactly one (the other
# gets EEXIST); renames and unlinks on one are seen on the other; the same
# bytes written on both are stored once; `densefs status` lists two live
# writers; a file one has open and the other unlinks stays readable where
# it is open; PostgreSQL stopped for longer than a session's expiry and
# started again under both writers writing: every file fsync'd is there
# on both, both write again; kill -9 of B mid-write while A writes on: A serves and takes
# every file, and removes the new file B was writing once B's session
# expired, B mounts again; after both unmount, fsck (refcounts, link
# counts, orphans) is clean.
# usage: two_writers_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"
# A server of its own: this test restarts it (not the phase's shared one).
pg_private=1
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

command -v jq >/dev/null || missing_tool jq
command -v rsync >/dev/null || missing_tool rsync

test_start=$(now)
export DENSEFS_HEARTBEAT_SECONDS=1
store=$work/store
a=$work/a
b=$work/b
mkdir -p "$a" "$b" "$work/c"
pg_createdb vol1
location="s3://densefs-writers/vol1-$$?endpoint=$S3_ENDPOINT"
uri="postgresql:///vol1?host=$pg_socket_dir&port=$pg_port&user=postgres"

b_client() { find "$work/client2" -mindepth 1 -maxdepth 1 -type d | head -n 1; }
# entries DIR [PATTERN]: how many names DIR lists (matching PATTERN).
entries() { find "$1" -mindepth 1 -maxdepth 1 -name "${2:-*}" | wc -l; }
# entries_are N DIR [PATTERN]: counted again at every try of `eventually`.
entries_are() { [[ $(entries "$2" "${3:-*}") -eq $1 ]]; }

step "mkfs; A and B mount the volume with -o shared"
"$densefs" mkfs --meta "$(pg_conninfo vol1)" --data "$location" "$store" >/dev/null ||
  fail "densefs mkfs --data failed"
mount_densefs "$store" "$a" -o shared
mount_densefs "$uri" "$b" -o "shared,cache_dir=$work/client2"
status=$("$densefs" status "$uri" --json) || fail "densefs status failed"
[[ $(jq '[.sessions[] | select(.alive and (.read_only | not))] | length' <<<"$status") == 2 ]] ||
  fail "densefs status does not list two live writers: $status"
# A writer alone refuses the volume while they share it, and -o shared
# is refused where it cannot work.
if "$densefs" mount "$uri" "$work/c" -o "cache_dir=$work/client3" 2>"$work/alone.err"; then
  fail "a writer alone mounted a volume two shared writers have"
fi
echo "a writer alone: $(tail -n 1 "$work/alone.err")"
# The error names who has it and both ways on.
for hint in "-o ro" "-o shared" "pid "; do
  grep -qF -- "$hint" "$work/alone.err" || fail "a writer alone refused without naming '$hint'"
done
# A second client on this machine in B's client directory: it needs one of
# its own, and the error names the option.
expect_mount_refused "cache_dir=DIR" "$uri" "$work/c" -o "shared,cache_dir=$work/client2"
"$densefs" mkfs "$work/embedded" >/dev/null || fail "densefs mkfs of an embedded store failed"
mkdir -p "$work/e"
if "$densefs" mount "$work/embedded" "$work/e" -o shared 2>"$work/embedded.err"; then
  fail "-o shared mounted an embedded store"
fi
grep -q "shared" "$work/embedded.err" || fail "-o shared on an embedded store: $(cat "$work/embedded.err")"
# The kernel's writeback cache keeps its own file sizes: a third writer
# with it would never see the others' writes.
expect_mount_refused writeback_cache "$uri" "$work/c" -o "shared,writeback_cache,cache_dir=$work/client3"
sleep 1.5 # each counts the other at a heartbeat (close then commits)

step "close-to-open both ways"
head -c 3000000 /dev/urandom >"$work/one.bin"
cp "$work/one.bin" "$a/one.bin"
cmp "$work/one.bin" "$b/one.bin" || fail "B read a file A closed differently"
head -c 2000000 /dev/urandom >"$work/two.bin"
cp "$work/two.bin" "$b/two.bin"
cmp "$work/two.bin" "$a/two.bin" || fail "A read a file B closed differently"
# Rewritten by the other writer: the first one's cached pages and size go.
cp "$work/one.bin" "$b/two.bin"
cmp "$work/one.bin" "$a/two.bin" || fail "A read stale bytes of a file B rewrote"
printf 'appended by A\n' >>"$a/two.bin"
eventually 5 "B sees the size A's append gave" stat_is %s "$b/two.bin" 3000014

step "both create in one directory at once"
mkdir "$a/shared"
eventually 5 "B sees the new directory" test -d "$b/shared"
# creates SIDE ROOT: 150 files and 150 directories in ROOT/shared.
creates() {
  local i
  for i in $(seq 1 150); do
    printf '%s %s\n' "$1" "$i" >"$2/shared/$1-$i.txt" || return 1
    mkdir "$2/shared/dir-$1-$i" || return 1
  done
}
creates a "$a" &
pa=$!
creates b "$b" &
pb=$!
wait "$pa" || fail "A's creates failed"
wait "$pb" || fail "B's creates failed"
for root in "$a" "$b"; do
  eventually 10 "$root lists all 600 names" entries_are 600 "$root/shared"
  # 2 + one per subdirectory: no link count update was lost.
  links=$(stat -c %h "$root/shared")
  [[ $links == 302 ]] || fail "$root/shared has $links links, not 302"
  for side in a b; do
    for i in 1 75 150; do
      [[ $(cat "$root/shared/$side-$i.txt") == "$side $i" ]] || fail "$root/shared/$side-$i.txt differs"
    done
  done
done

step "a name created on both at once is made once"
made=0
for i in $(seq 1 30); do
  mkdir "$a/shared/race-$i" 2>/dev/null &
  pa=$!
  mkdir "$b/shared/race-$i" 2>/dev/null &
  pb=$!
  wait "$pa" && made=$((made + 1))
  wait "$pb" && made=$((made + 1))
done
((made == 30)) || fail "30 names raced on both writers: $made mkdirs succeeded, not 30"
eventually 5 "B lists the raced directories" entries_are 30 "$b/shared" 'race-*'
[[ $(stat -c %h "$a/shared") == 332 ]] || fail "after the races A/shared has $(stat -c %h "$a/shared") links, not 332"

step "crossed directory renames never make a loop"
# A moves xN under yN while B moves yN under xN: one of each pair wins;
# the other fails (EINVAL) unless it no longer names a loop.
moved=0
for i in $(seq 1 15); do
  mkdir "$a/x$i" "$a/y$i"
  eventually 5 "B sees x$i and y$i" test -d "$b/y$i"
  mv "$a/x$i" "$a/y$i/" 2>/dev/null &
  pa=$!
  mv "$b/y$i" "$b/x$i/" 2>/dev/null &
  pb=$!
  wait "$pa" && moved=$((moved + 1))
  wait "$pb" && moved=$((moved + 1))
done
# (Both may succeed without a loop: B's kernel may already know x is gone
# from the root, and then `mv y x/` names y "x".)
((moved >= 15)) || fail "15 crossed renames: only $moved succeeded"
# Every pair is still reachable from the root: no directory was cut off in
# a loop of its own.
for i in $(seq 1 15); do
  found=$(find "$a" -maxdepth 2 \( -name "x$i" -o -name "y$i" \) | wc -l)
  ((found == 2)) || fail "after crossed renames, x$i and y$i: $found of them reachable from the root"
done

step "renames and unlinks on one, seen on the other"
mv "$a/shared/b-1.txt" "$a/renamed-by-a.txt"
eventually 5 "B no longer sees the old name" absent "$b/shared/b-1.txt"
eventually 5 "B lists the new name" listed "$b" renamed-by-a.txt
[[ $(cat "$b/renamed-by-a.txt") == "b 1" ]] || fail "B reads the renamed file differently"
rm "$b/shared/a-2.txt"
rmdir "$b/shared/dir-a-2"
eventually 5 "A no longer sees the file B unlinked" absent "$a/shared/a-2.txt"
eventually 5 "A sees the directory B removed gone" absent "$a/shared/dir-a-2"
[[ $(stat -c %h "$a/shared") == 331 ]] || fail "after rmdir on B, A/shared has $(stat -c %h "$a/shared") links"
chmod 600 "$b/renamed-by-a.txt"
eventually 5 "A sees B's chmod" stat_is %a "$a/renamed-by-a.txt" 600

step "a chmod on A while B's change of the file is heard stays A's"
# A's listener re-reads the file for B's touch while A's chmod commits: the
# record it read before must not undo the chmod in A's table (it did in
# 121 of 300 rounds before the fix, and then stayed until the next notice).
echo x >"$a/modes"
stale=0
for round in $(seq 1 40); do
  if ((round % 2)); then mode=4755; else mode=755; fi
  touch "$b/modes" &
  toucher=$!
  sleep "0.00$((round % 4))"
  chmod "$mode" "$a/modes"
  wait "$toucher"
  sleep 0.15 # B's notice is in
  [[ $(stat -c %a "$a/modes") == "$mode" ]] || stale=$((stale + 1))
done
((stale == 0)) || fail "A showed an older mode than its own chmod after $stale of 40 rounds"

step "the same bytes written on both are stored once"
head -c 8000000 /dev/urandom >"$work/same.bin"
cp "$work/same.bin" "$a/same-a.bin" &
cp "$work/same.bin" "$b/same-b.bin" &
wait
cmp "$work/same.bin" "$b/same-a.bin" || fail "B reads A's copy differently"
cmp "$work/same.bin" "$a/same-b.bin" || fail "A reads B's copy differently"

step "a file open on A and unlinked on B stays readable on A"
head -c 1000000 /dev/urandom >"$work/held.bin"
cp "$work/held.bin" "$a/held.bin"
exec 7<"$a/held.bin"
rm "$b/held.bin"
eventually 5 "A no longer sees the file B unlinked" absent "$a/held.bin"
sleep 6 # past the grace (4 heartbeats): released by now if nothing held it
cmp - "$work/held.bin" <&7 || fail "A's open handle read the file B unlinked differently"
exec 7<&-

step "PostgreSQL restarted under both writers"
# Each writer's loop writes and fsyncs files until told to stop, and lists
# those whose fsync returned 0 (with the time): while the server is down
# writes may fail (EIO), never silently; once it is back, both write again;
# neither takes the other for dead (its session looked expired to the
# clock) and removes its files (store::session_alive).
restart_writer() {
  python3 - "$1" "$2" "$work/stop-writers" <<'PY'
import os, sys, time
mnt, tag, stop = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(f"{mnt}/restart-{tag}", exist_ok=True)
i = 0
with open(f"{os.path.dirname(stop)}/synced-{tag}", "w") as synced:
    while not os.path.exists(stop):
        name = f"restart-{tag}/f{i:05d}"
        try:
            fd = os.open(f"{mnt}/{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, (name + "\n").encode() * 500)
                os.fsync(fd)
            finally:
                os.close(fd)
            print(f"{time.time():.3f} {name}", file=synced, flush=True)
        except OSError:
            time.sleep(0.05)
        i += 1
PY
}
rm -f "$work/stop-writers"
restart_writer "$a" a &
writer_a=$!
restart_writer "$b" b &
writer_b=$!
sleep 1
pg_stop fast
sleep 4 # past a session's expiry (3 heartbeats): the clock takes every session for dead
restarted=$(now)
pg_start
sleep 3 # both write again, and beat: each sees the other's session come back
touch "$work/stop-writers"
wait "$writer_a" || fail "the writer loop on A failed"
wait "$writer_b" || fail "the writer loop on B failed"
for tag in a b; do
  after=$(awk -v t="$restarted" '$1 > t' "$work/synced-$tag" | wc -l)
  ((after > 0)) || fail "writer $tag wrote nothing after the restart"
  echo "writer $tag: $(wc -l <"$work/synced-$tag") files fsync'd, $after after the restart"
  python3 - "$work/synced-$tag" "$a" "$b" <<'PY' || fail "a file fsync'd on $tag is missing or wrong after the server restart"
import sys
for line in open(sys.argv[1]):
    name = line.split()[1]
    for mnt in sys.argv[2:]:
        try:
            ok = open(f"{mnt}/{name}", "rb").read() == (name + "\n").encode() * 500
        except OSError as e:
            ok = False
        if not ok:
            sys.exit(f"{mnt}/{name} is missing or wrong")
PY
done

step "kill -9 of B mid-write; A writes on"
data=$work/data
make_tree "$data" 3000000
printf 'durable on B\n' >"$b/durable.txt"
"$densefs" sync "$b" >/dev/null || fail "densefs sync on B failed"
# A new file B is writing when it dies: its data is not all stored, so A
# removes it once B's session has expired (a heartbeat after).
exec 8>"$b/unfinished.bin"
head -c 100000 /dev/urandom >&8
eventually 5 "A sees the new file B is writing" test -e "$a/unfinished.bin"
start_flood "$b"
rsync -aHAX "$data/" "$a/data/" &
rsync_pid=$!
sleep 0.5
kill_daemon "$(daemon_pid "$(b_client)")" "$b"
# densefs status says B is not alive (two heartbeats missed) before A takes
# it for gone and drops its session (three, and one of A's own).
b_not_alive() { "$densefs" status "$uri" | grep -q "not alive: no heartbeat for"; }
eventually 4 "densefs status shows B not alive" b_not_alive
wait "$rsync_pid" || fail "rsync to A failed while B died"
check_tree "on A after B died" "$data" "$a/data"
[[ $(cat "$a/durable.txt") == "durable on B" ]] || fail "A lost a file B synced before it died"
eventually 20 "A removed the new file B was writing when it died" absent "$a/unfinished.bin"
exec 8>&-
mount_densefs "$uri" "$b" -o "shared,cache_dir=$work/client2"
check_tree "on B after its restart" "$data" "$b/data"
[[ $(cat "$b/durable.txt") == "durable on B" ]] || fail "B lost a synced file to kill -9"

umount_densefs "$b"
umount_densefs "$a"
check_fsck "after two writers and a kill -9"
echo "fsck: $(tail -n 1 "$work/fsck.out")"
stats=$("$densefs" stats "$store" --json) || fail "densefs stats failed"
echo "dedup: $(jq -c '{chunks, dedup_saved_bytes}' <<<"$stats")"
(($(jq '.dedup_saved_bytes' <<<"$stats") >= 8000000)) ||
  fail "the same 8 MB written on both writers was not stored once: $stats"
step "done"
echo "PASS: two writers on one volume ($(elapsed "$test_start" "$(now)") s after the servers started)"
