"""`ember run`, `ember perplexity` and `ember bench` as a user calls them:
options, streaming output, the timing line, seeds, and errors."""
import json
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def test_run_generates_and_prints_timing(ember_bin, smollm2_path):
    r = run(ember_bin, "run", "-m", smollm2_path, "-p", "The capital of France is", "-n", "16",
            "--temp", "0", "-t", "2")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    timing = r.stderr.strip().splitlines()[-1]
    assert re.search(r"prompt \d+ tok in .* generated 16 tok in .* tok/s", timing), timing


def test_same_seed_same_text(ember_bin, smollm2_path):
    args = [ember_bin, "run", "-m", smollm2_path, "-p", "Once upon a time", "-n", "24", "--temp", "1.0",
            "--top-k", "0", "--top-p", "1", "--min-p", "0", "-t", "2"]
    a = run(*args, "--seed", "7")
    b = run(*args, "--seed", "7")
    c = run(*args, "--seed", "8")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    assert "seed 7" in a.stderr
    assert a.stdout != c.stdout   # 24 tokens drawn at temperature 1: a collision is ~impossible


def test_prompt_ids_json_mode(ember_bin, smollm2_path, tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("504,3575,282,4649,314\n\n504,2365,6354,30591\n")   # two prompts, a blank line
    r = run(ember_bin, "run", "-m", smollm2_path, "--prompt-ids-file", f, "-n", "5", "--temp", "0",
            "--n-probs", "4", "-t", "2")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert [x["n_prompt"] for x in rows] == [5, 4]
    for x in rows:
        assert len(x["tokens"]) == len(x["gap"]) <= 5
        assert len(x["top"]) == 4
        lps = [lp for _, lp in x["top"]]
        assert lps == sorted(lps, reverse=True) and lps[0] <= 0
        assert x["top"][0][0] == x["tokens"][0]   # greedy takes the top token
        assert abs(x["gap"][0] - (lps[0] - lps[1])) < 1e-3


def test_run_errors(ember_bin, smollm2_path):
    r = run(ember_bin, "run", "-p", "hi")
    assert r.returncode == 2 and "needs -m FILE" in r.stderr
    r = run(ember_bin, "run", "-m", smollm2_path, "-p", "hi", "-n", "abc")
    assert r.returncode == 2 and "-n expects an integer" in r.stderr
    r = run(ember_bin, "run", "-m", smollm2_path, "-p", "hi", "--top-p", "2")
    assert r.returncode == 2 and "--top-p expects a number in [0, 1]" in r.stderr
    r = run(ember_bin, "run", "-m", "/nonexistent.gguf", "-p", "hi")
    assert r.returncode == 1 and "/nonexistent.gguf" in r.stderr
    r = run(ember_bin, "run", "-m", smollm2_path, "--prompt-ids", "1,99999999")
    assert r.returncode == 1 and "entry 1" in r.stderr
    r = run(ember_bin, "run", "-m", smollm2_path, "-p", "hi", "--bogus")
    assert r.returncode == 2 and "unknown option '--bogus'" in r.stderr


def test_perplexity_output_and_short_text(ember_bin, smollm2_path, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Too short to score.\n")
    r = run(ember_bin, "perplexity", "-m", smollm2_path, "-f", short, "-c", "128")
    assert r.returncode == 1 and "need at least 256 tokens" in r.stderr
    r = run(ember_bin, "perplexity", "-m", smollm2_path, "-f", ROOT / "tests/data/pride_prejudice.txt",
            "-c", "64", "--chunks", "2", "-t", "2")
    assert r.returncode == 0, r.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", r.stdout)
    assert m and 1.0 < float(m.group(1)) < 1000.0 and float(m.group(2)) > 0


def test_bench_reports_pp_and_tg(ember_bin, smollm2_path):
    r = run(ember_bin, "bench", "-m", smollm2_path, "-p", "32", "-n", "4", "-r", "2", "-t", "2", "-o", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["pp"]["n"] == 32 and d["tg"]["n"] == 4
    assert len(d["pp"]["ts"]) == 2 and all(t > 0 for t in d["tg"]["ts"])
    assert d["peak_rss_bytes"] > d["size_bytes"] // 2
    r = run(ember_bin, "bench", "-m", smollm2_path, "-p", "16", "-n", "2", "-r", "1", "-t", "2")
    assert r.returncode == 0 and "| pp16 |" in r.stdout and "| tg2 |" in r.stdout


def test_bench_ubatch_as_llama_bench(ember_bin, smollm2_path):
    """-ub as llama-bench's: tokens per forward pass, default 512, at most the batch (here the
    32-token prompt); a 0 is refused."""
    want = {None: 32, "8": 8, "4096": 32}
    for ub, n in want.items():
        r = run(ember_bin, "bench", "-m", smollm2_path, "-p", "32", "-n", "0", "-r", "1", "-t", "2", "-o", "json",
                *(["-ub", ub] if ub else []))
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["n_batch"] == 32 and d["n_ubatch"] == n, (ub, d)
    r = run(ember_bin, "bench", "-m", smollm2_path, "-ub", "0")
    assert r.returncode == 2 and "-ub" in r.stderr
