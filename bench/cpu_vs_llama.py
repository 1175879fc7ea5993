#!/usr/bin/env python3
"""CPU speed of ember beside llama.cpp, same machine, same file, same threads.

Runs, for each model: bench/membw (streaming read bandwidth), llama-bench and
`ember bench` (pp and tg, -r repetitions, median tok/s of the repetitions for
both: llama-bench's per-repetition samples_ns give its median), and peak
resident memory (/usr/bin/time -v) of `llama-completion` and `ember run`
generating the same number of tokens at the same -c. Writes
bench/results/cpu-<model>.md. Speed is never a test; this is the record.

usage: bench/cpu_vs_llama.py [-t 2] [-p 512] [-n 128] [-r 5] [-c 2048] [--only NAME]
                             [--ember build/bin/ember] [--llama-bin DIR] [--note TEXT]
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = {
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def sh(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True, **kw)


def peak_rss_mib(cmd):
    r = subprocess.run(["/usr/bin/time", "-v"] + [str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {r.stderr[-2000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    return int(m.group(1)) / 1024.0


def cpu_name():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def llama_bench(bin_dir, model, a):
    out = sh([bin_dir / "llama-bench", "-m", model, "-p", a.p, "-n", a.n, "-r", a.r, "-t", a.t, "-o", "json"]).stdout
    res = {}
    for t in json.loads(out):
        n = t["n_prompt"] or t["n_gen"]
        ts = [n / (ns / 1e9) for ns in t["samples_ns"]]
        key = "pp" if t["n_prompt"] else "tg"
        res[key] = dict(median=statistics.median(ts), mean=t["avg_ts"], sd=t["stddev_ts"], ts=ts)
    res["build"] = out and json.loads(out)[0].get("build_commit", "")
    return res


def ember_bench(ember, model, a):
    d = json.loads(sh([ember, "bench", "-m", model, "-p", a.p, "-n", a.n, "-r", a.r, "-t", a.t, "-o", "json"]).stdout)
    return {k: dict(median=d[k]["median_ts"], mean=d[k]["mean_ts"], sd=d[k]["sd_ts"], ts=d[k]["ts"])
            for k in ("pp", "tg")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-t", default="2")
    ap.add_argument("-p", default="512")
    ap.add_argument("-n", default="128")
    ap.add_argument("-r", default="5")
    ap.add_argument("-c", default="2048")
    ap.add_argument("--only", choices=list(MODELS))
    ap.add_argument("--ember", default=str(ROOT / "build/bin/ember"))
    ap.add_argument("--membw", default=str(ROOT / "build/bench/membw"))
    ap.add_argument("--llama-bin", default="/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin")
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/ember/models"))
    ap.add_argument("--note", default="", help="e.g. that the machine was shared")
    a = ap.parse_args()
    bin_dir = pathlib.Path(a.llama_bin)
    bw_out = sh([a.membw, "-t", a.t, "-s", "1024"]).stdout
    bw = float(re.search(r"([0-9.]+) GB/s", bw_out).group(1))
    load = os.getloadavg()
    for name, fname in MODELS.items():
        if a.only and a.only != name:
            continue
        model = pathlib.Path(a.models) / fname
        size = model.stat().st_size
        lb = llama_bench(bin_dir, model, a)
        eb = ember_bench(a.ember, model, a)
        prompt = "The history of the Roman Empire begins"
        rss_llama = peak_rss_mib([bin_dir / "llama-completion", "-m", model, "-p", prompt, "-n", "64", "-c", a.c,
                                  "-t", a.t, "--temp", "0", "-no-cnv", "--no-warmup"])
        rss_ember = peak_rss_mib([a.ember, "run", "-m", model, "-p", prompt, "-n", "64", "-c", a.c, "-t", a.t,
                                  "--temp", "0"])
        load_after = os.getloadavg()
        lines = [
            f"# CPU: ember vs llama.cpp — {name}",
            "",
            f"- date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; file `{fname}` ({size / 2**20:.1f} MiB); "
            f"threads -t {a.t}; CPU: {cpu_name()}, {os.cpu_count()} cores",
            f"- llama.cpp: llama-bench built from source on this machine (build {lb.get('build', '?')}); "
            f"ember: `ember bench` (same -p {a.p} -n {a.n} -r {a.r})",
            f"- load average before/after: {load[0]:.1f} / {load_after[0]:.1f}"
            + (f" — {a.note}" if a.note else ""),
            f"- streaming read bandwidth (bench/membw -t {a.t}): {bw:.2f} GB/s",
            "",
            "| test | llama.cpp t/s (median) | ember t/s (median) | ember / llama.cpp |",
            "| ---- | ---------------------: | -----------------: | ----------------: |",
        ]
        for key, n in (("pp", a.p), ("tg", a.n)):
            lines.append(f"| {key}{n} | {lb[key]['median']:.2f} (mean {lb[key]['mean']:.2f} ± {lb[key]['sd']:.2f}) "
                         f"| {eb[key]['median']:.2f} (mean {eb[key]['mean']:.2f} ± {eb[key]['sd']:.2f}) "
                         f"| {eb[key]['median'] / lb[key]['median']:.2f}x |")
        frac_e = eb["tg"]["median"] * size / (bw * 1e9)
        frac_l = lb["tg"]["median"] * size / (bw * 1e9)
        lines += [
            "",
            f"tg as a fraction of bandwidth (tg tok/s x file bytes / bandwidth): ember {frac_e:.2f}, "
            f"llama.cpp {frac_l:.2f}",
            "",
            f"Peak resident memory, generating 64 tokens at -c {a.c} (/usr/bin/time -v): "
            f"llama-completion {rss_llama:.1f} MiB, ember run {rss_ember:.1f} MiB",
            "",
            "Raw tok/s per repetition:",
            f"- llama.cpp pp: {', '.join(f'{x:.1f}' for x in lb['pp']['ts'])}; "
            f"tg: {', '.join(f'{x:.1f}' for x in lb['tg']['ts'])}",
            f"- ember pp: {', '.join(f'{x:.1f}' for x in eb['pp']['ts'])}; "
            f"tg: {', '.join(f'{x:.1f}' for x in eb['tg']['ts'])}",
            "",
            "Made by `bench/cpu_vs_llama.py`.",
        ]
        out = ROOT / "bench/results" / f"cpu-{name}.md"
        out.write_text("\n".join(lines) + "\n")
        print(out.read_text())


if __name__ == "__main__":
    main()
