#!/usr/bin/env bash
# Evaluates FUSE writeback_cache: the same workloads with it on and off, side
# by side in one run (ratios matter; the machines are shared and noisy).
# Not part of ctest. Usage: tests/bench/writeback_cache.sh [path/to/densefs] [workdir]
set -euo pipefail
densefs=${1:-build/tools/densefs}
work=${2:-/var/tmp/densefs-bench-wbc}
input=$work/compressible.bin

mkdir -p "$work"
if [ ! -f "$input" ]; then
  # 1 GiB of word-like text: compresses about 2.7x with zstd -3.
  python3 - "$input" <<'PY'
import random, sys
random.seed(1)
words = [bytes(random.choice(b'abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(2, 9)))
         for _ in range(5000)]
with open(sys.argv[1], 'wb') as f:
    n = 0
    while n < 1 << 30:
        line = b' '.join(random.choice(words) for _ in range(20000)) + b'\n'
        f.write(line)
        n += len(line)
    f.truncate(1 << 30)
PY
fi

seconds() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); echo "$e - $s" | bc; }

for mode in writeback_cache no_writeback_cache; do
  d=$work/$mode
  fusermount3 -u "$d/mnt" 2>/dev/null || true
  rm -rf "$d" && mkdir -p "$d/mnt"
  "$densefs" mkfs "$d/store" >/dev/null
  "$densefs" mount "$d/store" "$d/mnt" -o "$mode"
  w4k=$(seconds dd if="$input" of="$d/mnt/f" bs=4k conv=fsync status=none)
  w1m=$(seconds dd if="$input" of="$d/mnt/g" bs=1M conv=fsync status=none)
  rs=$(seconds rsync -aHAX /usr/share/doc/ "$d/mnt/doc/")
  verdict=ok
  cmp -s "$input" "$d/mnt/f" && cmp -s "$input" "$d/mnt/g" &&
    diff -r --no-dereference /usr/share/doc "$d/mnt/doc" >/dev/null || verdict=MISMATCH
  printf '%-20s dd bs=4k+fsync %6.2fs  dd bs=1M+fsync %6.2fs  rsync /usr/share/doc %6.2fs  %s\n' \
    "$mode" "$w4k" "$w1m" "$rs" "$verdict"
  "$densefs" umount "$d/mnt"
done
