#!/usr/bin/env python3
"""Many processes writing, verifying, reading, truncating and statting
files on one mount, with signals interrupting their requests: the shape of
LTP's iogen/doio runs that found a stale read and a hung io_uring queue.

Each worker keeps its descriptors open for the whole run (as doio does)
and, in a loop until the time is up:

* verify: takes an fcntl lock on a random unaligned range of a file shared
  by all workers, writes a pattern unique to (worker, round) through its
  O_RDWR descriptor (every other write O_SYNC), reads the range back
  through its O_RDONLY descriptor and compares; on a mismatch it reads the
  range again with O_DIRECT to tell a stale page in the kernel from wrong
  bytes in the daemon, and records both;
* cold read: drops a big file's pages (POSIX_FADV_DONTNEED) and reads 32
  random pages of it, so the daemon decodes and replies from its decoder
  pool (mount with -o chunk_cache=0 to make every such read do that);
* truncate: cuts a scratch file of its own and grows it again;
* stat: fstat and stat of the shared files.

The parent sends SIGUSR1 to random workers every few milliseconds (their
system calls are interrupted and restarted, as iogen's are) and watches
progress: when no worker finishes an operation for --hang-seconds it
reports a hang (with the kernel's recent fuse lines) and exits 2. A data
mismatch exits 1. Prints one line of counts.

usage: io_stress.py MOUNT [--seconds S] [--workers N] [--hang-seconds H]
"""

import argparse
import ctypes
import fcntl
import mmap
import multiprocessing
import os
import random
import signal
import struct
import subprocess
import sys
import time

SHARED_FILES = 2
SHARED_SIZE = 512 * 1024  # iogen01's bigger file
BIG_SIZE = 24 << 20
COUNTERS = ("verify", "cold_read", "truncate", "stat", "stale_page", "wrong_bytes")


