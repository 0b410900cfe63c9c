#!/usr/bin/env bash
# Snapshots on real mounts (docs/backup.md, "Snapshots" and "The nightly
# backup"): seven "nights" of a changing tree, each rsync -aHAX --delete'd
# into the mount and snapshotted as the recipe does; on night 5 the daemon
# is killed (kill -9) during the rsync, remounted and the rsync run again.
# Then every snapshot, browsed in the live mount's hidden .snapshots while
# a writer changes the tree, and mounted with -o snapshot=NAME after a
# remount, equals the tree of its night (rsync -c, diff -r, hard link,
# xattr), and refuses every change; a snapshot
# taken while a writer renames finished files into place shows only whole
# files; kill -9 during a snapshot create leaves it whole or absent; the
# retention rule deletes what it does not keep, gc gives the space back,
# fsck is clean throughout; diff names what a night changed; bad names,
# a snapshot mount of a mounted volume and a mount of the volume while a
# snapshot of it is mounted are refused with one line.
# usage: snapshot_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"

command -v rsync >/dev/null || missing_tool rsync
command -v setfattr >/dev/null || missing_tool "setfattr (Debian attr)"

tree=$work/tree
make_tree "$tree" 1000000
store=$work/store
mnt=$work/mnt
snap=$work/snap
mkdir -p "$mnt" "$snap" "$work/nights"
mkfs_store "$store"
mount_densefs "$store" "$mnt"

# change_tree NIGHT: what a day does to a tree: about 1% of the files
# rewritten (a line appended), one new file, one deleted, one renamed.
change_tree() {
  local night=$1 f i=0
  while IFS= read -r f; do
    ((i++ % 100 == night)) && printf 'night %s\n' "$night" >>"$f"
  done < <(find "$tree/store" "$tree/docs" -type f | sort)
  printf 'written on night %s\n' "$night" >"$tree/night-$night.txt"
  f=$(find "$tree/store" -type f -name '*.cpp' | sort | sed -n "${night}p")
  rm -f "$f"
  f=$(find "$tree/docs" -type f | sort | sed -n "${night}p")
  [[ -n $f ]] && mv "$f" "$f.renamed-$night"
  return 0
}

for night in 1 2 3 4 5 6 7; do
  step "night $night: change the tree, rsync -aHAX --delete it in, snapshot"
  change_tree "$night"
  if ((night == 5)); then
    # A bigger night, cut by kill -9 of the daemon mid-rsync.
    head -c 30000000 /dev/urandom >"$tree/big-$night.bin"
    rsync -aHAX --delete "$tree/" "$mnt/" 2>/dev/null &
    rsync_pid=$!
    sleep 0.5
    flood_pid=$rsync_pid
    kill_daemon "$(daemon_pid "$store")" "$mnt"
    wait "$rsync_pid" 2>/dev/null || true
    mount_densefs "$store" "$mnt"
  fi
  rsync -aHAX --delete "$tree/" "$mnt/" || fail "night $night: rsync failed"
  "$densefs" snapshot create "$mnt" "night-$night" >/dev/null || fail "night $night: snapshot create failed"
  cp -a "$tree" "$work/nights/$night"
done
"$densefs" snapshot list "$mnt"
[[ $("$densefs" snapshot list "$mnt" --json | grep -c '"name"') == 7 ]] || fail "not 7 snapshots"
"$densefs" snapshot diff "$mnt" night-6 night-7 >"$work/diff.out" || fail "snapshot diff failed"
cat "$work/diff.out"
grep -qx '+    /night-7.txt' "$work/diff.out" || fail "diff: night-7.txt is not added"
grep -q '^-    /store/.*\.cpp$' "$work/diff.out" || fail "diff: the deleted .cpp file is not removed"
grep -q '^+    /docs/.*\.renamed-7$' "$work/diff.out" || fail "diff: the renamed file is not added"

