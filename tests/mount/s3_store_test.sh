#!/usr/bin/env bash
# A scale-out volume (`densefs mkfs --meta --data s3://...`,
# docs/scale-out.md): records in a private PostgreSQL 15 (postgres_lib.sh),
# pack payloads as objects in a private Ceph radosgw (s3_lib.sh), used as a
# user would: mkfs and its refusals (--data without --meta, not an s3:// URL,
# no endpoint, a location that already holds another volume's packs); the
# bucket made by mkfs, FORMAT naming the location and no credential anywhere;
# a tree copied in with rsync -aHAX and checked with rsync -c and diff -r;
# its pack objects in S3 after `densefs sync` and after an fsync; stored
# bytes within 2% of the same tree in an embedded store; stats naming the
# location; `densefs status` listing the mount as a live session; kill -9
# of the daemon after an fsync (the file exact, a small one whose pack was
# not uploaded yet too, fsck clean, the session
# shown as not alive once its heartbeat expired, and gone after the next
# mount); the local cache deleted and the tree read back exactly from S3
# with -o cache_size=16M, the cache staying within it; radosgw stopped under
# the mount (a read of uncached data fails with EIO in bounded time, the
# mount still answers, a small fsync succeeds on PostgreSQL alone, a big
# one fails) and started again (the same read
# exact, the unsynced data durable after a sync); most files deleted and gc
# leaving fewer pack objects, the rest read back exactly from S3, fsck clean;
# PostgreSQL restarted under a writer (every fsync'd file exact, fsck clean);
# the volume mounted by its postgresql:// URI from a fresh client directory
# (another machine's view), a second mount refused meanwhile.
# usage: s3_store_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"
# A server of its own: this test restarts it (not the phase's shared one).
pg_private=1
# shellcheck source=postgres_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/postgres_lib.sh"
# A server of its own: this test stops and restarts it.
# shellcheck disable=SC2034 # read by s3_lib.sh
s3_private=1
# shellcheck source=s3_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/s3_lib.sh"

command -v rsync >/dev/null || missing_tool rsync
command -v jq >/dev/null || missing_tool jq
command -v setfattr >/dev/null || missing_tool "setfattr (Debian attr)"

test_start=$(now)
# Session heartbeats every second, so a killed mount's session expires in 3 s.
export DENSEFS_HEARTBEAT_SECONDS=1
store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"
pg_createdb vol1
meta=$(pg_conninfo vol1)
bucket="densefs-vol1"
prefix=vol1
location="s3://$bucket/$prefix?endpoint=$S3_ENDPOINT"

