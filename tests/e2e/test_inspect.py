"""`ember inspect` against gguf-py's GGUFReader (the independent oracle) on
both real models: header, every metadata key with its type and value, array
lengths and elements (all of them, tokenizer strings included), the tensor
table, the parameter count and the bytes per type."""
import json
import pathlib
import random
import subprocess

import gguf
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# gguf-py GGUFValueType name -> ember_gguf_vtype_name
VTYPE = {
    "UINT8": "u8", "INT8": "i8", "UINT16": "u16", "INT16": "i16", "UINT32": "u32",
    "INT32": "i32", "FLOAT32": "f32", "BOOL": "bool", "STRING": "string", "ARRAY": "array",
    "UINT64": "u64", "INT64": "i64", "FLOAT64": "f64",
}


_readers = {}


def reader(path):
    """GGUFReader is slow on a 262,144-token vocab (seconds): read each file once."""
    if path not in _readers:
        _readers[path] = gguf.GGUFReader(path)
    return _readers[path]


def run(*args, timeout=120):
    return subprocess.run(list(args), capture_output=True, timeout=timeout)


@pytest.fixture(scope="module", params=["gemma3", "smollm2"])
def model(request, gemma3_path, smollm2_path, ember_bin):
    path = gemma3_path if request.param == "gemma3" else smollm2_path
    r = run(ember_bin, "inspect", path, "--json")
    assert r.returncode == 0, r.stderr.decode()
    return path, json.loads(r.stdout), reader(path)


def test_header(model):
    path, ours, ref = model
    assert ours["version"] == int(ref.fields["GGUF.version"].contents())
    assert ours["n_kv"] == int(ref.fields["GGUF.kv_count"].contents())
    assert ours["n_tensors"] == int(ref.fields["GGUF.tensor_count"].contents()) == len(ref.tensors)
    assert ours["alignment"] == int(ref.alignment)
    assert ours["data_offset"] == int(ref.data_offset)
    assert ours["file_size"] == pathlib.Path(path).stat().st_size


def test_metadata_keys_types_and_values(model):
    _, ours, ref = model
    ref_fields = [f for name, f in ref.fields.items() if not name.startswith("GGUF.")]
    assert [m["key"] for m in ours["metadata"]] == [f.name for f in ref_fields]
    rng = random.Random(1234)
    n_arrays = n_strings = 0
    for m, f in zip(ours["metadata"], ref_fields):
        assert m["type"] == VTYPE[f.types[0].name], m["key"]
        if m["type"] == "array":
            n_arrays += 1
            assert m["types"] == [VTYPE[t.name] for t in f.types], m["key"]
            assert m["elem_type"] == VTYPE[f.types[1].name]
            assert m["count"] == len(f.data) == len(m["value"]), m["key"]
            want = f.contents()
            if m["elem_type"] == "string":
                n_strings += len(want)
                assert m["value"] == want, m["key"]  # every token / merge
            else:
                # numeric: first, last and a random sample, exactly
                n = len(want)
                idx = sorted(set(list(range(min(n, 16))) + list(range(max(0, n - 16), n))
                                 + [rng.randrange(n) for _ in range(min(n, 500))])) if n else []
                for j in idx:
                    assert m["value"][j] == want[j], (m["key"], j)
                assert m["value"] == want, m["key"]
        else:
            assert m["value"] == f.contents(), m["key"]
    assert n_arrays >= 3 and n_strings >= 49152


def test_tensor_table(model):
    _, ours, ref = model
    assert len(ours["tensors"]) == len(ref.tensors)
    for t, r in zip(ours["tensors"], ref.tensors):
        assert t["name"] == r.name
        assert t["type"] == gguf.GGMLQuantizationType(r.tensor_type).name
        assert t["type_id"] == int(r.tensor_type)
        assert t["shape"] == [int(x) for x in r.shape], r.name
        assert t["n_elements"] == int(r.n_elements), r.name
        assert t["bytes"] == int(r.n_bytes), r.name
        assert t["file_offset"] == int(r.data_offset), r.name
        assert t["offset"] == int(r.data_offset) - int(ref.data_offset), r.name


def test_parameter_count_and_bytes_per_type(model):
    _, ours, ref = model
    assert ours["n_params"] == sum(int(r.n_elements) for r in ref.tensors)
    assert ours["n_bytes"] == sum(int(r.n_bytes) for r in ref.tensors)
    want = {}
    for r in ref.tensors:
        name = gguf.GGMLQuantizationType(r.tensor_type).name
        w = want.setdefault(name, {"tensors": 0, "n_elements": 0, "bytes": 0})
        w["tensors"] += 1
        w["n_elements"] += int(r.n_elements)
        w["bytes"] += int(r.n_bytes)
    assert ours["bytes_per_type"] == want


def test_text_output_summarizes(ember_bin, gemma3_path):
    r = run(ember_bin, "inspect", gemma3_path)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    ref = reader(gemma3_path)
    tokens = ref.fields["tokenizer.ggml.tokens"].contents()
    n_params = sum(int(t.n_elements) for t in ref.tensors)
    assert f"string[{len(tokens)}]" in out
    assert f"... ({len(tokens)} total)" in out
    assert f'"{tokens[0]}", "{tokens[1]}"' in out
    assert f"parameters: {n_params} " in out
    assert len(out) < 200_000  # long arrays are not dumped in text mode
    for t in ref.tensors[:5]:
        assert t.name in out


def test_errors(ember_bin, tmp_path):
    r = run(ember_bin, "inspect")
    assert r.returncode == 2
    r = run(ember_bin, "inspect", str(tmp_path / "missing.gguf"))
    assert r.returncode == 1 and b"cannot open" in r.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little")
                    + (1 << 60).to_bytes(8, "little"))
    r = run(ember_bin, "inspect", str(bad))
    assert r.returncode == 1
    assert b"n_kv" in r.stderr and b"byte offset 16" in r.stderr


def test_malformed_corpus(ember_bin):
    """Every hand-made file (tests/data/gguf/make_malformed.py): valid ones are
    inspected (exit 0), malformed ones give a clean error naming the fault."""
    d = ROOT / "tests/data/gguf/malformed"
    rows = [l.split("\t") for l in (d / "expected.tsv").read_text().splitlines() if not l.startswith("#")]
    assert sum(1 for r in rows if r[1] != "EMBER_OK") >= 20
    for name, status, sub in rows:
        r = run(ember_bin, "inspect", str(d / name), "--json", timeout=30)
        if status == "EMBER_OK":
            assert r.returncode == 0, (name, r.stderr[-500:])
            json.loads(r.stdout)
        else:
            assert r.returncode == 1, (name, r.returncode, r.stderr[-500:])
            err = r.stderr.decode()
            assert "gguf:" in err and sub in err and status in err, (name, err)
