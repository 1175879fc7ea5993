"""Qwen3.5 (qwen35) through the real binaries, on the tiny random model of
tests/golden/qwen35 (its logits are checked against transformers and
llama.cpp by tests/unit/model/test_qwen35.c).

A slot's recurrent state cannot be cut back to a middle position directly:
the server's prefix cache reuses it through block checkpoints (the engine
keeps the state every --checkpoint-min-step tokens; truncate / fork restore
the last one before the cut and decode the rest again) and recomputes where
it has none: requests that share prefixes with earlier ones, and two slots
decoding at once, must give exactly the tokens of a cold greedy `ember run`. With n-gram speculation the engine checkpoints each slot's state
before a verify step and rolls rejected drafts back through it (restore, then
decode the kept tokens again): the output must still be the cold run's.
"""
import json
import pathlib
import subprocess

import requests

from serverutil import Server, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "tests" / "golden" / "qwen35" / "tiny-qwen35.gguf")
PROMPTS = [[17, 250, 33, 481, 7, 92, 300, 12], [17, 250, 33, 481, 7, 92, 300, 12, 55, 66, 77, 88, 99, 111],
           [17, 250, 33, 481, 9], [400, 401, 402]]
N = 12


def cold(ember_bin, ids):
    """The text of a cold greedy `ember run` (a fresh context)."""
    r = subprocess.run([ember_bin, "run", "-m", MODEL, "--prompt-ids", ",".join(map(str, ids)), "-n", str(N),
                        "--temp", "0", "--ignore-eos", "-t", "2", "-ngl", "0"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(b"\n")   # run ends its output with a newline of its own
    return r.stdout[:-1].decode("utf-8", errors="replace")


def test_inspect_loads(ember_bin):
    r = subprocess.run([ember_bin, "inspect", MODEL], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert 'general.architecture' in r.stdout and '"qwen35"' in r.stdout


def test_server_matches_cold_runs(ember_bin):
    want = [cold(ember_bin, p) for p in PROMPTS]
    assert len(set(want)) == len(PROMPTS)
    port = free_port()
    srv = Server([ember_bin, "serve", "-m", MODEL, "--port", str(port), "-np", "2", "-c", "256", "--kv-unified-per-slot", "128", "-t", "2",
                  "-ngl", "0"], port)
    try:
        def ask(ids):
            r = requests.post(srv.base + "/v1/completions", timeout=60, json={
                "prompt": ids, "max_tokens": N, "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200, r.text
            return r.json()

        # one after another: each shares a prefix with an earlier one
        order = [0, 1, 0, 2, 1, 3, 0]
        got = [ask(PROMPTS[i]) for i in order]
        for i, g in zip(order, got):
            assert g["usage"]["completion_tokens"] == N
            assert g["choices"][0]["text"] == want[i], (i, g["choices"][0]["text"], want[i])
        # two slots at once, each request with a prefix the other slot holds
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(2) as ex:
            for _ in range(2):
                futs = {i: ex.submit(ask, PROMPTS[i]) for i in (1, 2)}
                for i, f in futs.items():
                    assert f.result()["choices"][0]["text"] == want[i]
    finally:
        assert srv.stop() == 0


def metric(base, name):
    for line in requests.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def test_speculation_rolls_back_recurrent_state(ember_bin, tmp_path):
    n = 24

    def cold_ids(ids):
        f = tmp_path / "ids.txt"
        f.write_text(",".join(map(str, ids)) + "\n")
        r = subprocess.run([ember_bin, "run", "-m", MODEL, "--prompt-ids-file", str(f), "-n", str(n), "--temp", "0",
                            "--ignore-eos", "-t", "2", "-ngl", "0"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.splitlines()[0])["tokens"]

    def cold_text(ids):
        r = subprocess.run([ember_bin, "run", "-m", MODEL, "--prompt-ids", ",".join(map(str, ids)), "-n", str(n),
                            "--temp", "0", "--ignore-eos", "-t", "2", "-ngl", "0"], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout[:-1].decode("utf-8", errors="replace")

    # prompt P, its greedy continuation C, then P again: prompt lookup
    # (ngram) drafts C after the second P, which the model (whose state has
    # seen more by then) mostly rejects, so steps roll drafts back
    prompts = []
    for p in PROMPTS + [[5, 6, 7, 8, 9], [300, 301, 302, 303]]:
        prompts.append(p + cold_ids(p) + p)
    want = [cold_text(p) for p in prompts]
    port = free_port()
    srv = Server([ember_bin, "serve", "-m", MODEL, "--port", str(port), "-np", "2", "-c", "256", "--kv-unified-per-slot", "128", "-t", "2",
                  "-ngl", "0", "--spec-type", "ngram", "--spec-adaptive", "off", "--metrics"], port)
    try:
        import concurrent.futures as cf

        def ask(ids):
            r = requests.post(srv.base + "/v1/completions", timeout=60, json={
                "prompt": ids, "max_tokens": n, "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["text"]

        for i, p in enumerate(prompts):
            assert ask(p) == want[i], i
        with cf.ThreadPoolExecutor(2) as ex:   # two slots verifying drafts in the same steps
            futs = [ex.submit(ask, p) for p in prompts[:2]]
            assert [f.result() for f in futs] == want[:2]
        drafted = metric(srv.base, "ember_spec_draft_tokens_total")
        accepted = metric(srv.base, "ember_spec_draft_tokens_accepted_total")
        print(f"drafted {drafted}, accepted {accepted}")
        assert drafted >= 5 and accepted < drafted, (drafted, accepted)
    finally:
        assert srv.stop() == 0


def test_prefix_cache_hits_through_block_checkpoints(ember_bin):
    """A prompt that shares a long prefix with an earlier one (then differs)
    takes the prefix from the cache through a block checkpoint of the slot's
    recurrent state (--checkpoint-min-step 8: prefill stops and the state is
    kept every 8 tokens): the runtime restores the last checkpoint at or before
    the common prefix and decodes the few tokens up to it again, so
    cached_tokens is the whole common prefix, and every reply is the cold
    greedy run's. With --ctx-checkpoints 0 nothing can be reused."""
    base = list(range(100, 141))                       # 41 shared tokens
    prompts = [base + [7, 8, 9, 10], base + [20, 21], base[:30] + [5, 5, 5], base + [7, 8, 9, 10]]
    want = [cold(ember_bin, p) for p in prompts]

    def serve(extra):
        port = free_port()
        return Server([ember_bin, "serve", "-m", MODEL, "--port", str(port), "-np", "1", "-c", "256", "-t", "2",
                       "-ngl", "0"] + extra, port)

    def ask(srv, ids):
        r = requests.post(srv.base + "/v1/completions", timeout=60, json={
            "prompt": ids, "max_tokens": N, "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        j = r.json()
        return j["choices"][0]["text"], j["usage"]["prompt_tokens_details"]["cached_tokens"]

    srv = serve(["--checkpoint-min-step", "8"])
    try:
        got = [ask(srv, p) for p in prompts]
    finally:
        assert srv.stop() == 0
    assert [g[0] for g in got] == want
    # 2nd: common prefix 41 (from the checkpoint at 40); 3rd: 30 (from 24); 4th: the
    # 3rd's slot (30 + 3 + N tokens) shares 30 with it (from 24 again)
    assert [g[1] for g in got] == [0, 41, 30, 30], got

    srv = serve(["--ctx-checkpoints", "0"])
    try:
        got = [ask(srv, p) for p in prompts]
    finally:
        assert srv.stop() == 0
    assert [g[0] for g in got] == want
    assert [g[1] for g in got] == [0, 0, 0, 0], got


def test_embedding_prompt_leaves_checkpoints(ember_bin):
    """An embeddings request leaves its prompt in the slot's cache like a
    completion does, and checkpoints its recurrent state the same way: a
    completion that shares 30 of its 41 tokens then takes them from the
    checkpoint at 24 (cached_tokens 30, not 0) and gives the cold greedy
    run's text."""
    base = list(range(100, 141))
    prompt = base[:30] + [5, 5, 5]
    want = cold(ember_bin, prompt)
    port = free_port()
    srv = Server([ember_bin, "serve", "-m", MODEL, "--port", str(port), "-np", "1", "-c", "256", "-t", "2", "-ngl", "0",
                  "--embedding", "--pooling", "mean", "--checkpoint-min-step", "8"], port)
    try:
        r = requests.post(srv.base + "/v1/embeddings", timeout=60, json={"input": [base]})
        assert r.status_code == 200, r.text
        r = requests.post(srv.base + "/v1/completions", timeout=60, json={
            "prompt": prompt, "max_tokens": N, "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        j = r.json()
    finally:
        assert srv.stop() == 0
    assert j["choices"][0]["text"] == want
    assert j["usage"]["prompt_tokens_details"]["cached_tokens"] == 30
