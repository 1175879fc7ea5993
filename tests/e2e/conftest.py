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


def _model(name, fetch):
    """A model file of MODELS; missing, an error (make test fetches them), or a skip when
    EMBER_E2E_ALLOW_MISSING=1 (a partial run on a box that has only some of them)."""
    p = MODELS / name
    if not p.exists() and os.environ.get("EMBER_E2E_ALLOW_MISSING") == "1":
        pytest.skip(f"{name} not on this box (EMBER_E2E_ALLOW_MISSING=1)")
    assert p.exists(), f"run scripts/fetch-model {fetch}"
    return str(p)


@pytest.fixture(scope="session")
def gemma3_path():
    return _model("gemma-3-270m-q4_k_m.gguf", "gemma3-270m")


@pytest.fixture(scope="session")
def smollm2_path():
    return _model("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct")
