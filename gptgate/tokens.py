"""Cheap token estimates, used where a real count is unavailable.

No tokenizer runs on the event loop (LiteLLM #36174: a tokenizer stalled it for seconds). The
estimate is ~4 characters a token for ASCII text and its script's measured rate for any other
(a Chinese character ~0.8 of a token, a Cyrillic one ~a third: gptgate/token_scripts.py, O(n)
in C loops) — good enough to reserve rate-limit budget, to estimate an interrupted stream's billed
output, and to refuse a call that cannot fit (a refusal counts half the estimate). The
simulator models a real tokenizer's rates instead (gptgate/sim/tokenizer.py). A prompt's
image, audio and file parts count by the providers' published rules (gptgate/media_tokens.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .media_tokens import MediaRule, content_media_tokens
from .token_scripts import ESTIMATE, ScriptRates, text_chars

__all__ = [
    "CHARS_PER_TOKEN",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
    "estimate_tools_tokens",
    "message_text",
    "sure_prompt_tokens",
    "tokens_for_chars",
]

#: ASCII characters a token (another script's: gptgate/token_scripts.py)
CHARS_PER_TOKEN = 4
#: per-message overhead of the chat format (role, separators)
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_text_tokens(text: str, rates: ScriptRates = ESTIMATE) -> int:
    """``text``'s tokens: ~4 ASCII characters a token, another script's at its rate."""
    return tokens_for_chars(text_chars(text, rates))


def tokens_for_chars(chars: int) -> int:
    """The tokens of ``chars`` ASCII(-equivalent) characters (~4 a token, rounded up): a size
    from :func:`gptgate.token_scripts.text_chars`, which is ``len`` for ASCII text."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message's content (string or list of text parts); non-text parts are
    sized by :func:`estimate_prompt_tokens` (gptgate/media_tokens.py), not here."""
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


def _length(value: Any, rates: ScriptRates = ESTIMATE) -> int:
    return text_chars(value, rates) if isinstance(value, str) else 0


def _json_chars(value: Any, rates: ScriptRates, separators: tuple[str, str] = (", ", ": ")) -> int:
    """``value`` as JSON, its characters as the model reads them (not ``\\uXXXX`` escapes)."""
    text = json.dumps(value, separators=separators, ensure_ascii=False, default=str)
    return text_chars(text, rates)


def _call_chars(call: Any, rates: ScriptRates = ESTIMATE) -> int:
    """A tool call's name and arguments (``{"name", "arguments"}`` or its ``function``)."""
    if not isinstance(call, Mapping):
        return 0
    function = call.get("function", call)
    if not isinstance(function, Mapping):
        return 0
    return _length(function.get("name"), rates) + _length(function.get("arguments"), rates)


def _prompt_chars(message: Mapping[str, Any], rates: ScriptRates = ESTIMATE) -> int:
    """A message's characters as the server reads them: its text, and what a tool turn sends
    beside it — an assistant's ``tool_calls`` (or legacy ``function_call``), a Responses API
    ``function_call`` item's name and arguments or ``function_call_output``'s ``output``,
    Anthropic's ``tool_use`` input and ``tool_result`` content. The text alone sized a
    follow-up turn at its user line and the tool's one-line result. In ASCII-equivalent
    characters (``rates``: gptgate/token_scripts.py)."""
    chars = text_chars(message_text(message), rates)
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        chars += _call_chars(call, rates)
    chars += _call_chars(message.get("function_call"), rates)
    if message.get("type") == "function_call":  # a Responses API input item
        chars += _call_chars(message, rates)
    chars += _length(message.get("output"), rates)  # a Responses API function_call_output
    content = message.get("content")
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "tool_use":  # Anthropic's
            chars += _length(part.get("name"), rates) + _json_chars(part.get("input"), rates)
        elif part.get("type") == "tool_result":
            inner = part.get("content")
            chars += _length(inner, rates) or _length(message_text({"content": inner}), rates)
    return chars


def estimate_prompt_tokens(
    messages: Sequence[Mapping[str, Any]],
    media: MediaRule = "openai",
    unseen: bool = True,
    rates: ScriptRates = ESTIMATE,
) -> int:
    """The messages' prompt tokens: their text (~4 ASCII characters a token, another script's
    at its ``rates``, plus the chat format's overhead) and their image, audio and file parts
    (``media``: whose formula prices an OpenAI-style image part; ``unseen=False``: a part of
    unreadable size counts 0, for a refusal; gptgate/media_tokens.py)."""
    return sum(
        MESSAGE_OVERHEAD_TOKENS
        + tokens_for_chars(_prompt_chars(m, rates))
        + content_media_tokens(m.get("content"), media, unseen)
        for m in messages
    )


def estimate_tools_tokens(tools: Any) -> int:
    """A request's ``tools`` definitions, which the server puts in the prompt: their compact
    JSON's characters (0 for none). Five tools of the usual shape are ~350 tokens, which the
    messages' text alone left out."""
    if not isinstance(tools, list) or not tools:
        return 0
    return tokens_for_chars(_json_chars(tools, ESTIMATE, (",", ":")))


def sure_prompt_tokens(
    messages: Sequence[Mapping[str, Any]], tools: Any, media: MediaRule = "openai"
) -> int:
    """The prompt a refusal may rest on (a context window, a tokens-per-minute limit): the
    estimate without the default of an image, sound or PDF whose size cannot be read — a
    remote image counts its largest for the budget, but must not refuse a call whose image
    is small."""
    return estimate_prompt_tokens(messages, media, unseen=False) + estimate_tools_tokens(tools)
