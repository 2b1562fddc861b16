"""Anthropic refuses a stop sequence with no visible character: ``stop="\\n"`` (the most
common OpenAI stop, a line's end) is its 400 "stop_sequences: each stop sequence must
contain non-whitespace" (an empty one: "each stop sequence must be non-empty"; LiteLLM
#3286). gptgate maps ``stop`` to ``stop_sequences`` and sent it as it was: the call waited
for its turn and failed at the server. It is refused before sending, naming the
parameter, and in a fleet with an OpenAI-compatible backend the call goes there."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

from .mockbackend import Script, ok

USER = [{"role": "user", "content": "List three fruits, one per line."}]


def _claude(sent: list[dict[str, Any]]) -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "apple"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 2},
        })

    return gg.Backend(name="claude", provider="anthropic", model="claude-sonnet-4-5",
                      api_key="sk-ant-test", price=gg.Price(input_per_mtok=3.0, output_per_mtok=15.0),
                      transport=httpx2.MockTransport(answer))


@pytest.mark.parametrize(
    "params",
    [{"stop": "\n"}, {"stop": ["END", "\n\n"]}, {"stop": [""]}, {"stop_sequences": [" \t"]}],
)
async def test_a_blank_stop_sequence_is_refused_before_sending(params: dict[str, Any]) -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([_claude(sent)]) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER, max_tokens=20, **params)
    (name,) = params
    assert "provider 'anthropic'" in info.value.message
    assert f"the parameter {name!r}" in info.value.message
    assert "non-whitespace" in info.value.message
    assert sent == []  # nothing sent


async def test_visible_stop_sequences_are_sent() -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([_claude(sent)]) as gate:
        await gate.chat(USER, max_tokens=20, stop=["END", " \nHuman:"])
    assert sent[0]["stop_sequences"] == ["END", " \nHuman:"]


async def test_in_a_mixed_fleet_a_blank_stop_goes_to_the_backend_that_takes_it() -> None:
    """Claude is the cheaper backend here: the router would send it every call."""
    sent: list[dict[str, Any]] = []
    script = Script(ok("apple\nbanana"))
    other = gg.Backend(name="local", provider="vllm", model="Qwen/Qwen3-8B", signals=False,
                       price=gg.Price(input_per_mtok=50.0, output_per_mtok=50.0),
                       transport=httpx2.MockTransport(script))
    async with gg.Gateway([_claude(sent), other]) as gate:
        results = await gate.map(
            [{"messages": USER, "max_tokens": 20, "stop": "\n"} for _ in range(12)])
    assert {r.backend for r in results} == {"local"}  # type: ignore[union-attr]
    assert sent == [] and len(script.requests) == 12
    assert script.bodies[0]["stop"] == "\n"
