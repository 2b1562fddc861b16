"""The JSON types of the standard chat parameters, checked before anything is sent.

Why here and not at the server: a live call with ``temperature="hot"`` costs one 400, but a
Batch API item with it is uploaded with thousands of others and only refused once the batch
has run (or, at a provider that validates the whole request set, takes the others down with
it). Only the *type* is checked — a string where a number goes, a bool where an int goes, a
list where a string goes — since every OpenAI-compatible server and every dialect agrees on
types; ranges differ (Anthropic's temperature stops at 1, OpenAI's at 2) and stay the
server's to judge. ``None`` is the server's default; parameters not listed pass untouched."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import BadRequestError

__all__ = ["PARAM_KINDS", "check_param_types"]


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stop(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    )


def _tool_choice(value: object) -> bool:
    return isinstance(value, str | Mapping)


_KINDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "number": ("a number", _number),
    "int": ("an int", _int),
    "bool": ("a bool", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "list": ("a list", lambda v: isinstance(v, list | tuple)),
    "dict": ("a dict", lambda v: isinstance(v, Mapping)),
    "stop": ("a string or a list of strings", _stop),
    "tool_choice": ("a string or a dict", _tool_choice),
}

#: parameter → its kind (OpenAI's chat-completions reference; ``top_k``: Anthropic's, vLLM's)
PARAM_KINDS: dict[str, str] = {
    "temperature": "number", "top_p": "number", "frequency_penalty": "number",
    "presence_penalty": "number", "seed": "int", "top_k": "int", "top_logprobs": "int",
    "logprobs": "bool", "parallel_tool_calls": "bool", "store": "bool", "stop": "stop",
    "user": "str", "reasoning_effort": "str", "service_tier": "str",
    "prompt_cache_key": "str", "tools": "list", "functions": "list", "modalities": "list",
    "logit_bias": "dict", "metadata": "dict", "tool_choice": "tool_choice",
}


def check_param_types(params: Mapping[str, Any]) -> None:
    """Raise :class:`BadRequestError` naming the first parameter of a wrong JSON type."""
    for name, kind in PARAM_KINDS.items():
        value = params.get(name)
        if value is None:
            continue
        what, fits = _KINDS[kind]
        if not fits(value):
            raise BadRequestError(f"{name} must be {what} (or None), got {value!r}")