def pattern(worker, round_, length):
    head = struct.pack("<II", worker, round_)
    unit = head + bytes((worker * 31 + round_ + i) & 0xFF for i in range(56))
    return (unit * (length // len(unit) + 1))[:length]


def read_direct(path, offset, length):
    """The range as the daemon serves it, past the page cache."""
    start = offset & ~4095
    end = (offset + length + 4095) & ~4095
    buf = mmap.mmap(-1, end - start)  # page-aligned, as O_DIRECT needs
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        n = os.preadv(fd, [buf], start)
    finally:
        os.close(fd)
    return bytes(buf[offset - start:min(n, offset - start + length)])


def worker_main(index, args, counts, progress, report, cursors):
    signal.signal(signal.SIGUSR1, lambda *_: None)  # interrupts, restarts
    rng = random.Random(args.seed * 1000 + index)
    shared = [os.path.join(args.mount, f"shared{i}") for i in range(SHARED_FILES)]
    rw = [os.open(p, os.O_RDWR) for p in shared]
    rw_sync = [os.open(p, os.O_RDWR | os.O_SYNC) for p in shared]
    ro = [os.open(p, os.O_RDONLY) for p in shared]
    big = os.open(os.path.join(args.mount, f"big{index % 2}"), os.O_RDONLY)
    os.posix_fadvise(big, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel read-ahead
    scratch_path = os.path.join(args.mount, f"scratch{index}")
    scratch = os.open(scratch_path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + args.seconds
    round_ = 0
    while time.monotonic() < deadline:
        round_ += 1
        op = rng.random()
        if op < 0.6:
            f = rng.randrange(SHARED_FILES)
            # Mostly a few hundred bytes, sometimes up to 128 KiB (as
            # iogen): a long WRITE is long in flight.
            length = rng.randrange(200, 1200) if rng.random() < 0.7 else rng.randrange(1, 128 << 10)
            # Ranges in turn through the file, as iogen's sequential
            # mode: neighbours' ranges, written at the same time by other
            # workers, share their edge pages.
            cursor = cursors[f]
            with cursor.get_lock():
                if cursor.value + length > SHARED_SIZE:
                    cursor.value = 0
                offset = cursor.value
                cursor.value += length
            data = pattern(index, round_, length)
            fcntl.lockf(rw[f], fcntl.LOCK_EX, length, offset)
            try:
                os.pwrite(rw_sync[f] if round_ % 2 else rw[f], data, offset)
                back = os.pread(ro[f], length, offset)
                if back != data:
                    direct = read_direct(shared[f], offset, length)
                    kind = "stale_page" if direct == data else "wrong_bytes"
                    with counts.get_lock():
                        counts[COUNTERS.index(kind)] += 1
                    first = next((i for i in range(min(len(back), length))
                                  if back[i] != data[i]), len(back))
                    report.put(f"{kind}: worker {index} round {round_} {shared[f]} "
                               f"offset {offset} length {length}: read back {len(back)} bytes, "
                               f"differing from byte {offset + first} on; O_DIRECT read "
                               f"{'matches' if direct == data else 'differs too'}")
            finally:
                fcntl.lockf(rw[f], fcntl.LOCK_UN, length, offset)
            kind = "verify"
        elif op < 0.8:
            # Small reads at random places: many READs, each answered
            # from the decoder pool when the chunk is not cached.
            os.posix_fadvise(big, 0, 0, os.POSIX_FADV_DONTNEED)
            for _ in range(32):
                os.pread(big, 4096, rng.randrange(0, BIG_SIZE >> 12) << 12)
            kind = "cold_read"
        elif op < 0.9:
            os.ftruncate(scratch, rng.randrange(0, 1 << 20))
            os.pwrite(scratch, b"t" * 4096, rng.randrange(0, 1 << 20))
            kind = "truncate"
        else:
            for p in shared:
                os.stat(p)
            os.fstat(rw[0])
            kind = "stat"
        with counts.get_lock():
            counts[COUNTERS.index(kind)] += 1
        progress.value = time.monotonic()


def fuse_kernel_lines():
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "(dmesg unavailable)"
    lines = [l for l in out.splitlines() if "fuse" in l]
    return "\n".join(lines[-10:]) or "(no fuse lines in dmesg)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mount")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--hang-seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()

    rng = random.Random(args.seed)
    for i in range(SHARED_FILES):
        with open(os.path.join(args.mount, f"shared{i}"), "wb") as f:
            f.write(bytes(SHARED_SIZE))
    for i in range(2):  # compressible, so reads decode
        with open(os.path.join(args.mount, f"big{i}"), "wb") as f:
            block = bytes(rng.randrange(0, 16) for _ in range(1 << 16))
            for _ in range(BIG_SIZE >> 16):
                f.write(block)
                block = block[1:] + block[:1]

    counts = multiprocessing.Array(ctypes.c_long, len(COUNTERS))
    cursors = [multiprocessing.Value(ctypes.c_long, 0) for _ in range(SHARED_FILES)]
    report = multiprocessing.SimpleQueue()
    progress = [multiprocessing.Value(ctypes.c_double, time.monotonic(), lock=False)
                for _ in range(args.workers)]
    workers = [multiprocessing.Process(target=worker_main,
                                       args=(i, args, counts, progress[i], report, cursors))
               for i in range(args.workers)]
    # Before the workers exist: they inherit it, and a SIGUSR1 that came
    # before a worker installed its own would kill it (the default action).
    signal.signal(signal.SIGUSR1, lambda *_: None)
    for w in workers:
        w.start()
    hung = False
    start = time.monotonic()
    while any(w.is_alive() for w in workers):
        time.sleep(0.005)
        alive = [w for w in workers if w.is_alive()]
        if alive:
            try:
                os.kill(rng.choice(alive).pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        now = time.monotonic()
        newest = max(p.value for p in progress)
        if now - newest > args.hang_seconds and now - start > args.hang_seconds:
            hung = True
            break
    problems = []
    while not report.empty():
        problems.append(report.get())
    summary = " ".join(f"{name}={counts[i]}" for i, name in enumerate(COUNTERS))
    print(f"io_stress: seed {args.seed}, {args.workers} workers, "
          f"{time.monotonic() - start:.0f} s: {summary}")
    for p in problems[:20]:
        print(p)
    if hung:
        print(f"io_stress: HANG: no worker finished an operation for {args.hang_seconds:.0f} s; "
              f"the kernel's last fuse lines:\n{fuse_kernel_lines()}")
        for w in workers:
            if w.is_alive():
                w.kill()  # they may stay in D state until the mount goes
        sys.stdout.flush()
        os._exit(2)  # not sys.exit: multiprocessing would wait for them
    if any(w.exitcode != 0 for w in workers):
        print("io_stress: a worker failed (above)")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
