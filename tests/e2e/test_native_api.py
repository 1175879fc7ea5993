"""llama.cpp's native completion API (POST /completion, /completions without
/v1) on `ember serve` with SmolLM2-135M-Instruct.

Independent values: the field sets are llama-server's (llama.cpp
tools/server/server-task.cpp to_json_non_oaicompat of the final and partial
results, completion_token_output::probs_vector_to_json, server-common.cpp
server_slot_stats::to_json, format_error_response), written out below; the
greedy replies and prompt token counts are llama-server's own on the same
GGUF (tests/golden/server/server_goldens.json, made by
tests/golden/server/make_server_goldens.py); token ids are checked against
what /tokenize gives for the text, probabilities against the laws of
probability (a top list sums to at most 1 and its first entry is the greedy
token).
"""
import json
import math
import pathlib

import pytest
import requests

from serverutil import Server, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests/golden/server/server_goldens.json").read_text())
CASES = GOLDEN["models"]["smollm2"]

# server_task_result_cmpl_final::to_json_non_oaicompat
FINAL_FIELDS = {"index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted", "tokens_evaluated",
                "generation_settings", "prompt", "has_new_line", "truncated", "stop_type", "stopping_word",
                "tokens_cached", "timings"}
# server_task_result_cmpl_partial::to_json_non_oaicompat
PARTIAL_FIELDS = {"index", "content", "tokens", "stop", "id_slot", "tokens_predicted", "tokens_evaluated"}
# server_slot_stats::to_json (draft_n / draft_n_accepted only when speculating)
TIMINGS_FIELDS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                  "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}
# task_params::to_json, the fields ember has
SETTINGS_FIELDS = {"seed", "temperature", "top_k", "top_p", "min_p", "repeat_last_n", "repeat_penalty",
                   "presence_penalty", "frequency_penalty", "stop", "max_tokens", "n_predict", "n_keep", "ignore_eos",
                   "stream", "logit_bias", "n_probs", "min_keep", "grammar", "post_sampling_probs"}
PROMPT = "The capital of France is"
EOG = (0, 1, 2)   # SmolLM2: <|endoftext|>, <|im_start|>, <|im_end|> (tokenizer.ggml unknown/bos/eos_token_id)


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def srv(ember_bin, smollm2_path, slot_dir):
    port = free_port()
    s = Server([ember_bin, "serve", "-m", smollm2_path, "-c", "2048", "-np", "2", "-t", "2", "--port", str(port),
                "--slot-save-path", str(slot_dir)], port)
    yield s
    assert s.stop() == 0


def post(srv, body, path="/completion", status=200):
    r = requests.post(srv.base + path, json=body, timeout=120)
    assert r.status_code == status, r.text
    return r.json()


def tokenize(srv, text, add_special=False):
    return post(srv, {"content": text, "add_special": add_special}, "/tokenize")["tokens"]


def native_error(srv, body, status=400):
    """llama-server's error object: {"error": {"code", "message", "type"}}."""
    e = post(srv, body, status=status)["error"]
    assert e["code"] == status and e["type"] and e["message"]
    return e


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["messages"][-1]["content"][:20])
def test_golden_prompt_as_native_completion(srv, case):
    n = GOLDEN["max_tokens"]
    d = post(srv, {"prompt": case["prompt"], "n_predict": n, "temperature": 0})
    assert set(d) >= FINAL_FIELDS and "completion_probabilities" not in d
    assert set(d["timings"]) >= TIMINGS_FIELDS and "draft_n" not in d["timings"]
    assert set(d["generation_settings"]) >= SETTINGS_FIELDS
    assert d["stop"] is True and d["truncated"] is False and d["index"] == 0
    assert d["tokens"] == []                                  # return_tokens is off by default
    assert d["tokens_evaluated"] == case["prompt_tokens"]     # llama-server's count
    assert d["content"].startswith(case["stable_prefix"])     # llama-server's greedy reply, up to its first near-tie
    assert d["prompt"] == case["prompt"]
    assert d["has_new_line"] == ("\n" in d["content"])
    assert d["generation_settings"]["n_predict"] == n and d["generation_settings"]["temperature"] == 0
    if case["finish_reason"] == "length":
        assert d["stop_type"] == "limit" and d["tokens_predicted"] == n
    else:
        assert d["stop_type"] == "eos" and d["tokens_predicted"] <= n   # the end token counts, as llama-server counts it
    assert d["stopping_word"] == ""
    assert d["timings"]["predicted_n"] == d["tokens_predicted"]
    assert d["timings"]["prompt_n"] + d["timings"]["cache_n"] == d["tokens_evaluated"]


