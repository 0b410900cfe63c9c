#!/usr/bin/env bash
# Metadata dumps and moving a volume (docs/backup.md): a tree copied in
# with rsync -aHAX (hard link, symlink, xattr, ACL, sparse file, 2,000
# small files), then
#   - a dump of the mounted volume while a writer is busy loads into a
#     volume that fsck finds clean (one state of every table);
#   - a dump of the unmounted volume (a private file) loads against a copy
#     of its packs (a lost database) into a volume equal file by file;
#   - a damaged, truncated or foreign dump, and a load without the packs,
#     are refused with one line naming what is wrong, and leave no store;
#   - kill -9 during a dump leaves the last whole dump as it was;
#   - migrate to PostgreSQL + S3 (the phase's servers) with nothing mounted,
#     and back to an embedded store: fsck clean, equal file by file; a
#     migrate of a mounted store is refused;
#   - the PostgreSQL volume's dump loads into a new database against the
#     same S3 packs (a lost database of a scale-out volume) only with
#     --take-over-packs; a migrate of a volume a writer has mounted is
#     refused.
# usage: dump_load_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

command -v rsync >/dev/null || missing_tool rsync
command -v setfattr >/dev/null || missing_tool "setfattr (Debian attr)"
command -v setfacl >/dev/null || missing_tool "setfacl (Debian acl)"

test_start=$(now)
tree=$work/tree
make_tree "$tree" 3000000
setfacl -m u:nobody:r "$tree/dir/a"
mkdir "$tree/many"
for i in $(seq 1 2000); do echo "small file $i" >"$tree/many/$i"; done

# check_copy LABEL MNT: the tree, its hard link, xattr and ACL, in MNT.
check_copy() {
  check_tree "$1" "$tree" "$2"
  getfacl -p "$2/dir/a" 2>/dev/null | grep -q '^user:nobody:r--' || fail "$1: the ACL is lost"
}
# check_store LABEL STORE [busy]: fsck clean, then mounted, the tree is
# there (with `busy`: once the busy writer's directory is gone and the
# root's times are the tree's again).
check_store() {
  "$densefs" fsck "$2" >"$work/fsck.out" 2>&1 || {
    cat "$work/fsck.out" >&2
    fail "$1: fsck failed"
  }
  mkdir -p "$work/check"
  mount_densefs "$2" "$work/check"
  if [[ ${3:-} == busy ]]; then
    rm -rf "$work/check/busy"
    touch -r "$tree" "$work/check"
  fi
  check_copy "$1" "$work/check"
  umount_densefs "$work/check"
  echo "$1: fsck clean, the tree equal file by file"
}
# no_store DIR: a refused load left no store there.
no_store() {
  [[ ! -e $1/FORMAT ]] || fail "a refused load left a store in $1"
  [[ ! -e $1 ]] || [[ -z $(find "$1" -mindepth 1 -maxdepth 1 ! -name packs) ]] ||
    fail "a refused load left files in $1: $(ls "$1")"
}

step "an embedded volume; the tree copied in with rsync -aHAX"
store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"
mkfs_store "$store"
mount_densefs "$store" "$mnt"
rsync -aHAX "$tree/" "$mnt/"
"$densefs" sync "$mnt" >/dev/null

step "a dump of the mounted volume while a writer is busy: one state, clean after a load"
mkdir "$mnt/busy"
(
  i=0
  while :; do
    head -c 20000 /dev/urandom >"$mnt/busy/$((i % 50))" || exit 0
    mv "$mnt/busy/$((i % 50))" "$mnt/busy/r$((i % 7))" || exit 0
    i=$((i + 1))
  done
) &
busy=$!
sleep 0.5
"$densefs" dump "$store" "$work/live.dump" >/dev/null || fail "densefs dump of a mounted volume failed"
kill "$busy"
wait "$busy" || true
mkdir "$work/live"
cp -a "$store/packs" "$work/live/"
"$densefs" load "$work/live.dump" "$work/live" >/dev/null || fail "densefs load of the live dump failed"
check_store "the live dump" "$work/live" busy
rm -rf "$mnt/busy"
touch -r "$tree" "$mnt"
umount_densefs "$mnt"

