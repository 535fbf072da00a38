"""Responses shaped like the OpenAI API's (and llama-cpp-python's) on top of ``Model.generate``."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from .errors import BadArgumentError

# `typing.TYPE_CHECKING` without importing `typing` (see `_model`).
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (they are strings): see `_model`
    from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

    from ._model import Generation, Model

# Fields of llama-cpp-python's calls that ggrs does not implement: refused by name rather
# than ignored.
_UNSUPPORTED = ("functions", "function_call", "suffix")

_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "stop",
    "logit_bias",
)


def _check_unknown(kwargs: Mapping[str, Any], allowed: Sequence[str], call: str) -> None:
    for name, value in kwargs.items():
        if name in _UNSUPPORTED and value is not None:
            raise BadArgumentError(f"`{name}` is not supported by ggrs ({call})")
        if name not in allowed and name not in _UNSUPPORTED:
            raise TypeError(f"{call}() got an unexpected keyword argument '{name}'")


def _sampling(kwargs: Mapping[str, Any], defaults: Mapping[str, Any]) -> Dict[str, Any]:
    out = {k: kwargs[k] for k in _SAMPLING if kwargs.get(k) is not None}
    for k, v in defaults.items():
        out.setdefault(k, v)
    if "logit_bias" in out:
        out["logit_bias"] = {int(k): float(v) for k, v in out["logit_bias"].items()}
    return out


def _grammar_text(grammar: Any) -> Optional[str]:
    """GBNF text from ``grammar``: a string, or llama-cpp-python's ``LlamaGrammar`` (which
    keeps its text in ``_grammar``)."""
    if grammar is None or isinstance(grammar, str):
        return grammar
    text = getattr(grammar, "_grammar", None)
    if isinstance(text, str):
        return text
    raise BadArgumentError(
        f"`grammar` must be GBNF text or a LlamaGrammar, not {type(grammar).__name__}"
    )


def _constraint(kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """``generate``'s ``grammar``/``json_schema`` from a call's ``grammar`` and
    ``response_format``, as llama-cpp-python reads them."""
    grammar = _grammar_text(kwargs.get("grammar"))
    fmt = kwargs.get("response_format")
    schema: Any = None
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, Mapping) else None
        if kind == "json_object":
            schema = fmt.get("schema")
            if schema is None:
                schema = {"type": "object"}
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, Mapping) else None
            if schema is None:
                raise BadArgumentError(
                    "`response_format` of type json_schema needs "
                    "{'json_schema': {'schema': {...}}}"
                )
        elif kind != "text":
            raise BadArgumentError(
                "`response_format` must be {'type': 'text'}, {'type': 'json_object'} "
                f"(optionally with a 'schema') or {{'type': 'json_schema', ...}}, not {fmt!r}"
            )
    if grammar is not None and schema is not None:
        raise BadArgumentError("give `grammar` or a `response_format` schema, not both")
    return {"grammar": grammar, "json_schema": schema}


def _usage(g: "Generation") -> Dict[str, Any]:
    completion = len(g.tokens)
    return {
        "prompt_tokens": len(g.prompt_tokens),
        "completion_tokens": completion,
        "total_tokens": len(g.prompt_tokens) + completion,
        "prompt_tokens_details": {"cached_tokens": g.cached_tokens},
    }


def _piece(model: "Model", token: int) -> str:
    return model.token_to_piece(token).decode("utf-8", errors="replace")


def _arguments_text(args: Any) -> str:
    if args is None:
        return "{}"
    if isinstance(args, str):
        return args
    import json

    return json.dumps(args, ensure_ascii=False)


def message_parts(messages: Sequence[Mapping[str, Any]]) -> List[Tuple[Any, ...]]:
    """OpenAI-style messages as the native half takes them: ``(role, text, [(id, name,
    arguments)], tool_call_id, name, reasoning_content)`` (content as a string or a list of
    text parts; an assistant's ``tool_calls``; a ``tool`` message's ``tool_call_id``)."""
    if isinstance(messages, (str, bytes)) or not messages:
        raise BadArgumentError("`messages` must be a non-empty list of {role, content} dicts")
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise BadArgumentError(f"messages[{i}] must be a dict with `role` and `content`")
        content = m.get("content")
        if content is None:
            content = ""
        elif not isinstance(content, str):
            texts = []
            for part in content:
                if not isinstance(part, Mapping) or part.get("type") != "text":
                    kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                    raise BadArgumentError(
                        f"messages[{i}].content: parts of type {kind!r} are not supported "
                        "(text only)"
                    )
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        role = str(m["role"])
        role = {"developer": "system", "function": "tool"}.get(role, role)
        calls = []
        for k, c in enumerate(m.get("tool_calls") or []):
            f = c.get("function") if isinstance(c, Mapping) else None
            if not isinstance(f, Mapping) or not isinstance(f.get("name"), str):
                raise BadArgumentError(
                    f"messages[{i}].tool_calls[{k}] must be {{'id', 'type': 'function', "
                    "'function': {'name', 'arguments'}}"
                )
            cid = c.get("id") or f"call_{os.urandom(12).hex()}"
            calls.append((str(cid), f["name"], _arguments_text(f.get("arguments"))))
        call_id = m.get("tool_call_id")
        name = m.get("name")
        reasoning = m.get("reasoning_content")
        parts.append(
            (
                role,
                content,
                calls,
                None if call_id is None else str(call_id),
                None if name is None else str(name),
                reasoning if isinstance(reasoning, str) else None,
            )
        )
    return parts


def _tool_choice(choice: Any) -> Tuple[str, Optional[str]]:
    """llama-cpp-python's ``tool_choice``: ``"auto"``, ``"none"``, ``"required"`` or
    ``{"type": "function", "function": {"name": ...}}``, as (kind, function name)."""
    if choice is None:
        return "auto", None
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        return choice, None
    if isinstance(choice, Mapping):
        f = choice.get("function")
        name = f.get("name") if isinstance(f, Mapping) else choice.get("name")
        if isinstance(name, str):
            return "function", name
    raise BadArgumentError(
        "`tool_choice` must be 'auto', 'none', 'required' or "
        f"{{'type': 'function', 'function': {{'name': ...}}}}, not {choice!r}"
    )


def chat_plan(
    model: "Model",
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    tools: Any = None,
    tool_choice: Any = None,
    parallel_tool_calls: Optional[bool] = None,
) -> Any:
    """The native plan of a chat request: its prompt, the tools' grammar, its reply's
    syntax."""
    tools_text = None
    if tools is not None:
        if not isinstance(tools, (list, tuple)):
            raise BadArgumentError("`tools` must be a list of {'type': 'function', ...} dicts")
        if tools:
            import json

            tools_text = json.dumps(list(tools), ensure_ascii=False)
    kind, name = _tool_choice(tool_choice)
    return model._m.chat_plan(
        message_parts(messages),
        add_generation_prompt,
        model.chat_format,
        tools=tools_text,
        tool_choice=kind,
        tool_name=name,
        parallel_tool_calls=bool(parallel_tool_calls),
    )


def _tool_calls(calls: Sequence[Tuple[str, str, str]]) -> List[Dict[str, Any]]:
    return [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
        for cid, name, args in calls
    ]


def _reply_delta(kind: str, index: int, a: str, b: str) -> Dict[str, Any]:
    """A streamed piece as OpenAI's ``delta``: a call's first piece names it (with empty
    arguments), the next ones carry its arguments."""
    if kind == "content":
        return {"content": a}
    if kind == "reasoning":
        return {"reasoning_content": a}
    if kind == "call":
        return {
            "tool_calls": [
                {"index": index, "id": a, "type": "function", "function": {"name": b, "arguments": ""}}
            ]
        }
    return {"tool_calls": [{"index": index, "function": {"arguments": a}}]}


# ----- /v1/completions ----------------------------------------------------------------------

_COMPLETION_ARGS = _SAMPLING + ("max_tokens", "stream", "logprobs", "echo", "model", "grammar")


def _completion_logprobs(model: "Model", g: "Generation", offset: int) -> Dict[str, Any]:
    tokens, offsets, tops = [], [], []
    for tok, alts in zip(g.tokens, g.top_logprobs):
        tokens.append(_piece(model, tok))
        offsets.append(offset)
        offset += len(tokens[-1])
        tops.append({_piece(model, t): lp for t, lp in alts} if alts else None)
    return {
        "tokens": tokens,
        "text_offset": offsets,
        "token_logprobs": list(g.logprobs),
        "top_logprobs": tops,
    }


def create_completion(model: "Model", prompt: Any, **kwargs: Any) -> Any:
    _check_unknown(kwargs, _COMPLETION_ARGS, "create_completion")
    sampling = _sampling(kwargs, {})
    sampling["grammar"] = _grammar_text(kwargs.get("grammar"))
    logprobs = kwargs.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)):
        raise BadArgumentError("`logprobs` of a completion is an int (how many alternatives)")
    echo = bool(kwargs.get("echo", False))
    max_tokens = kwargs.get("max_tokens", 16)
    cid = f"cmpl-{os.urandom(12).hex()}"
    created = int(time.time())
    name = kwargs.get("model") or model.model_path
    prefix = prompt if (echo and isinstance(prompt, str)) else ""
    if kwargs.get("stream"):
        stream = model.generate(
            prompt, max_tokens=max_tokens, logprobs=logprobs, stream=True, **sampling
        )
        return _completion_chunks(model, stream, cid, created, name, prefix, logprobs)
    g = model.generate(prompt, max_tokens=max_tokens, logprobs=logprobs, **sampling)
    choice = {
        "text": prefix + g.text,
        "index": 0,
        "logprobs": _completion_logprobs(model, g, len(prefix)) if logprobs is not None else None,
        "finish_reason": g.finish_reason,
    }
    return {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": name,
        "choices": [choice],
        "usage": _usage(g),
    }


def _completion_chunks(
    model: "Model",
    stream: Any,
    cid: str,
    created: int,
    name: str,
    prefix: str,
    logprobs: Optional[int],
) -> Iterator[Dict[str, Any]]:
    def chunk(text: str, lp: Any, finish: Optional[str]) -> Dict[str, Any]:
        return {
            "id": cid,
            "object": "text_completion",
            "created": created,
            "model": name,
            "choices": [{"text": text, "index": 0, "logprobs": lp, "finish_reason": finish}],
        }

    with stream:
        if prefix:
            yield chunk(prefix, None, None)
        offset = len(prefix)
        for piece in stream:
            lp = None
            if logprobs is not None and piece.token is not None:
                token = _piece(model, piece.token)
                lp = {
                    "tokens": [token],
                    "text_offset": [offset],
                    "token_logprobs": [piece.logprob],
                    "top_logprobs": [{_piece(model, t): v for t, v in piece.top_logprobs}],
                }
            offset += len(piece.text)
            if piece.text or lp is not None:
                yield chunk(piece.text, lp, None)
        yield chunk("", None, stream.result.finish_reason)


# ----- /v1/chat/completions -----------------------------------------------------------------

_CHAT_ARGS = _SAMPLING + (
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "logprobs",
    "top_logprobs",
    "response_format",
    "n",
    "model",
    "stream_options",
    "grammar",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
)


def _chat_logprobs(model: "Model", tokens: Sequence[int], lps: Sequence[float], tops: Any) -> Any:
    def entry(tok: int, lp: float) -> Dict[str, Any]:
        b = model.token_to_piece(tok)
        return {"token": b.decode("utf-8", errors="replace"), "logprob": lp, "bytes": list(b)}

    content = []
    for tok, lp, alts in zip(tokens, lps, tops):
        e = entry(tok, lp)
        e["top_logprobs"] = [entry(t, v) for t, v in alts]
        content.append(e)
    return {"content": content}


def create_chat_completion(
    model: "Model", messages: Sequence[Mapping[str, Any]], **kwargs: Any
) -> Any:
    _check_unknown(kwargs, _CHAT_ARGS, "create_chat_completion")
    if kwargs.get("n") not in (None, 1):
        raise BadArgumentError("`n` above 1 is not supported here (use ggrs serve)")
    sampling = _sampling(kwargs, {"temperature": 0.2})
    sampling.update(_constraint(kwargs))
    want_lp = bool(kwargs.get("logprobs"))
    top = kwargs.get("top_logprobs")
    if top is not None and not want_lp:
        raise BadArgumentError("`top_logprobs` needs `logprobs: true`")
    max_tokens = kwargs.get("max_completion_tokens", kwargs.get("max_tokens"))
    plan = chat_plan(
        model,
        messages,
        tools=kwargs.get("tools"),
        tool_choice=kwargs.get("tool_choice"),
        parallel_tool_calls=kwargs.get("parallel_tool_calls"),
    )
    sampling["_chat_plan"] = plan
    ids = model._m.encode_chat(plan.prompt)
    cid = f"chatcmpl-{os.urandom(12).hex()}"
    created = int(time.time())
    name = kwargs.get("model") or model.model_path
    n_top = (top or 0) if want_lp else None
    if kwargs.get("stream"):
        opts = kwargs.get("stream_options") or {}
        stream = model.generate(ids, max_tokens=max_tokens, logprobs=n_top, stream=True, **sampling)
        return _chat_chunks(
            model, stream, plan, cid, created, name, want_lp, bool(opts.get("include_usage"))
        )
    g = model.generate(ids, max_tokens=max_tokens, logprobs=n_top, **sampling)
    lp = None
    if want_lp:
        n = len(g.tokens) - (1 if g.stop_reason == "eos" else 0)
        lp = _chat_logprobs(model, g.tokens[:n], g.logprobs[:n], g.top_logprobs[:n])
    reasoning, content, calls = plan.parse(g.text)
    message: Dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    finish = g.finish_reason
    if calls:
        # As OpenAI writes a reply that only calls tools: no content.
        message["content"] = content or None
        message["tool_calls"] = _tool_calls(calls)
        finish = "tool_calls"
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": name,
        "choices": [{"index": 0, "message": message, "logprobs": lp, "finish_reason": finish}],
        "usage": _usage(g),
    }


def _chat_chunks(
    model: "Model",
    stream: Any,
    plan: Any,
    cid: str,
    created: int,
    name: str,
    want_lp: bool,
    include_usage: bool,
) -> Iterator[Dict[str, Any]]:
    def chunk(delta: Dict[str, Any], lp: Any, finish: Optional[str]) -> Dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}],
        }

    pieces = plan.stream()
    with stream:
        yield chunk({"role": "assistant"}, None, None)
        for piece in stream:
            lp = None
            if want_lp and piece.token is not None:
                lp = _chat_logprobs(model, [piece.token], [piece.logprob], [piece.top_logprobs])
            deltas = pieces.push(piece.text) if piece.text else []
            for d in deltas:
                yield chunk(_reply_delta(*d), lp, None)
                lp = None
            if lp is not None:
                yield chunk({"content": ""}, lp, None)
        g = stream.result
        rest, (_, _, calls) = pieces.finish()
        for d in rest:
            yield chunk(_reply_delta(*d), None, None)
        yield chunk({}, None, "tool_calls" if calls else g.finish_reason)
        if include_usage:
            last = chunk({}, None, None)
            last["choices"] = []
            last["usage"] = _usage(g)
            yield last
