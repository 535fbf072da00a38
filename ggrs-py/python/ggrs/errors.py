"""The exceptions ggrs raises.

Every error of the Rust library arrives as one of these, with the Rust error's message.
They also derive from the built-in exception that fits, so ``except ValueError`` and
``except OSError`` work as they do elsewhere.
"""

from __future__ import annotations

__all__ = [
    "GgrsError",
    "FileError",
    "ModelError",
    "ContextFullError",
    "BadArgumentError",
    "OutOfMemoryError",
]


class GgrsError(Exception):
    """Base class of every ggrs error."""


class FileError(GgrsError, OSError):
    """A model file cannot be read: missing, unreadable, truncated or not a valid GGUF."""


class ModelError(GgrsError):
    """The file is a GGUF, but not a model ggrs can run (unknown architecture, a missing
    or mis-shaped tensor, an unsupported tensor type or tokenizer)."""


class ContextFullError(GgrsError, ValueError):
    """The tokens do not fit in the context (use a larger ``n_ctx`` or a shorter prompt)."""


class BadArgumentError(GgrsError, ValueError):
    """An argument outside its domain: an empty prompt, a token id outside the vocabulary,
    a sampling parameter out of range, a conversation the chat format cannot render."""


class OutOfMemoryError(GgrsError, MemoryError):
    """The session needs more memory than the machine has (lower ``n_ctx`` or ``n_batch``)."""
