"""Speculative decoding through the real server and SmolLM2 (src/engine/spec).

Lossless: with greedy sampling, `--spec-type ngram`, `--spec-type draft` and
`--spec-type layerskip` (the target's own first layers draft on its own KV
cache, which must be rolled back exactly) must produce exactly the tokens of a server without speculation, on
input-grounded prompts where n-gram drafts are accepted (the response's
timings.draft_n_accepted must be > 0, so the test exercises acceptance and
rollback). The reference is the same model decoded one token per step: the
property under test is "speculation changes nothing", not the model's math
(test_fidelity covers that against llama.cpp).

The servers run with EMBER_NO_GEMM=1: the CPU backend computes a 1-token
matmul with vec_dot and a >= 2-token one with the AVX2 GEMM tiles, whose
float summation order differs, so ANY batching (two concurrent requests
without speculation too) can flip a near-tie argmax. With one kernel for all
batch sizes, decoding is batch-invariant and speculation must be exact.
"""
import os
import concurrent.futures as cf

import pytest
import requests

from serverutil import Server, free_port

TEXT = (
    "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n\n"
    "def variance(xs):\n    m = mean(xs)\n    total = 0\n    for x in xs:\n        total += (x - m) ** 2\n"
    "    return total / len(xs)\n"
)
PROMPTS = [
    "Rewrite this Python code, renaming the variable total to acc. Output only the code.\n\n" + TEXT,
    "Repeat the following text exactly, word for word:\n\nThe committee met on Tuesday to review the budget. "
    "The budget for the new library was approved, and the budget for the park was postponed until the spring. "
    "The committee will meet again on Tuesday.",
    "Copy this list and add a fourth item: 1. apples 2. oranges 3. pears",
]


def start(ember_bin, model, *extra, np=2):
    port = free_port()
    old = os.environ.get("EMBER_NO_GEMM")
    os.environ["EMBER_NO_GEMM"] = "1"   # inherited by the server process (see above)
    try:
        return Server([ember_bin, "serve", "-m", model, "-c", str(1024 * np), "--kv-unified-per-slot", "1024",
                       "-np", str(np), "-t", "2", "--port", str(port),
                       "--metrics", *extra], port)
    finally:
        if old is None:
            del os.environ["EMBER_NO_GEMM"]
        else:
            os.environ["EMBER_NO_GEMM"] = old


def complete(srv, prompt, n=96):
    r = requests.post(srv.base + "/v1/chat/completions", timeout=300, json={
        "messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": 0,
        "logprobs": True})
    r.raise_for_status()
    d = r.json()
    toks = [t["token"] for t in d["choices"][0]["logprobs"]["content"]]
    return d["choices"][0]["message"]["content"], toks, d["timings"]


@pytest.fixture(scope="module")
def reference(ember_bin, smollm2_path):
    srv = start(ember_bin, smollm2_path)
    try:
        yield [complete(srv, p) for p in PROMPTS]
    finally:
        srv.stop()


def test_ngram_greedy_identical_and_accepted(ember_bin, smollm2_path, reference):
    srv = start(ember_bin, smollm2_path, "--spec-type", "ngram", "--spec-draft-n-max", "8")
    try:
        # concurrently: the drafts of both slots are verified in one batch
        with cf.ThreadPoolExecutor(2) as ex:
            got = list(ex.map(lambda p: complete(srv, p), PROMPTS))
        accepted = 0
        for (ref_text, ref_toks, ref_t), (text, toks, t) in zip(reference, got):
            assert text == ref_text
            assert toks == ref_toks
            assert "draft_n" not in ref_t
            assert 0 <= t.get("draft_n_accepted", 0) <= t.get("draft_n", 0)
            accepted += t.get("draft_n_accepted", 0)
        assert accepted > 0, "no n-gram draft was accepted: the test did not exercise verification"
        m = requests.get(srv.base + "/metrics", timeout=10).text
        vals = {l.split()[0]: float(l.split()[1]) for l in m.splitlines() if l.startswith("ember_spec_")}
        assert vals["ember_spec_draft_tokens_accepted_total"] == accepted
        assert vals['ember_spec_position_drafted_total{position="0"}'] == vals["ember_spec_drafts_total"] > 0
    finally:
        srv.stop()


