"""Extended thinking's rules on ``provider="anthropic"``, refused before anything is sent.

Anthropic's extended-thinking docs: ``budget_tokens`` "has a floor of 1,024 tokens" and
"must be set to a value less than ``max_tokens``" (which counts the thinking) — except under
the interleaved-thinking beta, where "the token limit becomes your entire context window".
gptgate sent a budget of 512, or one of 8,000 beside ``max_tokens=4000`` or a backend's
``max_output_tokens=8000``: the call waited its turn and came back a 400 from the provider.

Which thinking a model takes (Anthropic's adaptive-thinking page and migration guides):
manual budgets only up to Claude 4.5 (Haiku 4.5 "the last of the pre-adaptive models"),
both on Opus 4.6 and Sonnet 4.6, adaptive only from Opus 4.7 (Opus 4.8, 5; Sonnet 5, 5.5;
Haiku 5.5), and "always on" — no ``disabled`` either — on Mythos, Fable and Opus 5.5.
``adaptive`` on Sonnet 4.5 was sent and refused by the server; so was ``disabled`` on
``claude-mythos-preview``, whose id (no version) escaped every per-model rule."""

from __future__ import annotations

from typing import Any

import pytest

import gptgate as gg

from .claudemock import claude

USER = [{"role": "user", "content": "Is 7919 prime?"}]
MANUAL = {"type": "enabled", "budget_tokens": 2048}
ADAPTIVE = {"type": "adaptive"}
DISABLED = {"type": "disabled"}


async def _send(model: str, params: dict[str, Any], **backend: Any) -> tuple[Any, list[Any]]:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([claude(sent, model, **backend)]) as gate:
        try:
            result: Any = await gate.chat(USER, stream=False, **params)
        except gg.GateError as error:
            result = error
    return result, sent


def _refused(result: Any, sent: list[Any], *phrases: str) -> None:
    assert isinstance(result, gg.BadRequestError), result
    assert "nothing was sent" in result.message and "'thinking'" in result.message
    for phrase in phrases:
        assert phrase in result.message, result.message
    assert sent == []


# -- the budget, whatever the model -----------------------------------------------------------


@pytest.mark.parametrize("budget", [0, 512, 1023])
async def test_a_budget_under_anthropics_minimum_is_refused_unsent(budget: int) -> None:
    result, sent = await _send("claude-sonnet-4-5", {
        "thinking": {"type": "enabled", "budget_tokens": budget}, "max_tokens": 8000})
    _refused(result, sent, "at least 1024", f"it is {budget}")


@pytest.mark.parametrize("max_tokens", [2048, 1500])
async def test_a_budget_not_below_max_tokens_is_refused_unsent(max_tokens: int) -> None:
    result, sent = await _send("claude-sonnet-4-5", {"thinking": MANUAL, "max_tokens": max_tokens})
    _refused(result, sent, "(2048) must be below max_tokens", f"({max_tokens})")


async def test_max_completion_tokens_is_the_max_tokens_the_budget_is_held_to() -> None:
    result, sent = await _send("claude-sonnet-4-5", {
        "thinking": MANUAL, "max_completion_tokens": 2000})
    _refused(result, sent, "must be below max_tokens (2000)")


async def test_a_budget_at_the_backends_output_cap_is_refused_unsent() -> None:
    """No ``max_tokens`` given: the backend's ``max_output_tokens`` is what is sent."""
    result, sent = await _send("claude-sonnet-4-5", {
        "thinking": {"type": "enabled", "budget_tokens": 8000}}, max_output_tokens=8000)
    _refused(result, sent, "(8000) must be below max_tokens (8000)")


@pytest.mark.parametrize(("budget", "max_tokens"), [(1024, 1025), (2048, 4096)])
async def test_a_budget_within_the_rules_is_sent(budget: int, max_tokens: int) -> None:
    thinking = {"type": "enabled", "budget_tokens": budget}
    result, sent = await _send("claude-sonnet-4-5", {"thinking": thinking,
                                                     "max_tokens": max_tokens})
    assert isinstance(result, gg.ChatResult), result
    assert sent[0]["thinking"] == thinking and sent[0]["max_tokens"] == max_tokens


async def test_under_the_interleaved_beta_a_budget_may_exceed_max_tokens() -> None:
    thinking = {"type": "enabled", "budget_tokens": 20_000}
    result, sent = await _send(
        "claude-sonnet-4-5", {"thinking": thinking, "max_tokens": 4096},
        headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
    )
    assert isinstance(result, gg.ChatResult), result
    assert sent[0]["thinking"] == thinking


