"""Every tensor of both real models: ember's dequantization == gguf-py's.

Reads the tensors with gguf-py (GGUFReader: raw block bytes and type), pipes
the raw bytes to build/tools/dequant (tests/tools/dequant.c: ember's scalar
reference to_float) and compares with gguf.quants.dequantize bit for bit.
Independent of ember's C GGUF reader. Large tensors are processed in
row chunks so memory stays bounded; every row of every tensor is compared.
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHUNK_BYTES = 32 << 20


@pytest.fixture(scope="session")
def dequant_tool():
    cand = [pathlib.Path(os.environ["EMBER_BIN"]).parent.parent / "tools" / "dequant"] if os.environ.get("EMBER_BIN") else []
    cand.append(ROOT / "build" / "tools" / "dequant")
    for p in cand:
        if p.exists():
            return str(p)
    pytest.fail("tests/tools/dequant not built: run make build")


def ember_dequant(tool, qtype, raw, n_elems):
    r = subprocess.run([tool, str(int(qtype)), str(n_elems)], input=raw.tobytes(), capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    out = np.frombuffer(r.stdout, dtype="<f4")
    assert out.size == n_elems
    return out


def check_model(tool, path):
    reader = gguf.GGUFReader(path)
    seen = {}
    for t in reader.tensors:
        qtype = T(t.tensor_type)
        bs, tb = GGML_QUANT_SIZES[qtype]
        data = np.asarray(t.data)
        rows = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
        row_bytes = rows.shape[1] * rows.itemsize
        step = max(1, CHUNK_BYTES // row_bytes)
        for r0 in range(0, rows.shape[0], step):
            chunk = np.ascontiguousarray(rows[r0:r0 + step]).view(np.uint8)
            want = gguf.quants.dequantize(chunk, qtype).astype(np.float32, copy=False).reshape(-1)
            got = ember_dequant(tool, qtype, chunk, want.size)
            same = got.view(np.uint32) == want.view(np.uint32)
            if not same.all():
                i = int(np.argmin(same))
                pytest.fail(f"{path}: {t.name} ({qtype.name}) element {r0 * (row_bytes // tb) * bs + i}: "
                            f"ember {got[i]!r} gguf-py {want[i]!r}")
        seen[qtype.name] = seen.get(qtype.name, 0) + 1
    return seen


def test_gemma3_all_tensors(dequant_tool, gemma3_path):
    seen = check_model(dequant_tool, gemma3_path)
    # Gemma 3 270M Q4_K_M: F32 norms, Q8_0 embeddings, Q5_0/Q4_K/Q6_K matrices
    assert {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"} <= set(seen), seen


def test_smollm2_all_tensors(dequant_tool, smollm2_path):
    seen = check_model(dequant_tool, smollm2_path)
    assert {"F32", "Q8_0", "Q4_1"} <= set(seen), seen
