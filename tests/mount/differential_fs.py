#!/usr/bin/env python3
"""Differential, stateful random test: densefs against a plain directory.

A hypothesis RuleBasedStateMachine applies the same random sequence of file
system calls to a densefs mount and to a plain directory on the local disk
(ext4 on the project's machines) and compares, after every step, the return
values and errnos, and as invariants the stat of every path of a small path
universe, every open handle's fstat, and (every FULL_EVERY steps, around
each remount and at teardown) the whole trees: names, types, modes, owners,
sizes, nlink, hard-link groups, bytes, xattrs, symlink targets and the
mtimes the test pinned with utime. Open handles live across steps (writes
to unlinked-but-open files included); a rule unmounts and remounts densefs
mid-run (handles closed first), and every example ends with an unmount,
`densefs fsck`, a mount and a last comparison (inode numbers must survive).

Paths come from a fixed universe (a, a/x, a/x/z, ...) and file data from a
(kind, size, seed) triple, so a shrunk failure prints as a short, readable
program. Run by tests/mount/differential_test.sh; see docs/testing.md.

Differences the comparison leaves out on purpose (not densefs bugs):
  - st_size of directories (ext4 counts its directory blocks),
  - st_blocks (densefs reports the compressed stored size),
  - st_ino, st_dev, ctime (file system specific; inode numbers are instead
    checked for stability across remounts and for hard-link groups),
  - atime after reads (densefs never updates atime on read, as noatime;
    ext4 uses relatime). atime is compared right after utime sets it.
  - mtimes set by the clock: compared only as "recent" (not one the test
    pinned), since the two file systems are written at different instants.
"""

import argparse
import ctypes
import errno
import functools
import os
import random
import shutil
import stat
import subprocess
import sys
import time
import traceback
import zlib

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    initialize,
    invariant,
    precondition,
    rule,
)

MIB = 1 << 20
SLOT = 4 * MIB  # densefs stages and commits files in 4 MiB slots

# The path universe: small enough that most operations hit something, deep
# enough for renames into and out of subdirectories and over non-empty dirs.
TOP = ["a", "b", "c", "d"]
PATHS = (
    TOP
    + [f"{t}/{n}" for t in TOP for n in ("x", "y")]
    + [f"{t}/{n}/z" for t in TOP for n in ("x", "y")]
)

FILE_MODES = [0o644, 0o600, 0o755, 0o444, 0o000, 0o777, 0o4755, 0o2755, 0o1644]
DIR_MODES = [0o755, 0o700, 0o2755, 0o1777, 0o555, 0o777]
OPEN_FLAGS = {
    "rdwr|creat": os.O_RDWR | os.O_CREAT,
    "wronly|creat|trunc": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "rdonly": os.O_RDONLY,
    "rdwr": os.O_RDWR,
    "wronly|append|creat": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
    "rdwr|creat|excl": os.O_RDWR | os.O_CREAT | os.O_EXCL,
    "wronly": os.O_WRONLY,
    "rdwr|trunc": os.O_RDWR | os.O_TRUNC,
    "rdonly|directory": os.O_RDONLY | os.O_DIRECTORY,
}
# Relative targets, so a symlink resolves inside its own tree on both sides;
# "" is refused by the kernel; the last one is PATH_MAX - 1 bytes long.
# Long ones go by a short key, so a printed program stays readable.
SYMLINK_TARGETS = {t: t for t in ["a", "../a", "../c", "c", "x", "../../b", "a/x", "z", "missing", ".",
                                   "..", "", "c/../a/x/z"]}
SYMLINK_TARGETS["<255 x n>"] = "n" * 255
SYMLINK_TARGETS["<d/d/.../e, 4095 bytes>"] = "d/" * 2047 + "e"
XATTR_NAMES = ["user.a", "user.b", "user." + "n" * 250, "trusted.t"]
# Values stay small: ext4 keeps all of an inode's xattrs in one 4 KiB block
# and would answer ENOSPC where densefs has room (not a difference to test).
XATTR_VALUES = [b"", b"v", b"value two", bytes(range(256)), b"x" * 1000]
# utime values the test pins; a file system clock never produces these.
PINNED_NS = [
    978_307_200_123_456_789,  # 2001-01-01, nanoseconds set
    1_000_000_000_000_000_000,  # 2001-09-09, whole seconds
    0,  # the epoch
    1,  # one nanosecond after it
    -1_500_000_000,  # before the epoch
    7_258_118_400_000_000_001,  # 2200-01-01, past 2038
]
# fallocate modes both file systems support (densefs: docs/design.md);
# COLLAPSE_RANGE and INSERT_RANGE are EOPNOTSUPP on densefs by design.
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10
FALLOC_MODES = {
    "0": 0,
    "keep_size": FALLOC_FL_KEEP_SIZE,
    "punch_hole|keep_size": FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
    "zero_range": FALLOC_FL_ZERO_RANGE,
    "zero_range|keep_size": FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
}
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                            ctypes.c_char_p, ctypes.c_uint]
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
AT_FDCWD = -100