# list_packs: $pack_keys (the keys under $prefix/packs/), $pack_key_sizes
# (their sizes, in the same order), $pack_count and $pack_bytes (their
# total size), from one LIST. (The query is written
# encoded: curl signs it as written, SigV4 wants '/' as %2F.)
list_packs() {
  local xml=$work/list.xml key
  s3_curl -f -o "$xml" "$S3_ENDPOINT/$bucket?list-type=2&max-keys=1000&prefix=$prefix%2Fpacks%2F" ||
    fail "listing s3://$bucket/$prefix/packs/ failed"
  ! grep -q '<IsTruncated>true</IsTruncated>' "$xml" || fail "more than 1000 pack objects"
  mapfile -t pack_keys < <(grep -o '<Key>[^<]*</Key>' "$xml" | sed -e 's/<[^>]*>//g')
  pack_count=${#pack_keys[@]}
  mapfile -t pack_key_sizes < <({ grep -o '<Size>[0-9]*</Size>' "$xml" || true; } | tr -dc '0-9\n')
  pack_bytes=$(printf '%s\n' "${pack_key_sizes[@]}" | awk '{ s += $1 } END { print s + 0 }')
  for key in "${pack_keys[@]}"; do
    [[ $key =~ ^$prefix/packs/[0-9]{8}\.pack$ ]] || fail "an object that is not a pack under $prefix/packs/: $key"
  done
}

# refused WHAT WORD MKFS_ARGS...: mkfs must fail with one line on stderr
# that says WORD (what is wrong) and names no credential, and leave no
# store behind.
refused() {
  local what=$1 word=$2 dir=$work/refused err
  shift 2
  if err=$("$densefs" mkfs "$@" "$dir" 2>&1 >/dev/null); then
    fail "mkfs took $what"
  fi
  [[ -n $err && $(wc -l <<<"$err") -eq 1 ]] || fail "mkfs with $what: expected one line on stderr: $err"
  [[ $err == *"$word"* ]] || fail "mkfs with $what: expected a line that says $word: $err"
  [[ $err != *"$AWS_SECRET_ACCESS_KEY"* ]] || fail "mkfs with $what printed the secret key"
  [[ ! -e $dir/FORMAT ]] || fail "mkfs with $what left a FORMAT in $dir"
  rm -rf "$dir"
  echo "mkfs with $what: $err"
}

# After a clean unmount every pack is in S3: nothing is left to upload.
check_nothing_staged() {
  local staged
  staged=$(find "$store/cache/staging" -type f -print -quit 2>/dev/null || true)
  [[ -z $staged ]] || fail "$1: packs still staged, not uploaded: $(ls -l "$store/cache/staging")"
}

# The location as stats names it: "s3://BUCKET/PREFIX at ENDPOINT".
check_location() {
  local label=$1 stats=$2 loc
  loc=$(jq -r '.payload_location // empty' <<<"$stats")
  [[ $loc == *"s3://$bucket/$prefix"* && $loc == *"$S3_ENDPOINT"* ]] ||
    fail "$label: payload_location '$loc' does not name s3://$bucket/$prefix at $S3_ENDPOINT"
}

# --- mkfs: what it refuses.
step "mkfs refusals"
refused "--data without --meta" --meta --data "$location"
pg_createdb refused1
refused "a --data that is not an s3:// URL" s3:// --meta "$(pg_conninfo refused1)" --data "$work/packs"
pg_createdb refused2
refused "an s3:// URL without an endpoint" endpoint --meta "$(pg_conninfo refused2)" --data "s3://$bucket/$prefix"

# --- mkfs: the bucket is made, FORMAT names the location, no credential is
# kept anywhere (the store directory, the database).
step "mkfs"
"$densefs" mkfs --meta "$meta" --data "$location" "$store" >"$work/mkfs.out" || fail "densefs mkfs --data failed"
# Its closing lines say how to mount it on any machine and where the
# credentials go.
for hint in "densefs mount postgresql://" "-o shared" "-o ro" PGPASSWORD AWS_ACCESS_KEY_ID; do
  grep -qF -- "$hint" "$work/mkfs.out" || fail "mkfs's closing hint lacks '$hint': $(cat "$work/mkfs.out")"
done
grep -q "^data=s3://$bucket/$prefix" "$store/FORMAT" || fail "FORMAT has no data=s3://$bucket/$prefix line: $(cat "$store/FORMAT")"
grep -qF "${S3_ENDPOINT#http://}" "$store/FORMAT" || fail "FORMAT does not name the endpoint: $(cat "$store/FORMAT")"
s3_curl -f -o /dev/null -I "$S3_ENDPOINT/$bucket" || fail "mkfs did not make the bucket $bucket"
if grep -rqF -e "$AWS_SECRET_ACCESS_KEY" -e "$AWS_ACCESS_KEY_ID" "$store"; then
  fail "a credential is written in the store directory"
fi
dump=$(as_postgres "$pg_bin/pg_dump" -h "$pg_socket_dir" -p "$pg_port" -U postgres vol1) ||
  fail "pg_dump of the volume's database failed"
[[ $dump != *"$AWS_SECRET_ACCESS_KEY"* && $dump != *"$AWS_ACCESS_KEY_ID"* ]] ||
  fail "a credential is written in the database"
unset dump
[[ ! -e $store/CURRENT ]] || fail "a RocksDB database was made in $store"
list_packs
echo "after mkfs: $pack_count pack objects"

# --- the tree: source files, incompressible and compressible data, a hard
# link, a symlink, an xattr, a sparse file.
data=$work/data
make_tree "$data" 6000000
# With random.bin and durable.bin, more than the 16 MiB cache of the
# cache_size test below, so that test reads more than the cache holds.
head -c 12000000 /dev/urandom >"$data/big.bin"

# --- the same tree in an embedded store, for its stored bytes.
step "the tree in an embedded store"
mkdir -p "$work/mnt-embedded"
"$densefs" mkfs "$work/embedded" >/dev/null || fail "densefs mkfs of the embedded store failed"
mount_densefs "$work/embedded" "$work/mnt-embedded"
rsync -aHAX "$data/" "$work/mnt-embedded/data/" || fail "rsync -aHAX into the embedded store failed"
"$densefs" sync "$work/mnt-embedded" >/dev/null || fail "densefs sync of the embedded store failed"
embedded_stats=$("$densefs" stats "$work/mnt-embedded" --json) || fail "densefs stats of the embedded store failed"
umount_densefs "$work/mnt-embedded"

# --- the tree in the volume; after a sync its packs are objects in S3.
step "rsync into the volume, sync"
mount_densefs "$store" "$mnt"
start=$(now)
rsync -aHAX "$data/" "$mnt/data/" || fail "rsync -aHAX into the mount failed"
echo "rsync -aHAX: $(elapsed "$start" "$(now)") s"
check_tree "after rsync" "$data" "$mnt/data"
start=$(now)
"$densefs" sync "$mnt" >/dev/null || fail "densefs sync failed"
echo "densefs sync: $(elapsed "$start" "$(now)") s"
list_packs
((pack_count > 0)) || fail "no pack objects in s3://$bucket/$prefix/packs/ after densefs sync"
# At least the incompressible files' bytes are in the objects.
((pack_bytes >= 18000000)) || fail "the pack objects hold $pack_bytes bytes after densefs sync, less than random.bin and big.bin"
echo "after sync: $pack_count pack objects, $pack_bytes bytes"

stats=$("$densefs" stats "$mnt" --json) || fail "densefs stats MNT --json failed"
check_location "stats of the mount" "$stats"
# The requests this client sent: PUTs of the packs listed above.
puts=$(jq -r '.object_requests.put' <<<"$stats")
((puts >= pack_count)) || fail "densefs stats counts $puts PUT requests, fewer than the $pack_count pack objects: $(jq -c .object_requests <<<"$stats")"
stored=$(jq -r .stored_bytes <<<"$stats")
embedded_stored=$(jq -r .stored_bytes <<<"$embedded_stats")
echo "stored bytes: $stored in the S3 volume ($(jq -r .chunks <<<"$stats") chunks)," \
  "$embedded_stored in an embedded store ($(jq -r .chunks <<<"$embedded_stats") chunks)"
[[ $(jq -r .logical_bytes <<<"$stats") == $(jq -r .logical_bytes <<<"$embedded_stats") ]] ||
  fail "logical bytes differ: $(jq -r .logical_bytes <<<"$stats") (S3 volume) against $(jq -r .logical_bytes <<<"$embedded_stats") (embedded)"
awk -v a="$stored" -v b="$embedded_stored" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.02 * b) }' ||
  fail "stored bytes differ by more than 2%: $stored (S3 volume) against $embedded_stored (embedded)"

