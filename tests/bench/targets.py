#!/usr/bin/env python3
"""Checks a `densefs bench --save-json` run against an issue's performance
targets (docs/bench.md). Not a test: speed belongs in the bench. Prints one
line per target: met / missed / not measured.

Usage: targets.py RUN.json [--set floor|peers|fast] [--baseline ext4] [--peer btrfs-zstd]
                  [--floor passthrough_hp] [--target densefs]

--set floor (default): the "small files at the cost of FUSE itself" issue,
every target a ratio in the same run, to ext4, to btrfs
compress-force=zstd:3, or to libfuse's passthrough_hp over ext4 (the
floor: every metadata row at most its time).
--set peers: the "faster than btrfs" issue before it, the same way.
--set fast: the earlier "fast" issue, whose targets are seconds measured when
it was planned next to ext4 on the same machine; each is checked as the ratio
to ext4 in the same run (planned densefs seconds over planned ext4 seconds),
and the absolute figure is printed beside it.
"""
import argparse
import json
import sys

# (workload, cache, procs, "baseline" or "peer", largest ratio)
PEER_TARGETS = [
    ("write-big", "", 1, "peer", 1.0),
    ("read-large", "cold", 1, "peer", 1.0),
    ("write-rsync", "", 1, "baseline", 2.0),
    ("write-cp", "", 1, "baseline", 1.5),
    ("walk", "warm", 1, "baseline", 1.25),
    ("walk", "warm", 2, "baseline", 1.25),
    ("walk", "warm", 4, "baseline", 1.25),
    ("read-small", "warm", 1, "baseline", 1.25),
    ("read-small", "warm", 2, "baseline", 1.25),
    ("read-small", "cold", 1, "peer", 1.0),
    ("read-small", "cold", 2, "peer", 1.0),
]
# The floor issue: (workload, cache, procs, "baseline", "peer" or "floor",
# largest ratio). The metadata rows (rsync, cp, tar, walks) against the
# floor as well as against ext4.
FLOOR_TARGETS = [
    ("write-rsync", "", 1, "baseline", 2.0),
    ("write-rsync", "", 1, "peer", 1.0),
    ("rsync-again", "", 1, "baseline", 1.25),
    ("rsync-1pct", "", 1, "baseline", 1.5),
    ("write-cp", "", 1, "baseline", 1.5),
    ("write-tar", "", 1, "baseline", 2.0),
    ("write-big", "", 1, "peer", 1.0),
    ("read-large", "cold", 1, "peer", 1.0),
    ("read-small", "warm", 1, "baseline", 1.5),
    ("read-small", "warm", 2, "baseline", 1.5),
    ("read-small", "cold", 1, "peer", 1.5),
    ("read-small", "cold", 2, "peer", 1.5),
] + [(w, c, p, "floor", 1.0) for w, c, p in [
    ("write-rsync", "", 1), ("rsync-again", "", 1), ("rsync-1pct", "", 1),
    ("write-cp", "", 1), ("write-tar", "", 1), ("walk", "warm", 1), ("walk", "warm", 2),
    ("walk", "warm", 4), ("walk", "cold", 1), ("walk", "cold", 4)]]

# "No worse than today": the stored shares of the run before the issue
# (docs/bench.md, "The targets"), with half a point of slack for the
# tree's drift between /usr/share copies.
PEER_SPACE_TARGETS = [("big.bin other", 0.333), ("tree (all)", 0.410), ("jpeg jpeg", 0.738)]

