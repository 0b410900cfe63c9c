#!/usr/bin/env bash
# File locks across the clients of a scale-out volume (docs/scale-out.md,
# "Locks across clients"): records in the phase's PostgreSQL, packs in its
# radosgw, writer A mounted from the mkfs directory and writer B by the
# database's URI from a client directory of its own (-o shared: another
# machine's view), programs on each taking locks with
# tests/mount/lock_probe.py. Checked: flock EX and SH exclude each other
# across A and B; a blocked flock and a blocked F_SETLKW on B are granted
# within a second of A's holder closing or being killed; fcntl ranges
# conflict only where they overlap, and F_GETLK on B names A's lock with
# pid 0 (A's own processes see the pid); an OFD lock goes at its file's
# close; a waiter interrupted by SIGALRM gets EINTR and
# a waiter killed with -9 is gone at once; two processes of one client that
# would wait for each other: the second gets EDEADLK; when A's daemon is killed with
# a lock held, B is granted it once A's session is dead; no lock row
# outlives the sessions; fsck clean. The embedded store and -o local_locks
# keep locks in the kernel (/proc/locks lists them; a volume's locks are
# not there).
# usage: locks_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

command -v jq >/dev/null || missing_tool jq
probe=$(dirname "${BASH_SOURCE[0]}")/lock_probe.py

test_start=$(now)
# A killed client's session is dead after three missed heartbeats: 3-5 s.
export DENSEFS_HEARTBEAT_SECONDS=1
store=$work/store
a=$work/a
b=$work/b
mkdir -p "$a" "$b" "$work/e" "$work/l"
pg_createdb locks1
location="s3://densefs-locks/vol-$$?endpoint=$S3_ENDPOINT"
uri="postgresql:///locks1?host=$pg_socket_dir&port=$pg_port&user=postgres"
b_client() { find "$work/client2" -mindepth 1 -maxdepth 1 -type d | head -n 1; }

# hold NAME PATH SPEC: a process that takes the lock and keeps it until
# `release NAME` (or its death).
declare -A holder_pid
hold() {
  local name=$1
  python3 "$probe" hold "$2" "$3" "$work/$name.go" >"$work/$name.out" 2>&1 &
  holder_pid[$name]=$!
  eventually 10 "$name holds $3" grep -qx held "$work/$name.out"
}
release() {
  touch "$work/$1.go"
  wait "${holder_pid[$1]}" || true
}
# expect_try WHAT ok|busy PATH SPEC: one non-blocking try.
expect_try() {
  local got
  got=$(python3 "$probe" try "$3" "$4") || true
  [[ $got == "$2" ]] || fail "$1: a try of $4 on $3 gave '$got', not $2"
}
# waiter NAME PATH SPEC [ALARM]: a process waiting for the lock.
declare -A waiter_pid
waiter() {
  local name=$1
  shift
  python3 "$probe" wait "$@" >"$work/$name.out" 2>&1 &
  waiter_pid[$name]=$!
  sleep 0.3
  kill -0 "${waiter_pid[$name]}" 2>/dev/null || fail "$name did not wait: $(cat "$work/$name.out")"
}
# granted_within NAME SECONDS: the waiter got its lock within SECONDS of now.
granted_within() {
  local start
  start=$(now)
  wait "${waiter_pid[$1]}" || fail "$1 failed: $(cat "$work/$1.out")"
  grep -q '^ok ' "$work/$1.out" || fail "$1: $(cat "$work/$1.out")"
  awk -v a="$start" -v b="$(now)" -v s="$2" 'BEGIN { exit !(b - a <= s) }' ||
    fail "$1 got its lock $(elapsed "$start" "$(now)") s after it was free (more than $2 s)"
  echo "$1 granted $(elapsed "$start" "$(now)") s after the lock went"
}
lock_rows() { pg_sql locks1 "SELECT count(*) FROM densefs_meta WHERE k >= 'lock/' AND k < 'lock0'"; }
inode_of() { stat -c %i "$1"; }
in_proc_locks() { grep -q ":$(inode_of "$1") " /proc/locks; }

step "mkfs; A and B mount the volume with -o shared"
"$densefs" mkfs --meta "$(pg_conninfo locks1)" --data "$location" "$store" >/dev/null ||
  fail "densefs mkfs --data failed"
mount_densefs "$store" "$a" -o shared
mount_densefs "$uri" "$b" -o "shared,cache_dir=$work/client2"
printf 'spool\n' >"$a/spool"
head -c 4096 /dev/zero >"$a/db"
"$densefs" sync "$a" >/dev/null || fail "densefs sync failed"
eventually 5 "B sees A's files" test -s "$b/db"

step "flock: EX and SH exclude each other across clients; a waiter is granted at the close"
hold a_ex "$a/spool" flock:ex
expect_try "B beside A's EX" busy "$b/spool" flock:ex
expect_try "B beside A's EX" busy "$b/spool" flock:sh
in_proc_locks "$a/spool" && fail "A's flock is in the kernel's /proc/locks: not served by densefs"
[[ $(lock_rows) == 1 ]] || fail "A's flock is not one lock row: $(lock_rows)"
waiter b_ex "$b/spool" flock:ex
release a_ex
granted_within b_ex 1.5
hold a_sh "$a/spool" flock:sh
hold b_sh "$b/spool" flock:sh
expect_try "a third reader" ok "$a/spool" flock:sh
expect_try "an EX beside two SH holders" busy "$b/spool" flock:ex
release b_sh
release a_sh