# A second volume whose packs would go where this one's are: refused.
pg_createdb refused3
refused "a location that holds another volume's packs" "$bucket/$prefix" --meta "$(pg_conninfo refused3)" --data "$location"
# (The daemon may add packs meanwhile: the background re-encoder's.)
before_keys=("${pack_keys[@]}")
list_packs
for key in "${before_keys[@]}"; do
  [[ " ${pack_keys[*]} " == *" $key "* ]] || fail "$key is gone after the refused mkfs"
done

# --- kill -9 right after an fsync: the fsync put the file's pack in S3, and
# the file is exact after a remount.
step "fsync, then kill -9 of the daemon"
before_count=$pack_count
before_bytes=$pack_bytes
before_keys=("${pack_keys[@]}")
head -c 6000000 /dev/urandom >"$work/durable.bin"
dd if="$work/durable.bin" of="$mnt/durable.bin" bs=1M conv=fsync status=none ||
  fail "writing durable.bin with conv=fsync failed"
list_packs
# Bytes of the packs that are new (gc may meanwhile have rewritten an old
# one smaller, so the total alone does not tell). Write-behind may commit
# the file in more than one group commit, and the records of a commit
# within the gather window (1 MiB per sync, pack_store.h) can stay inline
# in PostgreSQL, durable but not yet in an object: a small last chunk did
# (5,775,009 of 6,000,000 bytes uploaded). The remount below checks the
# bytes themselves.
new_bytes=0
for i in "${!pack_keys[@]}"; do
  [[ " ${before_keys[*]} " == *" ${pack_keys[i]} "* ]] || new_bytes=$((new_bytes + pack_key_sizes[i]))