def fallocate(fd, mode, offset, length):
    if _libc.fallocate(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def renameat2(src, dst, flags):
    if _libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), src, None, dst)


# --- data: (kind, size, seed) -> bytes, deterministic ----------------------

WORDS = ("the of and to in is densefs chunk slot extent inode rename xattr "
         "compress zstd brotli lepton hole sparse write read fsync mount "
         "lorem ipsum dolor sit amet 0123456789 {} [] () ; : , .").split()


@functools.lru_cache(maxsize=64)
def make_data(kind, size, sd):
    rnd = random.Random(f"{kind}/{size}/{sd}")
    if kind == "zeros":
        return bytes(size)
    if kind == "random":
        return rnd.randbytes(size)
    if kind == "text":
        # A few KiB of text lines repeated with a counter: compresses well,
        # and content-defined chunks find the repeats.
        block = "\n".join(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 14)))
                          for _ in range(100)).encode() + b"\n"
        out = bytearray()
        n = 0
        while len(out) < size:
            out += b"%d: " % n + block
            n += 1
        return bytes(out[:size])
    # mixed: text and random pieces of 1-64 KiB, and now and then zeros
    out = bytearray()
    while len(out) < size:
        n = rnd.randint(1, 64 * 1024)
        piece = rnd.random()
        if piece < 0.45:
            out += make_data("text", n, rnd.randrange(1 << 30))
        elif piece < 0.9:
            out += rnd.randbytes(n)
        else:
            out += bytes(n)
    return bytes(out[:size])


contents = st.tuples(
    st.sampled_from(["text", "random", "mixed", "zeros"]),
    st.one_of(
        st.integers(0, 4096), st.integers(0, 4096), st.integers(0, 4096),
        st.integers(0, 150_000), st.integers(0, 150_000),
        st.integers(0, 5 * MIB),
    ),
    st.integers(0, 3),
)
# Offsets: small ones, and now and then close to a 4 MiB slot edge, past
# EOF (holes) most of the time.
offsets = st.one_of(
    st.integers(0, 70_000),
    st.integers(0, 70_000),
    st.builds(lambda k, d: max(0, k * SLOT + d), st.integers(1, 2), st.integers(-5000, 5000)),
)
sizes = st.one_of(st.integers(0, 70_000), offsets, st.integers(0, 9 * MIB))
# Half of the draws at the top level, where most names exist.
paths = st.one_of(st.sampled_from(TOP), st.sampled_from(PATHS))
slots = st.integers(0, 2)
# Which densefs mount a path operation runs on: 0 alone, or 0 and 1 with
# --mnt2 (two writers of one volume). Deferred: CFG is read in main().
mounts = st.deferred(lambda: st.integers(0, len(MOUNTS) - 1))


# --- outcomes ---------------------------------------------------------------

class Mismatch(AssertionError):
    pass


def outcome(fn):
    """("ok", value) or ("err", errno name)."""
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, str(e.errno)))


def short(v):
    if isinstance(v, (bytes, bytearray)) and len(v) > 64:
        return f"<{len(v)} bytes, crc32 {zlib.crc32(v):08x}>"
    if isinstance(v, tuple):
        return tuple(short(x) for x in v)
    return v