step "the live mount's hidden .snapshots: every night as it was, beside a writer, read-only"
find "$mnt" -maxdepth 1 -name .snapshots | grep -q . && fail ".snapshots is listed in the root"
# A writer turning the live tree back and forth between two nights meanwhile.
(
  for _ in 1 2 3; do
    rsync -a --delete "$work/nights/3/" "$mnt/" && rsync -a --delete "$work/nights/7/" "$mnt/"
  done
) &
writer_pid=$!
for night in 1 2 3 4 5 6 7; do
  check_tree "night $night in .snapshots" "$work/nights/$night" "$mnt/.snapshots/night-$night"
done
wait "$writer_pid" || fail "the writer beside .snapshots failed"
check_tree "the live tree after the writer" "$work/nights/7" "$mnt"
for change in "touch $mnt/.snapshots/night-3/new" "rm $mnt/.snapshots/night-3/night-3.txt" \
  "mkdir $mnt/.snapshots/night-3/d" "mv $mnt/.snapshots/night-3/night-3.txt $mnt/moved" \
  "setfattr -n user.x -v y $mnt/.snapshots/night-3/night-3.txt" \
  "chmod 600 $mnt/.snapshots/night-3/night-3.txt"; do
  # shellcheck disable=SC2086 # the command's words
  out=$(LC_ALL=C $change 2>&1) && fail "a snapshot took a change: $change"
  [[ $out == *"Read-only file system"* ]] || fail "$change: $out (not EROFS)"
done
expect_refused "File exists" env LC_ALL=C mkdir "$mnt/.snapshots"
"$densefs" info "$mnt/.snapshots/night-2/night-2.txt" | grep -q "of snapshot night-2" ||
  fail "densefs info does not name the snapshot"
# A snapshot taken and deleted through the mount shows and goes at once,
# and a file held open in it fails its reads, never returns other bytes.
ls "$mnt/.snapshots" >/dev/null
"$densefs" snapshot create "$mnt" scratch >/dev/null || fail "snapshot create scratch failed"
find "$mnt/.snapshots" -maxdepth 1 -name scratch | grep -q . || fail "a new snapshot is not listed in .snapshots"
exec {held}<"$mnt/.snapshots/scratch/night-7.txt"
"$densefs" snapshot delete "$mnt" scratch >/dev/null || fail "snapshot delete scratch failed"
find "$mnt/.snapshots" -maxdepth 1 -name scratch | grep -q . && fail "a deleted snapshot is still listed"
[[ -e $mnt/.snapshots/scratch ]] && fail "a deleted snapshot is still there"
if cat <&"$held" >/dev/null 2>&1; then fail "a file of a deleted snapshot was read"; fi
exec {held}<&-

step "refusals: a bad name, a name taken, a snapshot mount of a mounted volume, no such snapshot"
expect_refused "'/'" "$densefs" snapshot create "$mnt" "a/b"
expect_refused "exists already" "$densefs" snapshot create "$mnt" night-3
expect_mount_refused "unmount it first" "$store" "$snap" -o snapshot=night-3
expect_refused "no snapshot named" "$densefs" snapshot delete "$mnt" no-such

step "a snapshot taken while a writer renames whole files into place shows only whole files"
mkdir "$mnt/writer"
(
  for i in $(seq 1 400); do
    name=f$((i % 40))
    # 40 KB of its own name and round: whole, or not this round at all.
    { yes "$name round $i" || true; } | head -c 40000 >"$mnt/writer/.$name.tmp" || exit 0
    mv "$mnt/writer/.$name.tmp" "$mnt/writer/$name" || exit 0
  done
) &
writer_pid=$!
for k in 1 2 3; do
  sleep 0.3
  "$densefs" snapshot create "$mnt" "busy-$k" >/dev/null || fail "snapshot busy-$k failed"
