"""Cheap token estimates, used where a real count is unavailable.

No tokenizer runs on the event loop (LiteLLM #36174: a tokenizer stalled it for seconds). The
estimate is ~4 characters a token, good enough to reserve rate-limit budget, to estimate an
interrupted stream's billed output, and to model tokens in the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
    "message_text",
    "tokens_for_chars",
]

CHARS_PER_TOKEN = 4
#: per-message overhead of the chat format (role, separators)
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_text_tokens(text: str) -> int:
    return tokens_for_chars(len(text))


def tokens_for_chars(chars: int) -> int:
    """The tokens of ``chars`` characters of text (~4 a token, rounded up)."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message's content (string or list of text parts); non-text parts count 0."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def estimate_prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(
        MESSAGE_OVERHEAD_TOKENS + estimate_text_tokens(message_text(m)) for m in messages
    )
