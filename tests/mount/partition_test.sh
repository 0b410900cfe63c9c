#!/usr/bin/env bash
# A scale-out volume's writer cut off from its servers by a network
# partition, and healed (issue 36; docs/scale-out.md, "Over a network"; the
# measurement with a 30 s cut is tests/bench/scale_out_network.sh). A
# private PostgreSQL and radosgw on this side; the writer's daemon in a
# network namespace (tests/mount/netns_lib.sh) whose link is set down for
# PARTITION_S (8) seconds while it fsyncs a 100 KB file every 0.2 s, a
# read-only follower on this side (mounted by the database's address, as
# from another machine). The writer's connection strings give up
# on a silent server after 4 s (libpq's tcp_user_timeout and keepalives,
# where densefs's defaults take 25-30 s), so the cut drops its connections,
# as a longer one would with the defaults. Checked:
#  - during the cut the follower, which reaches the servers, lists and reads;
#  - during the cut the writer itself answers a stat and a read of a file
#    it has written and committed within 3 s, while its fsyncs wait for the
#    link (the metadata lock lets readers pass a commit's round trip,
#    fs/meta_lock.h; the commit kept the file's extents and its chunks'
#    bytes, store::after_commit and group_commit, so the read, with the
#    kernel's pages dropped, asks the servers nothing).
#    The fsync loop runs on core 0 and the reads on core 1: over FUSE's
#    io_uring a core's requests share one ring thread, which a create or a
#    write waiting for the link holds (docs/scale-out.md, "Over a network");
#  - after it the writer goes on by itself: fsyncs succeed again within
#    15 s of the heal;
#  - nothing fsync'd is lost: after the writer's unmount and a remount
#    (which the servers must no longer refuse as in use: they notice the
#    cut connections by their keepalives), every file whose fsync
#    succeeded is exact;
#  - fsck is clean.
# Label scaleout; about 30 s with its servers. Needs root, ip and nsenter.
# usage: partition_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
for t in ip nsenter; do command -v "$t" >/dev/null || missing_tool "$t (Debian iproute2, util-linux)"; done
[[ $(id -u) == 0 ]] || skip "needs root (a network namespace)"
# shellcheck source=netns_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/netns_lib.sh"
netns_up 10.202

pg_private=1
pg_listen=127.0.0.1,$netns_server_ip
pg_listen_net=$netns_server_net
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
s3_private=1
s3_bind=0.0.0.0
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

test_start=$(now)
partition_s=${PARTITION_S:-8}
pg_createdb part
# tcp_user_timeout and keepalives_* in milliseconds and seconds: libpq's.
quick="keepalives_idle=2 keepalives_interval=1 keepalives_count=2 tcp_user_timeout=4000"
"$densefs" mkfs --meta "host=$netns_server_ip port=$pg_port user=postgres dbname=part $quick" \
  --data "s3://part/vol?endpoint=http://$netns_server_ip:$s3_port" "$work/part.store" >/dev/null ||
  fail "mkfs of the volume failed"
w=$work/writer.mnt
f=$work/follower.mnt
mkdir -p "$w" "$f" "$work/sent"
in_ns "$densefs" mount "$work/part.store" "$w" || fail "mounting the writer in the namespace failed"
mkdir "$w/p"
head -c 3000000 /dev/urandom >"$work/sent/before.bin"
cp "$work/sent/before.bin" "$w/before.bin"
"$densefs" sync "$w" >/dev/null || fail "densefs sync of the writer failed"
# Not read back before the cut, and out of the kernel's page cache: the
# reads during it reach the daemon, which must answer from what its commit
# kept (the file's extents and its chunks' bytes), asking the servers
# nothing.
echo 1 >/proc/sys/vm/drop_caches
# The writer's loop and the reads on cores of their own (see above).
core1=()
(($(nproc) > 1)) && core1=(taskset -c 1)
# By the database's address, from a client directory of its own: another
# machine's view (the store directory would bind the writer's mount here).
mount_densefs "postgresql://postgres@127.0.0.1:$pg_port/part" "$f" -o ro,cache_dir="$work/follower.client"

