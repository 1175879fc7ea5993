"""Shared fixtures for end-to-end tests: the ember binary and the real models."""
import os
import pathlib
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("EMBER_MODELS") or os.path.expanduser("~/.cache/ember/models"))


@pytest.fixture(scope="session")
def ember_bin():
    p = pathlib.Path(os.environ.get("EMBER_BIN", ROOT / "build" / "bin" / "ember"))
    assert p.exists(), f"{p} not built: run make build"
    return str(p)


@pytest.fixture(scope="session")
def gemma3_path():
    p = MODELS / "gemma-3-270m-q4_k_m.gguf"
    assert p.exists(), "run scripts/fetch-model gemma3-270m"
    return str(p)


@pytest.fixture(scope="session")
def smollm2_path():
    p = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert p.exists(), "run scripts/fetch-model smollm2-135m-instruct"
    return str(p)
