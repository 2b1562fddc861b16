"""The size of everything an answer generated, for booking one the server sent no usage for.

Output tokens are billed for every choice of ``n > 1``, tool-call names and arguments, a
reasoning model's thinking and a structured-output refusal — not only choice 0's text. An
answer without usage (a stream with no usage chunk: a server that ignores
``stream_options.include_usage``; a proxy that strips ``usage``) was estimated from its text
alone: a tool call was booked 0 output tokens, an ``n=2`` answer half of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gptgate.token_scripts import text_chars
from gptgate.tokens import message_text

__all__ = ["answer_chars"]

_TEXT_FIELDS = ("reasoning_content", "reasoning", "refusal")


def _message_chars(message: Mapping[str, Any]) -> int:
    chars = text_chars(message_text(message))
    for name in _TEXT_FIELDS:
        value = message.get(name)
        if isinstance(value, str):
            chars += text_chars(value)
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            for key in ("name", "arguments"):
                value = function.get(key)
                if isinstance(value, str):
                    chars += text_chars(value)
    return chars


def answer_chars(raw: Mapping[str, Any] | None, text: str) -> int:
    """Characters of output in a chat completion ``raw`` (all choices), at least ``text``'s."""
    choices = raw.get("choices") if raw is not None else None
    total = 0
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            total += _message_chars(message)
    return max(total, text_chars(text))
