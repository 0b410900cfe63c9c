#!/usr/bin/env bash
# Differential, stateful random test (hypothesis): the same random sequences
# of open/write/pwrite/truncate/rename/link/unlink/mkdir/rmdir/symlink/
# xattr/chmod/utime calls, with handles kept open across steps, on a densefs
# mount and on a plain directory; return values and errnos compared after
# every step, the whole trees now and then, across remounts and after
# `densefs fsck`. The logic is in differential_fs.py; a failure prints the
# shrunk program. Two configurations: the default mount options, and every
# kernel cache timeout 0 with writeback_cache on (off for writers beside
# others, which refuse it).
#
#   DENSEFS_SOAK=1                 many more examples and steps, a random seed
#   DENSEFS_HYPO_EXAMPLES=N        examples per configuration (default 70)
#   DENSEFS_HYPO_STEPS=N           steps per example (default 30)
#   DENSEFS_HYPO_SEED=N            the seed (default 0: CI runs are reproducible)
#   DENSEFS_HYPO_VERBOSE=1         print every step
#   DENSEFS_HYPO_WRITERS=2         on scale-out volumes mounted -o shared: each
#                                  volume mounted twice (the second by its URI,
#                                  from a client directory of its own), every
#                                  step on one of the two writers; a step on the
#                                  other one than the last is a hand-over
#                                  (differential_fs.py, "two writers")
# usage: differential_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

python=$(find_tool python3) || missing_tool "python3"
# The venv tools/setup.sh makes, when it exists: hypothesis lives there.
venv_python=${DENSEFS_TOOLS_DIR:-/opt/densefs-tools}/venv/bin/python3
if [[ -x $venv_python ]]; then python=$venv_python; fi
"$python" -c 'import hypothesis' 2>/dev/null ||
  missing_tool "hypothesis for $python (/opt/densefs-tools/venv/bin/pip install hypothesis)"

examples=70
steps=30
seed=0
if [[ ${DENSEFS_SOAK:-0} == 1 ]]; then
  examples=500
  steps=100
  seed=$RANDOM$RANDOM
fi
examples=${DENSEFS_HYPO_EXAMPLES:-$examples}
steps=${DENSEFS_HYPO_STEPS:-$steps}
seed=${DENSEFS_HYPO_SEED:-$seed}
verbose=()
if [[ ${DENSEFS_HYPO_VERBOSE:-0} == 1 ]]; then verbose=(--verbose); fi
writers=${DENSEFS_HYPO_WRITERS:-1}
[[ $writers == 1 || $writers == 2 ]] || fail "DENSEFS_HYPO_WRITERS=$writers is not 1 or 2"
[[ $writers == 1 ]] || mounts_shared ||
  fail "DENSEFS_HYPO_WRITERS=2 needs scale-out volumes mounted -o shared"

total_examples=0
total_steps=0
total_failures=0
t0=$(now)

# run_config LABEL [densefs mount options...]: a fresh store, mount and
# plain directory for one configuration.
run_config() {
  local label=$1 store=$work/$1/store mnt=$work/$1/mnt ref=$work/$1/plain out rc=0 line
  shift
  mkdir -p "$mnt" "$ref"
  mkfs_store "$store"
  mount_densefs "$store" "$mnt" "$@"
  # The script's remounts take the same options mount_densefs added.
  local mount_args=("$@") second=() mnt2=$work/$label/mnt2 uri client2=$work/$label/client2
  [[ -z ${DENSEFS_TEST_MOUNT_OPTIONS:-} ]] || mount_args+=(-o "$DENSEFS_TEST_MOUNT_OPTIONS")
  if ((writers == 2)); then
    uri=$(volume_uri "$mkfs_store_db")
    mkdir -p "$mnt2"
    mount_densefs "$uri" "$mnt2" "$@" -o "cache_dir=$client2"
    second=(--mnt2 "$mnt2" --store2 "$uri" --cache-dir2 "$client2")
  fi
  out=$work/$label/output.txt
  "$python" "$src/tests/mount/differential_fs.py" --densefs "$densefs" --store "$store" \
    --mnt "$mnt" --ref "$ref" --work "$work/$label" --label "$label" "${second[@]}" \
    --examples "$examples" --steps "$steps" --seed "$seed" "${verbose[@]}" -- "${mount_args[@]}" 2>&1 |
    tee "$out" || rc=$?
  line=$(grep '^RESULT ' "$out" | tail -n 1) || fail "$label: differential_fs.py printed no RESULT line (exit $rc)"
  total_examples=$((total_examples + $(sed -E 's/.*examples=([0-9]+).*/\1/' <<<"$line")))
  total_steps=$((total_steps + $(sed -E 's/.*steps=([0-9]+).*/\1/' <<<"$line")))
  total_failures=$((total_failures + $(sed -E 's/.*failures=([0-9]+).*/\1/' <<<"$line")))
  if [[ $rc -ne 0 && $(sed -E 's/.*failures=([0-9]+).*/\1/' <<<"$line") == 0 ]]; then
    total_failures=$((total_failures + 1))
  fi
  if ((writers == 2)) && mountpoint -q "$mnt2"; then umount_densefs "$mnt2"; fi
  if mountpoint -q "$mnt"; then umount_densefs "$mnt"; fi
}

run_config default
if mounts_shared; then
  # Writers beside others refuse writeback_cache (the kernel would keep its
  # own file sizes): the same without it.
  run_config timeouts0 -o entry_timeout=0,attr_timeout=0,negative_timeout=0
else
  run_config timeouts0-writeback -o entry_timeout=0,attr_timeout=0,negative_timeout=0,writeback_cache
fi

echo "differential: $(elapsed "$t0" "$(now)")s in all"
echo "COUNTS: hypothesis examples=$total_examples steps=$total_steps failures=$total_failures"
[[ $total_failures -eq 0 ]] || fail "the differential test found $total_failures failing configuration(s); the shrunk programs are above"
echo "PASS"