def test_tokens_are_the_text_tokenized_and_match_openai_greedy(srv):
    d = post(srv, {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "return_tokens": True})
    assert d["tokens"] == tokenize(srv, d["content"])
    assert len(d["tokens"]) == d["tokens_predicted"] == 8
    assert d["tokens_evaluated"] == len(tokenize(srv, PROMPT, add_special=True))
    o = post(srv, {"prompt": PROMPT, "max_tokens": 8, "temperature": 0}, "/v1/completions")
    assert o["object"] == "text_completion" and o["choices"][0]["text"] == d["content"]
    # /completions without /v1 is the native endpoint, as in llama-server
    d2 = post(srv, {"prompt": PROMPT, "n_predict": 8, "temperature": 0}, "/completions")
    assert set(d2) >= FINAL_FIELDS and d2["content"] == d["content"]


def test_prompt_shapes(srv):
    base = {"n_predict": 6, "temperature": 0, "return_tokens": True}
    text = post(srv, dict(base, prompt=PROMPT))
    ids = tokenize(srv, PROMPT, add_special=True)
    assert post(srv, dict(base, prompt=ids))["content"] == text["content"]
    # mixed: ids then text; the text after the first element gets no BOS
    head, tail = tokenize(srv, "The"), " capital of France is"
    mixed = post(srv, dict(base, prompt=head + [tail]))
    assert mixed["tokens_evaluated"] == len(head) + len(tokenize(srv, tail))
    assert post(srv, dict(base, prompt={"prompt_string": PROMPT}))["content"] == text["content"]
    # a batch: an array of results in prompt order, each the same as alone
    other = "Once upon a time"
    batch = post(srv, dict(base, prompt=[PROMPT, other, ids]))
    assert isinstance(batch, list) and [b["index"] for b in batch] == [0, 1, 2]
    assert batch[0]["content"] == text["content"] == batch[2]["content"]
    assert batch[1]["content"] == post(srv, dict(base, prompt=other))["content"]
    assert batch[1]["tokens_evaluated"] == len(tokenize(srv, other, add_special=True))
    # a batch of one is one object
    one = post(srv, dict(base, prompt=[PROMPT]))
    assert isinstance(one, dict) and one["content"] == text["content"]


def test_n_probs(srv):
    d = post(srv, {"prompt": PROMPT, "n_predict": 6, "temperature": 0, "n_probs": 3, "return_tokens": True})
    probs = d["completion_probabilities"]
    assert len(probs) == 6 and [p["id"] for p in probs] == d["tokens"]
    text = ""
    for p in probs:
        assert set(p) == {"id", "token", "bytes", "logprob", "top_logprobs"}
        assert bytes(p["bytes"]).decode("utf-8", "replace") == p["token"]
        top = p["top_logprobs"]
        assert len(top) == 3 and all(set(t) == {"id", "token", "bytes", "logprob"} for t in top)
        assert top[0]["id"] == p["id"] and top[0]["logprob"] == pytest.approx(p["logprob"])   # greedy: the top-1
        lps = [t["logprob"] for t in top]
        assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
        assert sum(math.exp(lp) for lp in lps) <= 1 + 1e-6
        text += p["token"]
    assert text == d["content"]
    assert d["generation_settings"]["n_probs"] == 3