step "dump, then load against a copy of the packs (a lost database)"
"$densefs" dump "$store" "$work/a.dump" >"$work/dump.out" || fail "densefs dump failed"
cat "$work/dump.out"
[[ $(stat -c %a "$work/a.dump") == 600 ]] || fail "the dump is not private: mode $(stat -c %a "$work/a.dump")"
mkdir "$work/restored"
cp -a "$store/packs" "$work/restored/"
"$densefs" load "$work/a.dump" "$work/restored" || fail "densefs load failed"
check_store "loaded" "$work/restored"
[[ $(sed -n 's/^uuid=//p' "$work/restored/FORMAT") != $(sed -n 's/^uuid=//p' "$store/FORMAT") ]] ||
  fail "the loaded volume has the UUID of the one dumped"

step "a damaged, truncated or foreign dump, or missing packs: one line, no store"
size=$(stat -c %s "$work/a.dump")
cp "$work/a.dump" "$work/damaged.dump"
printf '\xa5' | dd of="$work/damaged.dump" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect_refused "damaged at byte" "$densefs" load "$work/damaged.dump" "$work/x"
no_store "$work/x"
head -c $((size - 50)) "$work/a.dump" >"$work/cut.dump"
expect_refused "truncated" "$densefs" load "$work/cut.dump" "$work/x"
no_store "$work/x"
expect_refused "not a densefs metadata dump" "$densefs" load "$store/FORMAT" "$work/x"
no_store "$work/x"
expect_refused "packs/00000001.pack is missing" "$densefs" load "$work/a.dump" "$work/x"
no_store "$work/x"
expect_refused "not empty" "$densefs" load "$work/a.dump" "$work/restored"

step "kill -9 during a dump leaves the last whole dump"
cp "$work/a.dump" "$work/before.dump"
cut_short=0
for i in $(seq 1 8); do
  "$densefs" dump "$store" "$work/a.dump" >/dev/null 2>&1 &
  pid=$!
  sleep "0.0$i"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" || true
  # A dump killed mid-way leaves its hidden temporary file, never a.dump.
  if compgen -G "$work/.a.dump.densefs-*" >/dev/null; then
    cut_short=$((cut_short + 1))
    rm -f "$work"/.a.dump.densefs-*
  fi
  rm -rf "$work/k"
  mkdir "$work/k"
  cp -a "$store/packs" "$work/k/"
  "$densefs" load "$work/a.dump" "$work/k" >/dev/null || fail "after kill -9 number $i, the dump does not load"
done
echo "8 dumps killed, $cut_short of them mid-way; the dump loads after each"

step "a mounted embedded volume is not migrated"
mount_densefs "$store" "$mnt"
expect_refused "in use" "$densefs" migrate "$store" "$work/y"
umount_densefs "$mnt"

step "migrate to PostgreSQL + S3, nothing mounted"
pg_createdb mig1
location="s3://densefs-dump/mig1-$$?endpoint=$S3_ENDPOINT"
! findmnt -rn -o TARGET | grep -qF "$work/" || fail "something is mounted under $work"
"$densefs" migrate "$store" "$work/pgvol" --meta "$(pg_conninfo mig1)" --data "$location" ||
  fail "densefs migrate to PostgreSQL + S3 failed"
grep -q '^format_version=6$' "$work/pgvol/FORMAT" || fail "the migrated volume is not a format-6 volume"
check_store "migrated to PostgreSQL + S3" "$work/pgvol"

mount_densefs "$work/pgvol" "$mnt"
expect_refused "in use" "$densefs" migrate "$work/pgvol" "$work/y"
umount_densefs "$mnt"

step "and back to an embedded store"
"$densefs" migrate "$work/pgvol" "$work/back" || fail "densefs migrate back failed"
[[ -z $(sed -n 's/^postgresql=//p' "$work/back/FORMAT") ]] || fail "the store migrated back names a database"
check_store "migrated back" "$work/back"

step "a PostgreSQL volume's dump loads into a new database against the same S3 packs (the old one is gone)"
"$densefs" dump "$work/pgvol" "$work/pg.dump" >/dev/null || fail "densefs dump of a PostgreSQL volume failed"
pg_createdb mig2
# Two volumes must never share packs: only a volume that is gone gives
# its packs over, and the load must be told.
expect_refused "take-over-packs" "$densefs" load "$work/pg.dump" "$work/pgvol2" \
  --meta "$(pg_conninfo mig2)" --data "$location"
pg_createdb mig2
"$densefs" load "$work/pg.dump" "$work/pgvol2" --meta "$(pg_conninfo mig2)" --data "$location" \
  --take-over-packs >/dev/null || fail "densefs load into PostgreSQL against the same packs failed"
check_store "loaded into a new database" "$work/pgvol2"

step "done"
echo "PASS: dump, load and migrate ($(elapsed "$test_start" "$(now)") s)"
