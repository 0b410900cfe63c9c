# shellcheck shell=bash
# $src, $work and fail come from mount_lib.sh, sourced first.
# shellcheck disable=SC2154
# Sourced by the store tests that copy a tree in with rsync -aHAX, check
# it after each step and kill the daemon mid-write (postgres_store_test.sh,
# s3_store_test.sh, two_clients_test.sh, two_writers_test.sh).
#
# make_tree DIR RANDOM_BYTES: the source files and docs of this repository, a
#   hard link (dir/a, dir/sub/a-link), a symlink, an xattr (user.tag on
#   dir/a), RANDOM_BYTES of incompressible random.bin, 5 MB of compressible
#   text.txt and a sparse file with a tail.
# check_tree LABEL SOURCE COPY: rsync -c and diff -r find no difference, the
#   hard link is one file and the xattr is there; fails naming LABEL.
# start_flood MNT: writes in flight for a kill -9 of the daemon: a background
#   writer creating 200 small files in MNT/flood (it stops at the first
#   failure), given 0.3 s to start; its pid in $flood_pid.
# daemon_pid STORE: the pid of the daemon STORE's lock file names.
# kill_daemon PID MNT: kill -9 of the daemon, the flood's writer reaped, MNT
#   lazily unmounted, and the daemon gone (10 s at most).
# step LABEL: prints how long the previous step took, then LABEL.
# check_fsck LABEL: densefs fsck of $store passes, or the test fails with its
#   output, naming LABEL.
# eventually SECONDS WHAT CMD...: CMD succeeds within SECONDS (polled every
#   0.1 s), or the test fails saying WHAT; prints how long it took. For what
#   one mount sees of another's change.
# absent PATH: PATH does not exist.
# listed DIR NAME: a readdir of DIR (not a lookup) has NAME.

make_tree() {
  local dir=$1 random_bytes=$2
  mkdir -p "$dir/dir/sub"
  cp -a "$src/store" "$src/docs" "$dir/"
  printf 'hard linked\n' >"$dir/dir/a"
  ln "$dir/dir/a" "$dir/dir/sub/a-link"
  ln -s dir/a "$dir/symlink"
  setfattr -n user.tag -v "kept by -X" "$dir/dir/a"
  head -c "$random_bytes" /dev/urandom >"$dir/random.bin"
  { yes 'a line of text that compresses well' || true; } | head -c 5000000 >"$dir/text.txt"
  truncate -s 2M "$dir/sparse"
  printf 'tail' >>"$dir/sparse"
}

start_flood() {
  mkdir "$1/flood"
  (for i in $(seq 1 200); do printf 'file %s\n' "$i" >"$1/flood/$i" || exit 0; done) 2>/dev/null &
  # shellcheck disable=SC2034 # read by the sourcing test
  flood_pid=$!
  sleep 0.3
}

daemon_pid() {
  local pid
  pid=$(sed -n 's/^pid //p' "$1/LOCK.densefs")
  [[ -n $pid ]] || fail "no daemon pid in $1/LOCK.densefs"
  echo "$pid"
}

kill_daemon() {
  local pid=$1 mnt=$2
  kill -9 "$pid"
  wait "$flood_pid" || true
  umount -l "$mnt" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
}

check_tree() {
  local label=$1 source=$2 copy=$3 out
  out=$(rsync -aHAXc --dry-run --itemize-changes "$source/" "$copy/")
  [[ -z $out ]] || {
    head -n 20 <<<"$out" >&2
    fail "$label: rsync -c finds $(wc -l <<<"$out") differences"
  }
  diff -r "$source" "$copy" >/dev/null || fail "$label: diff -r finds differences"
  [[ $(stat -c %i "$copy/dir/a") == $(stat -c %i "$copy/dir/sub/a-link") ]] ||
    fail "$label: the hard link is two files"
  [[ $(getfattr --absolute-names --only-values -n user.tag "$copy/dir/a") == "kept by -X" ]] ||
    fail "$label: the xattr is lost"
}

step_start=
step() {
  local t
  t=$(now)
  [[ -z $step_start ]] || echo "  ($(elapsed "$step_start" "$t") s)"
  step_start=$t
  echo "--- $*"
}

check_fsck() {
  "$densefs" fsck "$store" >"$work/fsck.out" 2>&1 || {
    cat "$work/fsck.out" >&2
    fail "fsck $1 failed"
  }
}

eventually() {
  local seconds=$1 what=$2 start
  shift 2
  start=$(now)
  until "$@" >/dev/null 2>&1; do
    awk -v a="$start" -v b="$(now)" -v s="$seconds" 'BEGIN { exit !(b - a > s) }' &&
      fail "$what (not within $seconds s)"
    sleep 0.1
  done
  echo "$what after $(elapsed "$start" "$(now)") s"
}

absent() { [[ ! -e $1 ]]; }
# Whether `stat -c FORMAT PATH` prints EXPECTED: stat runs again at every
# try of `eventually`, where a "$(stat ...)" among its arguments would be
# expanded once, before the first.
stat_is() { [[ $(stat -c "$1" "$2" 2>/dev/null) == "$3" ]]; }
listed() { find "$1" -mindepth 1 -maxdepth 1 -printf '%f\n' | grep -qxF "$2"; }
