#!/usr/bin/env python3
"""Goldens for tests/e2e/test_server_models.py, made with llama.cpp's
llama-server (an independent implementation of the same OpenAI API over the
same GGUF files): for a few conversations, the rendered chat prompt
(/apply-template, llama.cpp's Jinja engine), the prompt token count
(usage.prompt_tokens) and the greedy reply of 8 tokens with llama.cpp's top-2
log-probabilities per token. `stable_prefix` is the reply up to the first
token whose top-2 gap is under GAP nats: beyond a near-tie, a correct
implementation with different rounding may pick the other token.

usage: tests/golden/server/make_server_goldens.py  (writes server_goldens.json beside it)
"""
import json
import os
import pathlib
import socket
import subprocess
import time

import requests

LLAMA = "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server"
MODELS = pathlib.Path(os.path.expanduser("~/.cache/ember/models"))
HERE = pathlib.Path(__file__).resolve().parent

CONVERSATIONS = {
    "smollm2": [
        [{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
        [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "user", "content": "Say the word 'banana' three times."}],
        [{"role": "user", "content": "What is the capital of France?"}],
    ],
    "gemma3": [
        [{"role": "user", "content": "Write one sentence about the sea."}],
        [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Good morning"}],
    ],
}
GAP = 0.5
FILES = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    out = {"made_by": "llama-server (llama.cpp, llama_cpp_python-0.3.36 vendor tree), --poll 0, -np 1",
           "max_tokens": 8, "gap": GAP, "models": {}}
    for name, convs in CONVERSATIONS.items():
        port = free_port()
        p = subprocess.Popen([LLAMA, "-m", str(MODELS / FILES[name]), "-c", "2048", "-np", "1", "-t", "2",
                              "--poll", "0", "--port", str(port), "--jinja"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if requests.get(base + "/health", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.5)
            cases = []
            for msgs in convs:
                prompt = requests.post(base + "/apply-template", json={"messages": msgs}).json()["prompt"]
                r = requests.post(base + "/v1/chat/completions",
                                  json={"messages": msgs, "max_tokens": 8, "temperature": 0, "logprobs": True,
                                        "top_logprobs": 2}).json()
                toks = r["choices"][0]["logprobs"]["content"]
                gaps = [t["top_logprobs"][0]["logprob"] - t["top_logprobs"][1]["logprob"] for t in toks]
                stable = ""
                for t, g in zip(toks, gaps):
                    if g < GAP:
                        break
                    stable += t["token"]
                cases.append({"messages": msgs, "prompt": prompt, "prompt_tokens": r["usage"]["prompt_tokens"],
                              "content": r["choices"][0]["message"]["content"],
                              "finish_reason": r["choices"][0]["finish_reason"],
                              "top2_gaps": [round(g, 4) for g in gaps], "stable_prefix": stable})
                print(name, json.dumps(cases[-1])[:200], flush=True)
            out["models"][name] = cases
        finally:
            p.terminate()
            p.wait()
    (HERE / "server_goldens.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
