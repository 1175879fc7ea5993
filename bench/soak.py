#!/usr/bin/env python3
"""soak.py — bounded soak of `ember serve` on loopback: N concurrent streaming
chat clients for D seconds, then checks that no slot is left busy (/slots and
/metrics) and reports server errors, latency percentiles and the server's
resident memory over time (sampled every --sample-every seconds; flat after
warm-up is the claim to check).

Owns: starting one server on a free 127.0.0.1 port, the client loops and the
report. Must not: touch anything but the loopback server it started (it is
killed at the end), or run unbounded (every request has a timeout; the run
has a deadline).

Usage: bench/soak.py --ember build/bin/ember --model ~/.cache/ember/models/SmolLM2-135M-Instruct.Q4_1.gguf \
           [--clients 16] [--parallel N] [--seconds 120] [--max-tokens 32] [--sample-every 30] \
           [--out bench/results/soak-smollm2.json]
       The issue-11 run: nice -n 10 bench/soak.py --clients 64 --seconds 600 --max-tokens 16
Needs: python3 with requests.
"""
import argparse
import json
import os
import pathlib
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

import requests

TOPICS = ["rivers", "the moon", "bread", "chess", "volcanoes", "owls", "trains", "glass", "tea", "maps", "bees",
          "snow", "clocks", "whales", "paper", "salt"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def proc_threads(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def gauges(base, hdr):
    """name -> value of the unlabelled samples on /metrics."""
    out = {}
    for line in requests.get(base + "/metrics", headers=hdr, timeout=30).text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, _, v = line.partition(" ")
            out[k] = float(v)
    return out


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def one_stream(base, hdr, body, timeout):
    """-> (ok, ttft_s, total_s, n_chunks, error)"""
    t0 = time.monotonic()
    ttft = None
    n = 0
    try:
        with requests.post(base + "/v1/chat/completions", json=body, headers=hdr, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                return False, None, time.monotonic() - t0, 0, f"HTTP {r.status_code}: {r.text[:200]}"
            done = False
            for line in r.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    done = True
                    break
                ev = json.loads(line[6:])
                if "error" in ev:
                    return False, ttft, time.monotonic() - t0, n, f"error event: {ev['error']}"
                delta = ev["choices"][0].get("delta", {}) if ev.get("choices") else {}
                if delta.get("content"):
                    if ttft is None:   # the first chunk that carries text (the role-only chunk comes at once)
                        ttft = time.monotonic() - t0
                    n += 1
            if not done:
                return False, ttft, time.monotonic() - t0, n, "stream ended without [DONE]"
    except requests.RequestException as ex:
        return False, ttft, time.monotonic() - t0, n, repr(ex)
    return True, ttft, time.monotonic() - t0, n, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default="build/bin/ember")
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/ember/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--warmup", type=float, default=15, help="seconds of load before the first RSS sample")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--parallel", type=int, default=0, help="server slots (-np); default: --clients")
    ap.add_argument("--sample-every", type=float, default=30, help="seconds between RSS / metrics samples")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    port = free_port()
    key = "sk-soak"
    hdr = {"Authorization": f"Bearer {key}"}
    base = f"http://127.0.0.1:{port}"
    n_slots = a.parallel or a.clients   # -c is the KV cache in all (as llama-server): a.ctx per slot
    argv = [a.ember, "serve", "-m", a.model, "-c", str(a.ctx * n_slots), "--kv-unified-per-slot", str(a.ctx),
            "-np", str(n_slots), "-t", str(a.threads),
            "--port", str(port), "--api-key", key, "--metrics"]
    log = open(f"/tmp/ember-soak-{port}.log", "w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                sys.exit(f"server exited with {proc.returncode}")
            try:
                if requests.get(base + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.time() > deadline:
                sys.exit("server did not become healthy")
            time.sleep(0.1)
        rss_start = rss_kib(proc.pid)

        results = []
        lock = threading.Lock()
        t_end = time.monotonic() + a.seconds
        stop = threading.Event()

        def client(i):
            rng = random.Random(i)
            while time.monotonic() < t_end and not stop.is_set():
                body = {"messages": [{"role": "user", "content": f"Tell me about {rng.choice(TOPICS)}."}],
                        "max_tokens": a.max_tokens, "temperature": 0.7, "seed": rng.randrange(1 << 30),
                        "stream": True}
                res = one_stream(base, hdr, body, timeout=300)
                with lock:
                    results.append((time.monotonic(),) + res)

        series = []   # (t_s, rss_kib, requests_processing, requests_deferred, threads)

        def sample(t_start):
            m = gauges(base, hdr)
            series.append((round(time.monotonic() - t_start, 1), rss_kib(proc.pid),
                           m.get("ember_requests_processing"), m.get("ember_requests_deferred"),
                           proc_threads(proc.pid)))

        def sampler(t_start):
            while not stop.wait(a.sample_every):
                try:
                    sample(t_start)
                except Exception:   # noqa: BLE001 - a missed sample is not a server error
                    pass

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
        t_start = time.monotonic()
        for th in threads:
            th.start()
        smp = threading.Thread(target=sampler, args=(t_start,), daemon=True)
        smp.start()
        time.sleep(min(a.warmup, a.seconds))
        rss_warm = rss_kib(proc.pid)
        for th in threads:
            th.join(a.seconds + 360)
        wall = time.monotonic() - t_start
        hung = sum(th.is_alive() for th in threads)
        stop.set()
        smp.join(30)

        # no slot may stay busy once the clients are done
        t_idle = time.monotonic()
        while True:
            slots = requests.get(base + "/slots", headers=hdr, timeout=10).json()
            busy = sum(s["is_processing"] for s in slots)
            if busy == 0 or time.monotonic() - t_idle > 10:
                break
            time.sleep(0.1)
        rss_end = rss_kib(proc.pid)
        sample(t_start)
        after = gauges(base, hdr)
        metrics = requests.get(base + "/metrics", headers=hdr, timeout=10).text
        proc.send_signal(15)
        rc = proc.wait(30)

        ok = [r for r in results if r[1]]
        errs = [r[5] for r in results if not r[1]]
        ttft = [r[2] for r in ok if r[2] is not None]
        total = [r[3] for r in ok]
        chunks = sum(r[4] for r in ok)
        http_errors = [ln for ln in metrics.splitlines() if ln.startswith(("ember_http", "ember_requests"))]
        post_warm = [x[1] for x in series if x[0] >= a.warmup]
        rep = {
            "argv": " ".join(argv[1:]), "clients": a.clients, "seconds": a.seconds, "max_tokens": a.max_tokens,
            "wall_s": round(wall, 1), "requests": len(results), "ok": len(ok), "errors": len(errs),
            "error_samples": errs[:5], "client_threads_hung": hung, "slots_busy_after": busy,
            "text_chunks": chunks, "text_chunks_per_s": round(chunks / wall, 1),
            "ttft_s": {p: round(pct(ttft, p), 3) for p in (50, 90, 99)} if ttft else None,
            "latency_s": {p: round(pct(total, p), 3) for p in (50, 90, 99)} if total else None,
            "latency_mean_s": round(statistics.mean(total), 3) if total else None,
            "rss_kib": {"start": rss_start, "after_warmup": rss_warm, "end": rss_end,
                        "post_warmup_min": min(post_warm) if post_warm else None,
                        "post_warmup_max": max(post_warm) if post_warm else None},
            "series": [dict(zip(("t_s", "rss_kib", "processing", "deferred", "threads"), x)) for x in series],
            "metrics_after": {k: after.get(k) for k in ("ember_requests_processing", "ember_requests_deferred",
                                                         "ember_http_requests_total", "ember_http_errors_total",
                                                         "ember_requests_finished_total",
                                                         "ember_requests_cancelled_total")},
            "http_error_metric": http_errors, "server_exit": rc,
            "machine": f"{os.cpu_count()} cores, load average at end {os.getloadavg()[0]:.1f} (shared)",
        }
        print(json.dumps(rep, indent=2))
        if a.out:
            pathlib.Path(a.out).write_text(json.dumps(rep, indent=2) + "\n")
        clean = (not errs and busy == 0 and hung == 0 and rc == 0 and after.get("ember_requests_processing") == 0
                 and after.get("ember_requests_deferred") == 0 and after.get("ember_http_errors_total") == 0)
        return 0 if clean else 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
