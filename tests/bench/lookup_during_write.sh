#!/usr/bin/env bash
# How long a getattr and a lookup wait while a large file is written (issue
# 33: the group commit held meta_mutex_, which every lookup and getattr
# takes, across its pack writes). Each binary given gets a fresh store and
# mount, in turn, ROUNDS times: a probe asks for the attributes of one file
# (statx with AT_STATX_FORCE_SYNC, so each one is a GETATTR to the daemon)
# and looks up a name that does not exist (a new one each time, so each one
# is a LOOKUP), over and over, first for 3 s idle, then while dd writes 1 GiB
# of incompressible bytes with conv=fsync. Prints per binary and phase the
# count, median, 99th percentile and maximum of each, and dd's time.
# Not part of ctest; run with nothing else on the machine.
# Usage: tests/bench/lookup_during_write.sh DENSEFS [DENSEFS...]
#   env ROUNDS (default 2), WORK (default /var/tmp/densefs-bench-lookup),
#   OPTIONS (mount options, e.g. transport=device)
set -euo pipefail
[[ $# -ge 1 ]] || {
  echo "usage: $0 DENSEFS [DENSEFS...]" >&2
  exit 2
}
rounds=${ROUNDS:-2}
work=${WORK:-/var/tmp/densefs-bench-lookup}
mkdir -p "$work"
input=$work/random.bin
[[ -f $input ]] || head -c $((1 << 30)) /dev/urandom >"$input"

probe() { # MNT STOPFILE OUT
  python3 - "$@" <<'PY'
import ctypes, os, sys, time
mnt, stop, out = sys.argv[1:]
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
AT_FDCWD, AT_STATX_FORCE_SYNC, STATX_BASIC_STATS = -100, 0x2000, 0x7FF
probe = os.path.join(mnt, "probe").encode()
with open(out, "w") as f:
    i = 0
    while not os.path.exists(stop):
        t = time.perf_counter()
        if libc.statx(AT_FDCWD, probe, AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, buf) != 0:
            sys.exit("statx: " + os.strerror(ctypes.get_errno()))
        f.write("getattr %.6f\n" % (time.perf_counter() - t))
        i += 1
        t = time.perf_counter()
        if os.path.exists(os.path.join(mnt, "missing-%d" % i)):
            sys.exit("a name that was never made exists")
        f.write("lookup %.6f\n" % (time.perf_counter() - t))
        time.sleep(0.001)
PY
}

summary() { # LABEL PHASE FILE
  python3 - "$@" <<'PY'
import sys
label, phase, path = sys.argv[1:]
times = {}
for line in open(path):
    op, s = line.split()
    times.setdefault(op, []).append(float(s) * 1000)
for op in ("getattr", "lookup"):
    v = sorted(times.get(op, [0.0]))
    pick = lambda q: v[min(len(v) - 1, int(q * len(v)))]
    print("%-28s %-6s %-8s n=%6d  p50 %7.3f ms  p99 %8.3f ms  max %8.1f ms"
          % (label, phase, op, len(v), pick(0.5), pick(0.99), v[-1]))
PY
}

for round in $(seq 1 "$rounds"); do
  for densefs in "$@"; do
    label="$(basename "$densefs") #$round"
    d=$work/run
    fusermount3 -u "$d/mnt" 2>/dev/null || true
    rm -rf "$d" && mkdir -p "$d/mnt"
    "$densefs" mkfs "$d/store" >/dev/null
    "$densefs" mount "$d/store" "$d/mnt" ${OPTIONS:+-o "$OPTIONS"}
    echo probe >"$d/mnt/probe"
    sync
    probe "$d/mnt" "$d/stop" "$d/idle.txt" &
    sleep 3
    touch "$d/stop"
    wait $!
    rm -f "$d/stop"
    probe "$d/mnt" "$d/stop" "$d/write.txt" &
    pid=$!
    start=$(date +%s.%N)
    dd if="$input" of="$d/mnt/big" bs=1M conv=fsync status=none
    end=$(date +%s.%N)
    touch "$d/stop"
    wait "$pid"
    summary "$label" idle "$d/idle.txt"
    summary "$label" write "$d/write.txt"
    printf '%-28s dd 1 GiB conv=fsync: %.1f s\n' "$label" "$(echo "$end - $start" | bc)"
    cmp -s "$input" "$d/mnt/big" || echo "$label: MISMATCH reading the file back" >&2
    "$densefs" umount "$d/mnt"
  done
done