# (workload, cache, procs, planned ext4 s, planned densefs limit s)
TIME_TARGETS = [
    ("write-big", "", 1, 1.0, 2.5),
    ("read-large", "cold", 1, 1.2, 1.5),
    ("walk", "warm", 1, 0.40, 0.40 * 1.25),
    ("walk", "warm", 2, 0.73, 0.73 * 1.25),
    ("walk", "warm", 4, 1.22, 1.22 * 1.25),
    ("walk", "cold", 1, 1.5, 1.5 * 2),
    ("walk", "cold", 4, 1.7, 1.7 * 2),
    ("write-cp", "", 1, 4.2, 4.2 * 1.5),
    ("write-rsync", "", 1, 3.4, 3.4 * 1.5),
]
# space row -> largest stored share of the logical bytes
SPACE_TARGETS = [("big.bin other", 0.42), ("tree (all)", 0.40), ("jpeg jpeg", 0.78)]
LEPTON_SHARE = 0.9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--set", choices=("floor", "peers", "fast"), default="floor")
    ap.add_argument("--baseline", default="ext4")
    ap.add_argument("--peer", default="btrfs-zstd")
    ap.add_argument("--floor", default="passthrough_hp")
    ap.add_argument("--floor-run", help="a second run with the floor in it, for the floor rows "
                    "(where the floor could not serve the first run's input)")
    ap.add_argument("--target", default="densefs")
    a = ap.parse_args()
    with open(a.run) as f:
        j = json.load(f)
    cells = {(r["workload"], r["cache"], r["procs"], r["target"]): r for r in j["results"]}
    floor_cells = cells
    if a.floor_run:
        with open(a.floor_run) as f:
            floor_cells = {(r["workload"], r["cache"], r["procs"], r["target"]): r
                           for r in json.load(f)["results"]}
    met = missed = 0

    def say(ok, what, detail):
        nonlocal met, missed
        if ok is None:
            print(f"not measured  {what}: {detail}")
            return
        met += ok
        missed += not ok
        print(f"{'met   ' if ok else 'MISSED'}        {what}: {detail}")

    def complete(cell):
        return (cell and cell.get("available") and not cell.get("errors")
                and not cell.get("failed_workers"))

    if a.set in ("floor", "peers"):
        rows = FLOOR_TARGETS if a.set == "floor" else PEER_TARGETS
        against_label = {"baseline": a.baseline, "peer": a.peer, "floor": a.floor}
        for workload, cache, procs, against, limit in rows:
            other = against_label[against]
            what = f"{workload} {cache or '-'} {procs}p <= {limit:.2f}x {other}"
            run = floor_cells if against == "floor" else cells
            theirs = run.get((workload, cache, procs, other))
            ours = run.get((workload, cache, procs, a.target))
            if not complete(theirs) or not complete(ours):
                say(None, what, "no complete cells in this run")
                continue
            ratio = ours["wall_s"] / theirs["wall_s"]
            say(ratio <= limit, what,
                f"{ratio:.2f}x ({ours['wall_s']:.3f} s vs {theirs['wall_s']:.3f} s)")
        space = {(s["type"], s["target"]): s for s in j.get("space", [])}
        for row, share_limit in PEER_SPACE_TARGETS:
            what = f"stored size of {row} <= {share_limit:.1%} (no worse than before)"
            s = space.get((row, a.target))
            if not s or "densefs_stored_bytes" not in s or not s["logical_bytes"]:
                say(None, what, "no densefs stored figure")
                continue
            share = s["densefs_stored_bytes"] / s["logical_bytes"]
            peer = space.get((row, a.peer))
            beside = (f"; {a.peer} used {peer['used_bytes'] / peer['logical_bytes']:.1%}"
                      if peer and peer["logical_bytes"] else "")
            say(share <= share_limit, what, f"{share:.1%}{beside}")
        print(f"targets: {met} met, {missed} missed")
        return 0

    for workload, cache, procs, ext4_s, limit_s in TIME_TARGETS:
        what = f"{workload} {cache or '-'} {procs}p <= {limit_s / ext4_s:.2f}x {a.baseline}"
        base = cells.get((workload, cache, procs, a.baseline))
        ours = cells.get((workload, cache, procs, a.target))
        usable = [c for c in (base, ours) if c and c.get("available") and not c.get("errors")
                  and not c.get("failed_workers")]
        if len(usable) != 2:
            say(None, what, "no complete cells in this run")
            continue
        ratio = ours["wall_s"] / base["wall_s"]
        say(ratio <= limit_s / ext4_s, what,
            f"{ratio:.2f}x ({ours['wall_s']:.3f} s vs {base['wall_s']:.3f} s; "
            f"planned: <= {limit_s:.2f} s next to {ext4_s:.2f} s)")

    refs = [r for r in j.get("references", []) if r["workload"] == "lepton-decode"]
    what = f"read-jpeg cold >= {LEPTON_SHARE}x the Lepton library's decode rate, all cores"
    if not refs:
        say(None, what, "no lepton-decode reference (no JPEGs Lepton accepts)")
    else:
        ref = refs[0]
        ours = cells.get(("read-jpeg", "cold", ref["procs"], a.target))
        if not ours or not ours.get("available") or ours.get("errors"):
            say(None, what, f"no cold read-jpeg cell with {ref['procs']} procs")
        else:
            share = ours["bytes_per_s"] / ref["bytes_per_s"]
            say(share >= LEPTON_SHARE, what,
                f"{share:.2f}x ({ours['bytes_per_s'] / 2**20:.1f} MiB/s vs library "
                f"{ref['bytes_per_s'] / 2**20:.1f} MiB/s, {ref['procs']} procs)")

    space = {(s["type"], s["target"]): s for s in j.get("space", [])}
    for row, share_limit in SPACE_TARGETS:
        what = f"stored size of {row} <= {share_limit:.0%}"
        s = space.get((row, a.target))
        if not s or "densefs_stored_bytes" not in s or not s["logical_bytes"]:
            say(None, what, "no densefs stored figure")
            continue
        share = s["densefs_stored_bytes"] / s["logical_bytes"]
        say(share <= share_limit, what,
            f"{share:.1%} ({s['densefs_stored_bytes'] / 2**20:.1f} of "
            f"{s['logical_bytes'] / 2**20:.1f} MiB)")
    print(f"targets: {met} met, {missed} missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