stop=$work/stop
fsync_writer "$work/sent" "$w/p" "$work/fsyncs" "$stop" &
writer=$!
# Its dd and head inherit the core.
if (($(nproc) > 1)); then taskset -pc 0 "$writer" >/dev/null || fail "taskset failed"; fi
sleep 2
netns_cut
sleep 1
# The writer's own reads of what it has: its fsyncs meanwhile wait for the
# link, and for 4 s hold a commit on its way (the connection's timeout).
start=$(now)
"${core1[@]}" timeout 3 stat "$w/before.bin" >/dev/null ||
  fail "the writer's stat of a stored file waited for the link during the partition"
"${core1[@]}" timeout 3 cmp -s "$work/sent/before.bin" "$w/before.bin" ||
  fail "the writer's read of a file it has cached waited for the link, or differs, during the partition"
echo "during the cut the writer's stat and read of a cached file took $(elapsed "$start" "$(now)") s"
# From the writer loop's own core too: over io_uring that core's ring
# thread serves both, and the loop's changes that wait for the link are
# handled off it (filesystem::hands_off).
start=$(now)
taskset -c 0 timeout 3 stat "$w/before.bin" >/dev/null ||
  fail "the writer's stat of a stored file, from the core of a change waiting for the link, waited with it"
taskset -c 0 timeout 3 cmp -s "$work/sent/before.bin" "$w/before.bin" ||
  fail "the writer's read of a cached file, from the core of a change waiting for the link, waited with it or differs"
echo "from the waiting writer's core: $(elapsed "$start" "$(now)") s"
# The follower reaches the servers: it answers during the cut.
timeout 20 ls -R "$f" >/dev/null || fail "the follower's ls -R failed during the partition"
cmp -s "$work/sent/before.bin" "$f/before.bin" || fail "the follower's read of before.bin failed or differs during the partition"
sleep "$((partition_s - 1))"
netns_heal
healed_at=$(now)
resumed=""
for _ in {1..150}; do
  resumed=$(awk -v h="$healed_at" '$4 == "ok" && $3 > h { print $3 - h; exit }' "$work/fsyncs" 2>/dev/null)
  [[ -n $resumed ]] && break
  sleep 0.1
done
[[ -n $resumed ]] || fail "the writer did not go on within 15 s of the heal (fsyncs: $(tail -n 3 "$work/fsyncs" | tr '\n' ';'))"
sleep 2
touch "$stop"
wait "$writer" || true
ok=$(awk '$4 == "ok"' "$work/fsyncs" | wc -l)
failed=$(awk '$4 != "ok"' "$work/fsyncs" | wc -l)
echo "a cut of ${partition_s} s: the writer's first fsync after the heal came ${resumed} s after it; $ok fsyncs succeeded, $failed failed$( ((failed == 0)) || echo " (the first: $(awk '$4 != "ok" { print; exit }' "$work/fsyncs"))")"

umount_densefs "$f"
umount_densefs "$w"
start=$(now)
remounted=0
for _ in {1..30}; do
  if in_ns "$densefs" mount "$work/part.store" "$w" 2>"$work/remount.err"; then
    remounted=1
    break
  fi
  sleep 1
done
((remounted)) || fail "the writer could not mount again after the partition: $(cat "$work/remount.err")"
echo "the writer mounted again $(elapsed "$start" "$(now)") s after its unmount"
check_fsynced "$work/sent" "$w/p" "$work/fsyncs"
cmp -s "$work/sent/before.bin" "$w/before.bin" || fail "before.bin differs after the remount"
umount_densefs "$w"
"$densefs" fsck "$work/part.store" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck after the partition failed"
}
echo "all $fsynced_exact files whose fsync succeeded exact after the remount; fsck clean ($(elapsed "$test_start" "$(now)") s)"