def test_post_sampling_probs(srv):
    """post_sampling_probs: "prob" / "top_probs" after the sampler chain
    (llama-server's populate_token_probs). With top_k 5, temperature 1 and
    top_p / min_p off, the chain keeps the 5 largest logits and renormalizes,
    so each list sums to 1 and equals the raw top-5 probabilities (the
    n_probs answer of the same seeded request) divided by their sum; the
    chosen token's prob is its entry. Greedy: one candidate of prob 1."""
    body = {"prompt": "Once upon a time", "n_predict": 4, "temperature": 1.0, "top_k": 5, "top_p": 1, "min_p": 0,
            "seed": 3, "n_probs": 5, "return_tokens": True}
    post_d = post(srv, dict(body, post_sampling_probs=True))
    raw_d = post(srv, body)
    assert post_d["tokens"] == raw_d["tokens"]          # the same draws
    assert post_d["generation_settings"]["post_sampling_probs"] is True
    for p, r in zip(post_d["completion_probabilities"], raw_d["completion_probabilities"]):
        assert set(p) == {"id", "token", "bytes", "prob", "top_probs"}
        top = p["top_probs"]
        assert all(set(t) == {"id", "token", "bytes", "prob"} for t in top)
        assert sum(t["prob"] for t in top) == pytest.approx(1, abs=1e-5)
        z = sum(math.exp(t["logprob"]) for t in r["top_logprobs"])
        assert [t["id"] for t in top] == [t["id"] for t in r["top_logprobs"]]
        for t, rt in zip(top, r["top_logprobs"]):
            assert t["prob"] == pytest.approx(math.exp(rt["logprob"]) / z, rel=1e-4)
        assert p["prob"] == pytest.approx(next(t["prob"] for t in top if t["id"] == p["id"]))
    g = post(srv, {"prompt": "Once upon a time", "n_predict": 3, "temperature": 0, "n_probs": 3,
                   "post_sampling_probs": True})
    assert all(p["prob"] == 1 and [t["id"] for t in p["top_probs"]] == [p["id"]] for p in g["completion_probabilities"])


def test_logit_bias_bans(srv):
    base = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "return_tokens": True}
    first = post(srv, base)["tokens"][0]
    for lb in ([[first, False]], {str(first): False}, {str(first): -100}):
        d = post(srv, dict(base, logit_bias=lb))
        assert first not in d["tokens"]
    # a string's tokens each get the bias
    word = " Paris"
    wt = tokenize(srv, word)
    d = post(srv, dict(base, logit_bias=[[word, False]]))
    assert not set(wt) & set(d["tokens"])
    assert {b["token"] for b in d["generation_settings"]["logit_bias"]} == set(wt)


def test_stop_word(srv):
    full = post(srv, {"prompt": PROMPT, "n_predict": 20, "temperature": 0})["content"]
    word = full.split()[1]          # a word the greedy reply goes on to write
    d = post(srv, {"prompt": PROMPT, "n_predict": 20, "temperature": 0, "stop": ["", word]})
    assert d["stop_type"] == "word" and d["stopping_word"] == word
    assert d["content"] == full[:full.index(word)]
    assert d["generation_settings"]["stop"] == [word]   # empty stop strings are dropped


def test_stream(srv):
    body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "return_tokens": True}
    whole = post(srv, body)
    r = requests.post(srv.base + "/completion", json=dict(body, stream=True), stream=True, timeout=120)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    raw = r.text
    assert "[DONE]" not in raw
    events = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: ")]
    parts, last = events[:-1], events[-1]
    assert parts and all(set(e) >= PARTIAL_FIELDS and e["stop"] is False for e in parts)
    assert "".join(e["content"] for e in parts) == whole["content"]
    assert [t for e in parts for t in e["tokens"]] == whole["tokens"]
    assert set(last) >= FINAL_FIELDS and last["stop"] is True
    assert last["content"] == "" and last["tokens"] == []     # streamed already
    assert last["tokens_predicted"] == 8 and last["stop_type"] == "limit"


def test_n_completions_with_seed(srv):
    d = post(srv, {"prompt": "Once upon a time", "n_predict": 10, "temperature": 1.0, "seed": 42, "n": 2})
    assert isinstance(d, list) and [x["index"] for x in d] == [0, 1]
    # the extra completion samples with seed + 1, as llama-server's child tasks
    assert [x["generation_settings"]["seed"] for x in d] == [42, 43]
    case = next(c for c in CASES if len(c["stable_prefix"]) > 10)
    d = post(srv, {"prompt": [case["prompt"]] * 2, "n_predict": GOLDEN["max_tokens"], "temperature": 0, "n": 2})
    assert [x["index"] for x in d] == [0, 1, 2, 3]
    assert all(x["content"].startswith(case["stable_prefix"]) for x in d)


