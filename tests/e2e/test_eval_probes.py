"""eval/ probe suites against stub OpenAI servers started in the test.

Two stubs: one that answers every request with an empty message (no probe may
pass: nothing passes by default) and one that answers each probe the way a
perfect model would (every pass rule must be satisfiable). The perfect answers
are written here by hand from each probe's task, not taken from the probes.
"""
import json
import pathlib
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "eval"))
import run as eval_run  # noqa: E402


def call(name, args, i=0):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def perfect(body):
    """The answer an ideal model gives: (content, tool_calls, reasoning)."""
    msgs = body["messages"]
    last = msgs[-1]
    user = next(m["content"] for m in reversed(msgs) if m["role"] == "user")
    think = (body.get("chat_template_kwargs") or {}).get("enable_thinking")
    if last["role"] == "tool":
        c = last["content"]
        if "a.txt" in c:
            return "", [call("read_file", {"path": "/notes/b.txt"})], None
        if c.startswith("Q3 budget"):
            return "", [call("write_file", {"path": "/summary.txt", "content": c.splitlines()[0]})], None
        if c == "ok":
            return "Done.", None, None
        if "27" in c:
            return "Yes, it is 27°C and clear in Lisbon.", None, None
    table = [
        ("weather like in Tokyo", ("", [call("get_weather", {"city": "Tokyo"})])),
        ("Europe/Paris", ("", [call("get_time", {"timezone": "Europe/Paris"})])),
        ("bob@example.com", ("", [call("send_email", {"to": "bob@example.com", "subject": "Lunch",
                                                      "body": "I'll be ten minutes late."})])),
        ("Python 3.13", ("", [call("search_web", {"query": "Python 3.13 release notes"})])),
        ("1234 * 5678", ("", [call("calculate", {"expression": "1234*5678"})])),
        ("Tokyo and in Paris", ("", [call("get_weather", {"city": "Tokyo"}, 0),
                                     call("get_weather", {"city": "Paris"}, 1)])),
        ("How are you today", ("", [call("get_time", {"timezone": "UTC"})])),
        ("In /notes", ("", [call("list_dir", {"path": "/notes"})])),
        ("every Monday at 9am", ("", [call("schedule_recurring", {"cron": "0 9 * * 1",
                                                                   "task": "water the plants"})])),
        ("When is breakfast", ("Breakfast is served 7:00-10:00 in the Atrium and check-out is at 11:00. "
                               "Have a calm day.", None)),
        ("fixed the login bug", ("Date: 2026-03-02\nDone: fixed the login bug\nNext: write tests\n"
                                 "Risks: the release date", None)),
        ("朝ごはん", ("納豆ご飯がおすすめです。", None)),
        ("hash table", ("A hash table maps keys to values. It finds them with a hash function.", None)),
        ("warm in Lisbon", ("", [call("get_weather", {"city": "Lisbon"})])),
        ("17 * 23", ("391", None)),
        ("apples", ("7", None)),
        ("9.11 or 9.9", ("9.9", None)),
        ("三語", ("春の川辺に桜が咲く。", None)),
        ("JSONだけ", ('{"name": "山田太郎", "age": 35}', None)),
        ("漢数字", ("3521", None)),
        ("敬語", ("明日そちらに伺います。", None)),
        ("150文字以内", ("田中さんは東京からトヨタの工場がある大阪へ出張し、富士山を見て、佐藤さんと品質を議論した。", None)),
        ("50文字以内", ("日本の首都は東京です。", None)),
        ("次回の会議", ("第3会議室で午後2時からです。", None)),
        ("英語に翻訳", ("Thank you.", None)),
        ("何文字", ("5", None)),
        ("四季", ("- 春\n- 夏\n- 秋\n- 冬", None)),
        ("主語", ("猫", None)),
    ]
    for key, (content, calls) in table:
        if key in user:
            return content, calls, ("Let me think step by step." if think else None)
    raise AssertionError(f"perfect stub has no answer for: {user[:60]}")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "empty"

    def log_message(self, *a):
        pass

    def _json(self, obj):
        b = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        self._json({"object": "list", "data": [{"id": "stub", "object": "model", "created": 0, "owned_by": "t"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content, calls, reasoning = ("", None, None) if Handler.mode == "empty" else perfect(body)
        msg = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = calls
        if reasoning:
            msg["reasoning_content"] = reasoning
        usage = {"prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22}
        if reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": 6}
        self._json({"id": "x", "object": "chat.completion", "created": 0, "model": "stub",
                    "choices": [{"index": 0, "message": msg,
                                 "finish_reason": "tool_calls" if calls else "stop"}], "usage": usage})


@pytest.fixture()
def stub_url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def results(tmp_path):
    (f,) = list(tmp_path.glob("*.json"))
    return json.loads(f.read_text())


def test_nothing_passes_by_default(stub_url, tmp_path):
    Handler.mode = "empty"
    assert eval_run.main(["--base-url", stub_url, "--out", str(tmp_path), "--label", "empty"]) == 0
    r = results(tmp_path)
    assert r["total"] >= 5 + 3 + 6 + 7 + 11
    assert r["passed"] == 0, [x["name"] for x in r["results"] if x["passed"]]


def test_every_probe_can_pass(stub_url, tmp_path):
    Handler.mode = "perfect"
    assert eval_run.main(["--base-url", stub_url, "--out", str(tmp_path), "--label", "perfect"]) == 0
    r = results(tmp_path)
    failed = [(x["name"], x["note"]) for x in r["results"] if not x["passed"]]
    assert not failed
    md = (tmp_path / next(p.name for p in tmp_path.glob("*.md"))).read_text()
    assert f"{r['total']} of {r['total']} probes passed." in md


def test_unreachable_server_is_an_error(tmp_path):
    assert eval_run.main(["--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path)]) == 2