done
((new_bytes >= 6000000 - 1048576)) ||
  fail "the fsync of durable.bin did not upload it: $before_count objects ($before_bytes bytes) before, $pack_count ($pack_bytes) after, $new_bytes bytes in new ones"
# A small file fsync'd: its records gathered into a pack not uploaded yet,
# its bytes only in PostgreSQL when the daemon dies.
head -c 300000 /dev/urandom >"$work/gathered.bin"
dd if="$work/gathered.bin" of="$mnt/gathered.bin" bs=64k conv=fsync status=none ||
  fail "writing gathered.bin with conv=fsync failed"
# More writes in flight when the daemon dies.
start_flood "$mnt"
pid=$(daemon_pid "$store")
# densefs status: the mount is a session of the volume, alive.
status=$("$densefs" status "$store" --json) || fail "densefs status --json failed"
[[ $(jq '.sessions | length' <<<"$status") == 1 &&
  $(jq -r '.sessions[0].mountpoint' <<<"$status") == "$(realpath "$mnt")" &&
  $(jq -r '.sessions[0].pid' <<<"$status") == "$pid" &&
  $(jq -r '.sessions[0].alive' <<<"$status") == true ]] ||
  fail "densefs status does not list the mount as one live session: $status"
kill_daemon "$pid" "$mnt"
check_fsck "after kill -9"
# The killed mount's session stays, and shows as not alive once two
# heartbeats are missed (2 s with DENSEFS_HEARTBEAT_SECONDS=1).
sleep 4
status=$("$densefs" status "$store" --json) || fail "densefs status --json failed"
[[ $(jq -r '[.sessions[] | select(.pid == '"$pid"')][0].alive' <<<"$status") == false ]] ||
  fail "densefs status does not show the killed mount as not alive: $status"
"$densefs" status "$store" | grep -q "not alive: no heartbeat for" ||
  fail "densefs status (text) does not say so: $("$densefs" status "$store")"
mount_densefs "$store" "$mnt"
# The next mount removed the expired row: one session, the new one.
status=$("$densefs" status "$store" --json) || fail "densefs status --json failed"
[[ $(jq '.sessions | length' <<<"$status") == 1 &&
  $(jq -r '.sessions[0].pid' <<<"$status") != "$pid" ]] ||
  fail "after a remount, densefs status should list only the new session: $status"