def test_n_predict_zero_fills_the_cache(srv):
    """n_predict 0 (llama-server's schema: "no tokens will be generated but
    the prompt is evaluated into the cache")."""
    prompt = "A prompt evaluated into the cache and nothing more, then reused by the next request"
    n = len(tokenize(srv, prompt))
    d = post(srv, {"prompt": prompt, "n_predict": 0, "id_slot": 0})
    assert d["content"] == "" and d["tokens_predicted"] == 0 and d["stop_type"] == "limit"
    assert d["tokens_evaluated"] == n and d["timings"]["prompt_n"] == n
    again = post(srv, {"prompt": prompt, "n_predict": 1, "id_slot": 0})
    assert again["timings"]["cache_n"] == n - 1


def test_cache_prompt_and_id_slot(srv):
    body = {"prompt": "A long prompt about the history of the city of Paris and its river", "n_predict": 2,
            "temperature": 0}
    post(srv, body)
    again = post(srv, body)
    assert again["timings"]["cache_n"] > 0 and again["tokens_cached"] >= again["tokens_evaluated"]
    cold = post(srv, dict(body, cache_prompt=False))
    assert cold["timings"]["cache_n"] == 0 and cold["timings"]["prompt_n"] == cold["tokens_evaluated"]
    assert cold["content"] == again["content"]
    for slot in (0, 1):
        assert post(srv, dict(body, id_slot=slot))["id_slot"] == slot


def test_errors(srv):
    assert "prompt" in native_error(srv, {"n_predict": 2})["message"]
    native_error(srv, {"prompt": []})
    native_error(srv, {"prompt": 5})
    native_error(srv, {"prompt": [1, 10 ** 9]})
    native_error(srv, {"prompt": "x", "n_probs": 21})
    native_error(srv, {"prompt": "x", "n_probs": "3"})
    native_error(srv, {"prompt": "x", "post_sampling_probs": 1})
    native_error(srv, {"prompt": "x", "id_slot": 2})
    native_error(srv, {"prompt": "x", "n": 3})              # more completions than slots
    native_error(srv, {"prompt": "x", "logit_bias": [[1, "no"]]})
    native_error(srv, {"prompt": "x", "logit_bias": 3})
    native_error(srv, {"prompt": "x", "temperature": "hot"})
    native_error(srv, {"prompt": "x", "return_tokens": 1})
    e = native_error(srv, {"prompt": "word " * 3000, "n_predict": 1})
    assert e["type"] == "exceed_context_size_error" and e["n_ctx"] == 2048 and e["n_prompt_tokens"] > 2048
    r = requests.post(srv.base + "/completion", data=b"{not json", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    assert requests.get(srv.base + "/health", timeout=5).status_code == 200


def test_openai_n_choices(srv):
    """n > 1 on the OpenAI endpoints, read with the official client: choices
    with index 0..n-1, each greedy one llama-server's greedy reply (the
    golden's stable prefix); usage counts every choice; a stream's chunks
    carry their choice's index and add up to the same choices. (Sampled
    choices are not compared with lone requests: a batch of two rows may
    round differently from one row, and sampling then parts ways.)"""
    import openai
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)
    case = next(c for c in CASES if len(c["stable_prefix"]) > 10)
    msgs, n_max = case["messages"], GOLDEN["max_tokens"]
    r = client.chat.completions.create(model="m", messages=msgs, n=2, max_tokens=n_max, temperature=0)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.message.content.startswith(case["stable_prefix"]) for c in r.choices)
    assert r.usage.prompt_tokens == case["prompt_tokens"] and r.usage.completion_tokens == 2 * n_max
    chat = {0: "", 1: ""}
    for chunk in client.chat.completions.create(model="m", messages=msgs, n=2, max_tokens=n_max, temperature=0,
                                                stream=True):
        for c in chunk.choices:
            chat[c.index] += c.delta.content or ""
    assert all(t.startswith(case["stable_prefix"]) for t in chat.values())
    # sampled: n choices of n_max tokens each, streamed by index
    whole = client.completions.create(model="m", prompt="Once upon a time", n=2, seed=3, max_tokens=6,
                                      temperature=1.0, logit_bias={str(t): -100 for t in EOG})
    assert [c.index for c in whole.choices] == [0, 1] and whole.usage.completion_tokens == 12
    texts, usage = {0: "", 1: ""}, None
    for chunk in client.completions.create(model="m", prompt="Once upon a time", n=2, seed=3, max_tokens=6,
                                           temperature=1.0, stream=True, stream_options={"include_usage": True},
                                           logit_bias={str(t): -100 for t in EOG}):
        for c in chunk.choices:
            texts[c.index] += c.text
        usage = chunk.usage or usage
    assert all(texts.values()) and usage.completion_tokens == 12
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=msgs, n=3, max_tokens=2)   # more than --parallel (2)


