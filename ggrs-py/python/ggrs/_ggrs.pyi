"""Type stubs of the native module `ggrs._ggrs` (the Rust half of the package)."""

from os import PathLike
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

__version__: str

class Piece:
    """One generated token as a stream gives it."""

    text: str
    token: Optional[int]
    logprob: Optional[float]
    top_logprobs: List[Tuple[int, float]]

class TokenStream(Iterator[Piece]):
    result: Optional[Dict[str, Any]]
    def __next__(self) -> Piece: ...
    def close(self) -> None: ...
    def __enter__(self) -> "TokenStream": ...
    def __exit__(self, *exc: object) -> bool: ...

class ReplyPieces:
    """A chat reply split while it streams: pieces ``(kind, call_index, text, name)``,
    kind ``reasoning``, ``content``, ``call`` (text: the call's id) or ``arguments``."""

    def push(self, text: str) -> List[Tuple[str, int, str, str]]: ...
    def finish(
        self,
    ) -> Tuple[
        List[Tuple[str, int, str, str]],
        Tuple[Optional[str], str, List[Tuple[str, str, str]]],
    ]: ...

class ChatPlan:
    """A chat request ready to generate: its prompt, the tools' grammar, its reply's syntax."""

    prompt: str
    def parse(self, text: str) -> Tuple[Optional[str], str, List[Tuple[str, str, str]]]: ...
    def stream(self) -> ReplyPieces: ...

class NativeModel:
    def __init__(
        self,
        path: Union[str, PathLike[str]],
        n_ctx: int = 0,
        n_batch: int = 512,
        n_threads: int = 0,
        logits_all: bool = False,
        kv_type: str = "f16",
        type_k: Optional[str] = None,
        type_v: Optional[str] = None,
        copy_weights: Optional[bool] = None,
        swa_full: bool = False,
        speculative: Optional[str] = None,
        draft_max: int = 16,
        draft_min: int = 1,
        context_shift: bool = False,
        n_keep: int = 0,
        draft_model: Optional[str] = None,
        draft_p_min: float = 0.75,
    ) -> None: ...
    path: str
    arch: str
    n_vocab: int
    n_ctx_train: int
    n_ctx: int
    n_batch: int
    n_threads: int
    n_tokens: int
    cached_tokens: List[int]
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]
    add_bos: bool
    chat_template: Optional[str]
    metadata: Dict[str, Any]
    def tokenize(self, text: Union[str, bytes], add_bos: bool = True, special: bool = False) -> List[int]: ...
    def encode_prompt(self, text: str) -> List[int]: ...
    def detokenize(self, ids: Sequence[int], special: bool = False) -> str: ...
    def token_to_piece(self, id: int) -> bytes: ...
    def render_chat(
        self,
        messages: Sequence[Tuple[str, str]],
        add_generation_prompt: bool = True,
        template: Optional[str] = None,
        enable_thinking: bool = True,
    ) -> str: ...
    def chat_plan(
        self,
        messages: Sequence[
            Tuple[str, str, List[Tuple[str, str, str]], Optional[str], Optional[str], Optional[str]]
        ],
        add_generation_prompt: bool = True,
        template: Optional[str] = None,
        enable_thinking: bool = True,
        tools: Optional[str] = None,
        tool_choice: str = "auto",
        tool_name: Optional[str] = None,
        parallel_tool_calls: bool = False,
        reasoning: bool = False,
    ) -> ChatPlan: ...
    def encode_chat(self, text: str) -> List[int]: ...
    def generate(self, prompt: Sequence[int], **kwargs: Any) -> Any: ...
    def eval(self, ids: Sequence[int], all_logits: bool = False) -> None: ...
    def logits(self, all: bool = False) -> np.ndarray: ...
    def reset(self) -> None: ...
    def perplexity(self, text: str, chunk: int = 512) -> Tuple[float, float, int, int]: ...
    n_embd: int
    pooling: Optional[str]
    generative: bool
    def embed(
        self,
        inputs: Sequence[Union[str, Sequence[int]]],
        pooling: Optional[str] = None,
        normalize: int = 2,
    ) -> Tuple[Union[np.ndarray, List[np.ndarray]], int]: ...
    def rerank(self, query: str, documents: Sequence[str]) -> List[float]: ...

def quantize(
    source: Union[str, PathLike[str]],
    dest: Union[str, PathLike[str]],
    file_type: str,
    *,
    pure: bool = False,
    allow_requantize: bool = False,
    n_threads: int = 0,
) -> int: ...
def _at_exit() -> None: ...
