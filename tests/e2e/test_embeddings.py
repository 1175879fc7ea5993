"""`ember serve --embedding` on the real models: POST /v1/embeddings (the official
openai client), llama-server's native /embeddings and /embedding.

Expected vectors and token counts come from llama.cpp's llama-embedding on the
same GGUF files (tests/golden/embed/<model>.json, made by
make_embed_goldens.py beside it): mean, cls and last pooling, Euclidean
normalization (llama-server's default embd_normalize 2), and per-token rows
with pooling none. A vector passes at cosine >= 1 - 1e-4 against llama.cpp's
single-token arithmetic (last and per-token rows from -ub 1 runs, mean as the
mean of those rows, cls from position 0) and against llama-embedding's own
--pooling mean (one ubatch per prompt) at least as closely as llama.cpp's
single-token run is to it (batched_vs_single, minus 1e-4: Gemma 3 differs
from itself by up to 8e-4 between the two batch shapes; SmolLM2 not at all). Error shapes and
codes follow llama-server's handle_embeddings_impl (tools/server/
server-context.cpp, llama-cpp-python 0.3.36); 'dimensions' is refused (400).
"""
import base64
import concurrent.futures as cf
import json
import math
import pathlib
import struct
import subprocess

import openai
import pytest
import requests

from serverutil import Server, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = {m: json.loads((ROOT / f"tests/golden/embed/{m}.json").read_text()) for m in ("gemma3-270m", "smollm2-135m")}
N_CTX = 256
COS_MIN = 1 - 1e-4


def cosine(a, b):
    assert len(a) == len(b)
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def norm2(a):
    return math.sqrt(sum(x * x for x in a))


def check(model, pooling, i, got):
    """Vector `got` of text i against llama.cpp (see the top of the file)."""
    g = GOLDEN[model]
    want = g["pooling"]["mean_single" if pooling == "mean" else pooling][i]
    assert len(got) == len(want)
    assert cosine(got, want) >= COS_MIN, (model, pooling, i, cosine(got, want))
    if pooling == "mean":
        c = cosine(got, g["pooling"]["mean"][i])
        assert c >= min(COS_MIN, g["batched_vs_single"][i] - 1e-4), (model, i, c, g["batched_vs_single"][i])


@pytest.fixture(scope="module")
def servers(ember_bin, gemma3_path, smollm2_path):
    """One server per (model, pooling), started on first use."""
    paths = {"gemma3-270m": gemma3_path, "smollm2-135m": smollm2_path}
    running = {}

    def get(model, pooling, *extra):
        key = (model, pooling, extra)
        if key not in running:
            port = free_port()
            argv = [ember_bin, "serve", "-m", paths[model], "-c", str(2 * N_CTX), "--kv-unified-per-slot", str(N_CTX),
                    "-np", "2", "-t", "2", "--port", str(port), "--alias", model]
            if pooling:
                argv += ["--embedding", "--pooling", pooling]
            running[key] = Server(argv + list(extra), port)
        return running[key]

    yield get
    for s in running.values():
        assert s.stop() == 0


def client_for(s):
    return openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
@pytest.mark.parametrize("model", ["gemma3-270m", "smollm2-135m"])
def test_openai_client_matches_llama_embedding(servers, model, pooling):
    g = GOLDEN[model]
    s = servers(model, pooling)
    r = client_for(s).embeddings.create(model=model, input=g["texts"])   # the client asks for base64 and decodes it
    assert r.object == "list" and r.model == model
    assert [d.index for d in r.data] == list(range(len(g["texts"])))
    assert r.usage.prompt_tokens == sum(g["n_tokens"]) == r.usage.total_tokens
    for i, d in enumerate(r.data):
        assert d.object == "embedding"
        assert abs(norm2(d.embedding) - 1) < 1e-5   # Euclidean, as llama-server's embd_normalize 2
        check(model, pooling, i, d.embedding)


@pytest.mark.parametrize("model", ["gemma3-270m", "smollm2-135m"])
def test_each_text_alone_and_float_format(servers, model):
    """One string per request, float encoding: the same vectors and token counts."""
    g = GOLDEN[model]
    s = servers(model, "mean")
    for i, (text, n) in enumerate(zip(g["texts"], g["n_tokens"])):
        r = requests.post(s.base + "/v1/embeddings", json={"input": text, "encoding_format": "float"}, timeout=120)
        assert r.status_code == 200, r.text
        j = r.json()
        assert j["usage"] == {"prompt_tokens": n, "total_tokens": n}
        assert len(j["data"]) == 1 and "encoding_format" not in j["data"][0]
        check(model, "mean", i, j["data"][0]["embedding"])


