"""Gemma 4 MTP speculation through the real server (`--spec-type draft-mtp
--spec-draft-model FILE`, llama-server's flags) on the tiny golden files:
the Gemma 4 target of tests/golden/dflash/ and the gemma4-assistant drafts
of tests/golden/mtp/ (tests/golden/make_mtp.py: transformers'
Gemma4AssistantForCausalLM with random weights, converted by llama.cpp's
convert_hf_to_gguf.py).

Lossless: at temperature 0 the completion's tokens equal those of the same
server without speculation, with the constant draft (it drafts the token
the target repeats: accepted once the target repeats it, rejected before,
timings.draft_n_accepted > 0) and the random one (mostly rejected); at
temperature > 0 with a seed, the same tokens as without speculation.
/metrics counts the drafted and accepted tokens as the timings do. Servers
run with EMBER_NO_GEMM=1 as in test_spec.py (batch-invariant matmuls). Bad
set-ups are refused at start.
"""
import os
import re
import subprocess
from pathlib import Path

import pytest
import requests

from serverutil import Server, free_port

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
TARGET = str(GOLDEN / "dflash" / "tiny-dflash-target.gguf")
DRAFT = str(GOLDEN / "mtp" / "tiny-mtp-draft.gguf")
DRAFT_CONST = str(GOLDEN / "mtp" / "tiny-mtp-draft-const.gguf")
# token ids: tiny-dflash.json's prompt, after which the target repeats the
# constant draft's token (417) from its third token on
PROMPTS = [[2, 50, 38, 41, 234, 551, 346, 226, 113, 122, 512, 292], "the model and the user",
           "hello world weather city Paris"]


def start(ember_bin, *extra):
    port = free_port()
    env_old = os.environ.get("EMBER_NO_GEMM")
    os.environ["EMBER_NO_GEMM"] = "1"
    try:
        return Server([ember_bin, "serve", "-m", TARGET, "-c", "512", "-np", "2", "-t", "2", "--port", str(port),
                       *extra], port)
    finally:
        if env_old is None:
            del os.environ["EMBER_NO_GEMM"]
        else:
            os.environ["EMBER_NO_GEMM"] = env_old


def complete(srv, prompt, n=32, **kw):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 1}
    body.update(kw)
    r = requests.post(srv.base + "/v1/completions", timeout=120, json=body)
    r.raise_for_status()
    d = r.json()
    return d["choices"][0]["logprobs"]["tokens"], d["timings"]


def metric(srv, name):
    text = requests.get(srv.base + "/metrics", timeout=30).text
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    assert m, (name, text)
    return float(m.group(1))


@pytest.fixture(scope="module")
def reference(ember_bin):
    srv = start(ember_bin)
    try:
        yield [complete(srv, p)[0] for p in PROMPTS]
    finally:
        srv.stop()


@pytest.mark.parametrize("draft,accepting", [(DRAFT_CONST, True), (DRAFT, False)])
def test_mtp_greedy_identical(ember_bin, reference, draft, accepting):
    srv = start(ember_bin, "--spec-type", "draft-mtp", "--spec-draft-model", draft, "--spec-draft-n-max", "4",
                "--spec-adaptive", "off", "--metrics")
    try:
        n_drafted = n_accepted = 0
        for p, want in zip(PROMPTS, reference):
            toks, timings = complete(srv, p)
            assert toks == want, p
            assert len(toks) == 32
            n_drafted += timings.get("draft_n", 0)
            n_accepted += timings.get("draft_n_accepted", 0)
        assert n_drafted > 0
        if accepting:
            assert 0 < n_accepted < n_drafted
        # /metrics counts what the requests' timings report
        assert metric(srv, "ember_spec_draft_tokens_total") == n_drafted
        assert metric(srv, "ember_spec_draft_tokens_accepted_total") == n_accepted
    finally:
        srv.stop()


def test_mtp_parallel_requests_identical(ember_bin, reference):
    """Two slots drafting at once keep their own K/V copies."""
    import concurrent.futures as cf
    srv = start(ember_bin, "--spec-type", "draft-mtp", "--spec-draft-model", DRAFT_CONST, "--spec-draft-n-max", "4",
                "--spec-adaptive", "off")
    try:
        with cf.ThreadPoolExecutor(2) as ex:
            got = list(ex.map(lambda p: complete(srv, p)[0], PROMPTS))
        assert got == reference
    finally:
        srv.stop()


def test_mtp_sampled_identical_with_seed(ember_bin):
    """At temperature > 0 the verifier draws each emitted token once from the
    target with the request's seeded sampler (spec.h), so a seeded sampled
    completion is the same with and without the MTP draft."""
    def run(*extra):
        srv = start(ember_bin, *extra)
        try:
            return [complete(srv, p, temperature=0.5, seed=1) for p in PROMPTS]
        finally:
            srv.stop()
    plain = run()
    spec = run("--spec-type", "draft-mtp", "--spec-draft-model", DRAFT_CONST, "--spec-draft-n-max", "4",
               "--spec-adaptive", "off")
    assert [t for t, _ in spec] == [t for t, _ in plain]
    assert sum(tm.get("draft_n_accepted", 0) for _, tm in spec) > 0


@pytest.mark.parametrize("args,needle", [
    (["--spec-type", "draft-mtp"], "--spec-draft-model"),
    (["--spec-type", "draft-mtp", "--spec-draft-model", TARGET], "not gemma4-assistant"),
    (["--spec-type", "draft-mtp", "--spec-draft-model", str(GOLDEN / "missing.gguf")], "missing.gguf"),
])
def test_mtp_bad_setup_refused(ember_bin, args, needle):
    p = subprocess.run([ember_bin, "serve", "-m", TARGET, "--port", "0", *args], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert needle in p.stderr, p.stderr


def test_mtp_draft_does_not_fit_target(ember_bin):
    small = str(GOLDEN / "gemma4" / "tiny-gemma4-kv.gguf")
    p = subprocess.run([ember_bin, "serve", "-m", small, "--port", "0", "--spec-type", "draft-mtp",
                        "--spec-draft-model", DRAFT], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "embedding_length_out" in p.stderr, p.stderr
