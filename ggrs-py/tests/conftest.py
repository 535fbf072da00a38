"""Fixtures of the ggrs Python tests: llama.cpp's reference outputs, the tiny models, the
real model (fetched when missing) and the `ggrs` command line to compare against."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]


def reference_dir() -> Path:
    """`$GGRS_REFERENCE_DIR`, or the `shared/reference` beside the repository."""
    env = os.environ.get("GGRS_REFERENCE_DIR")
    if env:
        return Path(env)
    for d in REPO.parents:
        if (d / "shared" / "reference").is_dir():
            return d / "shared" / "reference"
    raise RuntimeError("no shared/reference beside the repository: set GGRS_REFERENCE_DIR")


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def ref_dir() -> Path:
    return reference_dir()


@pytest.fixture(scope="session")
def tiny_llama_path(ref_dir: Path) -> str:
    return str(ref_dir / "tiny" / "tiny-llama-f16.gguf")


@pytest.fixture(scope="session")
def qwen_path() -> str:
    """The default model (Qwen2.5-Coder-0.5B-Instruct q4_0), made if missing."""
    if os.environ.get("GGRS_SKIP_MODEL_TESTS") == "1":
        pytest.skip("GGRS_SKIP_MODEL_TESTS=1")
    import ggrs

    return ggrs.default_model()


@pytest.fixture(scope="session")
def ggrs_bin() -> str:
    """The `ggrs` command: `$GGRS_BIN`, else the workspace's release or debug build."""
    env = os.environ.get("GGRS_BIN")
    candidates = [env] if env else []
    candidates += [str(REPO / "target" / p / "ggrs") for p in ("release", "debug")]
    candidates.append(shutil.which("ggrs") or "")
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise RuntimeError("no ggrs binary: build it (cargo build --release -p ggrs-cli) or set GGRS_BIN")


def cli_run(ggrs_bin: str, model: str, prompt: str, n: int, top: int = 0) -> Dict[str, Any]:
    """`ggrs run --json` greedy on 2 threads: its JSON object."""
    import subprocess

    cmd = [ggrs_bin, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2",
           "--json"]
    if top:
        cmd += ["--top-logprobs", str(top)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def assert_logits_equal_cli(model_path: str, ggrs_bin: str, prompt: str) -> None:
    """The log-softmax of `Model.logits()` after the prompt equals the first token's
    `--top-logprobs 5` of `ggrs run` (ids in order, values to 1e-5)."""
    import numpy as np

    import ggrs

    top = cli_run(ggrs_bin, model_path, prompt, 1, top=5)["logprobs"][0]["top_logprobs"]
    m = ggrs.Model(model_path, n_ctx=256, n_threads=2)
    m.eval(m._m.encode_prompt(prompt))
    logits = m.logits().astype(np.float64)
    mx = logits.max()
    logprobs = logits - (mx + np.log(np.exp(logits - mx).sum()))
    assert [t["token"] for t in top] == [int(i) for i in np.argsort(-logprobs, kind="stable")[:5]]
    for t in top:
        assert abs(logprobs[t["token"]] - t["logprob"]) < 1e-5, t
