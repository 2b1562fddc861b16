"""Reading a provider's ``usage`` object into one :class:`~gptgate.results.Usage`.

Providers report the prompt cache three ways, and a reader that assumes one shape on another
bills the wrong thing (LiteLLM #5017 and #16009: DeepSeek's cache unread; #9812, #11364,
#5443: Anthropic's cache tokens counted twice or not at all):

- **OpenAI** (and Azure, vLLM, OpenRouter, …): ``prompt_tokens`` is every prompt token and
  ``prompt_tokens_details.cached_tokens`` the *part* read from cache
  (``cache_write_tokens`` there, on OpenRouter, the part written);
  ``completion_tokens_details.reasoning_tokens`` is part of ``completion_tokens``. The
  Responses API says the same with ``input_tokens`` / ``input_tokens_details``.
- **DeepSeek**: top-level ``prompt_cache_hit_tokens`` + ``prompt_cache_miss_tokens`` =
  ``prompt_tokens``.
- **Anthropic** (native Messages API): ``input_tokens`` is only the prompt *after* the last
  cache breakpoint; ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` come *on
  top* of it; ``output_tokens_details.thinking_tokens`` is the part of ``output_tokens``
  spent on extended thinking. Recognised by those keys without a ``prompt_tokens`` (a proxy
  that adds them beside an OpenAI-style ``prompt_tokens`` means them as parts, and is read
  so).

Every reader returns None when the object carries no token count at all (so a caller can tell
"no usage reported" from "zero tokens"), and clamps the parts to their whole: a count that
claims more cache than prompt (seen on proxies) is never billed below zero.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ..results import Usage

__all__ = ["cut_usage", "parse_anthropic_usage", "parse_usage", "token_count"]

def token_count(value: Any) -> int | None:
    """A non-negative token count, or None for anything that is not a number."""
    if type(value) is int:  # the common case; the exact check also rejects bool
        return value if value >= 0 else 0
    if isinstance(value, float) and math.isfinite(value):
        return max(0, int(value))
    return None


def _details(obj: dict[str, Any], name: str, alias: str) -> dict[str, Any] | None:
    details = obj.get(name)
    if isinstance(details, dict):
        return details
    details = obj.get(alias)
    return details if isinstance(details, dict) else None


def _normalised(
    input_tokens: int, read: int, write: int, output_tokens: int, reasoning: int
) -> Usage:
    """A Usage whose parts fit their wholes (reads first, then writes, within the prompt)."""
    if read > input_tokens:
        read = input_tokens
    if write > input_tokens - read:
        write = input_tokens - read
    return Usage(
        input_tokens=input_tokens,
        cached_input_tokens=read,
        output_tokens=output_tokens,
        cache_write_input_tokens=write,
        reasoning_tokens=reasoning if reasoning <= output_tokens else output_tokens,
    )


def parse_anthropic_usage(obj: Any) -> Usage | None:
    """Anthropic's usage: cache reads and writes are added to ``input_tokens`` (they are
    billed prompt tokens it leaves out), so ``Usage.input_tokens`` is the whole prompt."""
    if not isinstance(obj, dict):
        return None
    uncached = token_count(obj.get("input_tokens"))
    output = token_count(obj.get("output_tokens"))
    read = token_count(obj.get("cache_read_input_tokens")) or 0
    write = token_count(obj.get("cache_creation_input_tokens")) or 0
    if uncached is None and output is None and not read and not write:
        return None
    details = obj.get("output_tokens_details")  # Claude's thinking, a part of the output
    thinking = token_count(details.get("thinking_tokens")) if isinstance(details, dict) else 0
    usage = _normalised((uncached or 0) + read + write, read, write, output or 0, thinking or 0)
    split = obj.get("cache_creation")  # the writes by TTL: the one-hour ones cost more
    hour = token_count(split.get("ephemeral_1h_input_tokens")) if isinstance(split, dict) else 0
    if hour:
        usage = replace(
            usage, cache_write_1h_input_tokens=min(hour, usage.cache_write_input_tokens)
        )
    tools = obj.get("server_tool_use")  # searches a server-side tool made, billed apiece
    searches = token_count(tools.get("web_search_requests")) if isinstance(tools, dict) else 0
    if searches:
        usage = replace(usage, web_search_requests=searches)
    return usage


#: keys only Anthropic's usage has (an OpenAI-style one has ``prompt_tokens``)
_ANTHROPIC_KEYS = ("cache_read_input_tokens", "cache_creation_input_tokens", "server_tool_use")


def parse_usage(obj: Any) -> Usage | None:
    """Token counts from any provider's ``usage`` object (the shapes above)."""
    if not isinstance(obj, dict):
        return None
    prompt = token_count(obj.get("prompt_tokens"))
    if prompt is None:
        if any(k in obj for k in _ANTHROPIC_KEYS):
            return parse_anthropic_usage(obj)
        prompt = token_count(obj.get("input_tokens"))
    output = token_count(obj.get("completion_tokens"))
    if output is None:
        output = token_count(obj.get("output_tokens"))
    hit = token_count(obj.get("prompt_cache_hit_tokens"))  # DeepSeek
    if prompt is None and hit is not None:
        prompt = hit + (token_count(obj.get("prompt_cache_miss_tokens")) or 0)
    if prompt is None and output is None:
        return None
    read = hit
    write = None
    details = _details(obj, "prompt_tokens_details", "input_tokens_details")
    if details is not None:
        if read is None:
            read = token_count(details.get("cached_tokens"))
        write = token_count(details.get("cache_write_tokens"))
    if read is None:  # a proxy's OpenAI-style body with Anthropic's names, as parts
        read = token_count(obj.get("cache_read_input_tokens"))
    if write is None:
        write = token_count(obj.get("cache_creation_input_tokens"))
    reasoning = None
    details = _details(obj, "completion_tokens_details", "output_tokens_details")
    if details is not None:
        reasoning = token_count(details.get("reasoning_tokens"))
        if reasoning is None:  # Anthropic's name, in a usage without its cache keys
            reasoning = token_count(details.get("thinking_tokens"))
    return _normalised(prompt or 0, read or 0, write or 0, output or 0, reasoning or 0)


def cut_usage(
    said: Usage | None, prompt_tokens: int, output_tokens: int, cached_guess: int = 0
) -> Usage:
    """What an answer cut before its end is booked at (estimated): the input side as the
    server counted it when the stream said so (an Anthropic ``message_start`` gives the
    prompt, cache reads and writes before the first token; an OpenAI stream with
    continuous usage), else ``prompt_tokens`` of which ``cached_guess`` read from the cache
    (gptgate/cached_guess.py); ``output_tokens`` as guessed. A stream left after one delta
    over a cached 2,000-token prefix was booked at ten times its bill's input price."""
    if said is None or said.input_tokens <= 0:
        return Usage(
            input_tokens=prompt_tokens,
            cached_input_tokens=min(max(0, cached_guess), prompt_tokens),
            output_tokens=output_tokens,
            estimated=True,
        )
    return Usage(
        input_tokens=said.input_tokens,
        cached_input_tokens=said.cached_input_tokens,
        cache_write_input_tokens=said.cache_write_input_tokens,
        cache_write_1h_input_tokens=said.cache_write_1h_input_tokens,
        web_search_requests=said.web_search_requests,
        output_tokens=output_tokens,
        estimated=True,
    )
