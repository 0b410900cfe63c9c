#!/bin/bash
# Entrypoint of the two densefs clients of docker/scale-out.compose.yaml: one
# scale-out volume (records in PostgreSQL, packs in S3; docs/scale-out.md)
# mounted by its URI, in the foreground, at $DENSEFS_MOUNTPOINT.
#
#   writer   makes the volume on its first start (densefs mkfs --meta
#            --data), then mounts it read-write: the volume's one writer
#   reader   waits until the volume exists, then mounts it read-only: a
#            follower, which sees the writer's changes (LISTEN/NOTIFY)
#   health   exits 0 when $DENSEFS_MOUNTPOINT is a densefs mount
#
# usage: scale-out-entrypoint.sh writer|reader [densefs mount arguments...]
#        scale-out-entrypoint.sh health
#
# Environment:
#   DENSEFS_VOLUME        the volume: postgresql://USER@HOST[:PORT]/DB, an
#                         empty database before the first start (required)
#   DENSEFS_DATA          writer: where the packs go,
#                         s3://BUCKET/PREFIX?endpoint=http://HOST:PORT
#   PGPASSWORD            the database password (never in the URI: densefs
#                         refuses one there, and ps would show it)
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   the S3 key pair
#   DENSEFS_MOUNTPOINT    mount point (default /mnt/densefs)
#   DENSEFS_OPTIONS       -o options for densefs mount (the reader adds ro)
#   DENSEFS_WAIT_FOR      HOST:PORT ... that must accept TCP connections
#                         before anything else is tried (e.g. the servers)
#   DENSEFS_WAIT_SECONDS  how long all the waiting may take (default 120)
#
# The client's cache is densefs's default for root, /var/cache/densefs/UUID
# (a volume there keeps it across container restarts).
set -euo pipefail

mnt=${DENSEFS_MOUNTPOINT:-/mnt/densefs}

say() { echo "densefs-scale-out: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# /proc/self/mounts escapes a space in a path as \040.
is_densefs_mount() {
  awk -v m="${1// /\\040}" '$2 == m && $3 == "fuse.densefs" { found = 1 } END { exit !found }' \
    /proc/self/mounts
}

role=${1:-}
case $role in
  health)
    is_densefs_mount "$mnt"
    exit
    ;;
  writer | reader) shift ;;
  *) die "usage: scale-out-entrypoint.sh writer|reader [densefs mount arguments...] | health" ;;
esac

volume=${DENSEFS_VOLUME:-}
[[ -n $volume ]] || die "set DENSEFS_VOLUME to the volume's postgresql://USER@HOST/DB"
# USER:PASSWORD@ in the URI: densefs refuses it on every try; say so once.
[[ ! $volume =~ ^[a-z]+://[^/@]*:[^/@]*@ ]] ||
  die "DENSEFS_VOLUME holds a password: give it in PGPASSWORD instead"
if [[ $role == writer && -z ${DENSEFS_DATA:-} ]]; then
  die "set DENSEFS_DATA to where the packs go, s3://BUCKET/PREFIX?endpoint=http://HOST:PORT"
fi
command -v densefs >/dev/null || die "densefs is not on PATH"

wait_seconds=${DENSEFS_WAIT_SECONDS:-120}
deadline=$((SECONDS + wait_seconds))
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT

# What the last try wrote to stderr (its info lines left out), said when it
# differs from the try before, so that the log shows what is being waited
# for without a line per try.
last_said=''
note_error() {
  local text
  text=$(awk '!/^densefs: info:/ { printf "%s%s", sep, $0; sep = "; " }' "$errors")
  if [[ -n $text && $text != "$last_said" ]]; then
    say "waiting: $text"
    last_said=$text
  fi
}
give_up() {
  die "$1 after ${wait_seconds} s${last_said:+: $last_said}"
}

for hostport in ${DENSEFS_WAIT_FOR:-}; do
  host=${hostport%:*} port=${hostport##*:}
  # bash's /dev/tcp: the image has no nc or pg_isready. The inner shell
  # expands $1 and $2, not this one.
  # shellcheck disable=SC2016
  until timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' tcp "$host" "$port" 2>"$errors"; do
    note_error
    ((SECONDS < deadline)) || give_up "$hostport does not accept connections"
    sleep 1
  done
done

# `densefs status` succeeds once the volume exists. On the writer's first
# start it fails (no densefs schema in the database) and mkfs makes the
# volume; mkfs leaves nothing behind when it fails (a server that does not
# answer yet, the S3 user not made yet) and refuses a database that holds
# a volume, so trying both until one succeeds needs no parsing of messages.
volume_exists() { densefs status "$volume" --json >/dev/null 2>"$errors"; }

make_volume() {
  local dir
  # mkfs wants a directory for this machine's FORMAT, lock and cache; a
  # mount by URI makes its own under /var/cache/densefs, so this one is
  # only mkfs's and goes.
  dir=$(mktemp -d)
  if densefs mkfs --meta "$volume" --data "$DENSEFS_DATA" "$dir/store" >/dev/null 2>>"$errors"; then
    rm -rf "$dir"
    say "made the volume $volume with its packs in ${DENSEFS_DATA%%\?*}"
    return 0
  fi
  rm -rf "$dir"
  return 1
}

if [[ $role == writer ]]; then
  until volume_exists || make_volume; do
    note_error
    ((SECONDS < deadline)) || give_up "could not open or make the volume $volume"
    sleep 2
  done
else
  until volume_exists; do
    note_error
    ((SECONDS < deadline)) || give_up "could not open the volume $volume"
    sleep 2
  done
  set -- -o ro "$@"
fi

mkdir -p "$mnt"
if [[ -n ${DENSEFS_OPTIONS:-} ]]; then
  set -- -o "$DENSEFS_OPTIONS" "$@"
fi
rm -f "$errors"
trap - EXIT
say "mounting $volume at $mnt ($role)"
# densefs is the main process from here on: SIGTERM reaches it, and it
# flushes and unmounts before it exits.
exec densefs mount -f "$volume" "$mnt" "$@"
