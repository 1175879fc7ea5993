#!/usr/bin/env python3
"""llama.cpp's reading of ember's tool-output fixtures (the independent oracle
for tests/unit/chat/test_parse_llama.c).

Builds llama_parse.cpp against the llama.cpp tree shipped in llama-cpp-python
(/opt/llama/..., its build/bin libraries: libllama-common etc.), then, for
every fixture tests/data/tool_outputs/<format>/<name>.txt, sets llama.cpp's
chat parser up from the real chat template of a model that speaks that format
(TEMPLATES below) with tools named after the fixture's expected calls, parses
the output, and stores the message in llama_cpp.json.
Run: python3 tests/golden/parse/make_goldens.py
"""
import json, os, pathlib, subprocess, tempfile

ROOT = pathlib.Path(__file__).resolve().parents[3]
LLAMA = pathlib.Path(os.environ.get("LLAMA_CPP", "/opt/llama/llama_cpp_python-0.3.36/vendor/llama.cpp"))
HERE = pathlib.Path(__file__).resolve().parent
FIX = ROOT / "tests" / "data" / "tool_outputs"
TPL = ROOT / "tests" / "data" / "templates"

# format -> (template, enable_thinking); per-fixture overrides below
TEMPLATES = {
    "hermes": ("Qwen-Qwen2.5-7B-Instruct", 0),
    "qwen3_coder": ("Qwen3-Coder", 0),
    "gemma4": ("google-gemma-4-31B-it", 0),
    "llama3": ("meta-llama-Llama-3.1-8B-Instruct", 0),
    "mistral": ("unsloth-mistral-Devstral-Small-2507", 0),
    "think": ("Qwen-Qwen3-0.6B", 1),
}
OVERRIDES = {
    "hermes/qwen3_thinking": ("Qwen-Qwen3-0.6B", 1),
    "qwen3_coder/qwen35_thinking_open": ("Qwen3.5-4B", 1),
    "gemma4/thinking_call": ("google-gemma-4-31B-it", 1),
    "gemma4/thinking_answer": ("google-gemma-4-31B-it", 1),
    "llama3/two_calls": ("meta-llama-Llama-3.2-3B-Instruct", 0),
    "llama3/function_tag": ("meetkai-functionary-medium-v3.1", 0),
    "llama3/function_tag_bad_json": ("meetkai-functionary-medium-v3.1", 0),
    "mistral/nemo_array": ("mistralai-Mistral-Nemo-Instruct-2407", 0),
    "mistral/nemo_parallel": ("mistralai-Mistral-Nemo-Instruct-2407", 0),
    "mistral/call_id_form": ("Mistral-Small-3.2-24B-Instruct-2506", 0),
    "mistral/think_call": ("mistralai-Ministral-3-14B-Reasoning-2512", 1),
    "think/r1_open_at_start": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", 1),
    "think/repeated_open_tag": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", 1),
}
SKIP = {"think/raw_format_none"}   # reasoning kept raw: a parser setting, not a template's


def jtype(v):
    if isinstance(v, bool): return "boolean"
    if isinstance(v, int): return "integer"
    if isinstance(v, float): return "number"
    if isinstance(v, str): return "string"
    if isinstance(v, list): return "array"
    if isinstance(v, dict): return "object"
    return "null"


def tools_for(spec):
    if "tools" in spec:
        tools = list(spec["tools"])
    else:
        tools = []
    names = {t["function"]["name"] for t in tools}
    exp = spec.get("expected_stream_arguments", spec["expected"])
    for c in spec["expected"]["tool_calls"] + exp["tool_calls"]:
        if c["name"] in names:
            continue
        names.add(c["name"])
        props = {k: {"type": jtype(v)} for k, v in c["arguments"].items()}
        tools.append({"type": "function", "function": {"name": c["name"], "description": "",
                      "parameters": {"type": "object", "properties": props}}})
    if not tools:
        tools.append({"type": "function", "function": {"name": "get_weather", "description": "",
                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
    return tools


def main():
    exe = pathlib.Path(tempfile.gettempdir()) / "ember_llama_parse"
    subprocess.run(["g++", "-std=c++17", "-O1", f"-I{LLAMA}/common", f"-I{LLAMA}/include", f"-I{LLAMA}/ggml/include",
                    f"-I{LLAMA}/vendor", str(HERE / "llama_parse.cpp"), f"-L{LLAMA}/build/bin", "-lllama-common",
                    "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{LLAMA}/build/bin", "-o", str(exe)], check=True)
    out = {"source": "llama.cpp common_chat_parse via tests/golden/parse/llama_parse.cpp (llama-cpp-python 0.3.36 vendor tree)",
           "cases": {}}
    for txt in sorted(FIX.glob("*/*.txt")):
        key = f"{txt.parent.name}/{txt.stem}"
        if key in SKIP:
            continue
        spec = json.loads(txt.with_suffix(".json").read_text())
        tpl, think = OVERRIDES.get(key, TEMPLATES[txt.parent.name])
        if key not in OVERRIDES and txt.stem.startswith("qwen35_"):   # Qwen3.5 rows: its own template
            tpl, think = "Qwen3.5-4B", int(spec["reasoning_open_at_start"])
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tf:
            json.dump(tools_for(spec), tf)
        r = subprocess.run([str(exe), str(TPL / f"{tpl}.jinja"), str(txt), tf.name, str(think)],
                           capture_output=True, text=True)
        os.unlink(tf.name)
        if r.returncode != 0 or not r.stdout.strip():
            res = {"error": f"exit {r.returncode}: {r.stderr[-300:]}"}
        else:
            res = json.loads(r.stdout)
        res["template"] = tpl
        res["enable_thinking"] = bool(think)
        out["cases"][key] = res
        print(key, json.dumps(res, ensure_ascii=False)[:200])
    (HERE / "llama_cpp.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