step "fcntl: ranges conflict where they overlap; F_GETLK names the lock"
hold a_w "$a/db" posix:w:0:100
expect_try "B inside A's range" busy "$b/db" posix:w:50:10
expect_try "B's read inside A's write lock" busy "$b/db" posix:r:99:1
expect_try "B past A's range" ok "$b/db" posix:r:100:100
got=$(python3 "$probe" getlk "$b/db" posix:w:0:1)
[[ $got == "w 0 100 0" ]] || fail "F_GETLK on B: '$got', not 'w 0 100 0' (pid 0: another machine's)"
got=$(python3 "$probe" getlk "$a/db" posix:w:0:1)
[[ $got == "w 0 100 ${holder_pid[a_w]}" ]] || fail "F_GETLK on A: '$got', not A's holder's pid ${holder_pid[a_w]}"
waiter b_w "$b/db" posix:w:0:0
kill -9 "${holder_pid[a_w]}"
granted_within b_w 1.5
release a_w
hold a_ofd "$a/db" ofd:w:0:10
expect_try "B beside A's OFD lock" busy "$b/db" posix:w:5:1
release a_ofd
expect_try "B after A closed the OFD lock's file" ok "$b/db" posix:w:5:1
[[ $(lock_rows) == 0 ]] || fail "lock rows left after the holders closed: $(lock_rows)"

step "a waiter interrupted by a signal gets EINTR; a waiter killed with -9 goes at once"
hold a_w2 "$a/db" posix:w:0:0
hold a_x2 "$a/db" flock:ex  # flock and fcntl locks do not see each other
waiter b_alarm "$b/db" posix:w:0:0 1
wait "${waiter_pid[b_alarm]}" || fail "the interrupted waiter failed: $(cat "$work/b_alarm.out")"
read -r word seconds <"$work/b_alarm.out"
[[ $word == eintr ]] || fail "a SIGALRM did not interrupt F_SETLKW: $(cat "$work/b_alarm.out")"
awk -v s="$seconds" 'BEGIN { exit !(s < 2.5) }' || fail "EINTR came after $seconds s (alarm at 1 s)"
echo "F_SETLKW interrupted after $seconds s"
waiter b_killed "$b/db" flock:ex
waiter b_killed_posix "$b/db" posix:w:0:0
kill -9 "${waiter_pid[b_killed]}" "${waiter_pid[b_killed_posix]}"
killed_at=$(now)
for name in b_killed b_killed_posix; do
  for _ in $(seq 1 30); do
    kill -0 "${waiter_pid[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "${waiter_pid[$name]}" 2>/dev/null && fail "$name still runs 3 s after kill -9"
done
echo "killed waiters gone after $(elapsed "$killed_at" "$(now)") s"
release a_w2
release a_x2

step "two processes that would wait for each other: the second gets EDEADLK"
python3 "$probe" pair "$a/db" posix:w:0:10 posix:w:20:10 "$work/p1.go" >"$work/p1.out" 2>&1 &
p1=$!
python3 "$probe" pair "$a/db" posix:w:20:10 posix:w:0:10 "$work/p2.go" >"$work/p2.out" 2>&1 &
p2=$!
both_hold() { grep -qx held "$work/p1.out" && grep -qx held "$work/p2.out"; }
eventually 10 "both hold their first lock" both_hold
touch "$work/p1.go"
sleep 0.5  # P1 now waits for P2's lock
touch "$work/p2.go"
wait "$p2" || fail "the second process failed: $(cat "$work/p2.out")"
[[ $(tail -n 1 "$work/p2.out") == edeadlk ]] || fail "no EDEADLK: $(cat "$work/p2.out")"
wait "$p1" || fail "the first process failed: $(cat "$work/p1.out")"
[[ $(tail -n 1 "$work/p1.out") == ok ]] || fail "the first process was not granted: $(cat "$work/p1.out")"

step "A's daemon killed while a lock is held: B gets it once A's session is dead"
hold a_dies "$a/db" posix:w:0:0
expect_try "B beside the live A" busy "$b/db" posix:w:0:10
waiter b_after "$b/db" posix:w:0:0
pid_a=$(daemon_pid "$store")
kill -9 "$pid_a"
killed_at=$(now)
granted_within b_after 15
kill -9 "${holder_pid[a_dies]}" 2>/dev/null || true
release a_dies
umount -l "$a" 2>/dev/null || true
for _ in $(seq 1 100); do kill -0 "$pid_a" 2>/dev/null || break; sleep 0.1; done
mount_densefs "$store" "$a" -o shared
expect_try "A mounted again" ok "$a/db" posix:w:0:10

step "unmount: no lock row outlives the sessions; fsck clean"
umount_densefs "$b"
umount_densefs "$a"
[[ $(lock_rows) == 0 ]] || fail "lock rows left after both unmounted: $(lock_rows)"
check_fsck "after the lock tests"

step "the embedded store and -o local_locks keep locks in the kernel"
"$densefs" mkfs "$work/embedded" >/dev/null || fail "densefs mkfs (embedded) failed"
mount_densefs "$work/embedded" "$work/e"
printf 'x\n' >"$work/e/f"
hold e_ex "$work/e/f" flock:ex
in_proc_locks "$work/e/f" || fail "an embedded store's flock is not in /proc/locks"
expect_try "a second flock on the embedded store" busy "$work/e/f" flock:ex
release e_ex
umount_densefs "$work/e"
mount_densefs "$store" "$work/l" -o local_locks
hold l_w "$work/l/db" posix:w:0:0
in_proc_locks "$work/l/db" || fail "a -o local_locks fcntl lock is not in /proc/locks"
[[ $(lock_rows) == 0 ]] || fail "-o local_locks wrote lock rows"
release l_w
umount_densefs "$work/l"
step "done"
echo "locks_test: passed in $(elapsed "$test_start" "$(now)") s"
