#!/usr/bin/env bash
# A soak of the extended tier (tests/tiers.cmake): runs one of the default
# tier's tests again and again, each round with a new seed, until its time
# is spent, and fails at the first round that fails, naming its seed.
#
#   soak.sh [--seed-var NAME] -- COMMAND [ARGS...]
#
# DENSEFS_SOAK_SECONDS (default 1800): the time budget. A round is started
# only while the budget has room for one more round as long as the longest
# so far, so the soak ends within its budget (at least one round always
# runs). tools/setup.sh's CI sample gives its shard a few minutes,
# `tools/setup.sh test --extended` half an hour per soak.
# --seed-var NAME: the environment variable through which COMMAND takes its
# seed (DENSEFS_HYPO_SEED, DENSEFS_FSX_SEED, ...); each round sets it to a
# new number, printed before the round, so a failure can be run again.
# DENSEFS_SOAK_SEED (default: from the clock) is the first round's seed.
#
# Exit: 0 when every round passed, 77 when the first round skipped (the
# test's own skip), 1 otherwise. Prints
#   COUNTS: soak test=NAME rounds=N seconds=S failures=F
set -u
seed_var=""
if [[ ${1:-} == --seed-var ]]; then
  seed_var=${2:?--seed-var needs a name}
  shift 2
fi
[[ ${1:-} == -- ]] || {
  echo "usage: soak.sh [--seed-var NAME] -- COMMAND [ARGS...]" >&2
  exit 2
}
shift
budget=${DENSEFS_SOAK_SECONDS:-1800}
[[ $budget =~ ^[1-9][0-9]*$ ]] || {
  echo "soak.sh: DENSEFS_SOAK_SECONDS=$budget is not a positive number of seconds" >&2
  exit 2
}
# What to call it: the script, or the GoogleTest filter.
name=$(basename "$1")
for arg in "$@"; do
  case $arg in
    *_test.sh) name=$(basename "$arg" .sh) ;;
    --gtest_filter=*) name=${arg#--gtest_filter=} ;;
  esac
done
seed=${DENSEFS_SOAK_SEED:-$(($(date +%s) % 1000000))}

start=$SECONDS rounds=0 longest=0 failures=0
while :; do
  rounds=$((rounds + 1))
  round_start=$SECONDS
  if [[ -n $seed_var ]]; then
    echo "=== soak round $rounds of $name: $seed_var=$seed"
    env "$seed_var=$seed" "$@"
  else
    echo "=== soak round $rounds of $name"
    "$@"
  fi
  rc=$?
  took=$((SECONDS - round_start))
  ((took > longest)) && longest=$took
  if ((rc == 77 && rounds == 1)); then
    echo "soak.sh: the first round skipped; the soak is skipped"
    exit 77
  fi
  if ((rc != 0)); then
    failures=1
    echo "FAIL: soak round $rounds of $name failed (exit $rc) in $took s${seed_var:+; run it again with $seed_var=$seed}"
    break
  fi
  seed=$((seed + 1))
  # Room for another round as long as the longest so far?
  ((SECONDS - start + longest <= budget)) || break
done
echo "COUNTS: soak test=$name rounds=$rounds seconds=$((SECONDS - start)) failures=$failures"
((failures == 0))
