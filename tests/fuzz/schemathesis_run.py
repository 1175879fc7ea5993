#!/usr/bin/env python3
"""schemathesis_run.py — API conformance run: start `ember serve` on a free
127.0.0.1 port, run schemathesis (all checks) from docs/openapi.yaml against
it with a bounded number of examples and time, then read schemathesis'
NDJSON event log and summarise it independently of schemathesis' verdicts:
status histogram per operation, 5xx count, every >= 400 answer checked for
OpenAI's error shape (error.message non-empty string, type string, param and
code string or null), and whether the server survived and exits 0 on SIGTERM.

Owns: that one server process and the report. Must not: reach anything but
loopback. schemathesis lives in its own venv (not requirements-test.txt):
    python3 -m venv /work/venv-harden && /work/venv-harden/bin/pip install schemathesis
Usage:
    /work/venv-harden/bin/python tests/fuzz/schemathesis_run.py --ember build/bin/ember \
        [--examples 25] [--max-time 300] [--out bench/results/api-conformance-smollm2.json]
"""
import argparse
import base64
import collections
import glob
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def oai_error_ok(body):
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (isinstance(e, dict) and isinstance(e.get("message"), str) and len(e["message"]) > 0
            and isinstance(e.get("type"), str) and "param" in e and "code" in e
            and (e["param"] is None or isinstance(e["param"], str))
            and (e["code"] is None or isinstance(e["code"], str)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ember", default=str(ROOT / "build/bin/ember"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/ember/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--examples", type=int, default=25)
    ap.add_argument("--max-time", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    st_bin = pathlib.Path(sys.executable).parent / "schemathesis"

    port = free_port()
    key = "sk-conformance"
    base = f"http://127.0.0.1:{port}"
    argv = [a.ember, "serve", "-m", a.model, "-c", "128", "-np", "2", "-t", "2", "--port", str(port),
            "--api-key", key, "--metrics", "--embedding", "--pooling", "mean"]
    log = open(f"/tmp/ember-st-{port}.log", "w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    rep_dir = tempfile.mkdtemp(prefix="ember-st-")
    try:
        for _ in range(600):
            try:
                if requests.get(base + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        cmd = [str(st_bin), "run", str(ROOT / "docs/openapi.yaml"), "-u", base, "-H", f"Authorization: Bearer {key}",
               "-c", "all", "-n", str(a.examples), "--seed", str(a.seed), "--request-timeout", "90",
               "--max-time", str(a.max_time), "-w", "1", "--generation-allow-x00", "false",
               "--report", "ndjson", "--report-dir", rep_dir]
        t0 = time.time()
        st = subprocess.run(cmd, capture_output=True, text=True, cwd=rep_dir)
        wall = time.time() - t0
        alive = proc.poll() is None
        summary_lines = st.stdout[st.stdout.find("SUMMARY"):].splitlines() if "SUMMARY" in st.stdout else st.stdout[-3000:].splitlines()

        status = collections.Counter()
        bad_errors = []
        failures = collections.Counter()
        n = 0
        for f in glob.glob(rep_dir + "/*.ndjson"):
            for line in open(f):
                ev = json.loads(line)
                if "ScenarioFinished" not in ev:
                    continue
                rec = ev["ScenarioFinished"].get("recorder", {})
                for cid, it in rec.get("interactions", {}).items():
                    resp = it.get("response") or {}
                    code = resp.get("status_code")
                    if code is None:
                        continue
                    n += 1
                    status[f"{rec.get('label')} {code}"] += 1
                    if code >= 400:
                        body = resp.get("content")
                        if isinstance(body, dict):
                            body = base64.b64decode(body.get("$base64", "")).decode("utf-8", "replace")
                        if not oai_error_ok(body or ""):
                            bad_errors.append((rec.get("label"), code, (body or "")[:200]))
                for checks in rec.get("checks", {}).values():
                    for ch in checks:
                        if ch.get("status") != "success":
                            failures[(ch["name"], rec.get("label"))] += 1
        proc.send_signal(15)
        rc = proc.wait(30) if alive else proc.returncode
        rep = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "server": " ".join(argv[1:]),
            "schemathesis": subprocess.run([str(st_bin), "--version"], capture_output=True, text=True).stdout.strip(),
            "examples_per_operation": a.examples, "seed": a.seed, "wall_s": round(wall, 1),
            "responses": n, "server_errors_5xx": sum(v for k, v in status.items() if int(k.rsplit(" ", 1)[1]) >= 500),
            "error_answers_not_openai_shaped": len(bad_errors), "bad_error_samples": bad_errors[:5],
            "server_alive_after": alive, "server_exit_on_sigterm": rc,
            "status_by_operation": dict(sorted(status.items())),
            "check_failures": {f"{k[0]} | {k[1]}": v for k, v in sorted(failures.items())},
            "schemathesis_summary": summary_lines[:40],
        }
        print(json.dumps(rep, indent=2))
        if a.out:
            pathlib.Path(a.out).write_text(json.dumps(rep, indent=2) + "\n")
        return 0 if alive and rc == 0 and rep["server_errors_5xx"] == 0 and not bad_errors else 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
