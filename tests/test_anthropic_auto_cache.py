"""Anthropic's automatic prompt caching: a ``cache_control`` at the top level of the request
("the system automatically applies the cache breakpoint to the last cacheable block and moves
it forward as conversations grow" — Anthropic's prompt-caching page, GA since February 2026)
is sent as it is. gptgate refused it as an unknown parameter ("rejects the parameter
'cache_control'"), so the documented way to cache a growing conversation could not be used.
Its breakpoint is one of the request's four and the last one: gptgate's own marker counts it
(no fifth breakpoint, a 400) and takes its one-hour TTL (Anthropic refuses a one-hour
breakpoint after a five-minute one)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

from .claudemock import claude

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 300}  # ~2,000 tokens
ASK = [SYSTEM, {"role": "user", "content": "Name a prime."}]


USAGE = {"input_tokens": 12, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 0,
         "output_tokens": 1}


async def test_a_top_level_cache_control_is_sent() -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, usage=USAGE)]) as gate:
        result = await gate.chat(ASK, max_tokens=20, cache_control={"type": "ephemeral"})
    assert sent[0]["cache_control"] == {"type": "ephemeral"}
    assert sent[0]["system"][-1]["cache_control"] == {"type": "ephemeral"}  # the gate's own
    assert result.usage.cache_write_input_tokens == 2000


async def test_the_gates_marker_takes_the_automatic_breakpoints_hour() -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, usage=USAGE)]) as gate:
        await gate.chat(ASK, max_tokens=20, cache_control={"type": "ephemeral", "ttl": "1h"})
    assert sent[0]["system"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


async def test_with_three_markers_of_the_callers_the_gate_adds_none() -> None:
    mark = {"type": "ephemeral"}
    own = [{"role": "system", "content": [
        {"type": "text", "text": f"part {i} " * 400, "cache_control": mark} for i in range(3)
    ] + [{"type": "text", "text": "tail " * 400}]}, {"role": "user", "content": "q"}]
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, usage=USAGE)]) as gate:
        await gate.chat(own, max_tokens=20, cache_control=mark)
    body = json.dumps(sent[0])
    assert body.count("cache_control") == 4  # the caller's three and the automatic one


@pytest.mark.parametrize("provider", ["openai", "azure"])
async def test_openai_and_azure_refuse_it_before_sending(provider: str) -> None:
    """Their chat API answers it with a 400 ("Unrecognized request argument supplied")."""
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(400, json={"error": {"message": "Unrecognized request argument "
                                                               "supplied: cache_control"}})

    extra: dict[str, Any] = (
        {"deployment": "gpt-4o", "base_url": "https://res.openai.azure.com"}
        if provider == "azure" else {}
    )
    backend = gg.Backend(name="o", provider=provider, model="gpt-4o", api_key="k",
                         transport=httpx2.MockTransport(answer), **extra)
    async with gg.Gateway([backend]) as gate:
        with pytest.raises(gg.BadRequestError, match="'cache_control'"):
            await gate.chat(ASK, max_tokens=20, cache_control={"type": "ephemeral"})
    assert seen == []
