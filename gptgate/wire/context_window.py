"""A server's 400 saying the prompt does not fit the model's context window.

gptgate's own check (``Backend(context_tokens=...)``) raises ``RequestTooLargeError`` for a
call that cannot fit; the server's verdict on the same call must be the same type, so one
``except RequestTooLargeError`` catches both and reads the counts. Recognised shapes:
llama-server's ``exceed_context_size_error`` (``n_ctx``, ``n_prompt_tokens`` in the body),
OpenAI's ``context_length_exceeded``, vLLM's/OpenAI's "maximum context length is N tokens.
However, you requested M" message (vLLM's newer "your request has M input tokens"), SGLang's
and Together's "The input (M tokens) is longer than the model's context length (N tokens)" and
"maximum context length of N tokens. You requested a total of M tokens", and Anthropic's
"prompt is too long: M tokens > N maximum".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from gptgate.errors import RequestTooLargeError

__all__ = ["context_exceeded", "window_refusal"]

_CODES = frozenset({"exceed_context_size_error", "context_length_exceeded"})
_WINDOW = re.compile(r"maximum context length is (\d[\d,]*) tokens", re.IGNORECASE)
_ASKED = re.compile(
    r"(?:requested(?: a total of)?|resulted in) (\d[\d,]*) tokens", re.IGNORECASE
)
#: Anthropic and llama-server say (requested, window): "prompt is too long: 210000 tokens >
#: 200000 maximum", "request (12011 tokens) exceeds the available context size (2048 tokens)"
_ANTHROPIC = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum", re.IGNORECASE)
_LLAMA = re.compile(
    r"\((\d+) tokens\) exceeds the available context size \((\d+) tokens\)", re.IGNORECASE
)
#: SGLang and Together: "The input (5120 tokens) is longer than the model's context length
#: (4096 tokens)"
_LONGER = re.compile(
    r"input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)",
    re.IGNORECASE,
)
#: SGLang: "... exceeds the model's maximum context length of 4096 tokens. You requested a
#: total of 4600 tokens: ..."
_WINDOW_OF = re.compile(r"maximum context length of (\d[\d,]*) tokens", re.IGNORECASE)
#: vLLM since 0.10: "your request has 5000 input tokens", after "'max_tokens' or
#: 'max_completion_tokens' is too large: 1000" when the answer's room is what does not fit
_INPUT_HAS = re.compile(r"your request has (\d[\d,]*) input tokens", re.IGNORECASE)
_TOO_LARGE = re.compile(r"is too large: (\d[\d,]*)", re.IGNORECASE)


def context_exceeded(body: bytes, text: str, code: Any, kind: Any
                     ) -> tuple[int | None, int | None] | None:
    """``(window, requested)`` — either may be None when the server does not say — when a
    bad-request response (``text``, ``code`` and ``kind`` its message, code and type) refuses
    the prompt as too long for the context window; else None."""
    tags = {tag for tag in (code, kind) if isinstance(tag, str)}
    window = _number(_WINDOW, text, 1) or _number(_WINDOW_OF, text, 1)
    said = _LLAMA.search(text) or _ANTHROPIC.search(text) or _LONGER.search(text)
    if not tags & _CODES and window is None and said is None:
        return None
    extra = _error_object(body)
    window = _int(extra.get("n_ctx")) or window or (int(said.group(2)) if said else None)
    requested = (
        _int(extra.get("n_prompt_tokens"))
        or _number(_ASKED, text, 1)
        or (int(said.group(1)) if said else None)
        or _vllm_requested(text)
    )
    return window, requested


def _vllm_requested(text: str) -> int | None:
    """vLLM's count: the prompt, plus the answer's room when that is what does not fit."""
    prompt = _number(_INPUT_HAS, text, 1)
    if prompt is None:
        return None
    return prompt + (_number(_TOO_LARGE, text, 1) or 0)


def window_refusal(body: bytes, text: str, code: Any, kind: Any, status: int | None,
                   bad_request: bool, message: Callable[[], str]) -> RequestTooLargeError | None:
    """The :class:`RequestTooLargeError` of a ``bad_request`` that refuses the prompt as too
    long for the window — with a status, as the server's verdict: it moves the call to a
    backend with a longer window (gptgate/context_failover.py) — else None. Shared by the
    HTTP error and the one in a stream (llama-server's, vLLM's)."""
    sizes = context_exceeded(body, text, code, kind) if bad_request else None
    if sizes is None:
        return None
    return RequestTooLargeError(message(), status=status, limit=sizes[0], requested=sizes[1])


def _error_object(body: bytes) -> dict[str, Any]:
    """The body's ``error`` object (or the body itself), or {} when it is not JSON."""
    try:
        payload = json.loads(body)
    except ValueError:
        return {}
    if isinstance(payload, dict):
        inner = payload.get("error")
        return inner if isinstance(inner, dict) else payload
    return {}


def _int(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def _number(pattern: re.Pattern[str], text: str, group: int) -> int | None:
    match = pattern.search(text)
    return int(match.group(group).replace(",", "")) if match else None
