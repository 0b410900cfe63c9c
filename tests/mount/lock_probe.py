#!/usr/bin/env python3
"""Takes, tries and tests file locks for tests/mount/locks_test.sh.

usage: lock_probe.py hold PATH SPEC GO   take the lock (waiting), print "held",
                                         keep it until file GO exists
       lock_probe.py try PATH SPEC       one try: print "ok" (exit 0) or "busy" (1)
       lock_probe.py wait PATH SPEC [S]  wait for the lock: print "ok SECONDS",
                                         or "eintr SECONDS" when a SIGALRM after
                                         S seconds (no SA_RESTART) interrupts it
       lock_probe.py getlk PATH SPEC     F_GETLK: "unlck" or "TYPE START LEN PID"
       lock_probe.py pair PATH SPEC1 SPEC2 GO
                                         take SPEC1, print "held", once file GO
                                         exists wait for SPEC2: print "ok" or
                                         "edeadlk"

SPEC: flock:sh, flock:ex, posix:r:START:LEN, posix:w:START:LEN (LEN 0: to
the end of the file), ofd:r:START:LEN, ofd:w:START:LEN (open file
description locks). Files open read-write (read-only for posix:r and
flock, where the file is not writable).
"""
import errno
import fcntl
import os
import signal
import struct
import sys
import time

FLOCK_FORMAT = "@hhqqi4x"  # struct flock on Linux x86_64 and aarch64


def open_for(path, spec):
    try:
        return os.open(path, os.O_RDWR)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def take(fd, spec, wait):
    parts = spec.split(":")
    if parts[0] == "flock":
        op = fcntl.LOCK_EX if parts[1] == "ex" else fcntl.LOCK_SH
        fcntl.flock(fd, op if wait else op | fcntl.LOCK_NB)
        return
    kind = fcntl.F_WRLCK if parts[1] == "w" else fcntl.F_RDLCK
    arg = struct.pack(FLOCK_FORMAT, kind, os.SEEK_SET, int(parts[2]), int(parts[3]), 0)
    if parts[0] == "ofd":
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, arg)
    else:
        fcntl.fcntl(fd, fcntl.F_SETLKW if wait else fcntl.F_SETLK, arg)


class Interrupted(Exception):
    pass


def on_alarm(signum, frame):
    raise Interrupted()


def main():
    command, path, spec = sys.argv[1], sys.argv[2], sys.argv[3]
    parent = os.getppid()
    fd = open_for(path, spec)
    if command == "hold":
        take(fd, spec, True)
        print("held", flush=True)
        # The test script gone (it failed): let go, so that its mounts can go.
        while not os.path.exists(sys.argv[4]) and os.getppid() == parent:
            time.sleep(0.02)
        return 0
    if command == "try":
        try:
            take(fd, spec, False)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                print("busy", flush=True)
                return 1
            raise
        print("ok", flush=True)
        return 0
    if command == "wait":
        if len(sys.argv) > 4:
            signal.signal(signal.SIGALRM, on_alarm)
            signal.siginterrupt(signal.SIGALRM, True)
            signal.setitimer(signal.ITIMER_REAL, float(sys.argv[4]))
        start = time.monotonic()
        try:
            take(fd, spec, True)
        except Interrupted:
            print(f"eintr {time.monotonic() - start:.2f}", flush=True)
            return 0
        signal.setitimer(signal.ITIMER_REAL, 0)
        print(f"ok {time.monotonic() - start:.2f}", flush=True)
        return 0
    if command == "pair":
        take(fd, spec, True)
        print("held", flush=True)
        while not os.path.exists(sys.argv[5]) and os.getppid() == parent:
            time.sleep(0.02)
        try:
            take(fd, sys.argv[4], True)
        except OSError as e:
            if e.errno != errno.EDEADLK:
                raise
            print("edeadlk", flush=True)
            return 0
        print("ok", flush=True)
        return 0
    if command == "getlk":
        parts = spec.split(":")
        kind = fcntl.F_WRLCK if parts[1] == "w" else fcntl.F_RDLCK
        arg = struct.pack(FLOCK_FORMAT, kind, os.SEEK_SET, int(parts[2]), int(parts[3]), 0)
        l_type, _, start, length, pid = struct.unpack(FLOCK_FORMAT, fcntl.fcntl(fd, fcntl.F_GETLK, arg))
        if l_type == fcntl.F_UNLCK:
            print("unlck")
        else:
            print(f"{'w' if l_type == fcntl.F_WRLCK else 'r'} {start} {length} {pid}")
        return 0
    sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    sys.exit(main())