cmp "$work/durable.bin" "$mnt/durable.bin" || fail "the fsync'd file differs after kill -9"
cmp "$work/gathered.bin" "$mnt/gathered.bin" || fail "the small fsync'd file (gathered, not uploaded) differs after kill -9"
rm -rf "$mnt/flood"
check_tree "after kill -9" "$data" "$mnt/data"
umount_densefs "$mnt"
check_nothing_staged "after the unmount that followed kill -9"
check_fsck "after kill -9 and a remount"
stats=$("$densefs" stats "$store" --json) || fail "densefs stats STORE --json failed"
check_location "stats of the unmounted store" "$stats"
echo "stats: payloads in $(jq -r .payload_location <<<"$stats"), stored $(jq -r .stored_bytes <<<"$stats") bytes"

# --- the local cache deleted: every byte comes from S3, and the records
# fetched stay within -o cache_size.
step "local cache deleted, remount with -o cache_size=16M"
rm -rf "$store/cache"
mount_densefs "$store" "$mnt" -o cache_size=16M
check_tree "read from S3 with an empty cache" "$data" "$mnt/data"
cmp "$work/durable.bin" "$mnt/durable.bin" || fail "durable.bin read from S3 differs"
[[ -n $(find "$store/cache/records" -type f -print -quit 2>/dev/null) ]] ||
  fail "nothing kept in $store/cache/records after reading the tree"
cache_limit=$(((16 + 2) << 20)) # the records' bytes, plus the directories
cache_bytes=$(du -sb "$store/cache" | cut -f1)
((cache_bytes <= cache_limit)) ||
  fail "the cache holds $cache_bytes bytes after reading the tree, more than -o cache_size=16M allows"
umount_densefs "$mnt"
cache_bytes_after=$(du -sb "$store/cache" | cut -f1)
((cache_bytes_after <= cache_limit)) ||
  fail "the cache holds $cache_bytes_after bytes after the unmount, more than -o cache_size=16M allows"
echo "cache after reading the tree from S3: $cache_bytes bytes mounted, $cache_bytes_after unmounted"

# --- radosgw down under the mount: reads of uncached data fail with EIO in
# bounded time, the mount answers, an fsync fails; back up, both go through.
step "radosgw stopped under the mount"
rm -rf "$store/cache"
# Served to Prometheus (docs/metrics.md): the object store's retries and
# failures, the payload cache, PostgreSQL's round trips.
metrics_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mount_densefs "$store" "$mnt" -o "metrics=127.0.0.1:$metrics_port"
s3_stop TERM
start=$(now)
if err=$(timeout 90 dd if="$mnt/data/big.bin" of=/dev/null bs=4096 count=1 2>&1); then
  fail "a read of uncached data succeeded with radosgw down"
fi
took=$(elapsed "$start" "$(now)")
[[ $err == *"Input/output error"* ]] || fail "a read with radosgw down: expected EIO, got after $took s: $err"
# The client's retries take about 9 s; the kernel may ask twice (its
# readahead, then the one page).
awk -v t="$took" 'BEGIN { exit !(t < 30) }' || fail "a read with radosgw down took $took s to fail with EIO (expected < 30 s)"
echo "read with radosgw down: EIO after $took s"
timeout 10 ls "$mnt/data" >/dev/null || fail "the mount does not answer ls with radosgw down"
timeout 10 cat "$mnt/data/dir/a" >/dev/null || fail "a file held in the database cannot be read with radosgw down"
# A small fsync needs PostgreSQL alone: its records are gathered into a
# pack uploaded later, their bytes in the database until then
# (docs/scale-out.md, "Packs in object storage"). One of more than the 1
# MiB gathered between two syncs needs its pack in S3 first.
head -c 500000 /dev/urandom >"$work/small-down.bin"
timeout 90 dd if="$work/small-down.bin" of="$mnt/small-down.bin" bs=1M conv=fsync status=none ||
  fail "an fsync of 500 KB failed with radosgw down (it needs only PostgreSQL)"
head -c 3000000 /dev/urandom >"$work/down.bin"
start=$(now)
if err=$(timeout 90 dd if="$work/down.bin" of="$mnt/down.bin" bs=1M conv=fsync status=none 2>&1); then
  fail "an fsync of 3 MB succeeded with radosgw down"
