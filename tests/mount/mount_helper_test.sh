#!/usr/bin/env bash
# The ways to mount besides `densefs mount`, run with an empty environment the
# way systemd and boot run them (mount.fuse3 execs the file system through
# /bin/sh with PATH unset):
#   1. densefs STORE MNT -o ...                     (two positional arguments)
#   2. mount -t fuse 'DENSEFS#STORE' MNT            (fuse helper, old fstab form)
#   3. mount -t fuse.densefs STORE MNT              (needs densefs installed)
#   4. the fstab line in docs/examples/fstab        (mount -T FSTAB MNT)
#   5. what systemd runs for docs/examples/*.mount  (mount What Where -t -o)
# Each must show up as type fuse.densefs with the store as source, keep what
# the previous one wrote, and unmount with plain umount(8).
# Cases 3-5 need the binary under test to be the installed one (dash's
# default PATH: /usr/local/bin, /usr/bin, ...); tools/setup.sh test installs
# it. When another densefs is installed, cases 4 and 5 run rewritten to the
# form of case 2, and case 3 is reported as not run.
# usage: mount_helper_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

[[ -x /sbin/mount.fuse3 || -x /usr/sbin/mount.fuse3 ]] || missing_tool "mount.fuse3 (Debian fuse3)"

store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"
"$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs $store failed"

# Plain umount(8) returns when the kernel has let go; the daemon may still be
# flushing and holding the store lock. Wait for the lock like a script would.
wait_store_free() {
  for _ in $(seq 1 300); do
    if flock --nonblock "$store/LOCK.densefs" true 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  fail "the densefs daemon still holds $store 30 s after umount"
}

# check_mounted CASE: type, source, and the files earlier cases wrote.
written=()
check_mounted() {
  local label=$1 fstype source f
  mountpoint -q "$mnt" || fail "$label: $mnt is not mounted"
  fstype=$(findmnt -n -o FSTYPE --target "$mnt")
  source=$(findmnt -n -o SOURCE --target "$mnt")
  [[ $fstype == fuse.densefs ]] || fail "$label: mount type is '$fstype', expected fuse.densefs"
  [[ $source == "$store" ]] || fail "$label: mount source is '$source', expected $store"
  for f in "${written[@]}"; do
    [[ $(cat "$mnt/$f") == "written by $f" ]] || fail "$label: $f lost its content"
  done
  echo "written by case$((${#written[@]} + 1))" >"$mnt/case$((${#written[@]} + 1))"
  written+=("case$((${#written[@]} + 1))")
  umount "$mnt" || fail "$label: umount $mnt failed"
  wait_store_free
  echo "OK: $label"
}

# 1. Two positional arguments, as mount.fuse3 calls it.
env -i "$densefs" "$store" "$mnt" -o noatime ||
  fail "densefs STORE MNT -o noatime failed"
check_mounted "densefs STORE MNT -o noatime"

# 2. The fuse helper with the binary's path as the type.
env -i /bin/mount -t fuse "$densefs#$store" "$mnt" -o allow_other,noatime ||
  fail "mount -t fuse '$densefs#$store' $mnt failed"
check_mounted "mount -t fuse 'DENSEFS#STORE' MNT"

installed=$(env -i /bin/sh -c 'command -v densefs' || true)
same_binary=0
if [[ -n $installed ]] && cmp -s "$installed" "$densefs"; then
  same_binary=1
fi

# 3. The documented type.
if [[ $same_binary -eq 1 ]]; then
  env -i /bin/mount -t fuse.densefs "$store" "$mnt" -o allow_other ||
    fail "mount -t fuse.densefs $store $mnt failed"
  check_mounted "mount -t fuse.densefs STORE MNT"
else
  [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]] &&
    fail "the installed densefs '${installed:-none}' is not the binary under test (tools/setup.sh test installs it)"
  echo "NOT RUN: mount -t fuse.densefs (the installed densefs '${installed:-none}'" \
    "is not the binary under test; tools/setup.sh installs it)"
fi

# 4. The fstab line from the docs, with this test's paths.
line=$(grep -v '^#' "$src/docs/examples/fstab" | grep -m1 'fuse.densefs') ||
  fail "docs/examples/fstab has no fuse.densefs line"
read -r _ _ doc_type doc_options _ <<<"$line"
[[ $doc_type == fuse.densefs ]] || fail "docs/examples/fstab: type is $doc_type"
if [[ $same_binary -eq 1 ]]; then
  printf '%s %s fuse.densefs %s 0 0\n' "$store" "$mnt" "$doc_options" >"$work/fstab"
else
  printf '%s %s fuse %s 0 0\n' "$densefs#$store" "$mnt" "$doc_options" >"$work/fstab"
fi
echo "fstab: $(cat "$work/fstab")"
env -i /bin/mount -T "$work/fstab" "$mnt" || fail "mount -T FSTAB $mnt (the docs' fstab line) failed"
check_mounted "fstab line '$doc_options'"

# 5. What systemd runs for docs/examples/*.mount: mount What Where -t Type -o
# Options, with an empty environment (no systemd as PID 1 here to start it).
unit=$(find "$src/docs/examples" -name '*.mount' | head -n1)
[[ -n $unit ]] || fail "docs/examples has no .mount unit"
unit_type=$(sed -n 's/^Type=//p' "$unit")
unit_options=$(sed -n 's/^Options=//p' "$unit")
[[ $unit_type == fuse.densefs ]] || fail "$unit: Type=$unit_type"
if [[ $same_binary -eq 1 ]]; then
  env -i /bin/mount "$store" "$mnt" -t "$unit_type" -o "$unit_options" ||
    fail "mount STORE MNT -t $unit_type -o $unit_options (as $(basename "$unit")) failed"
else
  env -i /bin/mount "$densefs#$store" "$mnt" -t fuse -o "$unit_options" ||
    fail "mount 'DENSEFS#STORE' MNT -t fuse -o $unit_options (as $(basename "$unit")) failed"
fi
check_mounted "systemd unit $(basename "$unit") (Options=$unit_options)"
echo "PASS"
