"""When a streamed answer has begun: its first output of any kind, not only its first text.

A tool call streams as ``delta.tool_calls`` pieces with no ``content``; a reasoning model
(``deepseek-reasoner``, vLLM's and ollama's reasoning parsers) streams ``reasoning_content``
or ``reasoning`` first; Anthropic streams ``input_json_delta`` and ``thinking_delta``. Timing
a stream's first token by its first *text* left such answers without one until their end:
the hedge never learned a normal wait for them nor saw them start, so a stalled tool call was
never hedged (its tail stayed), and the cache gate held a prefix group until the whole
answer. The reader yields one ``""`` when output begins without text — the attempt's first
token, shown to nobody (the call path drops it before the caller) — and nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gptgate.token_scripts import text_chars

__all__ = ["generates", "reasoning_chars", "reasoning_piece"]

#: the delta fields that carry a reasoning model's thinking (DeepSeek's, vLLM's older
#: parser: ``reasoning_content``; vLLM's newer, ollama, OpenRouter: ``reasoning``)
_REASONING_FIELDS = ("reasoning_content", "reasoning")
#: the delta fields that carry generated output in OpenAI-compatible streams
_OUTPUT_FIELDS = ("content", "tool_calls", "refusal", *_REASONING_FIELDS)


def generates(delta: Mapping[str, Any]) -> bool:
    """Does this OpenAI-style ``delta`` carry output (not just the role or a null)?"""
    return any(delta.get(name) for name in _OUTPUT_FIELDS)


def reasoning_piece(delta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(the field, its text) of the reasoning in an OpenAI-style ``delta``, or None."""
    for name in _REASONING_FIELDS:
        piece = delta.get(name)
        if piece and isinstance(piece, str):
            return name, piece
    return None


def reasoning_chars(delta: Mapping[str, Any]) -> int:
    """Characters of reasoning in an OpenAI-style ``delta``: billed as output tokens, so a
    stream left mid-reasoning is booked at what arrived (~4 characters a token), like text."""
    size = 0
    for name in _REASONING_FIELDS:
        piece = delta.get(name)
        if isinstance(piece, str):
            size += text_chars(piece)
    return size
