"""gptgate's own cache marker beside a caller's 1-hour one, on ``provider="anthropic"``.

Anthropic processes breakpoints in the order tools, system, messages, and refuses a
``ttl="1h"`` breakpoint after a 5-minute one (a 400: "a ttl='1h' cache_control block must not
come after a ttl='5m' cache_control block"). gptgate marks the end of the prefix its cache gate
groups calls on (every message but the last) with a 5-minute marker; a caller who marked the
last message ``{"type": "ephemeral", "ttl": "1h"}`` — the agent-loop pattern of caching the
whole conversation for an hour — got that 400 on every call whose prefix was long enough to be
marked. gptgate's marker now takes the 1-hour TTL when a 1-hour marker follows it."""

from __future__ import annotations

import json
from typing import Any

import pytest

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual

ROOT = "http://127.0.0.1:1"
SYSTEM = "You are a careful assistant. " * 300  # ~2,000 tokens: over the cache minimum
HOUR = {"type": "ephemeral", "ttl": "1h"}


def _ask(i: int, ttl: dict[str, Any] | None) -> list[dict[str, Any]]:
    part: dict[str, Any] = {"type": "text", "text": f"Question {i}: name three teas."}
    if ttl is not None:
        part["cache_control"] = ttl
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": [part]}]


async def _calls(ttl: dict[str, Any] | None) -> tuple[list[Any], list[dict[str, Any]], Any]:
    clock = LoopClock()
    engine = SimEngine(ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 20}),
                       clock=clock, seed=3)
    transport = SimTransport(engine)
    inner = transport.handle_async_request
    sent: list[dict[str, Any]] = []

    async def record(request: Any) -> Any:
        sent.append(json.loads(request.content))
        return await inner(request)

    transport.handle_async_request = record  # type: ignore[method-assign]
    claude = gg.Backend(name="claude", provider="anthropic", base_url=ROOT,
                        model=ANTHROPIC_PROFILE.model, api_key="sk-ant-test",
                        transport=transport)
    results: list[Any] = []
    async with gg.Gateway([claude], clock=clock, seed=1) as gate:
        for i in range(3):
            try:
                results.append(await gate.chat(_ask(i, ttl), max_tokens=50))
            except gg.GateError as error:
                results.append(error)
    return results, sent, engine.ledger.snapshot()


def test_a_callers_one_hour_marker_after_gptgates_is_kept_valid() -> None:
    results, sent, billed = run_virtual(_calls, HOUR)
    assert all(isinstance(r, gg.ChatResult) for r in results), results
    assert sent[0]["system"][-1]["cache_control"] == HOUR  # gptgate's own, an hour too
    assert sent[0]["messages"][-1]["content"][-1]["cache_control"] == HOUR  # the caller's
    assert billed.cached_input_tokens > 0  # the shared system prompt is read from the cache


@pytest.mark.parametrize("ttl", [None, {"type": "ephemeral"}])
def test_without_a_one_hour_marker_gptgates_stays_five_minutes(ttl: Any) -> None:
    results, sent, _ = run_virtual(_calls, ttl)
    assert all(isinstance(r, gg.ChatResult) for r in results), results
    assert sent[0]["system"][-1]["cache_control"] == {"type": "ephemeral"}
