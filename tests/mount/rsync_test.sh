#!/usr/bin/env bash
# densefs as an rsync backup target (issue 2's acceptance test):
#   rsync -aHAX /usr/share/doc/ MNT/doc/, then
#   - rsync -aHAXc --dry-run --itemize-changes reports nothing,
#   - diff -r is clean,
#   - a second rsync -aHAX transfers nothing,
#   and the same after densefs umount + mount; then kill -9 of the daemon
#   mid-rsync leaves only whole files. The stored size of the tree
#   must be under half its logical size. A small tree with hard links,
#   xattrs, a fifo, odd names and nanosecond times goes along, so -H and -X
#   have something to preserve. Prints rsync times to densefs and to a plain
#   directory on the same disk (informational, not asserted).
# usage: rsync_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

command -v rsync >/dev/null || missing_tool rsync
command -v setfattr >/dev/null || missing_tool "setfattr (Debian attr)"
data=${DENSEFS_RSYNC_SOURCE:-/usr/share/doc}
[[ -d $data ]] || unavailable "$data does not exist"

store=$work/store
mnt=$work/mnt
plain=$work/plain
special=$work/special
mkdir -p "$mnt" "$plain"

# The small tree rsync -H and -X have to get right.
mkdir -p "$special/dir/sub" "$special/empty-dir"
printf 'hard linked\n' >"$special/dir/a"
ln "$special/dir/a" "$special/dir/sub/a-link"
ln "$special/dir/a" "$special/a-link-2"
ln -s dir/a "$special/symlink"
ln -s /nonexistent/target "$special/dangling"
mkfifo "$special/fifo"
: >"$special/empty"
printf 'secret\n' >"$special/mode-0600"
chmod 0600 "$special/mode-0600"
printf 'x%.0s' $(seq 1 300) >"$special/$(printf 'n%.0s' $(seq 1 200))"
printf 'odd name\n' >"$special/sp ace, tab	and ünïcødé"
setfattr -n user.backup.tag -v "rsync -X keeps this" "$special/dir/a"
setfattr -n user.empty -v "" "$special/empty"
setfattr -n user.on-dir -v 1 "$special/dir"
touch -d '2001-02-03 04:05:06.123456789' "$special/dir/a" "$special/empty"
truncate -s 1M "$special/sparse"
printf 'tail' >>"$special/sparse"

# Warm the page cache so neither timed copy pays for reading the source.
find "$data" "$special" -type f -print0 | xargs -0 cat >/dev/null 2>&1 || true

