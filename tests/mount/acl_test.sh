#!/usr/bin/env bash
# POSIX ACLs as ext4 has them (issue 16, item 1): the same script of
# setfacl, chmod, create and access checks runs, as root and as two
# unprivileged users, in a plain directory on ext4 (/var/tmp) and on
# densefs mounts (-o allow_other; with the default day-long caches, and with
# no caches and writeback_cache), and the transcripts must be equal:
#   - access allowed and denied by named-user and named-group entries, the
#     mask narrowing the group bits, a change visible at once;
#   - ls -l mode bits (and "+") and getfacl after setfacl and after chmod;
#   - default ACLs inherited by files, subdirectories and fifos, with the
#     umask ignored under a default ACL and applied without one;
#   - setgid: cleared by setfacl from a caller outside the owning group,
#     and on files created in a setgid directory by such a caller;
#   - removing the ACL xattr, invalid ACL bytes (EINVAL), other system.*
#     xattrs (EOPNOTSUPP), default ACLs on files;
#   - rsync -aHAX of the ext4 tree onto the mount: nothing left to change,
#     every mode and ACL equal.
# The densefs transcript is checked once more after a remount (persisted),
# and a few lines are asserted outright, so that the test fails if both
# sides stop exercising what it is about.
# usage: acl_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

for tool in setfacl getfacl setfattr getfattr setpriv perl rsync; do
  command -v "$tool" >/dev/null || missing_tool "$tool (Debian acl, attr, util-linux, perl, rsync)"
done

user_a="densefs-acl-a"
user_b="densefs-acl-b"
for u in "$user_a" "$user_b"; do
  getent passwd "$u" >/dev/null ||
    useradd --system --user-group --no-create-home --home-dir / \
      --shell /usr/sbin/nologin --comment "densefs ACL test user" "$u"
done
# Neither user is in the other's group: the tests depend on it.
for pair in "$user_a:$user_b" "$user_b:$user_a"; do
  if id -nG "${pair%%:*}" | tr ' ' '\n' | grep -qx "${pair#*:}"; then
    fail "${pair%%:*} is in group ${pair#*:}; the test needs them apart"
  fi
done

# The users must reach both trees (mktemp made $work 0700).
chmod 0755 "$work"
ext=$work/ext4
mkdir -p "$ext"

# as USER CMD...: CMD as USER with USER's groups only, no capabilities.
as() {
  local user=$1
  shift
  setpriv --reuid="$user" --regid="$user" --init-groups -- "$@"
}

# try LABEL CMD...: one transcript line, "LABEL: ok" or "LABEL: <error>".
try() {
  local label=$1 err
  shift
  if err=$("$@" 2>&1 >/dev/null); then
    echo "$label: ok"
  else
    echo "$label: ${err:-failed}"
  fi
}

# show PATH...: mode string (with ls's "+"), owner, group and the ACL.
show() {
  local p
  for p in "$@"; do
    # shellcheck disable=SC2012 # ls is what shows the "+" of an ACL
    echo "ls $p: $(ls -ld "$p" | awk '{print $1, $3, $4}')"
    getfacl -p "$p" 2>&1 | grep -v '^# file' | sed "s|^|  |"
  done
}

# perl -e "$create_with_mode" PATH MODE: open(O_CREAT) with MODE as given,
# setgid included (touch and install would chmod afterwards); the same for
# mkdir.
# shellcheck disable=SC2016 # perl's variables, not the shell's
create_with_mode='use Fcntl; sysopen(my $f, $ARGV[0], O_CREAT | O_WRONLY, oct($ARGV[1])) or die "$!\n"'
# shellcheck disable=SC2016
mkdir_with_mode='mkdir($ARGV[0], oct($ARGV[1])) or die "$!\n"'

