#!/usr/bin/env python3
"""bench/gpu/ncu_table.py — per-kernel totals from an ncu CSV log (`ncu --metrics gpu__time_duration.sum --csv
--log-file LOG ...`): kernels by total time (name, calls, total us, share), largest first.

  python3 bench/gpu/ncu_table.py LOG [ROWS]
"""
import collections
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1], errors="replace")))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 22
    hdr = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if hdr is None:
        print("no ncu rows")
        return
    h = rows[hdr]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    t = collections.defaultdict(float)
    n = collections.Counter()
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
        name = r[ki].split("(")[0][:90]
        t[name] += v
        n[name] += 1
    tot = sum(t.values())
    print(f"kernels {sum(n.values())}, total {tot:.0f} us")
    for k, v in sorted(t.items(), key=lambda x: -x[1])[:top]:
        print(f"{v:10.0f} us {100 * v / tot:5.1f}% {n[k]:6d} x {v / n[k]:8.2f} us  {k}")


if __name__ == "__main__":
    main()
