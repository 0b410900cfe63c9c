#!/usr/bin/env bash
# Encryption at rest (docs/encryption.md) on real mounts: a tree copied in
# with rsync -aHAX into an encrypted volume (a key file), then
#   - its pack files hold none of an incompressible file's bytes (which an
#     unencrypted volume keeps verbatim: the control) and no plain SHA-256
#     of a file's content;
#   - a wrong key, a missing key, a key file others can read, and a short
#     passphrase are each refused with one line naming the fix, and a
#     wrong key changes none of the volume's files;
#   - kill -9 of the daemon during an rsync, a remount with the key, fsck
#     --deep clean, the tree equal file by file;
#   - key change: the old key no longer opens it, the new one does, no
#     pack byte changed; DENSEFS_PASSPHRASE works as the key;
#   - gc, scrub, dump + load keep the volume encrypted and readable;
#   - an encrypted volume in PostgreSQL + S3 (the phase's servers): its
#     pack objects hold no plain bytes either, and it mounts again.
# usage: encryption_test.sh DENSEFS_BINARY SOURCE_DIR
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

test_start=$(now)
tree=$work/tree
make_tree "$tree" 3000000
key=$work/key
head -c 32 /dev/urandom >"$key"
chmod 600 "$key"

# holds_plain FILE...: whether the files hold 64 bytes from the middle of
# random.bin (stored verbatim by the raw codec unless sealed) or the
# SHA-256 of docs/format.md's content.
sample=$work/sample
dd if="$tree/random.bin" of="$sample" bs=1 skip=1500000 count=64 status=none
holds_plain() {
  python3 - "$sample" "$tree/docs/format.md" "$@" <<'PY'
import hashlib, sys
sample = open(sys.argv[1], 'rb').read()
digest = hashlib.sha256(open(sys.argv[2], 'rb').read()).digest()
for path in sys.argv[3:]:
    data = open(path, 'rb').read()
    if sample in data or digest in data:
        sys.exit(0)
sys.exit(1)
PY
}
# listing DIR: every file's name, size and mtime, the lock file left out.
listing() { find "$1" ! -name LOCK.densefs -printf '%p %s %T@\n' | sort; }