fi
[[ $err == *"Input/output error"* ]] || fail "an fsync with radosgw down: expected EIO within 90 s, got: $err"
echo "fsync with radosgw down: EIO after $(elapsed "$start" "$(now)") s"
timeout 10 ls "$mnt" >/dev/null || fail "the mount does not answer ls after a failed fsync"
s3_start
cmp "$data/big.bin" "$mnt/data/big.bin" || fail "big.bin differs once radosgw is back"
"$densefs" sync "$mnt" >/dev/null || fail "densefs sync failed once radosgw is back"
curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$work/metrics.txt" || fail "GET /metrics failed"
metric() { awk -v k="$1" '$1 == k { v = $2 } END { print v + 0 }' "$work/metrics.txt"; }
for m in densefs_object_retries_total densefs_object_failures_total \
  densefs_metadata_round_trips_total 'densefs_payload_cache_reads_total{result="miss"}'; do
  (($(metric "$m") > 0)) || fail "$m is 0 after reads and an fsync with radosgw down"
done
echo "metrics: $(metric densefs_object_retries_total) retries, $(metric densefs_object_failures_total) failures, $(metric densefs_metadata_round_trips_total) PostgreSQL round trips"
umount_densefs "$mnt"
check_nothing_staged "after radosgw came back and the unmount"
mount_densefs "$store" "$mnt"
cmp "$work/down.bin" "$mnt/down.bin" || fail "the file whose fsync failed with radosgw down differs after a sync and a remount"
cmp "$work/small-down.bin" "$mnt/small-down.bin" || fail "the file fsync'd with radosgw down differs after a remount"

# --- PostgreSQL restarted under load: a writer fsyncs file after file
# while the server stops and starts; every file whose fsync succeeded is
# exact after a remount, and fsck is clean.
step "PostgreSQL restarted under a writer"
mkdir -p "$mnt/load" "$work/load"
(
  for i in $(seq 1 40); do
    head -c 300000 /dev/urandom >"$work/load/$i"
    if dd if="$work/load/$i" of="$mnt/load/$i" bs=64k conv=fsync status=none 2>/dev/null; then
      echo "$i" >>"$work/load.ok"
    fi
    sleep 0.05
  done
) &
writer=$!
sleep 0.5
pg_stop fast
sleep 1
pg_start
wait "$writer" || true
"$densefs" sync "$mnt" >/dev/null || fail "densefs sync after the PostgreSQL restart failed"
umount_densefs "$mnt"
mount_densefs "$store" "$mnt"
synced=0
while read -r i; do
  cmp -s "$work/load/$i" "$mnt/load/$i" || fail "load/$i was fsync'd but differs after the restart"
  synced=$((synced + 1))
done <"$work/load.ok"
((synced > 0)) || fail "no fsync succeeded around the PostgreSQL restart"
echo "PostgreSQL restarted under a writer: $synced of 40 files fsync'd, all exact"
rm -rf "$mnt/load"
umount_densefs "$mnt"
check_fsck "after the PostgreSQL restart"
mount_densefs "$store" "$mnt"

# --- most files deleted: gc compacts and deletes pack objects; the rest
# reads back exactly from S3.
step "most files deleted, gc"
list_packs
before_count=$pack_count
before_bytes=$pack_bytes
rm -rf "$mnt/data/store" "$mnt/data/random.bin" "$mnt/data/big.bin" "$mnt/data/sparse" \
  "$mnt/durable.bin" "$mnt/down.bin"