# The script, run in DIR (the ext4 directory or the mount's root).
scenario() {
  cd "$1" || exit 1
  umask 022

  echo "== named entries and the mask"
  printf 'secret\n' >f
  chown "$user_a:$user_a" f
  chmod 0640 f
  try "b reads f (other ---)" as "$user_b" cat f
  setfacl -m "u:$user_b:r" f
  show f
  try "b reads f (u:b:r)" as "$user_b" cat f
  try "b writes f (u:b:r)" as "$user_b" sh -c 'echo x >>f'
  setfacl -m "u:$user_b:rw" f
  try "b writes f (u:b:rw)" as "$user_b" sh -c 'echo x >>f'
  setfacl -m m::r f
  show f
  try "b writes f (mask r)" as "$user_b" sh -c 'echo x >>f'
  try "b reads f (mask r)" as "$user_b" cat f
  setfacl -x "u:$user_b" f
  try "b reads f at once after setfacl -x" as "$user_b" cat f
  setfacl -m "g:$user_b:rw" f
  try "b writes f (g:b:rw)" as "$user_b" sh -c 'echo y >>f'
  show f

  echo "== a named entry denies what other allows"
  printf 'open\n' >o
  chmod 0644 o
  try "b reads o (other r)" as "$user_b" cat o
  setfacl -m "u:$user_b:---" o
  try "b reads o (u:b:---)" as "$user_b" cat o
  try "a reads o (other r)" as "$user_a" cat o

  echo "== chmod rewrites the ACL"
  chmod 0604 f
  show f
  try "b writes f (mask --- after chmod)" as "$user_b" sh -c 'echo z >>f'
  chmod 0674 f
  show f
  try "b writes f (mask rwx after chmod)" as "$user_b" sh -c 'echo z >>f'
  try "a chmods own f" as "$user_a" chmod 0750 f
  show f

  echo "== a directory's x for a named user"
  mkdir -m 0750 dx
  printf 'in dx\n' >dx/file
  chmod 0644 dx/file
  try "b reads dx/file (no x)" as "$user_b" cat dx/file
  setfacl -m "u:$user_b:x" dx
  try "b reads dx/file (u:b:x)" as "$user_b" cat dx/file
  try "b lists dx (u:b:x)" as "$user_b" ls dx
  show dx

  echo "== ACLs the mode says in full, and removal"
  printf 'plain\n' >p
  setfacl --set u::rw,g::r,o::- p
  show p
  setfacl -m "u:$user_a:rwx" p
  show p
  setfacl -b p
  show p
  setfacl -m "u:$user_a:rw" p
  try "setfattr -x system.posix_acl_access p" setfattr -x system.posix_acl_access p
  show p
  setfacl -m m::rwx p
  show p
  try "getfattr of a file without an ACL" getfattr -n system.posix_acl_access p

  echo "== default ACLs"
  mkdir dd
  chmod 0777 dd
  setfacl -d -m "u:$user_b:rwx,g:$user_a:rx,m::rwx" dd
  setfacl -m "u:$user_b:rwx" dd
  show dd
  (umask 077 && as "$user_a" touch dd/file-077)
  (umask 077 && as "$user_a" mkdir dd/dir-077)
  (umask 077 && as "$user_a" mkfifo -m 0640 dd/fifo)
  (umask 077 && as "$user_a" ln -s file-077 dd/link)
  (umask 0 && as "$user_a" sh -c 'echo x >dd/file-000')
  as "$user_a" chmod 0600 dd/file-000
  show dd/file-077 dd/dir-077 dd/fifo dd/file-000
  try "getfattr -h of a symlink" getfattr -h -m - -d dd/link
  try "b writes dd/file-077" as "$user_b" sh -c 'echo b >>dd/file-077'
  try "b creates in dd/dir-077" as "$user_b" touch dd/dir-077/by-b
  show dd/dir-077/by-b
  (umask 027 && mkdir dd/dir-077/deeper && touch dd/dir-077/deeper/file)
  show dd/dir-077/deeper dd/dir-077/deeper/file
  mkdir nodefault
  chmod 0777 nodefault
  (umask 027 && as "$user_a" touch nodefault/file-027 && as "$user_a" mkdir nodefault/dir-027)
  (umask 077 && as "$user_a" mkfifo -m 0666 nodefault/fifo-077)
  show nodefault/file-027 nodefault/dir-027 nodefault/fifo-077
  setfacl -k dd
  (umask 077 && touch dd/after-k)
  show dd dd/after-k

  echo "== setgid"
  mkdir sg
  chown "root:$user_b" sg
  chmod 2777 sg
  (umask 0 && as "$user_a" perl -e "$create_with_mode" sg/by-a 2755)
  (umask 0 && as "$user_a" perl -e "$mkdir_with_mode" sg/dir-by-a 2755)
  (umask 0 && as "$user_b" perl -e "$create_with_mode" sg/by-b 2755)
  (umask 0 && perl -e "$create_with_mode" sg/by-root 2755)
  show sg/by-a sg/dir-by-a sg/by-b sg/by-root
  setfacl -d -m "u:$user_a:rwx" sg
  (umask 0 && as "$user_a" perl -e "$create_with_mode" sg/acl-by-a 2775)
  (umask 0 && as "$user_b" perl -e "$create_with_mode" sg/acl-by-b 2775)
  show sg/acl-by-a sg/acl-by-b
  # setfacl by an owner outside the owning group clears setgid
  # (posix_acl_update_mode); the owner in the group and root keep it.
  printf 'x\n' >sa
  chown "$user_a:$user_b" sa
  chmod 2770 sa
  try "a setfacl on sa (group b)" as "$user_a" setfacl -m "u:$user_b:r" sa
  show sa
  printf 'x\n' >sb
  chown "$user_a:$user_a" sb
  chmod 2770 sb
  try "a setfacl on sb (group a)" as "$user_a" setfacl -m "u:$user_b:r" sb
  show sb
  printf 'x\n' >sr
  chown "$user_a:$user_b" sr
  chmod 2770 sr
  setfacl -m "u:$user_b:r" sr
  show sr
  try "b setfacl on sr (not owner)" as "$user_b" setfacl -m "u:$user_b:rwx" sr

  echo "== what is refused"
  try "invalid ACL bytes" setfattr -n system.posix_acl_access -v 0x02000000ffff p
  try "ACL of version 1" setfattr -n system.posix_acl_access \
    -v 0x01000000010006000000000004000400000000002000040000000000 p
  try "system.nfs4_acl" setfattr -n system.nfs4_acl -v 0x00 p
  try "getfattr system.nfs4_acl" getfattr -n system.nfs4_acl p
  try "default ACL on a file" setfacl -d -m u::rwx p
  show p
  echo "xattr names of f: $(getfattr -m - f 2>&1 | grep -v '^# file' | grep -v '^$' | sort | tr '\n' ' ')"
  echo "xattr names of dd: $(getfattr -m - dd 2>&1 | grep -v '^# file' | grep -v '^$' | sort | tr '\n' ' ')"
}

