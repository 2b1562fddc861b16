"""A llama-server's prompt-cache reuse read from its ``timings`` when ``usage`` omits it.

llama.cpp's ``llama-server`` reuses a slot's KV cache for a prompt's common prefix. Its
builds since ``usage_json_oaicompat`` say so in OpenAI's field
(``usage.prompt_tokens_details.cached_tokens``); earlier builds, and the ik_llama.cpp fork
today, send a ``usage`` of ``prompt_tokens``/``completion_tokens``/``total_tokens`` only and
report the reuse in their own ``timings`` object beside it: ``cache_n`` (the tokens reused)
where the build has it, and always ``prompt_n`` (the prompt tokens it evaluated — the rest came
from the cache). Read as OpenAI's usage alone, every answer from such a server had 0 cached
tokens: ``stats()`` showed a 0% hit rate on a server reusing most of each prompt, and the
cache gate (gptgate/cache.py), which widens a prefix's window only while hits hold, never
widened it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gptgate.results import Usage
from gptgate.wire.usage import parse_usage, token_count

__all__ = ["answer_usage"]


def answer_usage(obj: Mapping[str, Any]) -> Usage | None:
    """The usage of an answer or stream chunk ``obj`` (its ``usage`` object), with the cache
    reuse its llama-server ``timings`` report when ``usage`` carries no cache count."""
    raw = obj.get("usage")
    usage = parse_usage(raw)
    timings = obj.get("timings")
    if usage is None or not isinstance(timings, dict) or _says_cache(raw):
        return usage
    reused = token_count(timings.get("cache_n"))
    if reused is None:
        evaluated = token_count(timings.get("prompt_n"))
        if evaluated is None or evaluated > usage.input_tokens:
            return usage
        reused = usage.input_tokens - evaluated
    return replace(usage, cached_input_tokens=min(reused, usage.input_tokens))


def _says_cache(raw: Any) -> bool:
    """Whether the usage object has a cache count of its own (OpenAI's, DeepSeek's)."""
    if not isinstance(raw, dict) or "prompt_cache_hit_tokens" in raw:
        return True
    details = raw.get("prompt_tokens_details")
    return isinstance(details, dict) and "cached_tokens" in details