rm -rf "$data/store" "$data/random.bin" "$data/big.bin" "$data/sparse"
# The two deletions change their directories' mtimes, maybe in different
# seconds: the copy's is the one to check against.
touch -r "$mnt/data" "$data"
"$densefs" sync "$mnt" >/dev/null || fail "densefs sync after the deletions failed"
"$densefs" gc "$store" >"$work/gc.out" 2>&1 || {
  cat "$work/gc.out" >&2
  fail "densefs gc of the mounted volume failed"
}
list_packs
echo "gc: $before_count pack objects ($before_bytes bytes) before, $pack_count ($pack_bytes bytes) after"
((pack_count < before_count)) || {
  cat "$work/gc.out" >&2
  fail "gc left $pack_count pack objects of $before_count with most of their bytes deleted"
}
umount_densefs "$mnt"
check_fsck "after gc"
rm -rf "$store/cache"
mount_densefs "$store" "$mnt"
check_tree "after gc, read from S3" "$data" "$mnt/data"
umount_densefs "$mnt"
check_fsck "at the end"

# --- "another machine": the volume mounted by its database's URI, with a
# client directory of its own (made by the mount: FORMAT, lock, cache).
step "mounted by its postgresql:// URI from a new client directory"
uri="postgresql:///vol1?host=$pg_socket_dir&port=$pg_port&user=postgres"
export DENSEFS_CACHE_HOME=$work/client2
mount_densefs "$uri" "$mnt"
check_tree "mounted by URI" "$data" "$mnt/data"
uuid=$(sed -n 's/^uuid=//p' "$store/FORMAT")
[[ -f $DENSEFS_CACHE_HOME/$uuid/FORMAT && $(sed -n 's/^data=//p' "$DENSEFS_CACHE_HOME/$uuid/FORMAT") == "$location" ]] ||
  fail "the mount by URI made no client directory $DENSEFS_CACHE_HOME/$uuid naming $location"
[[ $(stat -c %a "$DENSEFS_CACHE_HOME/$uuid") == 700 ]] || fail "the client directory is not private"
status=$("$densefs" status "$uri" --json) || fail "densefs status URI failed"
[[ $(jq -r '.sessions[0].mountpoint' <<<"$status") == "$(realpath "$mnt")" ]] ||
  fail "densefs status by URI does not list the mount: $status"
# status reads the database alone: no client directory of its own, no S3
# credential needed.
status=$(env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY DENSEFS_CACHE_HOME="$work/client3" \
  "$densefs" status "$uri" --json) || fail "densefs status URI without S3 credentials failed"
[[ ! -e $work/client3 ]] || fail "densefs status URI made a client directory"
[[ $(jq -r '.sessions | length' <<<"$status") == 1 && $(jq -r '.payload_location' <<<"$status") == "s3://"* ]] ||
  fail "densefs status URI without S3 credentials: $status"
# The volume's other directory cannot take it meanwhile: one writer. The
# error names the mount that has it and the options that would do.
mkdir -p "$work/mnt2"
if out=$("$densefs" mount "$store" "$work/mnt2" 2>&1); then
  fail "a second mount of the volume from its first directory succeeded"
fi
[[ $out == *"in use"* && $out == *"$(realpath "$mnt")"* && $out == *"-o ro"* && $out == *"-o shared"* ]] ||
  fail "a second mount of the volume: expected \"in use\", the mount point and the options: $out"
# fsck by the URI while this machine has it mounted names the volume and
# the mount to unmount.
if out=$("$densefs" fsck "$uri" 2>&1); then
  fail "densefs fsck of a mounted volume succeeded"
fi
[[ $out == *"postgresql://"* && $out == *"densefs umount $(realpath "$mnt")"* ]] ||
  fail "densefs fsck of a mounted volume: expected the volume and the mount to unmount: $out"
umount_densefs "$mnt"
if out=$("$densefs" mount "postgresql:///vol1?host=$pg_socket_dir&password=x" "$mnt" 2>&1); then
  fail "a mount by a URI with a password succeeded"
fi
[[ $out == *password* && $out != *"password=x"* ]] || fail "mount by a URI with a password: $out"
unset DENSEFS_CACHE_HOME
step "done"
echo "PASS: a volume on PostgreSQL and S3 took rsync, kill -9, an empty cache, radosgw down and gc" \
  "($(elapsed "$test_start" "$(now)") s after the servers started)"
