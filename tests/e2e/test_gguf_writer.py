"""ember's GGUF writer, read back by gguf-py's GGUFReader (the oracle):
every value type, string/bool/nested arrays, tensors, v2/v3, alignments."""
import pathlib
import subprocess

import gguf
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
V = gguf.GGUFValueType


@pytest.fixture(scope="module")
def tool(ember_bin):
    p = pathlib.Path(ember_bin).parent.parent / "tools" / "gguf_write_sample"
    assert p.exists(), f"{p} not built"
    return str(p)


@pytest.mark.parametrize("version,alignment", [(3, 32), (2, 32), (3, 64), (3, 1)])
def test_gguf_py_reads_our_writer(tool, tmp_path, version, alignment):
    out = tmp_path / "sample.gguf"
    r = subprocess.run([tool, str(out), str(version), str(alignment)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rd = gguf.GGUFReader(str(out))
    f = rd.fields
    assert f["GGUF.version"].contents() == version
    assert rd.alignment == alignment
    if alignment != 32:
        assert f["general.alignment"].types == [V.UINT32] and f["general.alignment"].contents() == alignment
    want = {
        "s.u8": (V.UINT8, 200), "s.i8": (V.INT8, -100), "s.u16": (V.UINT16, 60000),
        "s.i16": (V.INT16, -30000), "s.u32": (V.UINT32, 4000000000), "s.i32": (V.INT32, -2000000000),
        "s.f32": (V.FLOAT32, 0.25), "s.bool": (V.BOOL, True), "s.str": (V.STRING, "héllo ▁wörld"),
        "s.u64": (V.UINT64, 18000000000000000000), "s.i64": (V.INT64, -5000000000),
        "s.f64": (V.FLOAT64, 2.718281828459045),
    }
    for k, (t, v) in want.items():
        assert f[k].types == [t], k
        assert f[k].contents() == v, k
    assert f["a.tokens"].types == [V.ARRAY, V.STRING]
    assert f["a.tokens"].contents() == ["<s>", "", "▁the", "<0x0A>"]
    assert f["a.scores"].types == [V.ARRAY, V.FLOAT32]
    assert f["a.scores"].contents() == [0.0, -1.5, -2.25, -1000.0]
    assert f["a.types"].types == [V.ARRAY, V.INT32] and f["a.types"].contents() == [3, 1, 1, 6]
    assert f["a.flags"].types == [V.ARRAY, V.BOOL] and f["a.flags"].contents() == [True, False, True]
    nested = f["a.nested"]
    assert nested.types == [V.ARRAY, V.ARRAY, V.UINT16]
    assert [int(nested.parts[i][0]) for i in nested.data] == [1, 2, 3, 4]  # gguf-py flattens
    t0, t1 = rd.tensors
    assert t0.name == "t.f32" and t0.tensor_type == gguf.GGMLQuantizationType.F32
    assert [int(x) for x in t0.shape] == [4, 3]
    assert np.array_equal(np.asarray(t0.data).reshape(-1), np.arange(12, dtype=np.float32) * 0.5)
    assert t1.name == "t.q8_0" and t1.tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert [int(x) for x in t1.shape] == [32, 2] and int(t1.n_bytes) == 68
    assert np.asarray(t1.data).reshape(-1).tobytes() == bytes((i * 3 + 1) & 0xFF for i in range(68))
    for t in rd.tensors:
        assert (int(t.data_offset) - int(rd.data_offset)) % alignment == 0