done
wait "$writer_pid"
umount_densefs "$mnt"
for k in 1 2 3; do
  mount_densefs "$store" "$snap" -o "snapshot=busy-$k"
  whole=0
  for f in "$snap"/writer/f*; do
    [[ -e $f ]] || continue
    first=$(head -n 1 "$f")
    if [[ $(stat -c %s "$f") != 40000 ]] || ! cmp -s "$f" <(yes "$first" | head -c 40000); then
      fail "busy-$k: $(basename "$f") is not whole ($(stat -c %s "$f") bytes)"
    fi
    whole=$((whole + 1))
  done
  echo "busy-$k: $whole whole files"
  if touch "$snap/x" 2>/dev/null; then fail "a snapshot mount took a write"; fi
  # The live volume does not bind to a snapshot's mount.
  ((k == 1)) && expect_mount_refused "as its snapshot" "$store" "$mnt"
  umount_densefs "$snap"
done

step "every night's snapshot, mounted on its own, is the tree of its night"
for night in 1 2 3 4 5 6 7; do
  mount_densefs "$store" "$snap" -o "snapshot=night-$night"
  check_tree "night $night" "$work/nights/$night" "$snap"
  umount_densefs "$snap"
done
check_fsck "with 10 snapshots"

step "kill -9 during a snapshot create: whole or absent, fsck clean"
mount_densefs "$store" "$mnt"
"$densefs" snapshot create "$mnt" killed >/dev/null 2>&1 &
create_pid=$!
flood_pid=$create_pid
kill_daemon "$(daemon_pid "$store")" "$mnt"
check_fsck "after kill -9 during a snapshot create"
if "$densefs" snapshot list "$store" --json | grep -q '"killed"'; then
  mount_densefs "$store" "$snap" -o snapshot=killed
  diff -r "$work/nights/7/store" "$snap/store" >/dev/null || fail "the snapshot made as the daemon died differs"
  umount_densefs "$snap"
  echo "the snapshot was taken whole"
else
  echo "the snapshot was not taken"
fi

step "retention: forget --keep-last 3 deletes the others; gc gives their space back"
mount_densefs "$store" "$mnt"
rm -rf "${mnt:?}"/*
before=$("$densefs" gc "$store" --dry-run --json | sed -n 's/.*"live_payload_bytes": *\([0-9]*\).*/\1/p' | head -n 1)
"$densefs" snapshot forget "$mnt" --keep-last 3 >"$work/forget.out" || fail "forget failed"
cat "$work/forget.out"
[[ $(grep -c '^delete' "$work/forget.out") -ge 7 ]] || fail "forget deleted fewer than 7"
[[ $("$densefs" snapshot list "$mnt" --json | grep -c '"name"') == 3 ]] || fail "not 3 snapshots left"
"$densefs" gc "$store" >/dev/null || fail "gc failed"
after=$("$densefs" gc "$store" --dry-run --json | sed -n 's/.*"live_payload_bytes": *\([0-9]*\).*/\1/p' | head -n 1)
echo "live payloads: $before -> $after bytes"
((after < before)) || fail "deleting snapshots gave no payload bytes back"
umount_densefs "$mnt"
check_fsck "after forget and gc"
# The three forget kept (one of them "killed" when that create got through).
mapfile -t left_names < <("$densefs" snapshot list "$store" --json | sed -n 's/.*"name": *"\([^"]*\)".*/\1/p')
((${#left_names[@]} == 3)) || fail "not 3 snapshots left: ${left_names[*]}"
"$densefs" snapshot delete "$store" "${left_names[@]}" >/dev/null ||
  fail "delete on an unmounted store failed"
"$densefs" snapshot list "$store"
"$densefs" gc "$store" >/dev/null || fail "gc failed"
left=$("$densefs" gc "$store" --dry-run --json | sed -n 's/.*"live_payload_bytes": *\([0-9]*\).*/\1/p' | head -n 1)
echo "no files, no snapshots: $left bytes of live payloads"
((left == 0)) || fail "with every file and snapshot deleted, $left bytes of payloads live on"
check_fsck "after deleting every snapshot on the unmounted store"
step "done"
