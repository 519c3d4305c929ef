#!/usr/bin/env python3
"""Where a campaign's runs spent their time: the median of each transition
of the attempts (from the event log, CLOCK_MONOTONIC), and the gap from one
attempt's end to the next one's creation, overall and by blocks of runs, so
that a cost that grows with the campaign shows.

usage: bench/timeline.py CAMPAIGN_DIR [BLOCK]   (BLOCK: runs a row, default 40)
"""
import collections
import json
import statistics
import subprocess
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    camp = sys.argv[1]
    block = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    out = subprocess.run(["bin/ctlq", "events", "-d", camp, "-o", "json"], capture_output=True, text=True, check=True).stdout
    attempts = collections.OrderedDict()
    for line in out.splitlines():
        e = json.loads(line)
        if e.get("run"):
            attempts.setdefault((e["run"], e.get("attempt")), []).append((e["mono"] / 1e6, e.get("to")))
    rows = []
    prev_end = None
    for evs in attempts.values():
        row = {f"{a}->{b}": t1 - t0 for (t0, a), (t1, b) in zip(evs, evs[1:])}
        row["planned->end"] = evs[-1][0] - evs[0][0]
        if prev_end is not None:
            row["gap"] = evs[0][0] - prev_end
        prev_end = evs[-1][0]
        rows.append(row)
    if not rows:
        sys.exit(f"{camp}: no attempts in the event log")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print(f"# {len(rows)} attempts; medians in ms")
    for k in keys:
        v = [r[k] for r in rows if k in r]
        print(f"{k:24s} {statistics.median(v):7.2f}  (n={len(v)})")
    print(f"# by blocks of {block} attempts")
    print("attempts   " + " ".join(f"{k.split('->')[-1][:8]:>8s}" for k in keys))
    for lo in range(0, len(rows), block):
        chunk = rows[lo:lo + block]
        cells = []
        for k in keys:
            v = [r[k] for r in chunk if k in r]
            cells.append(f"{statistics.median(v):8.2f}" if v else f"{'-':>8s}")
        print(f"{lo:4d}-{lo + len(chunk) - 1:<4d}  " + " ".join(cells))


if __name__ == "__main__":
    main()
