"""scripts/serve (what `make serve` runs): the default model is the chat model
SmolLM2-135M-Instruct, `MODEL=gemma3-270m` is Gemma 3 270M, a path serves that
file, and the README's own curl example gets a sensible answer.

What is independent here: the request is the one the README prints (parsed
out of README.md), the model ids come from the files' names, and Gemma 3's
chat template is the published one (tests/data/templates/SOURCES.md).
"""
import json
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest
import requests

from serverutil import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
STARTUP = 600 if os.environ.get("EMBER_SANITIZED") == "1" else 120


class Serve:
    """scripts/serve with MODEL (None: unset), on a free port."""

    def __init__(self, ember_bin, model, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, EMBER_BIN=ember_bin, PORT=str(self.port))
        env.pop("MODEL", None)
        if model is not None:
            env["MODEL"] = model
        self.proc = subprocess.Popen([str(ROOT / "scripts/serve"), "-t", "2", "-np", "1", *extra], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_healthy(self):
        deadline = time.time() + STARTUP
        while time.time() < deadline:
            assert self.proc.poll() is None, self.proc.stdout.read()
            try:
                if requests.get(self.base + "/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError("scripts/serve did not become healthy")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)    # scripts/serve execs ember: the signal reaches the server
        out, _ = self.proc.communicate(timeout=60)
        return self.proc.returncode, out


def readme_chat_body():
    """The JSON body of the README's curl example (the -d '...' after /v1/chat/completions)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"curl http://127\.0\.0\.1:8080/v1/chat/completions[^\n]*\\\n\s*-d '([^']+)'", text)
    assert m, "README.md has no curl example for /v1/chat/completions"
    return m.group(1)


def test_default_is_the_chat_model(ember_bin, smollm2_path):
    s = Serve(ember_bin, None).wait_healthy()
    try:
        ids = [m["id"] for m in requests.get(s.base + "/v1/models", timeout=30).json()["data"]]
        assert ids == [pathlib.Path(smollm2_path).stem]          # SmolLM2-135M-Instruct.Q4_1
        body = readme_chat_body()
        # greedy, so the answer is one answer; the README's request otherwise as printed
        r = requests.post(s.base + "/v1/chat/completions", json=dict(json.loads(body), temperature=0), timeout=STARTUP)
        assert r.status_code == 200
        answer = r.json()["choices"][0]["message"]["content"]
        # sensible: words, not the base model's column of numbers
        words = re.findall(r"[A-Za-z']+", answer)
        assert len(words) >= 3 and sum(c.isdigit() for c in answer) < len(answer) / 10, answer
        assert re.search(r"\b(hello|hi|help|assist)", answer, re.I), answer
        assert requests.get(s.base + "/", timeout=30).status_code == 200   # the web chat it points at
    finally:
        rc, out = s.stop()
    assert rc == 0, out
    # what the script prints to try is the README's example, at this port
    assert f"web chat:        http://127.0.0.1:{s.port}/" in out
    assert f"-d '{body}'" in out, out


def test_gemma_is_one_word_away(ember_bin, gemma3_path):
    s = Serve(ember_bin, "gemma3-270m").wait_healthy()
    try:
        ids = [m["id"] for m in requests.get(s.base + "/v1/models", timeout=30).json()["data"]]
        assert ids == [pathlib.Path(gemma3_path).stem]
        published = (ROOT / "tests/data/templates/google-gemma-3-it.jinja").read_text()
        assert requests.get(s.base + "/props", timeout=30).json()["chat_template"] == published
    finally:
        rc, out = s.stop()
    assert rc == 0, out


def test_model_path_and_bad_names(ember_bin, smollm2_path):
    s = Serve(ember_bin, smollm2_path).wait_healthy()
    try:
        ids = [m["id"] for m in requests.get(s.base + "/v1/models", timeout=30).json()["data"]]
        assert ids == [pathlib.Path(smollm2_path).stem]
    finally:
        assert s.stop()[0] == 0
    for model, says in (("no-such-model", "unknown model 'no-such-model'"),
                        ("/no/such/file.gguf", "MODEL=/no/such/file.gguf: no such file")):
        p = Serve(ember_bin, model)
        out, _ = p.proc.communicate(timeout=60)
        assert p.proc.returncode != 0 and says in out, out