def test_server_sampling_defaults(ember_bin, smollm2_path):
    """--temp, --seed, -n, --top-k (llama-server's flags) apply to requests
    that leave the field out, and /props shows them."""
    port = free_port()
    s = Server([ember_bin, "serve", "-m", smollm2_path, "-c", "1024", "-np", "1", "-t", "2", "--port", str(port),
                "--temp", "0", "--seed", "11", "-n", "5", "--top-k", "1"], port)
    try:
        params = requests.get(s.base + "/props", timeout=10).json()["default_generation_settings"]["params"]
        assert params["temperature"] == 0 and params["seed"] == 11 and params["n_predict"] == 5
        assert params["top_k"] == 1 and params["top_p"] == pytest.approx(0.95)   # not given: the usual default
        d = post(s, {"prompt": PROMPT})
        g = d["generation_settings"]
        assert d["tokens_predicted"] == 5 and d["stop_type"] == "limit"
        assert g["temperature"] == 0 and g["seed"] == 11 and g["top_k"] == 1
        assert post(s, {"prompt": PROMPT, "n_predict": 3})["tokens_predicted"] == 3
        assert post(s, {"prompt": PROMPT, "temperature": 1.0})["generation_settings"]["temperature"] == 1.0
        o = post(s, {"prompt": PROMPT}, "/v1/completions")
        assert o["usage"]["completion_tokens"] == 5 and o["choices"][0]["text"] == d["content"]
        assert post(s, {"prompt": PROMPT, "max_tokens": 2}, "/v1/completions")["usage"]["completion_tokens"] == 2
        case = next(c for c in CASES if len(c["stable_prefix"]) > 10)
        chat = post(s, {"messages": case["messages"]}, "/v1/chat/completions")   # greedy by --temp 0
        reply = chat["choices"][0]["message"]["content"]   # llama-server's greedy reply, as far as it is stable
        assert case["stable_prefix"].startswith(reply) or reply.startswith(case["stable_prefix"])
        assert chat["usage"]["completion_tokens"] == 5
    finally:
        assert s.stop() == 0


# server_task_result_metrics::to_metrics: llama-server's series and their types
LLAMACPP_COUNTERS = ["prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total",
                     "tokens_predicted_total", "tokens_predicted_seconds_total", "n_decode_total", "n_tokens_max",
                     "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
                     "spec_decode_num_drafts_total"]
LLAMACPP_GAUGES = ["prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred",
                   "n_busy_slots_per_decode"]