# The state left behind, for the after-remount comparison.
listing() {
  cd "$1" || exit 1
  find . -mindepth 1 -not -name lost+found | LC_ALL=C sort | while read -r p; do
    show "$p"
  done
}

(scenario "$ext") >"$work/ext4.out" 2>&1 || fail "the scenario failed on ext4: $(tail -n 5 "$work/ext4.out")"

# The kernel caches ACLs and attributes for a day by default (what must be
# dropped after setfacl and chmod); the second configuration caches nothing
# and lets the kernel own mtime and size (writeback_cache).
configs=("allow_other" "allow_other,writeback_cache,entry_timeout=0,attr_timeout=0,negative_timeout=0")
for i in "${!configs[@]}"; do
  options=${configs[$i]}
  store=$work/store$i
  mnt=$work/mnt$i
  out=$work/densefs$i.out
  mkdir -p "$mnt"
  "$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs failed"
  mount_densefs "$store" "$mnt" -o "$options"
  (scenario "$mnt") >"$out" 2>&1 || fail "-o $options: the scenario failed on densefs: $(tail -n 5 "$out")"
  if ! diff -u "$work/ext4.out" "$out" >"$work/diff.out"; then
    cat "$work/diff.out" >&2
    fail "-o $options: densefs answers differently from ext4 (diff above: - ext4, + densefs)"
  fi
  echo "-o $options: ext4 and densefs agree on $(wc -l <"$out") transcript lines"

  # The transcript must show what it is about, or equal transcripts prove
  # nothing (say, if setfacl stopped working on both).
  expect() {
    grep -qxF -- "$1" "$out" && return 0
    cat "$out" >&2
    fail "-o $options: the transcript (above) lacks: $1"
  }
  expect "b reads f (other ---): cat: f: Permission denied"
  expect "b reads f (u:b:r): ok"
  expect "b writes f (mask r): sh: 1: cannot create f: Permission denied"
  expect "b reads f at once after setfacl -x: cat: f: Permission denied"
  expect "b writes f (g:b:rw): ok"
  expect "b reads o (u:b:---): cat: o: Permission denied"
  expect "b writes f (mask --- after chmod): sh: 1: cannot create f: Permission denied"
  expect "b writes f (mask rwx after chmod): ok"
  expect "b reads dx/file (u:b:x): ok"
  expect "invalid ACL bytes: setfattr: p: Invalid argument"
  expect "system.nfs4_acl: setfattr: p: Operation not supported"
  # The mask shows in the group bits, with ls's "+".
  expect "ls f: -rw-r-----+ $user_a $user_a"
  # touch asks for 0666: the default ACL's other::rwx keeps it, umask 077 not.
  expect "ls dd/file-077: -rw-rw-rw-+ $user_a $user_a"
  expect "ls nodefault/file-027: -rw-r----- $user_a $user_a"
  expect "ls sg/by-a: -rwxr-xr-x $user_a $user_b"
  expect "ls sg/by-b: -rwxr-sr-x $user_b $user_b"
  expect "ls sa: -rwxrwx---+ $user_a $user_b"
  expect "ls sb: -rwxrws---+ $user_a $user_a"

  # rsync -A copies the ext4 tree's ACLs in and finds nothing to change.
  rsync -aHAX "$ext/" "$mnt/copy/" || fail "-o $options: rsync -aHAX of the ext4 tree failed"
  changes=$(rsync -aHAXc --dry-run --itemize-changes "$ext/" "$mnt/copy/")
  [[ -z $changes ]] || fail "-o $options: rsync -A sees changes after a copy: $changes"
  if ! diff -u <(listing "$ext") <(listing "$mnt/copy") >&2; then
    fail "-o $options: modes and ACLs of the rsync -A copy differ from ext4's"
  fi

  (listing "$mnt") >"$work/before.out" 2>&1
  umount_densefs "$mnt"
  mount_densefs "$store" "$mnt" -o "$options"
  (listing "$mnt") >"$work/after.out" 2>&1
  if ! diff -u "$work/before.out" "$work/after.out" >&2; then
    fail "-o $options: ACLs or modes changed across a remount"
  fi
  if as "$user_b" cat "$mnt/o" >/dev/null 2>&1; then
    fail "-o $options: after a remount, u:b:--- on o no longer denies b"
  fi
  umount_densefs "$mnt"
  echo "-o $options: $(wc -l <"$work/before.out") lines of state kept across a remount"
done

# -o noacl, as on ext4: setfacl is refused, never stored unenforced, and the
# umask applies (the kernel's own, as without ACL support).
mnt=$work/mnt0
mount_densefs "$work/store0" "$mnt" -o allow_other,noacl
(umask 027 && touch "$mnt/noacl-file")
# shellcheck disable=SC2012 # ls shows the "+" of an ACL
[[ $(ls -l "$mnt/noacl-file" | awk '{print $1}') == "-rw-r-----" ]] ||
  fail "-o noacl: umask 027 gave $(ls -l "$mnt/noacl-file")"
if err=$(setfacl -m "u:$user_b:r" "$mnt/noacl-file" 2>&1); then
  fail "-o noacl: setfacl succeeded (it must be refused, not stored unenforced)"
fi
[[ $err == *"Operation not supported"* ]] || fail "-o noacl: setfacl said: $err"
if getfattr -n system.posix_acl_access "$mnt/noacl-file" >/dev/null 2>&1; then
  fail "-o noacl: the refused ACL was stored"
fi
umount_densefs "$mnt"
echo "-o noacl: setfacl refused (EOPNOTSUPP), umask applied"
echo "PASS: POSIX ACLs on densefs match ext4 in ${#configs[@]} configurations; -o noacl refuses them"