def test_base64_is_little_endian_float32(servers):
    g = GOLDEN["gemma3-270m"]
    s = servers("gemma3-270m", "last")
    j = requests.post(s.base + "/v1/embeddings", json={"input": g["texts"][1], "encoding_format": "base64"},
                      timeout=120).json()
    d = j["data"][0]
    assert d["encoding_format"] == "base64" and d["object"] == "embedding"
    raw = base64.b64decode(d["embedding"])
    vec = struct.unpack(f"<{len(raw) // 4}f", raw)
    check("gemma3-270m", "last", 1, vec)


def test_token_array_inputs(servers):
    """A token array, and a list of token arrays, embed as their text does
    (tokens from /tokenize with add_special, counted as llama.cpp counts them)."""
    g = GOLDEN["gemma3-270m"]
    s = servers("gemma3-270m", "mean")
    toks = [requests.post(s.base + "/tokenize", json={"content": t, "add_special": True}).json()["tokens"]
            for t in g["texts"][:2]]
    assert [len(t) for t in toks] == g["n_tokens"][:2]
    one = requests.post(s.base + "/v1/embeddings", json={"input": toks[0]}, timeout=120).json()
    assert len(one["data"]) == 1 and one["usage"]["prompt_tokens"] == len(toks[0])
    check("gemma3-270m", "mean", 0, one["data"][0]["embedding"])
    r = client_for(s).embeddings.create(model="x", input=toks)
    assert len(r.data) == 2
    for i, d in enumerate(r.data):
        check("gemma3-270m", "mean", i, d.embedding)


@pytest.mark.parametrize("path", ["/embeddings", "/embedding"])
def test_native_shape_pooled(servers, path):
    g = GOLDEN["smollm2-135m"]
    s = servers("smollm2-135m", "cls")
    r = requests.post(s.base + path, json={"content": g["texts"][:2]}, timeout=120)
    assert r.status_code == 200, r.text
    j = r.json()
    assert isinstance(j, list) and [e["index"] for e in j] == [0, 1]
    for i, e in enumerate(j):
        assert len(e["embedding"]) == 1   # one pooled row
        assert abs(norm2(e["embedding"][0]) - 1) < 1e-5
        check("smollm2-135m", "cls", i, e["embedding"][0])


def test_content_field_on_v1_answers_native(servers):
    """llama-server: "content" instead of "input" is not OpenAI's and gets the native answer."""
    s = servers("smollm2-135m", "cls")
    j = requests.post(s.base + "/v1/embeddings", json={"content": "hello world"}, timeout=120).json()
    assert isinstance(j, list) and len(j[0]["embedding"]) == 1


@pytest.mark.parametrize("model", ["gemma3-270m", "smollm2-135m"])
def test_pooling_none_per_token_rows(servers, model):
    g = GOLDEN[model]["none"]
    s = servers(model, "none")
    r = requests.post(s.base + "/embeddings", json={"content": g["text"]}, timeout=120)
    assert r.status_code == 200, r.text
    rows = r.json()[0]["embedding"]
    assert len(rows) == len(g["rows"])   # one per token, as llama.cpp tokenized the text
    for got, want in zip(rows, g["rows"]):
        assert cosine(got, want) >= COS_MIN
        assert abs(norm2(got) / norm2(want) - 1) < 1e-3   # not normalized, as llama-server
    # OpenAI's route refuses pooling none (llama-server's message)
    e = requests.post(s.base + "/v1/embeddings", json={"input": "x"}, timeout=30)
    assert e.status_code == 400
    assert e.json()["error"]["message"] == "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
    assert e.json()["error"]["type"] == "invalid_request_error"