step "the control: an unencrypted volume keeps random.bin verbatim in its packs"
mkfs_plain=$work/plain
"$densefs" mkfs "$mkfs_plain" >/dev/null
mkdir -p "$work/m0"
mount_densefs "$mkfs_plain" "$work/m0"
cp "$tree/random.bin" "$work/m0/"
umount_densefs "$work/m0"
holds_plain "$mkfs_plain"/packs/*.pack || fail "the control's packs do not hold the sample: the check below proves nothing"

step "mkfs --encrypt with a key file; rsync -aHAX the tree in"
store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"
"$densefs" mkfs "$store" --encrypt --key-file "$key" >/dev/null || fail "mkfs --encrypt failed"
grep -qx 'format_version=7' "$store/FORMAT" || fail "an encrypted volume is not format 7"
grep -qx 'encryption=aes-256-gcm' "$store/FORMAT" || fail "FORMAT does not say the volume is encrypted"
mount_densefs "$store" "$mnt" -o "key_file=$key"
rsync -aHAX "$tree/" "$mnt/"
"$densefs" stats "$mnt" --json | grep -q '"encryption": *"aes-256-gcm"' || fail "stats does not say the volume is encrypted"
umount_densefs "$mnt"
holds_plain "$store"/packs/*.pack && fail "an encrypted volume's packs hold plain bytes or a plain hash"
echo "no plain byte sample and no plain SHA-256 in $(find "$store/packs" -name '*.pack' | wc -l) packs"

step "a wrong, missing or exposed key, a short passphrase: one line each, nothing changed"
before=$(listing "$store")
head -c 32 /dev/urandom >"$work/wrong"
chmod 600 "$work/wrong"
expect_refused "wrong key" "$densefs" mount "$store" "$mnt" -o "key_file=$work/wrong"
[[ $(listing "$store") == "$before" ]] || fail "a mount with a wrong key changed the volume's files"
mountpoint -q "$mnt" && fail "a mount with a wrong key is mounted"
# setsid: no terminal to ask at, also when the test runs from one.
expect_refused "key_file=FILE" setsid -w env -u DENSEFS_PASSPHRASE "$densefs" mount "$store" "$mnt" </dev/null
cp "$key" "$work/open-key"
chmod 644 "$work/open-key"
expect_refused "chmod 600" "$densefs" mount "$store" "$mnt" -o "key_file=$work/open-key"
expect_refused "at least 8" env DENSEFS_PASSPHRASE=short "$densefs" mount "$store" "$mnt"
expect_refused "wrong key" "$densefs" fsck "$store" --key-file "$work/wrong"
expect_refused "--key-file" setsid -w env -u DENSEFS_PASSPHRASE "$densefs" fsck "$store" </dev/null
[[ $(listing "$store") == "$before" ]] || fail "a refused command changed the volume's files"

step "kill -9 during an rsync, remount with the key, fsck --deep"
rm -rf "$work/tree2"
cp -a "$tree" "$work/tree2"
head -c 2000000 /dev/urandom >"$work/tree2/more.bin"
mount_densefs "$store" "$mnt" -o "key_file=$key"
pid=$(daemon_pid "$store")
rsync -aHAX "$work/tree2/" "$mnt/copy2/" 2>/dev/null &
rsync_pid=$!
sleep 1
flood_pid=$rsync_pid
kill_daemon "$pid" "$mnt"
"$densefs" fsck "$store" --deep --key-file "$key" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck --deep after kill -9 failed"
}
mount_densefs "$store" "$mnt" -o "key_file=$key"
rm -rf "$mnt/copy2"
touch -r "$tree" "$mnt"
check_tree "after kill -9 and a remount" "$tree" "$mnt"
umount_densefs "$mnt"

step "key change: the old key no longer opens the volume, the new one does; no pack byte changed"
packs_before=$(cat "$store"/packs/*.pack | sha256sum)
printf 'a new passphrase, typed nowhere\n' >"$work/new-key"
chmod 600 "$work/new-key"
"$densefs" key change "$store" --key-file "$key" --new-key-file "$work/new-key" >/dev/null ||
  fail "densefs key change failed"
[[ $(cat "$store"/packs/*.pack | sha256sum) == "$packs_before" ]] || fail "a key change rewrote pack bytes"
expect_refused "wrong key" "$densefs" mount "$store" "$mnt" -o "key_file=$key"
DENSEFS_PASSPHRASE='a new passphrase, typed nowhere' mount_densefs "$store" "$mnt"
check_tree "with the new key" "$tree" "$mnt"
umount_densefs "$mnt"

step "gc, scrub, dump + load: still encrypted, still readable"
"$densefs" gc "$store" --key-file "$work/new-key" >/dev/null || fail "gc of an encrypted volume failed"
"$densefs" scrub "$store" --key-file "$work/new-key" >/dev/null || fail "scrub of an encrypted volume failed"
"$densefs" dump "$store" "$work/a.dump" >/dev/null || fail "dump of an encrypted volume failed"
mkdir "$work/loaded"
cp -a "$store/packs" "$work/loaded/"
"$densefs" load "$work/a.dump" "$work/loaded" >/dev/null || fail "load of an encrypted volume's dump failed"
grep -qx 'encryption=aes-256-gcm' "$work/loaded/FORMAT" || fail "the loaded volume is not encrypted"
expect_refused "is encrypted" setsid -w env -u DENSEFS_PASSPHRASE "$densefs" mount "$work/loaded" "$mnt" </dev/null
mount_densefs "$work/loaded" "$mnt" -o "key_file=$work/new-key"
check_tree "loaded" "$tree" "$mnt"
umount_densefs "$mnt"

step "an encrypted volume in PostgreSQL + S3: no plain bytes in its pack objects"
pg_createdb enc1
location="s3://densefs-enc/enc1-$$?endpoint=$S3_ENDPOINT"
"$densefs" mkfs "$work/pgvol" --meta "$(pg_conninfo enc1)" --data "$location" --encrypt \
  --key-file "$key" >/dev/null || fail "mkfs --encrypt of a PostgreSQL + S3 volume failed"
mount_densefs "$work/pgvol" "$mnt" -o "key_file=$key"
rsync -aHAX "$tree/" "$mnt/"
umount_densefs "$mnt"
mkdir -p "$work/objects"
n=0
while read -r name; do
  s3_curl -sf -o "$work/objects/$(basename "$name")" "$S3_ENDPOINT/densefs-enc/$name" ||
    fail "cannot fetch $name"
  n=$((n + 1))
done < <(s3_curl -sf "$S3_ENDPOINT/densefs-enc?list-type=2&max-keys=1000&prefix=enc1-$$%2Fpacks%2F" |
  grep -o '<Key>[^<]*</Key>' | sed 's/<Key>\(.*\)<\/Key>/\1/')
((n > 0)) || fail "no pack objects listed in $location"
holds_plain "$work"/objects/* && fail "an encrypted volume's pack objects hold plain bytes or a plain hash"
echo "no plain byte sample and no plain SHA-256 in $n pack objects"
mount_densefs "$work/pgvol" "$mnt" -o "key_file=$key"
check_tree "PostgreSQL + S3, remounted" "$tree" "$mnt"
umount_densefs "$mnt"

step "done"
echo "PASS: encryption at rest ($(elapsed "$test_start" "$(now)") s)"
