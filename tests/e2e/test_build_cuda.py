"""A newcomer's CUDA build on a machine with nvcc but no GPU (issue 19 item 7).

`cmake -DEMBER_CUDA=ON` with no architecture given must configure, and
compile for sm_90 (H200) plus its PTX: CMake's own documented spelling of that
default is `--generate-code=arch=compute_90,code=[compute_90,sm_90]` (what
CMAKE_CUDA_ARCHITECTURES=90 means). `make cuda-check` (part of `make test`)
builds the CUDA tests the same way, with no architecture given.
"""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_plain_cuda_configure_defaults_to_sm90(tmp_path):
    env = dict(os.environ)
    env.pop("CUDAARCHS", None)
    env.setdefault("CUDACXX", NVCC)
    r = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), "-DEMBER_CUDA=ON",
                        "-DEMBER_TESTS=OFF"], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "CUDA_ARCHITECTURES is empty" not in r.stderr
    flags = (tmp_path / "b" / "CMakeFiles" / "ember.dir" / "flags.make").read_text()
    cuda = [l for l in flags.splitlines() if l.startswith("CUDA_FLAGS")]
    assert cuda and "--generate-code=arch=compute_90,code=[compute_90,sm_90]" in cuda[0], cuda
