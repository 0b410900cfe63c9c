#!/usr/bin/env python3
"""One step of tests/bench/scale.sh on one directory, timed inside (the same
Python loop for every target): prints "STEP SECONDS ENTRIES".

  scale_files.py create ROOT N   N empty files: N/2 in directories of 1,000
                                 (ROOT/d/NNNN/fNNN) and N/2 in one directory
                                 (ROOT/big/fNNNNNNN)
  scale_files.py list ROOT       the names of ROOT/big (os.scandir, no stat)
  scale_files.py walk ROOT       every entry under ROOT, with an lstat each
  scale_files.py remove ROOT     rm -rf ROOT (the program, as users run it)
"""
import os
import subprocess
import sys
import time


def create(root, n):
    per_dir = 1000
    spread = n // 2
    os.makedirs(os.path.join(root, "big"))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for d in range((spread + per_dir - 1) // per_dir):
        sub = os.path.join(root, "d", f"{d:04d}")
        os.makedirs(sub)
        for i in range(min(per_dir, spread - d * per_dir)):
            os.close(os.open(os.path.join(sub, f"f{i:03d}"), flags, 0o644))
    big = os.path.join(root, "big")
    for i in range(n - spread):
        os.close(os.open(os.path.join(big, f"f{i:07d}"), flags, 0o644))
    return n


def list_big(root):
    with os.scandir(os.path.join(root, "big")) as it:
        return sum(1 for _ in it)


def walk(root):
    count = 0
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lstat(os.path.join(top, name))
            count += 1
    return count


def main():
    step, root = sys.argv[1], sys.argv[2]
    start = time.monotonic()
    if step == "create":
        entries = create(root, int(sys.argv[3]))
    elif step == "list":
        entries = list_big(root)
    elif step == "walk":
        entries = walk(root)
    elif step == "remove":
        subprocess.run(["rm", "-rf", root], check=True)
        entries = 0
    else:
        sys.exit(f"unknown step {step}")
    print(f"{step} {time.monotonic() - start:.3f} {entries}")


if __name__ == "__main__":
    main()
