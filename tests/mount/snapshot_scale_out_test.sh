#!/usr/bin/env bash
# Snapshots of a volume in PostgreSQL + S3 (docs/backup.md, "Snapshots"),
# written by two shared writers A and B (-o shared, two client
# directories): a snapshot taken through A holds what both committed
# before it and nothing either wrote after; it mounts read-only by the
# volume's URI from a third client directory while A and B keep writing;
# a snapshot taken through B is consistent the same way; diff names both
# writers' changes; deleting one through B gives its space back; fsck of
# the volume (unmounted) is clean.
# usage: snapshot_scale_out_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

test_start=$(now)
export DENSEFS_HEARTBEAT_SECONDS=1
store=$work/store
a=$work/a
b=$work/b
snap=$work/snap
mkdir -p "$a" "$b" "$snap"
pg_createdb snap1
location="s3://densefs-snapshots/snap1-$$?endpoint=$S3_ENDPOINT"
uri="postgresql:///snap1?host=$pg_socket_dir&port=$pg_port&user=postgres"

# write_files DIR SIDE ROUND N: N files DIR/SIDE-I.txt holding "SIDE ROUND I".
write_files() {
  local i
  mkdir -p "$1"
  for i in $(seq 1 "$4"); do printf '%s %s %s\n' "$2" "$3" "$i" >"$1/$2-$i.txt"; done
}
# holds DIR SIDE ROUND N: DIR has exactly those files, with that round's content.
holds() {
  local i
  [[ $(find "$1" -name "$2-*.txt" | wc -l) == "$4" ]] ||
    fail "$1: $(find "$1" -name "$2-*.txt" | wc -l) files of $2, not $4"
  for i in $(seq 1 "$4"); do
    [[ $(cat "$1/$2-$i.txt") == "$2 $3 $i" ]] || fail "$1/$2-$i.txt: '$(cat "$1/$2-$i.txt")', not round $3"
  done
}

step "mkfs; A and B mount the volume with -o shared; both write round 1"
"$densefs" mkfs --meta "$(pg_conninfo snap1)" --data "$location" "$store" >/dev/null ||
  fail "densefs mkfs failed"
mount_densefs "$store" "$a" -o shared
mount_densefs "$uri" "$b" -o "shared,cache_dir=$work/client2"
write_files "$a/a" a 1 50
write_files "$b/b" b 1 50
"$densefs" sync "$b" >/dev/null || fail "sync of B failed"

step "a snapshot through A holds both writers' round 1"
"$densefs" snapshot create "$a" one >/dev/null || fail "snapshot create through A failed"
write_files "$a/a" a 2 60
write_files "$b/b" b 2 60
rm -f "$a/a/a-1.txt"
"$densefs" sync "$a" >/dev/null
"$densefs" sync "$b" >/dev/null
mount_densefs "$uri" "$snap" -o "snapshot=one,cache_dir=$work/client3"
holds "$snap/a" a 1 50
holds "$snap/b" b 1 50
if touch "$snap/x" 2>/dev/null; then fail "a snapshot mount took a write"; fi
umount_densefs "$snap"

step "a snapshot through B holds both writers' round 2; diff names the changes"
"$densefs" snapshot create "$b" two >/dev/null || fail "snapshot create through B failed"
write_files "$a/a" a 3 5
"$densefs" snapshot list "$a"
"$densefs" snapshot diff "$a" one two >"$work/diff.out" || fail "diff failed"
grep -qx -- '-    /a/a-1.txt' "$work/diff.out" || fail "diff: a-1.txt not removed"
grep -qx '+    /b/b-60.txt' "$work/diff.out" || fail "diff: b-60.txt not added"
grep -qx 'M    /a/a-2.txt' "$work/diff.out" || fail "diff: a-2.txt not modified"
tail -n 1 "$work/diff.out"
mount_densefs "$uri" "$snap" -o "snapshot=two,cache_dir=$work/client3"
[[ ! -e $snap/a/a-1.txt ]] || fail "snapshot two has a-1.txt, deleted before it"
[[ $(cat "$snap/a/a-2.txt") == "a 2 2" ]] || fail "snapshot two: a-2.txt is not round 2"
[[ $(cat "$snap/a/a-6.txt") == "a 2 6" ]] || fail "snapshot two: a-6.txt is not round 2"
holds "$snap/b" b 2 60
umount_densefs "$snap"

step "delete one through B; unmount; fsck clean; two still reads"
"$densefs" snapshot delete "$b" one >/dev/null || fail "snapshot delete through B failed"
umount_densefs "$a"
umount_densefs "$b"
"$densefs" fsck "$store" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck failed"
}
mount_densefs "$store" "$snap" -o snapshot=two
holds "$snap/b" b 2 60
umount_densefs "$snap"
step "done"
echo "PASS: snapshots of a shared volume ($(elapsed "$test_start" "$(now)") s)"
