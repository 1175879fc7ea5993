#!/usr/bin/env python3
"""bench/gpu/ncu_table.py — per-kernel totals from an ncu CSV log (`ncu --metrics gpu__time_duration.sum --csv
--log-file LOG ...`): kernels by total time (name, calls, total us, share), largest first.

  python3 bench/gpu/ncu_table.py LOG [ROWS]
  python3 bench/gpu/ncu_table.py LOG --seq START COUNT   # launches START.. in order: us, grid, name
"""
import collections
import csv
import sys


def launches(rows, hdr):
    """(kernel name, grid size or '?', microseconds) of every metric row after the header, in order."""
    h = rows[hdr]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    gi = h.index("Grid Size") if "Grid Size" in h else None
    for r in rows[hdr + 1:]:
        if len(r) <= vi:
            continue
        try:
            v = float(r[vi].replace(",", ""))
        except ValueError:
            continue
        if r[ui] in ("nsecond", "ns"):
            v /= 1000.0
        elif r[ui] in ("msecond", "ms"):
            v *= 1000.0
        yield r[ki], (r[gi] if gi is not None else "?"), v


def main():
    rows = list(csv.reader(open(sys.argv[1], errors="replace")))
    hdr = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if hdr is None:
        print("no ncu rows")
        return
    if len(sys.argv) > 2 and sys.argv[2] == "--seq":
        start, count = int(sys.argv[3]), int(sys.argv[4])
        for i, (name, grid, v) in enumerate(launches(rows, hdr)):
            if start <= i < start + count:
                print(f"{i:5d} {v:8.2f} us  grid {grid:>14}  {name.split('(')[0][-60:]}")
        return
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 22
    t = collections.defaultdict(float)
    n = collections.Counter()
    for name, _, v in launches(rows, hdr):
        name = name.split("(")[0][:90]
        t[name] += v
        n[name] += 1
    tot = sum(t.values())
    print(f"kernels {sum(n.values())}, total {tot:.0f} us")
    for k, v in sorted(t.items(), key=lambda x: -x[1])[:top]:
        print(f"{v:10.0f} us {100 * v / tot:5.1f}% {n[k]:6d} x {v / n[k]:8.2f} us  {k}")


if __name__ == "__main__":
    main()
