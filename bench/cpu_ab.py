#!/usr/bin/env python3
"""cpu_ab.py — `ember bench` beside llama-bench on the same GGUF file, thread
count and machine, for issue 4's CPU speed record (bench/results/runtime-cpu.md).

    bench/cpu_ab.py [--threads 1] [--rounds 5] [--pp 512] [--tg 128] MODEL...

Each round runs llama-bench -r 1 and `ember bench -r 1` once each, in
alternating order (the machine may be shared: both see the same load), under
/usr/bin/time -v for the peak resident memory. Reported per test: the median
over rounds of each (llama-bench and ember bench each already report a
median/mean over their own repetitions), the ratio of the medians, the load
average before/after, and tg as a fraction of the memory-bandwidth ceiling:
a decode step reads every weight once (the tied embedding is the LM head), so
tg tok/s <= bandwidth / model bytes; bandwidth from build/bench/membw
(best of the plain and prefetching readers), measured before and after.
Must not: assert anything (speed is recorded, never tested).
"""
import argparse, csv, io, json, os, pathlib, re, statistics, subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
LLAMA_BIN = pathlib.Path(os.environ.get("LLAMA_BIN", "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin"))


def timed(cmd):
    """Run cmd under /usr/bin/time -v; return (stdout, peak RSS MiB)."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, check=True)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    return p.stdout, int(m.group(1)) / 1024.0 if m else float("nan")


def llama_bench(model, threads, pp, tg):
    out, rss = timed([str(LLAMA_BIN / "llama-bench"), "-m", model, "-t", str(threads), "-p", str(pp),
                      "-n", str(tg), "-r", "1", "-o", "csv"])
    res = {"rss": rss}
    for row in csv.DictReader(io.StringIO(out)):
        if int(row["n_prompt"]) == 0 and int(row["n_gen"]) == 0:
            continue
        res["pp" if int(row["n_prompt"]) > 0 else "tg"] = float(row["avg_ts"])
    return res


def ember_bench(model, threads, pp, tg, exe):
    out, rss = timed([exe, "bench", "-m", model, "-t", str(threads), "-p", str(pp), "-n", str(tg), "-r", "1",
                      "-o", "json"])
    j = json.loads(out)
    res = {"rss": rss, "size": j["size_bytes"]}
    for k in ("pp", "tg"):
        if k in j:
            res[k] = j[k]["median_ts"]
    return res


def membw(threads):
    out = subprocess.run([str(ROOT / "build/bench/membw"), "-s", "256", "-t", str(threads), "-r", "3"],
                         capture_output=True, text=True, check=True).stdout
    return max(float(x) for x in re.findall(r"([0-9.]+) GB/s", out))


def loadavg():
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--exe", default=str(ROOT / "build/bin/ember"))
    a = ap.parse_args()
    print("| model | test | llama.cpp t/s | ember t/s | ember / llama.cpp | load avg | "
          "bandwidth GB/s | tg fraction of bandwidth (llama.cpp, ember) | peak RSS MiB (llama.cpp, ember) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in a.models:
        l0, bw0 = loadavg(), membw(a.threads)
        L, E = [], []
        for r in range(a.rounds):
            runs = [lambda: L.append(llama_bench(model, a.threads, a.pp, a.tg)),
                    lambda: E.append(ember_bench(model, a.threads, a.pp, a.tg, a.exe))]
            for f in (runs if r % 2 == 0 else runs[::-1]):
                f()
        l1, bw1 = loadavg(), membw(a.threads)
        bw = max(bw0, bw1)
        size = E[0]["size"]
        name = pathlib.Path(model).name
        rss_l, rss_e = max(x["rss"] for x in L), max(x["rss"] for x in E)
        for k, n in (("pp", a.pp), ("tg", a.tg)):
            if n == 0:
                continue
            ml, me = statistics.median(x[k] for x in L), statistics.median(x[k] for x in E)
            frac = f"{ml * size / 1e9 / bw:.2f}, {me * size / 1e9 / bw:.2f}" if k == "tg" else ""
            print(f"| {name} | {k}{n} -t {a.threads} | {ml:.2f} | {me:.2f} | {me / ml:.2f}x | {l0:.1f}-{l1:.1f} | "
                  f"{bw0:.1f}, {bw1:.1f} | {frac} | {rss_l:.0f}, {rss_e:.0f} |", flush=True)


if __name__ == "__main__":
    main()
