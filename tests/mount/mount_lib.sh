# shellcheck shell=bash
# Sourced by the tests/mount/*_test.sh scripts, which ctest runs as
# `bash X_test.sh DENSEFS_BINARY SOURCE_DIR` (exit 77: skipped).
#
# After sourcing: $densefs (the binary), $src (the source tree), $work (a
# fresh directory under /var/tmp, removed at exit after everything under it
# is unmounted). Mount with mount_densefs, and every mount made under $work
# is unmounted at exit, even when the test fails.

set -euo pipefail

densefs=${1:?usage: $(basename "$0") DENSEFS_BINARY SOURCE_DIR}
src=${2:?usage: $(basename "$0") DENSEFS_BINARY SOURCE_DIR}
densefs=$(realpath "$densefs")
src=$(realpath "$src")

skip() {
  echo "SKIP: $*" >&2
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# What the machine lacks fails the test under DENSEFS_REQUIRE_TOOLS=1
# (tools/setup.sh test: CI must not go green by skipping), else skips it.
unavailable() {
  [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]] && fail "$* (DENSEFS_REQUIRE_TOOLS=1: a skip would hide it)"
  skip "$*"
}
[[ $(id -u) -eq 0 ]] || unavailable "mount tests run as root (they create stores, users and mounts)"
[[ -c /dev/fuse ]] || unavailable "/dev/fuse is missing (load the fuse module; in a container pass --device /dev/fuse)"
[[ -x $densefs ]] || fail "densefs binary $densefs is missing"

# Prints the path of a tool: on PATH, or where tools/setup.sh installs it.
find_tool() {
  local name=$1 dir
  if command -v "$name" 2>/dev/null; then return 0; fi
  for dir in "${CARGO_HOME:-${HOME:-/root}/.cargo}/bin" /root/.cargo/bin \
    "${DENSEFS_TOOLS_DIR:-/opt/densefs-tools}/venv/bin"; do
    if [[ -x $dir/$name ]]; then
      echo "$dir/$name"
      return 0
    fi
  done
  return 1
}

# A missing tool fails the test when tools/setup.sh installed the tools
# (DENSEFS_REQUIRE_TOOLS=1), and skips it with the reason otherwise.
missing_tool() {
  if [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]]; then
    fail "$1 is not installed (tools/setup.sh test installs it)"
  fi
  skip "$1 is not installed; run tools/setup.sh test to install it"
}

work=$(mktemp -d /var/tmp/densefs-test.XXXXXX)

# unmount_below DIR: unmounts everything mounted below DIR, deepest first;
# fails if something is still mounted there.
unmount_below() {
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$1/" | sort -r); do
    "$densefs" umount "$m" >/dev/null 2>&1 || umount "$m" 2>/dev/null || umount -l "$m" || true
  done
  ! findmnt -rn -o TARGET | grep -qF "$1/"
}

# Unmounts everything below $work, then removes $work, but never while
# anything is still mounted there: rm -rf would go through the mount into
# the store's files.
cleanup_work() {
  local rc=$?
  cd /
  if unmount_below "$work"; then
    rm -rf "$work"
  else
    echo "cleanup: something is still mounted under $work; leaving it in place" >&2
  fi
  return $rc
}
trap cleanup_work EXIT

# mount_densefs STORE MNT [densefs mount options...]: the default daemon
# mode; returns once the mount is live (the daemon mounts before it forks).
mount_densefs() {
  local store=$1 mnt=$2
  shift 2
  # DENSEFS_TEST_MOUNT_OPTIONS: more options for every mount of a suite
  # (scale_out_tools_test.sh: `shared`).
  if [[ -n ${DENSEFS_TEST_MOUNT_OPTIONS:-} ]]; then set -- "$@" -o "$DENSEFS_TEST_MOUNT_OPTIONS"; fi
  "$densefs" mount "$store" "$mnt" "$@" || fail "densefs mount $store $mnt $* failed"
  mountpoint -q "$mnt" || fail "densefs mount returned but $mnt is not a mount point"
}

# mounts_shared: whether the suite's mounts are writers beside others
# (DENSEFS_TEST_MOUNT_OPTIONS has `shared`). They refuse -o writeback_cache
# (fs/mount.cpp: the kernel would keep its own sizes).
mounts_shared() { [[ ,${DENSEFS_TEST_MOUNT_OPTIONS:-}, == *,shared,* ]]; }

# expect_mount_refused WORD STORE MNT [densefs mount options...]: the mount
# must fail with one line of error that names WORD (printed).
expect_mount_refused() {
  local word=$1 store=$2 mnt=$3 err=$work/refused.err
  shift 3
  mkdir -p "$mnt"
  if "$densefs" mount "$store" "$mnt" "$@" 2>"$err"; then
    fail "densefs mount $store $* mounted; it should be refused"
  fi
  if [[ $(wc -l <"$err") != 1 ]] || ! grep -q "$word" "$err"; then
    fail "densefs mount $store $*: not one line naming $word: $(cat "$err")"
  fi
  echo "refused: $(cat "$err")"
}

# expect_refused WORD CMD...: CMD fails with one line of error naming WORD.
expect_refused() {
  local word=$1 err=$work/refused.err
  shift
  if "$@" >/dev/null 2>"$err"; then fail "$* succeeded; it should be refused"; fi
  if [[ $(wc -l <"$err") != 1 ]] || ! grep -q -- "$word" "$err"; then
    fail "$*: not one line naming $word: $(cat "$err")"
  fi
  echo "refused: $(cat "$err")"
}

# mkfs_store STORE [MKFS ARGS...]: densefs mkfs STORE. With
# DENSEFS_TEST_POSTGRES (a libpq connection string without dbname) the store
# keeps its records in a new database of that server, and with
# DENSEFS_TEST_S3_ENDPOINT too its packs are objects under a prefix of their
# own (scale_out_tools_test.sh runs the third-party suites so).
# mkfs_store_db is then the database of the last store made (for the
# scripts that source this file).
mkfs_store_count=0
# shellcheck disable=SC2034
mkfs_store_db=
mkfs_store() {
  local store=$1 db
  shift
  local args=()
  if [[ -n ${DENSEFS_TEST_POSTGRES:-} ]]; then
    db="densefs_sh_$$_$((mkfs_store_count++))"
    # shellcheck disable=SC2034
    mkfs_store_db=$db
    psql -X -q -v ON_ERROR_STOP=1 "$DENSEFS_TEST_POSTGRES dbname=postgres" \
      -c "CREATE DATABASE $db" >/dev/null || fail "creating database $db for $store"
    args+=(--meta "$DENSEFS_TEST_POSTGRES dbname=$db")
    if [[ -n ${DENSEFS_TEST_S3_ENDPOINT:-} ]]; then
      args+=(--data "s3://densefs-suite/$db?endpoint=$DENSEFS_TEST_S3_ENDPOINT")
    fi
  fi
  "$densefs" mkfs "$store" "${args[@]}" "$@" >/dev/null || fail "densefs mkfs $store ${args[*]} $* failed"
}

# volume_uri DB: the postgresql:// URI that mounts the volume in database
# DB of the server DENSEFS_TEST_POSTGRES names (by the URI, a mount makes a
# client directory of its own: another machine's view).
volume_uri() {
  local query
  query=$(tr ' ' '&' <<<"$DENSEFS_TEST_POSTGRES")
  echo "postgresql:///$1?$query"
}

umount_densefs() {
  "$densefs" umount "$1" || fail "densefs umount $1 failed"
  if mountpoint -q "$1"; then fail "$1 is still mounted after densefs umount"; fi
}

# Seconds since the epoch with nanoseconds, for timing.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