def first_difference(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if a[j] != b[j]:
                    return j
    return n


def norm_time(ns):
    return ns if ns in PINNED_NS else "recent"


CFG = None  # argparse namespace, set by main()
TIMES = {}  # rule -> seconds spent on densefs, printed at the end
TALLY = {}  # "rule:ok" or "rule:ERRNO" -> count, printed at the end
STATS = {"examples": 0, "steps": 0, "remounts": 0, "full_checks": 0, "hand_overs": 0,
         "settle_max": 0.0}
MOUNT_NAMES = ["A", "B"]


class DensefsMount:
    def __init__(self, cfg, store, mnt, mount_args):
        self.cfg = cfg
        self.store = store  # a store directory, or a volume's URI
        self.mnt = mnt
        self.mount_args = mount_args

    def mount(self):
        cmd = [self.cfg.densefs, "mount", self.store, self.mnt] + self.mount_args
        subprocess.run(cmd, check=True)
        if not os.path.ismount(self.mnt):
            raise AssertionError(f"{' '.join(cmd)} returned but {self.mnt} is not mounted")

    def umount(self):
        # The test holds nothing open here, but another process may, for a
        # moment (seen: a stress-ng run elsewhere on the machine showed up in
        # `fuser -m` of this mount): retry EBUSY for a while, and say who.
        cmd = [self.cfg.densefs, "umount", self.mnt]
        deadline = time.monotonic() + 20
        while True:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode == 0 or "busy" not in r.stderr or time.monotonic() > deadline:
                break
            who = "(fuser not installed)"
            if shutil.which("fuser"):
                r2 = subprocess.run(["fuser", "-vm", self.mnt], capture_output=True,
                                    text=True)
                who = (r2.stdout + r2.stderr).strip()[-400:]
            print(f"umount: busy, retrying; fuser -vm: {who}", flush=True)
            time.sleep(0.2)
        if r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        if os.path.ismount(self.mnt):
            raise AssertionError(f"{self.mnt} is still mounted after densefs umount")

    def fsck(self):
        r = subprocess.run([self.cfg.densefs, "fsck", self.store],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Mismatch(f"densefs fsck {self.store} is not clean "
                           f"(exit {r.returncode}):\n{r.stdout}{r.stderr}")


MOUNTS = []  # DensefsMount: the first, and with --mnt2 the second writer


def clear_dir(root):
    for name in os.listdir(root):
        p = os.path.join(root, name)
        if os.path.isdir(p) and not os.path.islink(p):
            # Directories made read-only by chmod still go: we are root.
            shutil.rmtree(p)
        else:
            os.unlink(p)


class DifferentialFS(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        STATS["examples"] += 1
        self.cur = 0  # the densefs mount the last step ran on
        for r in (CFG.mnt, CFG.ref):
            clear_dir(r)
        # slot -> [fd on densefs, fd on the plain dir, description, mount]
        self.handles = {}
        self.steps = 0
        self.since_remount = 0
        self.failed = False  # teardown then only cleans up: the first error is the one to see

    # -- helpers --

    def root(self, side):
        return MOUNTS[self.cur].mnt if side == 0 else CFG.ref

    def p(self, side, path):
        return os.path.join(self.root(side), path)

    def both(self, what, fn, on=0):
        """Runs fn(side) on densefs (0: mount `on`) and the plain directory
        (1); the outcomes must be equal. Returns them."""
        self.use(on)
        if len(MOUNTS) > 1:
            what += f" on {MOUNT_NAMES[on]}"
        self.count_step()
        t0 = time.monotonic()
        a = outcome(lambda: fn(0))
        t1 = time.monotonic()
        b = outcome(lambda: fn(1))
        name = what.split("(")[0]
        TIMES[name] = TIMES.get(name, 0.0) + t1 - t0
        if a != b:
            self.fail(f"{what}: densefs gave {short(a)}, the plain directory {short(b)}")
        key = what.split("(")[0] + ":" + (a[0] if a[0] == "ok" else a[1])
        TALLY[key] = TALLY.get(key, 0) + 1
        return a, b

    def pick(self, slot):
        """The slot if it is open, else the lowest open one (the handle rules
        run only while some handle is open, so no step is wasted)."""
        return slot if slot in self.handles else min(self.handles)

    def on(self, slot):
        """The densefs mount a handle was opened on."""
        return self.handles[slot][3]

    # -- two writers (--mnt2) --
    #
    # Each path operation runs on one of two mounts of the volume (`on`),
    # and each handle operation on the mount its handle was opened on. Two
    # clients are not one kernel: what one changes reaches the other when
    # it is committed and the other has heard of it (close-to-open, not
    # linearizable). So a step on the other mount than the last one is a
    # hand-over, as two processes would do it: the last mount's handles are
    # fsync'd (what close would commit), and the next mount is polled until
    # its view of every path and of its own handles (view), then the files'
    # bytes and xattrs (file_contents), are the model's (the plain
    # directory's) before the step runs. What never settles fails the test
    # after --settle-seconds.

    def use(self, on):
        if on == self.cur:
            return
        for slot, fds in sorted(self.handles.items()):
            if fds[3] == self.cur:
                r = outcome(lambda: os.fsync(fds[0]))
                if r[0] != "ok":
                    self.fail(f"hand-over from {MOUNT_NAMES[self.cur]}: fsync(slot {slot}, "
                              f"{fds[2]}) gave {r}")
        self.cur = on
        STATS["hand_overs"] += 1
        self.settle(f"hand-over to {MOUNT_NAMES[on]}")

    def view(self, side):
        """What a hand-over waits for: the lstat of every path, symlink
        targets, directory listings and the fstat of the current mount's
        handles. Nothing here opens a file: an open re-reads the file's
        record (close-to-open), so polling with opens would hide a missing
        change notice."""
        out = {}
        for path in [""] + PATHS:
            p = self.p(side, path)
            s = outcome(lambda: os.lstat(p))
            if path:
                out[path] = s if s[0] == "err" else self.stat_tuple(s[1])
            if s[0] == "err":
                continue
            if stat.S_ISLNK(s[1].st_mode):
                out[path + " target"] = outcome(lambda: os.readlink(p))
            elif stat.S_ISDIR(s[1].st_mode):
                out[path + "/ lists"] = outcome(lambda: sorted(os.listdir(p)))
        for slot, fds in sorted(self.handles.items()):
            if fds[3] == self.cur:
                out[f"slot {slot}"] = outcome(lambda: self.stat_tuple(os.fstat(fds[side])))
        return out

    def file_contents(self, side):
        """The bytes of every regular file (through an open: close-to-open)
        and every path's xattrs. Polled only once the view has settled."""
        out = {}
        for path in PATHS:
            p = self.p(side, path)
            s = outcome(lambda: os.lstat(p))
            if s[0] == "err":
                continue
            if stat.S_ISREG(s[1].st_mode):
                def read():
                    with open(p, "rb") as f:
                        return zlib.crc32(f.read())
                out[path + " bytes"] = outcome(read)
            out[path + " xattrs"] = outcome(
                lambda: {n: os.getxattr(p, n, follow_symlinks=False)
                         for n in sorted(os.listxattr(p, follow_symlinks=False))})
        return out

    def settle(self, when):
        """Polls the view until it is the plain directory's, then the
        contents, each within --settle-seconds."""
        t0 = time.monotonic()
        for what, look in (("attributes", self.view), ("contents", self.file_contents)):
            want = look(1)
            while True:
                got = look(0)
                if got == want:
                    break
                if time.monotonic() - t0 > CFG.settle_seconds:
                    self.fail(f"{when}: the {what} on {MOUNT_NAMES[self.cur]} still differ from "
                              f"the plain directory after {CFG.settle_seconds}s (densefs, plain): "
                              f"{self.differences(got, want)}")
                time.sleep(0.02)
        waited = time.monotonic() - t0
        TIMES["settle"] = TIMES.get("settle", 0.0) + waited
        STATS["settle_max"] = max(STATS["settle_max"], waited)

    @staticmethod
    def differences(got, want):
        return {k: (short(got.get(k)), short(want.get(k))) for k in sorted(set(got) | set(want))
                if got.get(k) != want.get(k)}

    def inject(self, side, slot, offset):
        """--inject-fault: a write past EOF on densefs also puts a byte in
        the hole before it, as a bug would. Shows that the test catches and
        shrinks such a bug (run by hand, docs/testing.md)."""
        fd = self.handles[slot][side]
        if CFG.inject_fault and side == 0 and offset > os.fstat(fd).st_size + 1:
            os.pwrite(fd, b"\x01", offset - 1)

    def count_step(self):
        STATS["steps"] += 1
        self.steps += 1
        self.since_remount += 1

    def fail(self, msg):
        self.failed = True
        raise Mismatch(msg)

    def close_all(self):
        for slot in list(self.handles):
            self._close(slot)

    def _close(self, slot):
        fds = self.handles.pop(slot, None)
        if fds is None:
            return
        a = outcome(lambda: os.close(fds[0]))
        b = outcome(lambda: os.close(fds[1]))
        if a != b:
            self.fail(f"close of slot {slot} ({fds[2]}): densefs {a}, plain {b}")

    def stat_view(self, side, path):
        st_ = os.lstat(self.p(side, path))
        return self.stat_tuple(st_)

    @staticmethod
    def stat_tuple(s):
        size = None if stat.S_ISDIR(s.st_mode) else s.st_size
        return (stat.filemode(s.st_mode), oct(s.st_mode), s.st_nlink, s.st_uid, s.st_gid, size,
                norm_time(s.st_mtime_ns))

    @initialize()
    def populate(self):
        """Every example starts from a small tree, so that most operations
        meet something: a text file with an xattr, a file across the first
        4 MiB slot edge with a hard link, a setgid directory, symlinks to a
        file and to a directory."""
        self.write_file("a", 0, ("text", 10_000, 0))
        self.setxattr("a", "user.a", b"v", 0, True)
        self.write_file("b", SLOT - 50_000, ("random", 100_000, 0))
        self.mkdir("c", 0o2755)
        self.mkdir("c/x", 0o755)
        self.link("b", "c/x/z")
        self.symlink("../a", "c/y")
        self.mkdir("d", 0o755)
        self.write_file("d/x", 0, ("mixed", 50_000, 0))
        self.symlink("../c", "d/y")
        # Three handles open from the start, so the handle rules (and
        # writes to a file unlinked while open) have something to work on.
        self.open(0, "a", "rdwr", 0o644)
        self.open(1, "b", "rdwr", 0o644)
        self.open(2, "d/x", "wronly|append|creat", 0o644)

    # -- handles --

    @rule(slot=slots, path=paths, flags=st.sampled_from(list(OPEN_FLAGS)),
          mode=st.sampled_from(FILE_MODES), on=mounts)
    def open(self, slot, path, flags, mode, on=0):
        self._close(slot)
        fds = [None, None]

        def do(side):
            fds[side] = os.open(self.p(side, path), OPEN_FLAGS[flags], mode)

        try:
            a, _ = self.both(f"open({path!r}, {flags}, {oct(mode)})", do, on)
        except Mismatch:
            for fd in fds:  # a leaked fd would keep the mount busy
                if fd is not None:
                    os.close(fd)
            raise
        if a[0] == "ok":
            self.handles[slot] = [fds[0], fds[1], f"{path} {flags}", on]

    @precondition(lambda self: self.handles)
    @rule(slot=slots)
    def close(self, slot):
        self.count_step()
        self._close(self.pick(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, content=contents)
    def write(self, slot, content):
        slot = self.pick(slot)
        data = make_data(*content)
        self.both(f"write(slot {slot}, {content})",
                  lambda s: os.write(self.handles[slot][s], data),
                  self.on(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, offset=offsets, content=contents)
    def pwrite(self, slot, offset, content):
        slot = self.pick(slot)
        data = make_data(*content)
        self.both(f"pwrite(slot {slot}, {offset}, {content})",
                  lambda s: self.inject(s, slot, offset) or
                  os.pwrite(self.handles[slot][s], data, offset),
                  self.on(slot))

    # The data path gets a second pwrite rule (hypothesis picks rules
    # evenly, and tries examples with some rules switched off): writes near
    # a 4 MiB slot edge, mostly past EOF, so with a hole before them.
    @precondition(lambda self: self.handles)
    @rule(slot=slots, k=st.integers(1, 2), delta=st.integers(-70_000, 70_000), content=contents)
    def pwrite_slot_edge(self, slot, k, delta, content):
        slot = self.pick(slot)
        data = make_data(*content)
        offset = max(0, k * SLOT + delta)
        self.both(f"pwrite_slot_edge(slot {slot}, {offset}, {content})",
                  lambda s: self.inject(s, slot, offset) or
                  os.pwrite(self.handles[slot][s], data, offset),
                  self.on(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, mode=st.sampled_from(list(FALLOC_MODES)), offset=offsets,
          length=st.integers(1, 300_000))
    def fallocate(self, slot, mode, offset, length):
        slot = self.pick(slot)
        self.both(f"fallocate(slot {slot}, {mode}, {offset}, {length})",
                  lambda s: fallocate(self.handles[slot][s], FALLOC_MODES[mode], offset, length),
                  self.on(slot))

    # copy_file_range: densefs shares whole 4 MiB slots at aligned offsets
    # instead of copying (docs/design.md), so aligned offsets and lengths
    # are drawn often.
    @precondition(lambda self: self.handles)
    @rule(src=slots, dst=slots,
          src_off=st.one_of(st.sampled_from([0, SLOT, 2 * SLOT]), offsets),
          dst_off=st.one_of(st.sampled_from([0, SLOT, 2 * SLOT]), offsets),
          length=st.one_of(st.sampled_from([SLOT, 2 * SLOT, 3 * SLOT]), st.integers(0, 9 * MIB)))
    def copy_file_range(self, src, dst, src_off, dst_off, length):
        src, dst = self.pick(src), self.pick(dst)
        if self.on(src) != self.on(dst):
            # From one writer's handle to the other's (the kernel splices
            # between two mounts): both must show the model first. The
            # destination's mount, which writes, is the current one after.
            self.use(self.on(dst))
            self.use(self.on(src))
            self.cur = self.on(dst)
        self.both(f"copy_file_range(slot {src} at {src_off} -> slot {dst} at {dst_off}, {length})",
                  lambda s: os.copy_file_range(self.handles[src][s], self.handles[dst][s],
                                               length, src_off, dst_off),
                  self.on(dst))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, offset=offsets, size=st.integers(0, 6 * MIB))
    def pread(self, slot, offset, size):
        slot = self.pick(slot)
        self.both(f"pread(slot {slot}, {offset}, {size})",
                         lambda s: os.pread(self.handles[slot][s], size, offset),
                  self.on(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, size=sizes)
    def ftruncate(self, slot, size):
        slot = self.pick(slot)
        self.both(f"ftruncate(slot {slot}, {size})",
                  lambda s: os.ftruncate(self.handles[slot][s], size),
                  self.on(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots)
    def fsync(self, slot):
        slot = self.pick(slot)
        self.both(f"fsync(slot {slot})", lambda s: os.fsync(self.handles[slot][s]),
                  self.on(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, mode=st.sampled_from(FILE_MODES))
    def fchmod(self, slot, mode):
        slot = self.pick(slot)
        self.both(f"fchmod(slot {slot}, {oct(mode)})",
                  lambda s: os.chmod(self.handles[slot][s], mode),
                  self.on(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, name=st.sampled_from(XATTR_NAMES), value=st.sampled_from(XATTR_VALUES))
    def fsetxattr(self, slot, name, value):
        slot = self.pick(slot)
        self.both(f"fsetxattr(slot {slot}, {name!r}, {short(value)})",
                  lambda s: os.setxattr(self.handles[slot][s], name, value),
                  self.on(slot))

    @precondition(lambda self: self.handles)
    @rule(slot=slots, name=st.sampled_from(XATTR_NAMES))
    def fgetxattr(self, slot, name):
        slot = self.pick(slot)
        self.both(f"fgetxattr(slot {slot}, {name!r})",
                  lambda s: os.getxattr(self.handles[slot][s], name),
                  self.on(slot))

    # -- paths --

    @rule(path=paths, offset=offsets, content=contents, on=mounts)
    def write_file(self, path, offset, content, on=0):
        """open(O_WRONLY|O_CREAT), pwrite, close: data without a handle."""
        data = make_data(*content)

        def do(side):
            fd = os.open(self.p(side, path), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                return os.pwrite(fd, data, offset)
            finally:
                os.close(fd)

        self.both(f"write_file({path!r}, {offset}, {content})", do, on)

    @rule(path=paths, on=mounts)
    def read_file(self, path, on=0):
        def do(side):
            with open(self.p(side, path), "rb") as f:
                return f.read()

        self.both(f"read_file({path!r})", do, on)

    @rule(path=paths, size=sizes, on=mounts)
    def truncate(self, path, size, on=0):
        self.both(f"truncate({path!r}, {size})", lambda s: os.truncate(self.p(s, path), size), on)

    @rule(path=paths, on=mounts)
    def unlink(self, path, on=0):
        self.both(f"unlink({path!r})", lambda s: os.unlink(self.p(s, path)), on)

    @rule(path=paths, mode=st.sampled_from(DIR_MODES), on=mounts)
    def mkdir(self, path, mode, on=0):
        self.both(f"mkdir({path!r}, {oct(mode)})", lambda s: os.mkdir(self.p(s, path), mode), on)

    @rule(path=paths, on=mounts)
    def rmdir(self, path, on=0):
        self.both(f"rmdir({path!r})", lambda s: os.rmdir(self.p(s, path)), on)

    @rule(src=paths, dst=paths, flags=st.sampled_from([0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE]),
          on=mounts)
    def rename(self, src, dst, flags, on=0):
        self.both(f"renameat2({src!r}, {dst!r}, {flags})",
                  lambda s: renameat2(self.p(s, src), self.p(s, dst), flags), on)

    @rule(src=paths, dst=paths, on=mounts)
    def link(self, src, dst, on=0):
        self.both(f"link({src!r}, {dst!r})",
                  lambda s: os.link(self.p(s, src), self.p(s, dst), follow_symlinks=False), on)

    @rule(link_target=st.sampled_from(list(SYMLINK_TARGETS)), path=paths, on=mounts)
    def symlink(self, link_target, path, on=0):
        self.both(f"symlink({link_target!r}, {path!r})",
                  lambda s: os.symlink(SYMLINK_TARGETS[link_target], self.p(s, path)), on)

    @rule(path=paths, on=mounts)
    def readlink(self, path, on=0):
        self.both(f"readlink({path!r})", lambda s: os.readlink(self.p(s, path)), on)

    @rule(path=paths, mode=st.sampled_from(FILE_MODES + DIR_MODES), on=mounts)
    def chmod(self, path, mode, on=0):
        self.both(f"chmod({path!r}, {oct(mode)})", lambda s: os.chmod(self.p(s, path), mode), on)

    @rule(path=paths, times=st.one_of(st.none(), st.tuples(st.sampled_from(PINNED_NS),
                                                            st.sampled_from(PINNED_NS))),
          follow=st.booleans(), on=mounts)
    def utime(self, path, times, follow, on=0):
        def do(side):
            p = self.p(side, path)
            if times is None:
                os.utime(p, follow_symlinks=follow)
            else:
                os.utime(p, ns=times, follow_symlinks=follow)
            s = os.stat(p, follow_symlinks=follow)
            # atime only here: reads later move it on ext4 (relatime), never
            # on densefs (noatime by design).
            return (norm_time(s.st_atime_ns), norm_time(s.st_mtime_ns))

        self.both(f"utime({path!r}, {times}, follow={follow})", do, on)

    @rule(path=paths, name=st.sampled_from(XATTR_NAMES), value=st.sampled_from(XATTR_VALUES),
          flags=st.sampled_from([0, os.XATTR_CREATE, os.XATTR_REPLACE]), follow=st.booleans(), on=mounts)
    def setxattr(self, path, name, value, flags, follow, on=0):
        self.both(f"setxattr({path!r}, {name!r}, {short(value)}, {flags}, follow={follow})",
                  lambda s: os.setxattr(self.p(s, path), name, value, flags,
                                        follow_symlinks=follow), on)

    @rule(path=paths, name=st.sampled_from(XATTR_NAMES), follow=st.booleans(), on=mounts)
    def getxattr(self, path, name, follow, on=0):
        self.both(f"getxattr({path!r}, {name!r}, follow={follow})",
                  lambda s: os.getxattr(self.p(s, path), name, follow_symlinks=follow), on)

    @rule(path=paths, name=st.sampled_from(XATTR_NAMES), follow=st.booleans(), on=mounts)
    def removexattr(self, path, name, follow, on=0):
        self.both(f"removexattr({path!r}, {name!r}, follow={follow})",
                  lambda s: os.removexattr(self.p(s, path), name, follow_symlinks=follow), on)

    @rule(path=paths, follow=st.booleans(), on=mounts)
    def listxattr(self, path, follow, on=0):
        self.both(f"listxattr({path!r}, follow={follow})",
                  lambda s: sorted(os.listxattr(self.p(s, path), follow_symlinks=follow)), on)

    @precondition(lambda self: self.since_remount >= CFG.remount_every)
    @rule()
    def remount(self):
        """Unmounts and mounts again the mount of the last step (with two
        writers, the other stays mounted)."""
        self.close_all()
        self.full_compare("before remount")
        inos = self.mnt_inodes()
        t0 = time.monotonic()
        MOUNTS[self.cur].umount()
        MOUNTS[self.cur].mount()
        TIMES["remount"] = TIMES.get("remount", 0.0) + time.monotonic() - t0
        STATS["remounts"] += 1
        self.since_remount = 0
        self.full_compare("after remount")
        after = self.mnt_inodes()
        if inos != after:
            changed = {p: (inos.get(p), after.get(p)) for p in set(inos) | set(after)
                       if inos.get(p) != after.get(p)}
            self.fail(f"inode numbers changed across the remount: {changed}")

    # -- invariants --

    # The invariants look at the mount of the last step: the other one
    # settles at the next hand-over to it.

    @invariant()
    def paths_match(self):
        """Every path of the universe: same lstat view (or same errno)."""
        for path in PATHS:
            a = outcome(lambda: self.stat_view(0, path))
            b = outcome(lambda: self.stat_view(1, path))
            if a != b:
                self.fail(f"lstat({path!r}): densefs {a}, plain directory {b}")

    @invariant()
    def handles_match(self):
        for slot, fds in self.handles.items():
            if fds[3] != self.cur:
                continue
            a = outcome(lambda: self.stat_tuple(os.fstat(fds[0])))
            b = outcome(lambda: self.stat_tuple(os.fstat(fds[1])))
            if a != b:
                self.fail(f"fstat(slot {slot}, {fds[2]}): densefs {a}, plain directory {b}")

    @invariant()
    def trees_match_now_and_then(self):
        if self.steps > 0 and self.steps % CFG.full_every == 0:
            self.full_compare(f"after step {self.steps}")

    def compare_every_mount(self, when):
        """The whole tree on every mount (each settled first); the inode
        numbers, which must be the same on every mount."""
        inos = None
        for on in [self.cur] + [m for m in range(len(MOUNTS)) if m != self.cur]:
            self.use(on)
            self.full_compare(f"{when}, on {MOUNT_NAMES[on]}")
            mine = self.mnt_inodes()
            if inos is not None and mine != inos:
                differ = {p: (inos.get(p), mine.get(p)) for p in set(inos) | set(mine)
                          if inos.get(p) != mine.get(p)}
                self.fail(f"{when}: inode numbers differ between the mounts: {differ}")
            inos = mine
        return inos

    def teardown(self):
        """Every handle closed, the trees compared, every mount unmounted,
        `densefs fsck`, mounted again and compared again."""
        try:
            self.close_all()
            if self.failed:
                return
            inos = self.compare_every_mount("at teardown")
            t0 = time.monotonic()
            for m in MOUNTS:
                m.umount()
            MOUNTS[0].fsck()
            for m in MOUNTS:
                m.mount()
            TIMES["teardown remount"] = TIMES.get("teardown remount", 0.0) + time.monotonic() - t0
            STATS["remounts"] += 1
            if inos != self.compare_every_mount("after the teardown remount"):
                self.fail("inode numbers changed across the teardown remount")
        finally:
            for m in MOUNTS:
                if not os.path.ismount(m.mnt):
                    m.mount()

    # -- whole-tree comparison --

    def mnt_inodes(self):
        out = {}
        for rel, _ in self.walk(0):
            out[rel] = os.lstat(self.p(0, rel)).st_ino
        return out

    def walk(self, side):
        """(relative path, lstat) of every entry below the root, sorted."""
        root = self.root(side)
        out = []
        stack = [""]
        while stack:
            d = stack.pop()
            for name in sorted(os.listdir(os.path.join(root, d))):
                rel = os.path.join(d, name)
                s = os.lstat(os.path.join(root, rel))
                out.append((rel, s))
                if stat.S_ISDIR(s.st_mode):
                    stack.append(rel)
        return sorted(out, key=lambda e: e[0])

    def full_compare(self, when):
        t0 = time.monotonic()
        try:
            self._full_compare(when)
        finally:
            TIMES["full_compare"] = TIMES.get("full_compare", 0.0) + time.monotonic() - t0

    def _full_compare(self, when):
        STATS["full_checks"] += 1
        ta, tb = self.walk(0), self.walk(1)
        na, nb = [r for r, _ in ta], [r for r, _ in tb]
        if na != nb:
            self.fail(f"{when}: the trees differ in names: only on densefs "
                           f"{sorted(set(na) - set(nb))}, only in the plain directory "
                           f"{sorted(set(nb) - set(na))}")
        groups_a, groups_b = {}, {}
        for (rel, sa), (_, sb) in zip(ta, tb):
            va, vb = self.stat_tuple(sa), self.stat_tuple(sb)
            if va != vb:
                self.fail(f"{when}: {rel}: densefs {va}, plain directory {vb}")
            groups_a.setdefault(sa.st_ino, []).append(rel)
            groups_b.setdefault(sb.st_ino, []).append(rel)
            pa, pb = self.p(0, rel), self.p(1, rel)
            xa = outcome(lambda: {n: os.getxattr(pa, n, follow_symlinks=False)
                                  for n in os.listxattr(pa, follow_symlinks=False)})
            xb = outcome(lambda: {n: os.getxattr(pb, n, follow_symlinks=False)
                                  for n in os.listxattr(pb, follow_symlinks=False)})
            if xa != xb:
                self.fail(f"{when}: {rel}: xattrs on densefs {short(xa)}, "
                               f"plain directory {short(xb)}")
            if stat.S_ISLNK(sa.st_mode):
                la, lb = os.readlink(pa), os.readlink(pb)
                if la != lb:
                    self.fail(f"{when}: {rel}: symlink target {la!r} on densefs, {lb!r}")
            elif stat.S_ISREG(sa.st_mode):
                with open(pa, "rb") as fa, open(pb, "rb") as fb:
                    da, db = fa.read(), fb.read()
                if da != db:
                    self.fail(f"{when}: {rel}: bytes differ ({len(da)} on densefs, "
                                   f"{len(db)} in the plain directory), first at offset "
                                   f"{first_difference(da, db)}")
        ga = sorted(sorted(g) for g in groups_a.values())
        gb = sorted(sorted(g) for g in groups_b.values())
        if ga != gb:
            self.fail(f"{when}: hard-link groups differ: densefs {ga}, plain directory {gb}")


def main():
    global CFG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--densefs", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--mnt", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--work", required=True, help="hypothesis keeps its database here")
    ap.add_argument("--examples", type=int, default=70)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full-every", type=int, default=15)
    ap.add_argument("--remount-every", type=int, default=12)
    ap.add_argument("--label", default="default")
    ap.add_argument("--mnt2", help="a second writer's mount of the same volume (-o shared)")
    ap.add_argument("--store2", help="what mounts the second writer: the volume's URI")
    ap.add_argument("--cache-dir2", help="the second writer's client directory")
    ap.add_argument("--settle-seconds", type=float, default=10.0,
                    help="how long a mount may take to show the other writer's changes")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--inject-fault", action="store_true",
                    help="make writes past EOF on densefs corrupt the hole: the test must fail")
    ap.add_argument("mount_args", nargs="*", help="densefs mount arguments, after --")
    CFG = ap.parse_args()
    MOUNTS.append(DensefsMount(CFG, CFG.store, CFG.mnt, CFG.mount_args))
    if CFG.mnt2:
        if not CFG.store2 or not CFG.cache_dir2:
            ap.error("--mnt2 needs --store2 and --cache-dir2")
        MOUNTS.append(DensefsMount(CFG, CFG.store2, CFG.mnt2,
                                   CFG.mount_args + ["-o", f"cache_dir={CFG.cache_dir2}"]))
    os.umask(0o022)

    s = settings(
        max_examples=CFG.examples,
        stateful_step_count=CFG.steps,
        deadline=None,
        database=DirectoryBasedExampleDatabase(os.path.join(CFG.work, "hypothesis-db")),
        suppress_health_check=list(HealthCheck),
        print_blob=True,
        report_multiple_bugs=False,
        verbosity=Verbosity.verbose if CFG.verbose else Verbosity.normal,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink,
                Phase.explain],
    )
    test = seed(CFG.seed)(get_state_machine_test(DifferentialFS, settings=s))
    print(f"differential[{CFG.label}]: seed {CFG.seed}, {CFG.examples} examples of up to "
          f"{CFG.steps} steps, mount args {CFG.mount_args}", flush=True)
    t0 = time.monotonic()
    failures = 0
    try:
        test()
    except Exception:  # the shrunk program and the error are printed by hypothesis
        failures = 1
        traceback.print_exc()
        print(f"differential[{CFG.label}]: FAILED; reproduce with the seed above "
              f"(DENSEFS_HYPO_SEED={CFG.seed}) or the @reproduce_failure blob", flush=True)
    print(f"differential[{CFG.label}]: {STATS['examples']} examples, {STATS['steps']} steps, "
          f"{STATS['remounts']} remounts, {STATS['full_checks']} full tree checks, "
          + (f"{STATS['hand_overs']} hand-overs between the writers (the longest wait "
             f"{STATS['settle_max']:.2f}s), " if len(MOUNTS) > 1 else "")
          + f"{time.monotonic() - t0:.1f}s", flush=True)
    print(f"differential[{CFG.label}]: outcomes: "
          + ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items())), flush=True)
    print(f"differential[{CFG.label}]: seconds on densefs per call: "
          + ", ".join(f"{k} {v:.1f}" for k, v in sorted(TIMES.items(), key=lambda kv: -kv[1])),
          flush=True)
    print(f"RESULT examples={STATS['examples']} steps={STATS['steps']} failures={failures}",
          flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
