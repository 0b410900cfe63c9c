#!/usr/bin/env bash
# stress-ng's filesystem class with --verify on a densefs mount: every
# stressor of the class (as this stress-ng lists it) except the excluded ones
# below, one at a time, each in its own stress-ng run with its temporary
# files on the mount (--temp-path). A stressor that fails (non-zero exit:
# a failed verification, an unexpected errno, a crash) fails the test; all
# of them run first, so one failure does not hide the next. Then the store
# must pass `densefs fsck` after an unmount.
#
# DENSEFS_STRESS_TIMEOUT=SECONDS per stressor (default 3); DENSEFS_SOAK=1
# makes it 30.
# usage: stress_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

stress_ng=$(find_tool stress-ng) || missing_tool "stress-ng (Debian stress-ng)"
timeout=${DENSEFS_STRESS_TIMEOUT:-3}
[[ ${DENSEFS_SOAK:-0} == 1 ]] && timeout=30

# Stressors of the class that do not test the mounted file system; each is
# listed with its reason in docs/testing.md.
declare -A excluded=(
  [binderfs]="mounts the kernel's binderfs, not the temp path"
  [bind-mount]="bind-mounts / in a user namespace, not the temp path"
  [procfs]="reads /proc and /sys"
  [getdent]="walks /proc, /sys, /dev and /tmp, not the temp path"
  [handle]="name_to_handle_at/open_by_handle_at on /dev/zero, not the temp path"
  [dup]="dup/dup2/dup3 on descriptors of /dev/zero"
  [eventfd]="eventfd descriptors, no file"
  [fiemap]="FS_IOC_FIEMAP: FUSE has no FIEMAP request (stress-ng skips itself)"
  [verity]="fs-verity: FUSE cannot provide it (stress-ng skips itself)"
  [chattr]="FS_IOC_SETFLAGS: densefs has no inode attribute flags (ENOTTY, which the stressor accepts, so it tests nothing)"
  [inode-flags]="FS_IOC_GETFLAGS/SETFLAGS: densefs has no inode attribute flags (ENOTTY)"
)

class=$("$stress_ng" --class 'filesystem?' 2>&1) || fail "stress-ng --class filesystem? failed: $class"
class=${class#*stressors: }
read -r -a all <<<"$class"
((${#all[@]} > 10)) || fail "stress-ng lists too few filesystem stressors: $class"

store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"
"$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs $store failed"
mount_densefs "$store" "$mnt"

# Stressors whose round takes longer than the default: xattr sets ~4000
# attributes per round (one synchronous commit each) before it reads them
# back, 4-10 s per round here.
declare -A stressor_timeout=([xattr]=15)

stressors=0
passed=0
failed=()
bogo_ops=0
no_round=()
t0=$(now)
for s in "${all[@]}"; do
  if [[ -n ${excluded[$s]:-} ]]; then
    echo "stress-ng $s: excluded (${excluded[$s]})"
    continue
  fi
  stressors=$((stressors + 1))
  log=$work/$s.log
  yaml=$work/$s.yaml
  # --oomable: a stressor the kernel's OOM killer ends is reported, not
  # restarted. --timeout is per stressor; some finish their round first.
  t=${stressor_timeout[$s]:-$timeout}
  ((t > timeout)) || t=$timeout
  if (cd "$work" && "$stress_ng" "--$s" 1 --verify --timeout "${t}s" --temp-path "$mnt" \
    --metrics-brief --yaml "$yaml" --oomable >"$log" 2>&1); then
    passed=$((passed + 1))
    ops=$(awk '$1 == "bogo-ops:" { print $2; exit }' "$yaml")
    ops=${ops:-0}
    bogo_ops=$((bogo_ops + ops))
    ((ops > 0)) || no_round+=("$s")
    echo "stress-ng $s: passed, $ops bogo ops"
  else
    rc=$?
    failed+=("$s")
    grep -Ev 'info: .*(dispatching|setting to)|metrc:' "$log" | tail -n 20 >&2
    echo "stress-ng $s: FAILED (exit $rc)"
  fi
  # A stressor must leave no files behind on the mount.
  if [[ -n $(ls -A "$mnt") ]]; then
    ls -la "$mnt" >&2
    echo "stress-ng $s: left files on the mount"
    failed+=("$s(left files)")
    rm -rf "${mnt:?}"/*
  fi
done
t1=$(now)
echo "stress-ng: ${stressors} stressors in $(elapsed "$t0" "$t1")s, ${timeout}s each (more for ${!stressor_timeout[*]})"
((${#no_round[@]} == 0)) ||
  echo "stress-ng: no complete bogo op (slow rounds; the part that ran is still checked): ${no_round[*]}"

umount_densefs "$mnt"
fsck_ok=1
"$densefs" fsck "$store" >"$work/fsck.log" 2>&1 || fsck_ok=0

echo "COUNTS: stress-ng stressors=$stressors passed=$passed failed=${#failed[@]} bogo_ops=$bogo_ops"
((${#failed[@]} == 0)) || fail "failed: ${failed[*]}"
((fsck_ok)) || fail "densefs fsck $store is not clean after stress-ng: $(cat "$work/fsck.log")"
echo "PASS"