def test_metrics_llamacpp_names_and_spec_per_method(ember_bin, smollm2_path):
    """/metrics carries llama-server's llamacpp:* series beside ember's, with
    its names and types; the counters add up to what the answers reported
    (prompt lengths from /tokenize, tokens predicted, draft_n and
    draft_n_accepted of each answer's timings, as llama-server names them),
    and drafted / accepted tokens per speculative method."""
    from prometheus_client.parser import text_string_to_metric_families
    port = free_port()
    s = Server([ember_bin, "serve", "-m", smollm2_path, "-c", "1024", "-np", "1", "-t", "2", "--port", str(port),
                "--metrics", "--spec-type", "ngram", "--spec-draft-n-max", "4"], port)
    try:
        line = "apples, oranges, pears, plums, cherries, "
        prompts = [line * 4, "1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2"]
        outs = [post(s, {"prompt": p, "n_predict": 24, "temperature": 0, "logit_bias": [[t, False] for t in EOG]})
                for p in prompts]
        n_prompt = sum(len(tokenize(s, p, add_special=True)) for p in prompts)
        text = requests.get(s.base + "/metrics", timeout=10).text
        fams = {f.name: f for f in text_string_to_metric_families(text)}

        def val(name):
            return fams[name].samples[0].value

        for n in LLAMACPP_COUNTERS:
            # the parser drops a counter's _total from the family name
            f = fams["llamacpp:" + n[:-len("_total")] if n.endswith("_total") else "llamacpp:" + n]
            assert f.type == "counter", n
        for n in LLAMACPP_GAUGES:
            assert fams["llamacpp:" + n].type == "gauge", n
        assert val("llamacpp:tokens_predicted") == sum(o["tokens_predicted"] for o in outs) == 48
        assert val("llamacpp:prompt_tokens") + val("llamacpp:prompt_tokens_cached") == n_prompt
        drafted = sum(o["timings"].get("draft_n", 0) for o in outs)
        accepted = sum(o["timings"].get("draft_n_accepted", 0) for o in outs)
        assert drafted > 0 and 0 < accepted <= drafted          # the lists repeat: drafts are taken
        assert val("llamacpp:spec_decode_num_draft_tokens") == drafted
        assert val("llamacpp:spec_decode_num_accepted_tokens") == accepted
        assert 0 < val("llamacpp:spec_decode_num_drafts") <= drafted
        per_pos = {smp.labels["position"]: smp.value for smp in fams["llamacpp:spec_decode_num_accepted_tokens_per_pos"].samples}
        assert per_pos["0"] > 0 and sum(per_pos.values()) == accepted
        method = {smp.labels["method"]: smp.value for smp in fams["ember_spec_method_draft_tokens"].samples}
        assert method == {"ngram": drafted}
        assert fams["ember_spec_method_accepted_tokens"].samples[0].labels == {"method": "ngram"}
        assert fams["ember_spec_method_accepted_tokens"].samples[0].value == accepted
        # one slot: every step had exactly one busy slot; nothing runs or waits now
        assert val("llamacpp:n_busy_slots_per_decode") == 1
        assert val("llamacpp:requests_processing") == 0 and val("llamacpp:requests_deferred") == 0
        longest = max(o["tokens_evaluated"] + o["tokens_predicted"] for o in outs)
        assert max(o["tokens_evaluated"] for o in outs) < val("llamacpp:n_tokens_max") <= longest
        # fewer decode steps than tokens: accepted drafts save steps
        assert val("llamacpp:n_decode") < 48
    finally:
        assert s.stop() == 0


@pytest.fixture(scope="module")
def fim_srv(ember_bin, smollm2_path, tmp_path_factory):
    """SmolLM2 with FIM tokens named in its metadata, written by gguf-py's own
    gguf_new_metadata script: tokenizer.ggml.fim_pre/suf/mid_token_id = 8, 9,
    10 (<issue_start>, <issue_comment>, <issue_closed>, control tokens of
    its vocabulary). Its <reponame> is llama.cpp's FIM_REP by name; it has no
    <|file_sep|> (FIM_SEP)."""
    import subprocess
    import sys
    out = tmp_path_factory.mktemp("fim") / "smollm2-fim.gguf"
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", smollm2_path, str(out), "--force",
                    "--special-token-by-id", "fim_pre", "8", "--special-token-by-id", "fim_suf", "9",
                    "--special-token-by-id", "fim_mid", "10"], check=True, capture_output=True)
    port = free_port()
    s = Server([ember_bin, "serve", "-m", str(out), "-c", "2048", "-np", "1", "-t", "2", "--port", str(port)], port)
    yield s
    assert s.stop() == 0


