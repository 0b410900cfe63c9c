#!/usr/bin/env bash
# Two clients of one scale-out volume (docs/scale-out.md, "Several
# clients"): records in a private PostgreSQL 15, packs in a private Ceph
# radosgw, the writer mounted from the mkfs directory and a follower
# mounted read-only by the database's URI from a client directory of its
# own (another machine's view). Checked on the follower: a file the writer
# closed just before the follower mounted is whole at its first open (the
# mount waits for the writer's answer); a file the writer
# closed is whole at the next open (close-to-open), also rewritten in place
# and grown; a rename, an unlink, a new directory and a tree copied in with
# rsync -aHAX show up in its listings and stats within a few seconds (change
# notices, LISTEN/NOTIFY), the packs it reads from again fetched whole;
# writes are refused with EROFS; `densefs status`
# lists both mounts, the follower as read-only. Then the writer deletes
# most of the tree and runs gc while the follower reads the rest exactly
# (the emptied pack objects kept for a grace, deleted by the next gc);
# kill -9 of the writer mid-write leaves the follower serving everything
# the writer committed; the writer mounts again, fsck is clean, and the
# follower sees the writer's new files. A file the follower has open and
# the writer unlinks stays readable there (the follower holds it) until
# its last close, and then the writer releases it.
# usage: two_clients_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

command -v rsync >/dev/null || missing_tool rsync
command -v jq >/dev/null || missing_tool jq
command -v setfattr >/dev/null || missing_tool "setfattr (Debian attr)"

test_start=$(now)
# Heartbeats every second: the writer learns of the follower within one,
# and a killed writer's session expires in 3 s.
export DENSEFS_HEARTBEAT_SECONDS=1
store=$work/store
writer=$work/writer
reader=$work/reader
mkdir -p "$writer" "$reader"
pg_createdb vol1
location="s3://densefs-two/vol1-$$?endpoint=$S3_ENDPOINT"
uri="postgresql:///vol1?host=$pg_socket_dir&port=$pg_port&user=postgres"

same_file() { cmp -s "$1" "$2"; }

step "mkfs; the writer mounts; the follower mounts read-only by URI"
"$densefs" mkfs --meta "$(pg_conninfo vol1)" --data "$location" "$store" >/dev/null ||
  fail "densefs mkfs --data failed"

# A writer that keeps closed files staged for five minutes (-o commit=300)
# and would hear of a follower only at a heartbeat ten minutes away: only
# the follower's question at mount (its session's notice, answered once the
# writer has committed) makes the file it closed just before readable there.
DENSEFS_HEARTBEAT_SECONDS=600 mount_densefs "$store" "$writer" -o commit=300
head -c 300000 /dev/urandom >"$work/early.bin"
cp "$work/early.bin" "$writer/early.bin"
mount_densefs "$uri" "$reader" -o "ro,cache_dir=$work/client2"
same_file "$work/early.bin" "$reader/early.bin" ||
  fail "the follower's first open: a file the writer closed before the follower mounted is not whole"
echo "follower: a file closed before it mounted is whole at its first open"
umount_densefs "$reader"
umount_densefs "$writer"

mount_densefs "$store" "$writer"
mount_densefs "$uri" "$reader" -o "ro,cache_dir=$work/client2"
status=$("$densefs" status "$uri" --json) || fail "densefs status failed"
[[ $(jq '[.sessions[] | select(.alive)] | length' <<<"$status") == 2 ]] ||
  fail "densefs status does not list two live mounts: $status"
[[ $(jq -r --arg m "$(realpath "$reader")" '.sessions[] | select(.mountpoint == $m) | .read_only' <<<"$status") == true ]] ||
  fail "densefs status does not show the follower as read-only: $status"
"$densefs" status "$store" | grep -qF "(read-only)" || fail "densefs status (text) does not say read-only"
# A follower with the kernel's writeback cache would keep its own file
# sizes and never see the writer's: refused with one line.
expect_mount_refused writeback_cache "$uri" "$work/wb" -o "ro,writeback_cache,cache_dir=$work/client3"
# The writer counts the other sessions at each heartbeat.
sleep 1.5

step "close-to-open: a file closed on the writer is whole at the next open on the follower"
head -c 3000000 /dev/urandom >"$work/one.bin"
ls "$reader" >/dev/null  # the follower's kernel caches the empty root
cp "$work/one.bin" "$writer/one.bin"
cmp "$work/one.bin" "$reader/one.bin" || fail "the follower read a file the writer closed differently"
printf 'small text\n' >"$writer/small.txt"
[[ $(cat "$reader/small.txt") == "small text" ]] || fail "the follower read a small file differently"
# Rewritten in place (same size, new bytes), then grown: the follower's
# page cache and cached size must not survive the writer's close.
head -c 3000000 /dev/urandom >"$work/two.bin"
cp "$work/two.bin" "$writer/one.bin"
cmp "$work/two.bin" "$reader/one.bin" || fail "the follower read stale pages after a rewrite"
printf 'more\n' >>"$writer/small.txt"
[[ $(cat "$reader/small.txt") == $'small text\nmore' ]] ||
  fail "the follower read a stale size after an append: $(cat "$reader/small.txt")"