def test_batched_with_chats_no_slot_leak(servers):
    """Eight embedding requests (two prompts each) and four chats at once over
    two slots: every vector still matches, every chat finishes, no slot stays busy."""
    g = GOLDEN["smollm2-135m"]
    s = servers("smollm2-135m", "last")
    c = client_for(s)

    def embed(i):
        a, b = i % 4, (i + 1) % 4
        return i, c.embeddings.create(model="x", input=[g["texts"][a], g["texts"][b]])

    def chat(i):
        return c.chat.completions.create(model="x", messages=[{"role": "user", "content": f"Count to {i + 3}."}],
                                         max_tokens=24, temperature=0)

    with cf.ThreadPoolExecutor(12) as ex:
        chats = [ex.submit(chat, i) for i in range(4)]
        embs = [ex.submit(embed, i) for i in range(8)]
        for f in embs:
            i, r = f.result()
            for d, k in zip(r.data, (i % 4, (i + 1) % 4)):
                check("smollm2-135m", "last", k, d.embedding)
        for f in chats:
            r = f.result()
            assert r.choices[0].message.content and r.usage.completion_tokens > 0
    slots = s.wait_idle(timeout=10)
    assert not any(x["is_processing"] for x in slots)


def test_more_prompts_than_the_queue_holds(servers):
    """300 prompts in one request (the engine queues 256 beyond the slots):
    the later ones wait for the earlier ones instead of a 503."""
    g = GOLDEN["smollm2-135m"]
    s = servers("smollm2-135m", "cls")
    r = client_for(s).embeddings.create(model="x", input=g["texts"] * 75)
    assert [d.index for d in r.data] == list(range(300))
    assert r.usage.prompt_tokens == 75 * sum(g["n_tokens"])
    for i in (0, 1, 150, 299):
        check("smollm2-135m", "cls", i % 4, r.data[i].embedding)
    assert not any(x["is_processing"] for x in s.wait_idle(timeout=10))


def expect_400(s, body, param=None, contains=None, status=400):
    r = requests.post(s.base + "/v1/embeddings", json=body, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    if param is not None:
        assert err["param"] == param
    if contains:
        assert contains in err["message"]
    return err


def test_errors_in_openai_shape(servers):
    s = servers("smollm2-135m", "mean")
    c = client_for(s)
    with pytest.raises(openai.BadRequestError) as ei:
        c.embeddings.create(model="x", input=[])
    assert ei.value.status_code == 400 and "must not be empty" in ei.value.message
    # SmolLM2 adds no BOS: an empty string has no tokens (llama-server's message)
    expect_400(s, {"input": ""}, contains="Input content cannot be empty")
    expect_400(s, {"input": ["ok", ""]}, contains="Input content cannot be empty")
    expect_400(s, {}, contains='"input" or "content" must be provided')
    expect_400(s, {"input": "x", "dimensions": 8}, param="dimensions")
    expect_400(s, {"input": "x", "encoding_format": "int8"}, param="encoding_format")
    expect_400(s, {"input": [1, 2, 10 ** 7]}, param="input", contains="token id")
    expect_400(s, {"input": {"text": "x"}}, param="input")
    long_text = "word " * (2 * N_CTX)
    err = expect_400(s, {"input": ["short", long_text]})
    assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == N_CTX and err["n_prompt_tokens"] >= N_CTX
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(model="x", input=long_text)
    # nothing was left queued or running
    assert not any(x["is_processing"] for x in s.wait_idle(timeout=10))
    assert c.embeddings.create(model="x", input="still fine").data


def test_without_embedding_flag_is_501(servers):
    s = servers("smollm2-135m", None)
    for path in ("/v1/embeddings", "/embeddings", "/embedding"):
        r = requests.post(s.base + path, json={"input": "x"}, timeout=30)
        assert r.status_code == 501
        assert r.json()["error"]["type"] == "not_supported_error"
        assert "--embeddings" in r.json()["error"]["message"]
    # completions still work beside embeddings when the flag is on (llama-server 0.3.36 keeps them)
    e = servers("smollm2-135m", "mean")
    r = client_for(e).completions.create(model="x", prompt="One, two,", max_tokens=4, temperature=0)
    assert r.choices[0].text


def test_pooling_flag_and_help(ember_bin, smollm2_path):
    p = subprocess.run([ember_bin, "serve", "-m", smollm2_path, "--embedding", "--pooling", "max"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--pooling must be" in p.stderr
    p = subprocess.run([ember_bin, "serve", "-m", smollm2_path, "--pooling", "rank"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "rank" in p.stderr
    h = subprocess.run([ember_bin, "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "--embedding" in h and "--pooling" in h