def plain_tokens(srv, text):
    return post(srv, {"content": text, "add_special": False, "parse_special": False}, "/tokenize")["tokens"]


def test_infill_prompt_layout(fim_srv):
    """/infill lays the prompt out as llama-server's format_prompt_infill
    (server-common.cpp): [FIM_REP]myproject\\n, each input_extra chunk after
    a "--- snippet ---" line (no FIM_SEP in this vocabulary), [FIM_PRE]
    prefix prompt [FIM_SUF] suffix [FIM_MID]; the suffix cut to n_batch/4 -
    2 - |prompt| tokens (n_batch 512). Checked by the prompt text, its length,
    and a /completion of the expected ids giving the same greedy reply."""
    s = fim_srv
    prefix, prompt, suffix = "def add(a, b):\n    ", "return", "\n\nprint(add(1, 2))\n" + "x = 1\n" * 60
    extra = [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}]
    body = {"input_prefix": prefix, "input_suffix": suffix, "input_extra": extra, "prompt": prompt,
            "n_predict": 6, "temperature": 0, "cache_prompt": False}
    d = post(s, body, "/infill")
    assert set(d) >= FINAL_FIELDS
    snippet = "\n\n--- snippet ---\n\n"
    pt = tokenize(s, prompt)
    st = plain_tokens(s, suffix)
    n_suf = min(len(st), 512 // 4 - (2 + len(pt)))
    assert n_suf < len(st)                                  # the long suffix is cut
    ids = ([4] + plain_tokens(s, "myproject\n") + plain_tokens(s, snippet) + plain_tokens(s, extra[0]["text"]) +
           [8] + plain_tokens(s, prefix) + pt + [9] + st[:n_suf] + [10])
    assert d["tokens_evaluated"] == len(ids)
    assert d["prompt"].startswith("<reponame>myproject\n" + snippet + extra[0]["text"] + "<issue_start>" + prefix +
                                  prompt + "<issue_comment>\n\nprint(add(1, 2))\n")
    assert d["prompt"].endswith("<issue_closed>")
    same = post(s, {"prompt": ids, "n_predict": 6, "temperature": 0, "cache_prompt": False})
    assert same["content"] == d["content"] and same["tokens_evaluated"] == len(ids)
    # a mixed-array prefix and no prompt
    d2 = post(s, {"input_prefix": [prefix], "input_suffix": "", "n_predict": 2, "temperature": 0}, "/infill")
    assert d2["tokens_evaluated"] == 1 + len(plain_tokens(s, "myproject\n")) + 1 + len(plain_tokens(s, prefix)) + 2


def test_infill_errors(srv, fim_srv):
    e = post(srv, {"input_prefix": "a", "input_suffix": "b"}, "/infill", status=501)["error"]
    assert e["code"] == 501 and e["type"] == "not_supported_error"
    assert e["message"] == ("Infill is not supported by this model: prefix token is missing. suffix token is "
                            "missing. middle token is missing. ")
    for body in ({"input_suffix": "b"}, {"input_prefix": "a"}, {"input_prefix": "a", "input_suffix": "b", "prompt": 5},
                 {"input_prefix": "a", "input_suffix": "b", "input_extra": {"text": "x"}},
                 {"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "f"}]},
                 {"input_prefix": 3, "input_suffix": "b"}):
        r = requests.post(fim_srv.base + "/infill", json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["code"] == 400, body


def test_slot_save_erase_restore(srv, slot_dir, fim_srv):
    """POST /slots/{id}?action=save|erase|restore with llama-server's answer
    fields (server-task.cpp server_task_result_slot_save_load / _erase): the
    saved count is the tokens the slot's last answer left cached; after an
    erase the prompt is decoded afresh, after a restore it is read from the
    cache again (all but the last prompt token, which is decoded for its
    logits)."""
    prompt = "The history of the city of Paris and its river Seine"
    n_prompt = len(tokenize(srv, prompt))
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0, "id_slot": 1}
    first = post(srv, body)
    assert first["id_slot"] == 1
    saved = post(srv, {"filename": "paris.slot"}, "/slots/1?action=save")
    assert set(saved) == {"id_slot", "filename", "n_saved", "n_written", "timings"} and "save_ms" in saved["timings"]
    assert saved["id_slot"] == 1 and saved["filename"] == "paris.slot"
    assert saved["n_saved"] == first["tokens_cached"] == n_prompt + 3
    assert saved["n_written"] == (slot_dir / "paris.slot").stat().st_size
    erased = post(srv, {}, "/slots/1?action=erase")
    assert erased == {"id_slot": 1, "n_erased": saved["n_saved"]}
    assert next(x for x in requests.get(srv.base + "/slots", timeout=10).json() if x["id"] == 1)["n_past"] == 0
    cold = post(srv, dict(body, cache_prompt=True))
    assert cold["id_slot"] == 1 and cold["timings"]["cache_n"] == 0
    post(srv, {}, "/slots/1?action=erase")
    restored = post(srv, {"filename": "paris.slot"}, "/slots/1?action=restore")
    assert set(restored) == {"id_slot", "filename", "n_restored", "n_read", "timings"}
    assert restored["n_restored"] == saved["n_saved"] and restored["n_read"] == saved["n_written"]
    warm = post(srv, body)
    assert warm["id_slot"] == 1 and warm["timings"]["cache_n"] == n_prompt - 1
    assert warm["content"] == first["content"]
    # errors, in llama-server's words
    for path, b, msg in (("/slots/x?action=save", {"filename": "a"}, "Invalid slot ID"),
                         ("/slots/2?action=save", {"filename": "a"}, "Invalid slot ID"),
                         ("/slots/0?action=fly", {}, "Invalid action"),
                         ("/slots/0", {}, "Invalid action"),
                         ("/slots/0?action=save", {"filename": "../a"}, "Invalid filename"),
                         ("/slots/0?action=save", {}, "Invalid filename"),
                         ("/slots/0?action=restore", {"filename": "missing.slot"}, None)):
        e = post(srv, b, path, status=400)["error"]
        assert e["code"] == 400 and (msg is None or e["message"] == msg), path
    (slot_dir / "junk.slot").write_bytes(b"not a slot file")
    post(srv, {"filename": "junk.slot"}, "/slots/0?action=restore", status=400)
    e = post(fim_srv, {"filename": "a"}, "/slots/0?action=save", status=501)["error"]
    assert e["type"] == "not_supported_error" and "--slot-save-path" in e["message"]


@pytest.mark.parametrize("shift", [False, True])
def test_context_shift(ember_bin, smollm2_path, shift):
    """--context-shift (llama-server's pre_decode): at a full slot the first
    n_keep tokens stay (SmolLM2 adds no BOS: none), half of the rest goes and
    the generation runs on, truncated. The token after the first shift is
    the greedy next token of the shifted sequence, asked for separately.
    Without the flag the reply stops at the slot's context, truncated."""
    n_ctx = 64
    port = free_port()
    s = Server([ember_bin, "serve", "-m", smollm2_path, "-c", str(n_ctx), "-np", "1", "-t", "2", "--port", str(port)]
               + (["--context-shift"] if shift else []), port)
    try:
        ban = [[t, False] for t in EOG]
        prompt = tokenize(s, "Once upon a time")
        d = post(s, {"prompt": prompt, "n_predict": 100, "temperature": 0, "return_tokens": True, "logit_bias": ban})
        assert d["truncated"] is True and d["stop_type"] == "limit"
        if not shift:
            assert d["tokens_evaluated"] + d["tokens_predicted"] == n_ctx
            return
        assert d["tokens_predicted"] == 100 > n_ctx and len(d["tokens"]) == 100
        seq = prompt + d["tokens"]
        # the first shift: n_past = n_ctx - 1 cached, the n_ctx-th token pending; n_left = 63, 31 dropped
        n_discard = (n_ctx - 1) // 2
        shifted = seq[n_discard:n_ctx]
        nxt = post(s, {"prompt": shifted, "n_predict": 1, "temperature": 0, "return_tokens": True,
                       "cache_prompt": False, "logit_bias": ban})
        assert nxt["tokens"] == [seq[n_ctx]]
    finally:
        assert s.stop() == 0