eventually 5 "the follower sees the size of the grown file" stat_is %s "$reader/small.txt" 16

step "renames, unlinks, new directories, xattrs"
mv "$writer/one.bin" "$writer/renamed.bin"
eventually 5 "the follower no longer lists the old name" absent "$reader/one.bin"
eventually 5 "the follower lists the new name" listed "$reader" renamed.bin
cmp "$work/two.bin" "$reader/renamed.bin" || fail "the renamed file differs on the follower"
rm "$writer/small.txt"
eventually 5 "the follower no longer sees the unlinked file" absent "$reader/small.txt"
mkdir -p "$writer/d1/d2"
printf 'deep\n' >"$writer/d1/d2/f"
eventually 5 "the follower sees a new directory's file" same_file "$writer/d1/d2/f" "$reader/d1/d2/f"
setfattr -n user.note -v first "$writer/d1/d2/f"
[[ $(getfattr --absolute-names --only-values -n user.note "$reader/d1/d2/f" 2>/dev/null) == first ]] ||
  eventually 5 "the follower sees a new xattr" getfattr -n user.note "$reader/d1/d2/f"
chmod 600 "$writer/d1/d2/f"
eventually 5 "the follower sees a chmod" stat_is %a "$reader/d1/d2/f" 600

step "refused on the follower: writes"
if printf x 2>/dev/null >"$reader/nope"; then fail "the follower took a new file"; fi
if rm "$reader/renamed.bin" 2>/dev/null; then fail "the follower took an unlink"; fi
[[ -e $writer/renamed.bin ]] || fail "the file the follower could not unlink is gone"

step "a tree copied in with rsync -aHAX on the writer"
data=$work/data
make_tree "$data" 4000000
rsync -aHAX "$data/" "$writer/data/" || fail "rsync -aHAX to the writer failed"
check_tree "on the writer" "$data" "$writer/data"
eventually 10 "the follower lists the whole tree" diff -r "$data" "$reader/data"
check_tree "on the follower" "$data" "$reader/data"
# Packs it read from more than once came whole into its cache (one GET).
whole=$(find "$work/client2" -path '*/cache/packs/*.pack' | wc -l)
((whole > 0)) || fail "the follower read the tree without fetching any pack whole"
echo "follower: $whole packs fetched whole"
# ...and its cache counts them (a follower owns its client directory).
cached=$("$densefs" stats "$reader" --json | jq '.cache_bytes') || fail "densefs stats of the follower failed"
((cached > 0)) || fail "the follower's cache counts no bytes after reading the tree"

