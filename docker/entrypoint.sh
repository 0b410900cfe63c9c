#!/bin/sh
# Container entrypoint: creates the store on first start (an empty volume),
# then serves it in the foreground at $DENSEFS_MOUNTPOINT. Extra arguments
# are passed to `densefs mount` (e.g. -o codec=zstd:level=9).
set -eu

store=${DENSEFS_STORE:-/store}
mnt=${DENSEFS_MOUNTPOINT:-/mnt/densefs}

if [ ! -d "$store" ]; then
    echo "densefs-entrypoint: store directory $store does not exist (mount a volume there)" >&2
    exit 1
fi
# mkfs only an empty directory: anything else must already be a store, and
# `densefs mount` says so in one line when it is not.
if [ -z "$(ls -A "$store")" ]; then
    echo "densefs-entrypoint: $store is empty, creating a store" >&2
    densefs mkfs "$store"
fi
mkdir -p "$mnt"

if [ -n "${DENSEFS_OPTIONS:-}" ]; then
    set -- -o "$DENSEFS_OPTIONS" "$@"
fi
exec densefs mount -f "$store" "$mnt" "$@"
