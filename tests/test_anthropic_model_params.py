"""The parameters one Claude generation refuses, checked before sending as OpenAI's
reasoning models' are (docs/providers.md, "Per-model rules").

Anthropic's migration guide: "Starting with Claude Opus 4.7, setting `temperature`, `top_p`,
or `top_k` to any non-default value will return a 400 error", and `thinking={"type":
"enabled", "budget_tokens": N}` too (adaptive thinking and `output_config={"effort": ...}`
replace it); the Claude 4.5 and 4.6 models take `temperature` or `top_p`, "not both".
gptgate sent them all: an OpenAI-style call with `temperature=0.2` on `claude-opus-4-7`
waited its turn and failed at the server ("`temperature` is deprecated for this model"),
and in a mixed fleet it went to Claude rather than to the backend that takes it. And
`output_config`, the Messages API's field for that effort, was refused as unknown."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

import gptgate as gg

from .claudemock import claude, dearer_local
from .mockbackend import Script, ok

USER = [{"role": "user", "content": "Name a prime number."}]


ADAPTIVE = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}


@pytest.mark.parametrize("model", ["claude-opus-4-7", "claude-opus-4-8-20260601", "claude-opus-5",
                                   "claude-sonnet-5"])
@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"temperature": 0.2}, "temperature"),
        ({"top_p": 0.9}, "top_p"),
        ({"top_k": 40}, "top_k"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096},
         "thinking"),
    ],
)
async def test_claude_from_opus_4_7_refuses_sampling_and_thinking_budgets(
    model: str, params: dict[str, Any], named: str
) -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, model)]) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER, **{"max_tokens": 50, **params})
    message = info.value.message
    assert f"the parameter {named!r} for model {model!r}" in message
    assert "nothing was sent" in message
    if named == "thinking":
        assert "'adaptive'" in message
    assert sent == []


@pytest.mark.parametrize("model", ["claude-opus-4-7", "claude-sonnet-5"])
async def test_claude_from_opus_4_7_takes_defaults_adaptive_thinking_and_effort(model: str) -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, model)]) as gate:
        await gate.chat(USER, max_tokens=50, temperature=1)
        await gate.chat(USER, max_tokens=50, **ADAPTIVE)
    assert sent[0]["temperature"] == 1
    assert sent[1]["thinking"] == {"type": "adaptive"}
    assert sent[1]["output_config"] == {"effort": "high"}


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-haiku-4-5-20251001",
                                   "claude-opus-4-6", "claude-sonnet-4-6"])
async def test_claude_4_5_and_4_6_take_temperature_or_top_p_not_both(model: str) -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, model)]) as gate:
        with pytest.raises(gg.BadRequestError) as info:
            await gate.chat(USER, max_tokens=50, temperature=0.5, top_p=0.9)
        assert "'temperature' and 'top_p' together" in info.value.message
        assert f"model {model!r}" in info.value.message
        assert sent == []
        await gate.chat(USER, max_tokens=50, temperature=0.5, top_k=40)
        await gate.chat(USER, max_tokens=50, top_p=0.9)
    assert [b.get("temperature") for b in sent] == [0.5, None]


@pytest.mark.parametrize("model", ["claude-3-7-sonnet-20250219", "claude-opus-4-1-20250805",
                                   "claude-sonnet-4-20250514"])
async def test_older_claude_models_take_every_sampling_parameter(model: str) -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, model)]) as gate:
        await gate.chat(USER, max_tokens=50, temperature=0.5, top_p=0.9, top_k=40)
    assert (sent[0]["temperature"], sent[0]["top_p"], sent[0]["top_k"]) == (0.5, 0.9, 40)


async def test_in_a_mixed_fleet_a_sampled_call_goes_to_the_backend_that_takes_it() -> None:
    """Claude is the cheaper backend here: the router would send it every call."""
    sent: list[dict[str, Any]] = []
    script = Script(ok("7"))
    other = dearer_local(script)
    async with gg.Gateway([claude(sent, "claude-opus-4-7"), other]) as gate:
        results = await gate.map(
            [{"messages": USER, "max_tokens": 20, "temperature": 0.2} for _ in range(12)])
    assert {r.backend for r in results} == {"local"}  # type: ignore[union-attr]
    assert sent == [] and len(script.requests) == 12


async def test_output_config_is_claudes_in_a_mixed_fleet() -> None:
    """OpenAI's and Azure's chat API answer ``output_config`` with a 400 ("Unrecognized
    request argument supplied"): a call with it goes to Claude."""
    sent: list[dict[str, Any]] = []
    script = Script(ok("7"))
    other = gg.Backend(name="oai", provider="openai", model="gpt-4o", api_key="sk-test",
                       price=gg.Price(input_per_mtok=0.01, output_per_mtok=0.01),
                       transport=httpx2.MockTransport(script))
    async with gg.Gateway([claude(sent, "claude-opus-4-7"), other]) as gate:
        results = await gate.map(
            [{"messages": USER, "max_tokens": 20, **ADAPTIVE} for _ in range(6)])
    assert {r.backend for r in results} == {"claude"}  # type: ignore[union-attr]
    assert script.requests == [] and sent[0]["output_config"] == {"effort": "high"}