# rsync_quiet_check LABEL: the checks that must hold after every copy.
rsync_quiet_check() {
  local label=$1 from to out
  for pair in "$data/:$mnt/doc/" "$special/:$mnt/special/"; do
    from=${pair%%:*}
    to=${pair#*:}
    out=$(rsync -aHAXc --dry-run --itemize-changes "$from" "$to")
    if [[ -n $out ]]; then
      echo "$out" | head -n 40 >&2
      fail "$label: rsync -aHAXc --dry-run --itemize-changes $from $to reports $(wc -l <<<"$out") changes"
    fi
    # diff calls two fifos different; rsync's itemize above covers the fifo.
    if ! diff -r --no-dereference --exclude=fifo "$from" "$to" >"$work/diff.out" 2>&1; then
      head -n 40 "$work/diff.out" >&2
      fail "$label: diff -r $from $to is not clean"
    fi
    out=$(rsync -aHAX --itemize-changes "$from" "$to")
    if [[ -n $out ]]; then
      echo "$out" | head -n 40 >&2
      fail "$label: a second rsync -aHAX $from $to transferred $(wc -l <<<"$out") items"
    fi
  done
  # What rsync -X cannot see if it is wrong in both directions: the values.
  [[ $(getfattr --absolute-names --only-values -n user.backup.tag "$mnt/special/dir/a") == "rsync -X keeps this" ]] ||
    fail "$label: user.backup.tag lost its value"
  [[ $(stat -c %h "$mnt/special/dir/a") == 3 ]] || fail "$label: hard link count of dir/a is not 3"
  [[ $(stat -c %y "$mnt/special/dir/a") == "2001-02-03 04:05:06.123456789"* ]] ||
    fail "$label: dir/a lost its nanosecond mtime: $(stat -c %y "$mnt/special/dir/a")"
  echo "$label: dry-run, diff -r and second rsync are all clean"
}

"$densefs" mkfs "$store" || fail "densefs mkfs $store failed"
mount_densefs "$store" "$mnt"

t0=$(now)
rsync -aHAX "$data/" "$plain/doc/"
t1=$(now)
rsync -aHAX "$data/" "$mnt/doc/" || fail "rsync -aHAX $data/ $mnt/doc/ failed"
t2=$(now)
plain_time=$(elapsed "$t0" "$t1")
densefs_time=$(elapsed "$t1" "$t2")

# The savings on the doc tree alone, before the special tree joins it.
# Small files are stored with zstd -1 first (-o ingest=auto) and re-encoded
# by the idle re-encoder; `densefs recompress MNT` waits for that pass, so
# the figure is what the tree finally takes.
early=$("$densefs" stats "$mnt" --json) || fail "densefs stats $mnt --json failed"
echo "densefs stats right after rsync: stored $(jq -r '.stored_bytes' <<<"$early") bytes"
"$densefs" recompress "$mnt" >/dev/null || fail "densefs recompress $mnt failed"
stats=$("$densefs" stats "$mnt" --json) || fail "densefs stats $mnt --json failed"
logical=$(jq -er '.logical_bytes' <<<"$stats") || fail "stats JSON has no logical_bytes: $stats"
stored=$(jq -er '.stored_bytes' <<<"$stats") || fail "stats JSON has no stored_bytes: $stats"
files=$(find "$data" -type f | wc -l)
# Hard links count once, as in the store.
source_bytes=$(find "$data" -type f -printf '%i %s\n' | sort -u | awk '{ s += $2 } END { print s + 0 }')
echo "source: $data, $files files, $source_bytes bytes"
echo "densefs stats: logical $logical bytes, stored $stored bytes," \
  "ratio $(awk -v s="$stored" -v l="$logical" 'BEGIN { printf "%.3f", s / l }')"
echo "rsync -aHAX time: densefs ${densefs_time}s, plain directory on the same disk ${plain_time}s"
[[ $logical -eq $source_bytes ]] ||
  fail "stats logical_bytes $logical differs from the $source_bytes bytes copied in"
[[ $((stored * 2)) -lt $logical ]] ||
  fail "stored bytes $stored are not under half of the logical $logical"

rsync -aHAX "$special/" "$mnt/special/" || fail "rsync -aHAX of the special tree failed"
rsync_quiet_check "first mount"

umount_densefs "$mnt"
mount_densefs "$store" "$mnt"
rsync_quiet_check "after remount"

# kill -9 of the daemon in the middle of an rsync: after a remount every
# file the interrupted rsync left is whole (its temporaries too, which are
# a whole copy of their file or gone; docs/design.md, "Durability"), fsck
# is clean, and a second rsync completes the copy.
rsync -a "$data/" "$mnt/again/" &
rsync_pid=$!
sleep "${DENSEFS_RSYNC_KILL_AFTER:-1.5}"
pid=$(sed -n 's/^pid //p' "$store/LOCK.densefs")
[[ -n $pid ]] || fail "no daemon pid in $store/LOCK.densefs"
kill -9 "$pid"
wait "$rsync_pid" && echo "note: rsync finished before the kill"
umount -l "$mnt" 2>/dev/null || true
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
"$densefs" fsck "$store" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck after kill -9 mid-rsync failed"
}
mount_densefs "$store" "$mnt"
present=0
temporaries=0
while IFS= read -r -d '' f; do
  rel=${f#"$mnt/again/"}
  source_file=$data/$rel
  base=${rel##*/}
  # rsync's temporary for NAME is .NAME.XXXXXX in the same directory.
  if [[ ! -e $source_file && $base =~ ^\.(.+)\.[A-Za-z0-9]{6}$ ]]; then
    source_file=$data/${rel%"$base"}${BASH_REMATCH[1]}
    temporaries=$((temporaries + 1))
  fi
  cmp -s "$source_file" "$f" ||
    fail "after kill -9 mid-rsync: $rel is $(stat -c %s "$f") bytes, not the whole $source_file"
  present=$((present + 1))
done < <(find "$mnt/again" -type f -print0)
echo "after kill -9 mid-rsync: $present files present ($temporaries of them rsync temporaries), each whole"
# --delete: the temporaries the killed rsync left (checked whole above) go,
# as they would after a crash on any file system.
rsync -a --delete "$data/" "$mnt/again/" || fail "rsync after kill -9 failed"
if ! differences=$(diff -rq --no-dereference "$data" "$mnt/again" 2>&1); then
  head -n 20 <<<"$differences" >&2
  fail "diff -r after the second rsync finds $(wc -l <<<"$differences") differences"
fi
umount_densefs "$mnt"
echo "PASS"
