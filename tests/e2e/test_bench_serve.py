"""bench/serve.py against a stub OpenAI server started in the test.

The stub streams a known number of tokens with known timings and reports known
draft statistics, so the harness's counts, medians, aggregates and error
reporting can be checked against numbers computed here independently.
"""
import json
import pathlib
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import serve as bench_serve  # noqa: E402


class Stub:
    n_tokens = 12
    delay = 0.01
    honour_ignore_eos = True
    fail_requests = set()      # request numbers (1-based) answered with HTTP 500
    draft = (10, 7)
    count = 0
    bodies = []
    lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _json(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "stub-model", "object": "model",
                                                        "created": 0, "owned_by": "test"}]})
        else:
            self._json(404, {"error": {"message": "no", "type": "not_found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Stub.lock:
            Stub.count += 1
            n = Stub.count
            Stub.bodies.append(body)
        if n in Stub.fail_requests:
            self._json(500, {"error": {"message": "stub failure", "type": "server_error"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        n_tok = Stub.n_tokens if (body.get("ignore_eos") and Stub.honour_ignore_eos) else 3
        n_tok = min(n_tok, body.get("max_tokens", n_tok))

        def send(obj):
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "stub-model"}
        for i in range(n_tok):
            if i:
                time.sleep(Stub.delay)
            send({**base, "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]})
        send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
              "timings": {"draft_n": Stub.draft[0], "draft_n_accepted": Stub.draft[1],
                          "predicted_n": n_tok, "predicted_ms": 10.0 * (n_tok - 1)}})
        send({**base, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n_tok,
                                               "total_tokens": 5 + n_tok}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture()
def stub():
    Stub.count = 0
    Stub.bodies = []
    Stub.fail_requests = set()
    Stub.honour_ignore_eos = True
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_single_and_parallel_numbers(stub, tmp_path):
    out = tmp_path / "r.json"
    rc = bench_serve.main(["--base-url", stub, "-n", "12", "-r", "3", "-P", "4", "--json", str(out),
                           "--config", "stub", "--draft", "ngram"])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["model"] == "stub-model"
    # every request asked for a forced-length output
    assert all(b.get("ignore_eos") is True and b.get("max_tokens") == 12 for b in Stub.bodies)
    assert len(Stub.bodies) == 3 + 4
    runs = rep["single"]["runs"]
    assert [r["completion_tokens"] for r in runs] == [12, 12, 12]
    assert all(r["counted_from"] == "usage" for r in runs)
    # decode rate from the timestamps, recomputed here
    rates = [(12 - 1) / (r["t_last"] - r["t_first"]) for r in runs]
    assert rep["single"]["decode_tok_s_median"] == pytest.approx(statistics.median(rates))
    # 11 gaps of 10 ms each: the rate cannot exceed 100 tok/s
    assert rep["single"]["decode_tok_s_median"] < 100.0
    par = rep["parallel"]
    assert par["n"] == 4 and par["n_ok"] == 4
    wall = max(s["t_last"] for s in par["streams"]) - min(s["t_sent"] for s in par["streams"])
    assert par["aggregate_tok_s"] == pytest.approx(48 / wall)
    assert par["per_stream_tok_s"] == pytest.approx(
        statistics.fmean((12 - 1) / (s["t_last"] - s["t_first"]) for s in par["streams"]))
    # the same to each stream's end, which comes after its last text delta
    assert all(s["t_end"] >= s["t_last"] for s in par["streams"])
    end_wall = max(s["t_end"] for s in par["streams"]) - min(s["t_sent"] for s in par["streams"])
    assert par["aggregate_end_tok_s"] == pytest.approx(48 / end_wall)
    # each response's server timings are kept (bench/gpu/dflash_summary.py reads them)
    assert all(r["timings"] == {"predicted_n": 12, "predicted_ms": 110.0} for r in runs)
    # draft statistics summed over all 7 responses
    assert rep["acceptance"] == {"draft_n": 70, "draft_n_accepted": 49, "rate": pytest.approx(0.7)}


def test_failures_are_reported_not_hidden(stub, tmp_path, capsys):
    Stub.fail_requests = {2, 5}
    out = tmp_path / "r.json"
    rc = bench_serve.main(["--base-url", stub, "--model", "stub-model", "-n", "12", "-r", "3",
                           "-P", "3", "--json", str(out)])
    assert rc == 1
    rep = json.loads(out.read_text())
    assert len(rep["errors"]) == 2
    assert sum(1 for r in rep["single"]["runs"] if not r["ok"]) == 1
    assert rep["parallel"]["n_ok"] == 2
    assert "2 request(s) failed" in capsys.readouterr().out


def test_short_outputs_flagged_when_ignore_eos_not_honoured(stub, tmp_path):
    Stub.honour_ignore_eos = False
    out = tmp_path / "r.json"
    rc = bench_serve.main(["--base-url", stub, "--model", "stub-model", "-n", "12", "-r", "1",
                           "-P", "2", "--json", str(out)])
    assert rc == 1
    rep = json.loads(out.read_text())
    assert any("ignore_eos" in e for e in rep["errors"])


def test_summarize_parallel_exact():
    # hand-made streams: 2 ok, 1 failed
    rs = [
        {"ok": True, "t_sent": 0.0, "t_first": 0.5, "t_last": 2.5, "ttft_s": 0.5,
         "completion_tokens": 11, "decode_tok_s": 5.0},
        {"ok": True, "t_sent": 0.1, "t_first": 1.0, "t_last": 4.0, "ttft_s": 0.9,
         "completion_tokens": 31, "decode_tok_s": 10.0},
        {"ok": False, "error": "boom"},
    ]
    s = bench_serve.summarize_parallel(rs)
    assert s["aggregate_tok_s"] == pytest.approx(42 / 4.0)
    assert s["aggregate_end_tok_s"] == pytest.approx(42 / 4.0)   # no t_end: the last delta's time
    assert s["per_stream_tok_s"] == pytest.approx(7.5)
    assert s["ttft_s_median"] == pytest.approx(0.7)
    assert s["errors"] == ["boom"] and s["n_ok"] == 2
