"""DFlash speculation through the real server (`--spec-type draft-dflash
--spec-draft-model FILE`, llama-server's flags) on the tiny golden files of
tests/golden/dflash/ (tests/golden/make_dflash.py: a Gemma 4 target and
DFlash drafts for it, converted by llama.cpp's convert_hf_to_gguf.py).

Lossless: at temperature 0 the completion's tokens equal those of the same
server without speculation, with the constant draft (its blocks are
accepted once the target repeats its token: timings.draft_n_accepted > 0)
and the random one (rejected). Servers run with EMBER_NO_GEMM=1 as in
test_spec.py (batch-invariant matmuls). Bad set-ups are refused at start.
"""
import os
import subprocess
from pathlib import Path

import pytest
import requests

from serverutil import Server, free_port

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "dflash"
TARGET = str(GOLDEN / "tiny-dflash-target.gguf")
DRAFT = str(GOLDEN / "tiny-dflash-draft.gguf")
DRAFT_CONST = str(GOLDEN / "tiny-dflash-draft-const.gguf")
# token ids: tiny-dflash.json's prompt, after which the target repeats the
# constant draft's token ("call", 417) from its third token on
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


def complete(srv, prompt, n=32):
    r = requests.post(srv.base + "/v1/completions", timeout=120, json={
        "prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 1})
    r.raise_for_status()
    d = r.json()
    return d["choices"][0]["logprobs"]["tokens"], d["timings"]


@pytest.fixture(scope="module")
def reference(ember_bin):
    srv = start(ember_bin)
    try:
        yield [complete(srv, p)[0] for p in PROMPTS]
    finally:
        srv.stop()


@pytest.mark.parametrize("draft,accepting", [(DRAFT_CONST, True), (DRAFT, False)])
def test_dflash_greedy_identical(ember_bin, reference, draft, accepting):
    srv = start(ember_bin, "--spec-type", "draft-dflash", "--spec-draft-model", draft, "--spec-draft-n-max", "7",
                "--spec-draft-p-min", "0", "--spec-adaptive", "off")
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
    finally:
        srv.stop()


@pytest.mark.parametrize("args,needle", [
    (["--spec-type", "draft-dflash"], "--spec-draft-model"),
    (["--spec-type", "draft-dflash", "--spec-draft-model", TARGET], "not dflash"),
    (["--spec-type", "draft-dflash", "--spec-draft-model", str(GOLDEN / "missing.gguf")], "missing.gguf"),
])
def test_dflash_bad_setup_refused(ember_bin, args, needle):
    p = subprocess.run([ember_bin, "serve", "-m", TARGET, "--port", "0", *args], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert needle in p.stderr, p.stderr


def test_dflash_draft_does_not_fit_target(ember_bin):
    small = str(GOLDEN.parent / "gemma4" / "tiny-gemma4-kv.gguf")
    p = subprocess.run([ember_bin, "serve", "-m", small, "--port", "0", "--spec-type", "draft-dflash",
                        "--spec-draft-model", DRAFT], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "target_layers" in p.stderr, p.stderr


def test_dflash_llama_server_command_line(ember_bin, reference):
    """The issue's llama-server DFlash flags (without --spec-draft-p-min: llama.cpp's
    default 0 drafts the whole block) start a server that logs llama.cpp's
    DFlash parameters and stays lossless."""
    srv = start(ember_bin, "--spec-type", "draft-dflash", "--spec-draft-model", DRAFT_CONST, "--spec-draft-n-max", "7",
                "--spec-draft-ngl", "999")
    try:
        toks, _ = complete(srv, PROMPTS[0])
        assert toks == reference[0]
        log = Path(srv.log.name).read_text() if srv.log.name != os.devnull else None
    finally:
        srv.stop()
    if log is not None:
        assert "block_size=8, mask_token_id=4, n_extract=4" in log, log
        assert "p_min 0.00" in log, log


def test_dflash_sampled_identical_with_seed(ember_bin):
    """At temperature > 0 the verifier draws each emitted token once from the
    target with the request's seeded sampler (spec.h: accept iff the draw
    equals the draft), so a seeded sampled completion is the same with and
    without DFlash, accepted blocks included (a wrong acceptance rule, e.g.
    accepting a draft the draw did not give, changes the tokens)."""
    def run(*extra):
        srv = start(ember_bin, *extra)
        try:
            out = []
            for p in PROMPTS:
                r = requests.post(srv.base + "/v1/completions", timeout=120, json={
                    "prompt": p, "max_tokens": 32, "temperature": 0.5, "seed": 1, "logprobs": 1})
                r.raise_for_status()
                d = r.json()
                out.append((d["choices"][0]["logprobs"]["tokens"], d["timings"].get("draft_n_accepted", 0)))
            return out
        finally:
            srv.stop()
    plain = run()
    spec = run("--spec-type", "draft-dflash", "--spec-draft-model", DRAFT_CONST, "--spec-draft-n-max", "7",
               "--spec-adaptive", "off")
    assert [t for t, _ in spec] == [t for t, _ in plain]
    assert sum(a for _, a in spec) > 0
