#!/usr/bin/env python3
"""One flipped byte at many random offsets of a store's pack files, one at a
time (issue 38's "1,000 offsets" target; docs/testing.md, "Nothing lost").

For each offset, on a fresh copy of one prepared store:
  1. flip the byte (XOR 0x01);
  2. `densefs fsck --json`: which files it names (by path);
  3. mount, read every file: each must be exact or fail with EIO, never
     other bytes; the files that fail must be the ones fsck named;
  4. copy each failing file in again from its source (a re-copy) and read
     every file again: all exact;
  5. unmount; `densefs fsck` is clean.
Prints one line per trial that breaks a rule and a summary (--json for the
counts). Slow (a mount per trial): not a CI test.

usage: damage_sweep.py DENSEFS_BINARY [--trials N] [--seed S] [--json]
"""
import argparse, json, os, random, shutil, subprocess, sys, tempfile, time


def run(*args, check=True, **kw):
    r = subprocess.run(list(args), capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def make_tree(root):
    """Text, random bytes, JPEGs, a file that shares chunks with another."""
    rnd = random.Random(7)
    os.makedirs(f"{root}/text", exist_ok=True)
    os.makedirs(f"{root}/bin/deep", exist_ok=True)
    for i in range(20):
        with open(f"{root}/text/t{i}.txt", "w") as f:
            for j in range(1500 * (i + 1)):
                f.write(f"line {j} of file {i}: {rnd.randrange(10**6)}\n")
    for i in range(10):
        with open(f"{root}/bin/deep/r{i}.bin", "wb") as f:
            f.write(rnd.randbytes(50_000 * (i + 1)))
    shutil.copy(f"{root}/bin/deep/r9.bin", f"{root}/bin/copy-of-r9.bin")
    corpus = os.path.join(os.path.dirname(__file__), "../../../shared/corpus/jpeg")
    if os.path.isdir(corpus):
        os.makedirs(f"{root}/jpeg", exist_ok=True)
        for name in sorted(os.listdir(corpus))[:4]:
            shutil.copy(os.path.join(corpus, name), f"{root}/jpeg/{name}")


def files_of(root):
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def read_all(mnt, tree, names):
    """{name: "exact" | "EIO" | "WRONG" | "errno N"}"""
    result = {}
    for n in names:
        try:
            with open(os.path.join(mnt, n), "rb") as f:
                got = f.read()
            with open(os.path.join(tree, n), "rb") as f:
                want = f.read()
            result[n] = "exact" if got == want else "WRONG"
        except OSError as e:
            result[n] = "EIO" if e.errno == 5 else f"errno {e.errno}"
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("densefs")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    densefs = os.path.abspath(a.densefs)
    work = tempfile.mkdtemp(prefix="densefs-sweep.", dir="/var/tmp")
    tree, base, trial, mnt = (f"{work}/{x}" for x in ("tree", "base", "trial", "mnt"))
    os.makedirs(mnt)
    make_tree(tree)
    names = files_of(tree)
    run(densefs, "mkfs", base)
    run(densefs, "mount", base, mnt)
    run("cp", "-a", f"{tree}/.", mnt)
    run(densefs, "umount", mnt)
    packs = []
    for d, _, ns in os.walk(f"{base}/packs"):
        for n in ns:
            p = os.path.join(d, n)
            packs.append((os.path.relpath(p, base), os.path.getsize(p)))
    total = sum(s for _, s in packs)
    rnd = random.Random(a.seed)
    counts = {"trials": 0, "fsck_named_files": 0, "no_damage_found": 0, "eio_files": 0,
              "wrong_bytes": 0, "eio_not_named": 0, "named_not_eio": 0, "healed": 0,
              "not_healed": 0, "fsck_unclean_after": 0, "mount_failed": 0, "other": 0}
    start = time.time()
    try:
        for t in range(a.trials):
            at = rnd.randrange(total)
            for rel, size in packs:
                if at < size:
                    break
                at -= size
            shutil.rmtree(trial, ignore_errors=True)
            run("cp", "-a", base, trial)
            with open(f"{trial}/{rel}", "r+b") as f:
                f.seek(at)
                b = f.read(1)
                f.seek(at)
                f.write(bytes([b[0] ^ 0x01]))
            counts["trials"] += 1
            where = f"trial {t}: {rel} offset {at}"
            fsck = run(densefs, "fsck", trial, "--json", check=False)
            named = set()
            try:
                report = json.loads(fsck.stdout)
                for kind in ("bad_payload", "bad_content", "dangling_extent"):
                    for ex in report.get("problems", {}).get(kind, {}).get("examples", []):
                        for n in names:
                            if f"/{n} (inode " in ex:
                                named.add(n)
            except json.JSONDecodeError:
                counts["other"] += 1
                print(f"{where}: fsck printed no JSON: {fsck.stderr.strip()[:200]}")
            counts["fsck_named_files"] += len(named)
            if not named:
                counts["no_damage_found"] += 1
            if run(densefs, "mount", trial, mnt, check=False).returncode != 0:
                counts["mount_failed"] += 1
                print(f"{where}: the mount failed")
                continue
            try:
                got = read_all(mnt, tree, names)
                eio = {n for n, r in got.items() if r == "EIO"}
                for n, r in got.items():
                    if r == "WRONG":
                        counts["wrong_bytes"] += 1
                        print(f"{where}: {n} read OTHER BYTES")
                    elif r not in ("exact", "EIO"):
                        counts["other"] += 1
                        print(f"{where}: {n}: {r}")
                counts["eio_files"] += len(eio)
                counts["eio_not_named"] += len(eio - named)
                counts["named_not_eio"] += len(named - eio)
                for n in sorted(eio - named):
                    print(f"{where}: {n} fails to read but fsck did not name it")
                for n in sorted(eio):  # a re-copy from the source
                    shutil.copyfile(os.path.join(tree, n), os.path.join(mnt, n))
                run(densefs, "sync", mnt)
                again = read_all(mnt, tree, names)
                bad = {n for n, r in again.items() if r != "exact"}
                if eio:
                    counts["healed" if not bad else "not_healed"] += 1
                for n in sorted(bad):
                    print(f"{where}: after a re-copy {n} reads {again[n]}")
            finally:
                run(densefs, "umount", mnt, check=False)
            after = run(densefs, "fsck", trial, check=False)
            if after.returncode != 0:
                counts["fsck_unclean_after"] += 1
                print(f"{where}: fsck after the re-copy: {after.stdout.strip()[-300:]}")
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    counts["seconds"] = round(time.time() - start)
    counts["files"] = len(names)
    counts["pack_bytes"] = total
    print(json.dumps(counts) if a.json else
          "\n".join(f"{k}: {v}" for k, v in counts.items()))
    return 1 if counts["wrong_bytes"] or counts["eio_not_named"] or counts["not_healed"] \
        or counts["fsck_unclean_after"] or counts["mount_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
