"""The same request written two ways has one response-cache key; a different one never
shares it. Before: ``temperature=0`` and ``temperature=0.0`` (a value read from JSON or YAML
config), or ``seed=None`` and no seed, were two keys — the second call paid again for the
answer stored by the first; and ``gate.stream`` left a call's ``extra_headers`` out of its key
while ``gate.chat`` kept them in (``_spec`` popped them from the shared dict first), so a
stream never found the answer the same ``gate.chat`` stored, and streams with different
headers (a beta feature, a tenant's own key) shared one answer."""

from __future__ import annotations

from typing import Any

import gptgate as gg
from gptgate.response_cache import request_key
from gptgate.sim import LoopClock, SimEngine, run_virtual
from tests.test_response_cache import _BACKENDS, Counting, M, _backend


def test_the_same_request_written_two_ways_is_one_key() -> None:
    def key(**params: Any) -> str:
        return request_key(_BACKENDS, M, params)

    assert key(temperature=0) == key(temperature=0.0)
    assert key(temperature=0, top_p=1) == key(temperature=0.0, top_p=1.0)
    assert key(temperature=0, seed=None, max_tokens=None) == key(temperature=0)
    assert key(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "number", "minimum": 0.0}}}}}]) == key(
        tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": {"type": "number", "minimum": 0}}}}}])
    # a different request is still another key
    assert key(temperature=0) != key(temperature=0.5)
    assert key(temperature=1) != key(temperature=True)
    assert key(seed=1) != key(seed=1.5)
    assert key(stop=None) != key(stop=[None])


def test_a_stream_and_a_chat_with_the_same_headers_share_an_answer_others_do_not() -> None:
    async def main() -> None:
        clock = LoopClock()
        counting = Counting(SimEngine("gpu", clock=clock, seed=3))
        gate = gg.Gateway([_backend(counting)], clock=clock,
                          response_cache=gg.ResponseCache(ttl_s=600))
        beta = {"extra_headers": {"anthropic-beta": "output-128k-2025-02-19"}}
        async with gate:
            stored = await gate.chat(M, temperature=0, max_tokens=20, **beta)
            async with gate.stream(M, temperature=0.0, max_tokens=20, **beta) as same:
                text = "".join([piece async for piece in same])
            assert same.result is not None and same.result.from_cache
            assert text == stored.text and counting.requests == 1
            async with gate.stream(M, temperature=0, max_tokens=20) as plain:
                _ = [piece async for piece in plain]
            assert plain.result is not None and not plain.result.from_cache
            other = {"extra_headers": {"anthropic-beta": "another-beta"}}
            async with gate.stream(M, temperature=0, max_tokens=20, **other) as apart:
                _ = [piece async for piece in apart]
            assert apart.result is not None and not apart.result.from_cache
            assert counting.requests == 3

    run_virtual(main)
