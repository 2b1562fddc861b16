"""Anthropic refuses a stop sequence with no visible character: ``stop="\\n"`` (the most
common OpenAI stop, a line's end) is its 400 "stop_sequences: each stop sequence must
contain non-whitespace" (an empty one: "each stop sequence must be non-empty"; LiteLLM
#3286). gptgate maps ``stop`` to ``stop_sequences`` and sent it as it was: the call waited
for its turn and failed at the server. It is refused before sending, naming the
parameter, and in a fleet with an OpenAI-compatible backend the call goes there."""

from __future__ import annotations

from typing import Any

import pytest

import gptgate as gg

from .claudemock import claude, dearer_local
from .mockbackend import Script, ok

USER = [{"role": "user", "content": "List three fruits, one per line."}]


@pytest.mark.parametrize(
    "params",
    [{"stop": "\n"}, {"stop": ["END", "\n\n"]}, {"stop": [""]}, {"stop_sequences": [" \t"]}],
)
async def test_a_blank_stop_sequence_is_refused_before_sending(params: dict[str, Any]) -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent)]) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER, max_tokens=20, **params)
    (name,) = params
    assert "provider 'anthropic'" in info.value.message
    assert f"the parameter {name!r}" in info.value.message
    assert "non-whitespace" in info.value.message
    assert sent == []  # nothing sent


async def test_visible_stop_sequences_are_sent() -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent)]) as gate:
        await gate.chat(USER, max_tokens=20, stop=["END", " \nHuman:"])
    assert sent[0]["stop_sequences"] == ["END", " \nHuman:"]


async def test_in_a_mixed_fleet_a_blank_stop_goes_to_the_backend_that_takes_it() -> None:
    """Claude is the cheaper backend here: the router would send it every call."""
    sent: list[dict[str, Any]] = []
    script = Script(ok("apple\nbanana"))
    other = dearer_local(script)
    async with gg.Gateway([claude(sent), other]) as gate:
        results = await gate.map(
            [{"messages": USER, "max_tokens": 20, "stop": "\n"} for _ in range(12)])
    assert {r.backend for r in results} == {"local"}  # type: ignore[union-attr]
    assert sent == [] and len(script.requests) == 12
    assert script.bodies[0]["stop"] == "\n"