step "most of the tree deleted, gc on the writer, the rest read on the follower"
rm -rf "$writer/data/store" "$writer/data/random.bin" "$data/store" "$data/random.bin"
"$densefs" sync "$writer" >/dev/null || fail "densefs sync failed"
# gc() LABEL: densefs gc --json of the mounted volume into $gc_json.
gc() {
  gc_json=$("$densefs" gc --json "$store" 2>"$work/gc.err") || {
    cat "$work/gc.err" >&2
    fail "densefs gc $1 failed"
  }
}
gc "with a live follower"
deferred=$(jq '.after.packs_deferred' <<<"$gc_json")
((deferred > 0)) || fail "gc with a live follower deferred no pack deletion: $gc_json"
eventually 10 "the follower sees the deletions" diff -r "$data" "$reader/data"
rm -rf "$work/client2"/*/cache/records
check_tree "on the follower after gc, read from S3" "$data" "$reader/data"
# Past the grace (4 heartbeats), the next gc deletes them.
sleep 4.2
gc "after the grace"
(($(jq '.after.packs_deleted' <<<"$gc_json") >= deferred)) ||
  fail "gc after the grace did not delete the $deferred deferred packs: $gc_json"
check_tree "on the follower after the deferred deletions" "$data" "$reader/data"

step "kill -9 of the writer mid-write; the follower keeps serving"
printf 'durable\n' >"$writer/durable.txt"
"$densefs" sync "$writer" >/dev/null || fail "densefs sync failed"
start_flood "$writer"
kill_daemon "$(daemon_pid "$store")" "$writer"
check_tree "on the follower after the writer died" "$data" "$reader/data"
[[ $(cat "$reader/durable.txt") == durable ]] || fail "the follower lost a file the writer synced"
sleep 3.5
"$densefs" status "$uri" | grep -q "not alive" || fail "densefs status does not show the killed writer as not alive"

step "the writer mounts again; fsck; the follower sees its new files"
mount_densefs "$store" "$writer"
[[ $(cat "$writer/durable.txt") == durable ]] || fail "the writer lost a synced file to kill -9"
printf 'after the crash\n' >"$writer/after.txt"
[[ $(cat "$reader/after.txt" 2>/dev/null) == "after the crash" ]] ||
  eventually 5 "the follower sees a file written after the writer's restart" test -e "$reader/after.txt"
[[ $(cat "$reader/after.txt") == "after the crash" ]] || fail "the follower read after.txt differently"

step "a file open on the follower and unlinked on the writer stays readable there until its last close"
# rows ROW-PREFIX: how many densefs_meta rows the key prefix has.
rows() { pg_sql vol1 "SELECT count(*) FROM densefs_meta WHERE substring(k FROM 1 FOR length('$1')) = '$1'::bytea"; }
no_orphans() { [[ $(rows orphan/) == 0 && $(rows hold/) == 0 ]]; }
holds_one() { [[ $(rows hold/) == 1 ]]; }
head -c 2000000 /dev/urandom >"$work/held.bin"
cp "$work/held.bin" "$writer/held.bin"
"$densefs" sync "$writer" >/dev/null || fail "densefs sync failed"
exec 7<"$reader/held.bin"  # open, not read: none of it in the follower's page cache
rm "$writer/held.bin"
# With them, files nobody holds: kept for the grace, then released many
# to a commit.
mkdir "$writer/many"
for i in $(seq 1 60); do echo "file $i" >"$writer/many/$i.txt"; done
"$densefs" sync "$writer" >/dev/null || fail "densefs sync failed"
rm -r "$writer/many"
eventually 5 "the follower no longer sees the file the writer unlinked" absent "$reader/held.bin"
eventually 5 "the follower holds the unlinked file it has open" holds_one
# Past the writer's grace (4 heartbeats) and more: it would have released
# the file by now if nothing held it.
sleep 6
cmp - "$work/held.bin" <&7 || fail "the follower's open handle read the unlinked file differently"
exec 7<&-
eventually 10 "the follower lets the writer release the unlinked file at its last close" no_orphans

step "a handle the follower's kernel kept to a file the writer released: ESTALE, never bytes or EIO"
# file_handle FILE: name_to_handle_at of FILE printed as hex; file_handle -
# HEX: that handle opened with open_by_handle_at and read: prints "ok" or
# the errno's name.
file_handle() {
  python3 - "$1" "$reader" "${2:-}" <<'PY'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class handle(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("f", ctypes.c_ubyte * 128)]
h = handle()
if sys.argv[1] != "-":
    h.bytes = 128
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, sys.argv[1].encode(), ctypes.byref(h), ctypes.byref(mount_id), 0):
        sys.exit("name_to_handle_at: " + os.strerror(ctypes.get_errno()))
    print(bytes(ctypes.string_at(ctypes.byref(h), 8 + h.bytes)).hex())
    sys.exit()
raw = bytes.fromhex(sys.argv[3])
ctypes.memmove(ctypes.byref(h), raw, len(raw))
root = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECTORY)
fd = libc.open_by_handle_at(root, ctypes.byref(h), os.O_RDONLY)
if fd < 0:
    print(errno.errorcode[ctypes.get_errno()])
    sys.exit()
try:
    os.read(fd, 1 << 20)
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
PY
}
printf 'released while only a handle names it\n' >"$writer/stale.txt"
"$densefs" sync "$writer" >/dev/null || fail "densefs sync failed"
handle=$(file_handle "$reader/stale.txt") || fail "no file handle for $reader/stale.txt: $handle"
opened=$(file_handle - "$handle")
[[ $opened == ok ]] || fail "the follower's file handle gave $opened while the file exists"
rm "$writer/stale.txt"
eventually 5 "the follower no longer sees the file the writer unlinked" absent "$reader/stale.txt"
sleep 5 # past the writer's grace (4 heartbeats): released, as nothing holds it
eventually 10 "the follower lets the writer release the unlinked file nobody holds" no_orphans
opened=$(file_handle - "$handle")
[[ $opened == ESTALE ]] || fail "a handle to a released file gave $opened instead of ESTALE"
umount_densefs "$writer"
check_fsck "after the writer's kill -9"
umount_densefs "$reader"
status=$("$densefs" status "$uri" --json) || fail "densefs status failed"
[[ $(jq '.sessions | length' <<<"$status") == 0 ]] || fail "sessions left after both unmounted: $status"
step "done"
echo "PASS: a writer and a read-only follower on one volume ($(elapsed "$test_start" "$(now)") s after the servers started)"
