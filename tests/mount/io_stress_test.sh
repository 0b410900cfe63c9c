#!/usr/bin/env bash
# tests/mount/io_stress.py on a fresh store for each way of mounting it:
# many processes writing and verifying overlapping ranges through
# descriptors they keep open, cold reads answered from the decoder pool,
# truncates and stats, with signals interrupting their requests (LTP
# iogen's shape). It found the io_uring queue that hung (libfuse's ring
# submitted from two threads; third_party/patches) within a minute, and is
# the check for read-after-write through open descriptors. Each pass must
# end with no wrong or stale bytes and no hang; the store must pass fsck.
#
# DENSEFS_IO_STRESS_SECONDS per pass (default 20); DENSEFS_SOAK=1 makes it
# 120. The seed is printed; DENSEFS_IO_STRESS_SEED repeats one.
# usage: io_stress_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

python3 -c 'import multiprocessing' 2>/dev/null || missing_tool "python3"
seconds=${DENSEFS_IO_STRESS_SECONDS:-20}
[[ ${DENSEFS_SOAK:-0} == 1 ]] && seconds=120
seed=${DENSEFS_IO_STRESS_SEED:-$RANDOM}
stress=$src/tests/mount/io_stress.py

# The passes: the ring with every read decoded on the pool (chunk_cache=0:
# replies from other threads than the ring's), /dev/fuse, and the kernel's
# write-back cache.
passes=("transport=uring,chunk_cache=0" "transport=device" "transport=device,writeback_cache")
if [[ $("$densefs" mount --help 2>&1) != *transport=* ]] ||
  [[ $(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null) != [Y1] ]]; then
  unavailable "FUSE over io_uring (the kernel's fuse enable_uring parameter, libfuse 3.18)"
fi

failed=()
for options in "${passes[@]}"; do
  store=$work/store-${options//[,=]/-}
  mnt=$work/mnt-${options//[,=]/-}
  mkdir -p "$mnt"
  "$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs $store failed"
  mount_densefs "$store" "$mnt" -o "$options"
  echo "== -o $options: $seconds s, seed $seed"
  rc=0
  python3 "$stress" "$mnt" --seconds "$seconds" --workers 6 --hang-seconds 30 --seed "$seed" || rc=$?
  if ((rc == 2)); then
    # A hung mount: end its daemon, detach it, and say so.
    pid=$(sed -n 's/^pid //p' "$store/LOCK.densefs" 2>/dev/null || true)
    if [[ -n $pid ]]; then kill -9 "$pid" 2>/dev/null || true; fi
    umount -l "$mnt" 2>/dev/null || true
    failed+=("-o $options: hung")
    continue
  fi
  ((rc == 0)) || failed+=("-o $options: wrong or stale bytes (above)")
  umount_densefs "$mnt"
  "$densefs" fsck "$store" >"$work/fsck.out" 2>&1 || {
    cat "$work/fsck.out"
    failed+=("-o $options: fsck failed after the run")
  }
done
if ((${#failed[@]})); then
  printf 'io_stress: %s\n' "${failed[@]}"
  fail "${#failed[@]} of ${#passes[@]} passes failed (seed $seed)"
fi
echo "io_stress: ${#passes[@]} passes, no wrong or stale bytes, no hang (seed $seed)"