def test_draft_model_same_model_identical(ember_bin, smollm2_path):
    # the target as its own draft: the vocabulary check passes and greedy
    # drafts are (nearly) all accepted; output must still be identical.
    # The reference is a fresh plain server, not the `reference` fixture: there
    # PROMPTS[2] reuses the 24-token chat prefix whose KV was written by an
    # earlier >= 64-token prefill, and the CPU attention (as ggml's flash
    # attention) takes its all-f32 tiled path for >= 64 queries per ubatch and
    # the f16 row path below, so that prefix KV differs from a 51-token
    # prefill's and a near tie (' P' / ' Pe' at token 11) can flip.
    ref = start(ember_bin, smollm2_path, np=1)
    try:
        _, ref_toks, _ = complete(ref, PROMPTS[2], n=48)
    finally:
        ref.stop()
    srv = start(ember_bin, smollm2_path, "--spec-type", "draft", "-md", smollm2_path, "--spec-draft-p-min", "0",
                "--spec-draft-n-max", "4", np=1)
    try:
        text, toks, t = complete(srv, PROMPTS[2], n=48)
        assert toks == ref_toks[:len(toks)] and len(toks) == min(48, len(ref_toks))
        assert t["draft_n_accepted"] > 0
    finally:
        srv.stop()


def test_layerskip_greedy_identical(ember_bin, smollm2_path, reference):
    # two slots drafting at once with the target's first 20 of 30 layers; the
    # draft pass writes K/V rows the verification must overwrite
    srv = start(ember_bin, smollm2_path, "--spec-type", "layerskip", "--spec-layers", "20", "--spec-draft-p-min", "0",
                "--spec-draft-n-max", "4", "--spec-adaptive", "off")
    try:
        with cf.ThreadPoolExecutor(2) as ex:
            got = list(ex.map(lambda p: complete(srv, p), PROMPTS))
        drafted = accepted = 0
        for (ref_text, ref_toks, _), (text, toks, t) in zip(reference, got):
            assert text == ref_text
            assert toks == ref_toks
            drafted += t.get("draft_n", 0)
            accepted += t.get("draft_n_accepted", 0)
        assert drafted > 0 and 0 < accepted <= drafted
    finally:
        srv.stop()


def test_layerskip_bad_layers_refused(ember_bin, smollm2_path):
    import subprocess
    p = subprocess.run([ember_bin, "serve", "-m", smollm2_path, "--spec-type", "layerskip", "--spec-layers", "30",
                        "--port", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "--spec-layers 30" in p.stderr


def test_draft_model_vocab_mismatch_refused(ember_bin, smollm2_path, gemma3_path):
    import subprocess
    p = subprocess.run([ember_bin, "serve", "-m", smollm2_path, "-md", gemma3_path, "--spec-type", "draft",
                        "--port", "0"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "vocabulary" in p.stderr


def test_force_accept_overrides_the_draw(ember_bin, smollm2_path):
    """--spec-force-accept X (benchmarks): the target as its own draft would have (nearly) every
    one of its 4 drafted tokens accepted; forced to 1.5 a step, the steps accept 1 and 2 in turn
    (floor/ceil dithered), so accepted / steps is 1.5 and far from the 4 of the real rule."""
    srv = start(ember_bin, smollm2_path, "--spec-type", "draft", "-md", smollm2_path, "--spec-draft-p-min", "0",
                "--spec-draft-n-max", "4", "--spec-adaptive", "off", "--spec-force-accept", "1.5", np=1)
    try:
        _, toks, t = complete(srv, PROMPTS[0], n=40)   # the code rewrite: a long answer
        assert len(toks) == 40, t
        steps = t["draft_n"] / 4          # every step drafts 4 (p_min 0, adaptive off), the last maybe fewer
        assert steps >= 10, t
        assert 1.2 <= t["draft_n_accepted"] / steps <= 1.8, t
    finally:
        srv.stop()


def test_bad_spec_flags(ember_bin, smollm2_path):
    import subprocess
    for args in (["--spec-type", "bogus"], ["--spec-draft-n-max", "0"], ["--spec-draft-p-min", "2"],
                 ["--spec-row-cost", "0"], ["--spec-layers", "0"], ["--spec-force-accept", "-1"],
                 ["--spec-force-accept", "33"], ["--spec-force-accept", "x"]):
        p = subprocess.run([ember_bin, "serve", "-m", smollm2_path, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, args