@pytest.mark.parametrize("thinking", [
    {"type": "enable", "budget_tokens": 2048}, {"type": "enabled"},
    {"type": "enabled", "budget_tokens": "2048"}, "enabled",
])
async def test_a_malformed_thinking_is_refused_unsent(thinking: Any) -> None:
    result, sent = await _send("claude-sonnet-4-5", {"thinking": thinking, "max_tokens": 8000})
    _refused(result, sent)


async def test_extra_body_still_sends_any_thinking_as_it_is() -> None:
    thinking = {"type": "enabled", "budget_tokens": 512}
    result, sent = await _send("claude-sonnet-4-5", {"extra_body": {"thinking": thinking},
                                                     "max_tokens": 100})
    assert isinstance(result, gg.ChatResult), result
    assert sent[0]["thinking"] == thinking


# -- which thinking each model family takes ---------------------------------------------------

MANUAL_ONLY = ["claude-3-7-sonnet-20250219", "claude-sonnet-4-20250514",
               "claude-opus-4-1-20250805", "claude-sonnet-4-5-20250929", "claude-opus-4-5",
               "claude-haiku-4-5@20251001"]
BOTH = ["claude-opus-4-6", "claude-sonnet-4-6", "anthropic.claude-opus-4-6-v1"]
ADAPTIVE_ONLY = ["claude-opus-4-7", "claude-opus-4-8-20260601", "claude-sonnet-5",
                 "claude-opus-5", "claude-sonnet-5-5", "claude-haiku-5-5"]
ALWAYS_ON = ["claude-mythos-preview", "claude-mythos-5", "claude-fable-5", "claude-fable-5-1",
             "claude-opus-5-5"]


async def _taken(model: str, *thinkings: dict[str, Any]) -> None:
    for thinking in thinkings:
        result, sent = await _send(model, {"thinking": thinking, "max_tokens": 4096})
        assert isinstance(result, gg.ChatResult), (model, thinking, result)
        assert sent[0]["thinking"] == thinking


@pytest.mark.parametrize("model", MANUAL_ONLY)
async def test_claude_up_to_4_5_refuses_adaptive_thinking_and_takes_a_budget(model: str) -> None:
    result, sent = await _send(model, {"thinking": ADAPTIVE, "max_tokens": 4096})
    _refused(result, sent, f"model {model!r}", "no adaptive thinking", "'budget_tokens'")
    await _taken(model, MANUAL, DISABLED)


@pytest.mark.parametrize("model", BOTH)
async def test_opus_and_sonnet_4_6_take_a_budget_or_adaptive(model: str) -> None:
    await _taken(model, MANUAL, ADAPTIVE, DISABLED)


@pytest.mark.parametrize("model", ADAPTIVE_ONLY)
async def test_claude_from_opus_4_7_refuses_a_budget_and_takes_adaptive(model: str) -> None:
    result, sent = await _send(model, {"thinking": MANUAL, "max_tokens": 4096})
    _refused(result, sent, f"model {model!r}", "rejects a thinking budget", "'adaptive'")
    await _taken(model, ADAPTIVE, DISABLED)


@pytest.mark.parametrize("model", ALWAYS_ON)
async def test_always_thinking_models_refuse_a_budget_and_disabled(model: str) -> None:
    for thinking, phrase in ((MANUAL, "rejects a thinking budget"),
                             (DISABLED, "cannot turn thinking off")):
        result, sent = await _send(model, {"thinking": thinking, "max_tokens": 4096})
        _refused(result, sent, f"model {model!r}", phrase)
    await _taken(model, ADAPTIVE)


@pytest.mark.parametrize("thinking", [MANUAL, ADAPTIVE, DISABLED])
async def test_a_model_id_of_no_known_shape_is_sent_as_it_is(thinking: dict[str, Any]) -> None:
    """A proxy's alias: its model is not known, the server decides."""
    await _taken("house-reasoner", thinking)


@pytest.mark.parametrize(("param", "value"), [
    ("temperature", 0.5), ("top_k", 40), ("top_p", 0.5), ("tool_choice", "required"),
])
async def test_adaptive_thinking_refuses_what_thinking_refuses(param: str, value: Any) -> None:
    """Adaptive thinking is thinking: a ``temperature`` other than 1 beside it was the
    server's 400 on Opus and Sonnet 4.6, as with a budget."""
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {}}}}]
    result, sent = await _send("claude-sonnet-4-6", {
        "thinking": ADAPTIVE, "max_tokens": 4096, "tools": tools, param: value})
    assert isinstance(result, gg.BadRequestError), result
    assert repr(param) in result.message and "with extended thinking" in result.message
    assert sent == []
    result, sent = await _send("claude-sonnet-4-6", {
        "thinking": ADAPTIVE, "max_tokens": 4096, "temperature": 1, "tools": tools})
    assert isinstance(result, gg.ChatResult), result
