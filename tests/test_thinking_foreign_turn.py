"""A thinking tool loop whose last tool-calling turn another provider made.

In a mixed fleet a tool loop's turns need not all be one provider's: Claude overloaded, turn
k goes to DeepSeek (which takes ``thinking`` too) and makes the tool call; turn k+1 goes back
to Claude. Anthropic refuses thinking on a turn whose last assistant tool-use turn does not
start with its own signed thinking block ("a final `assistant` message must start with a
thinking block ... To avoid this requirement, disable `thinking`"), so the loop failed there
with a 400 — and DeepSeek, the other way round, refuses a tool-calling turn without
``reasoning_content``. Now Claude gets that one turn without ``thinking`` (what its error
asks; thinking resumes with the next user turn), and DeepSeek gets an empty
``reasoning_content`` on another model's tool-calling turn (accepted, as AgentScope found)."""

from __future__ import annotations

import json
from typing import Any

import gptgate as gg
from gptgate.sim import (
    ANTHROPIC_PROFILE,
    DEEPSEEK_PROFILE,
    LoopClock,
    SimEngine,
    SimTransport,
    run_virtual,
)

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look a fact up",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}}]
THINK = {"type": "enabled", "budget_tokens": 1024}
ASK = [{"role": "user", "content": "Look up 7."}]


def _recording(engine: SimEngine, sent: list[dict[str, Any]]) -> SimTransport:
    transport = SimTransport(engine)
    inner = transport.handle_async_request

    async def record(request: Any) -> Any:
        sent.append(json.loads(request.content))
        return await inner(request)

    transport.handle_async_request = record  # type: ignore[method-assign]
    return transport


async def _loop(first: str, then: str) -> tuple[Any, list[dict[str, Any]]]:
    clock = LoopClock()
    sent: list[dict[str, Any]] = []
    claude_engine = SimEngine(ANTHROPIC_PROFILE.model_copy(update={"output_tokens_mean": 40}),
                              clock=clock, seed=3)
    ds_engine = SimEngine(DEEPSEEK_PROFILE.model_copy(
        update={"model": "deepseek-reasoner", "output_tokens_mean": 40}), clock=clock, seed=4)
    backends = [
        gg.Backend(name="claude", provider="anthropic", base_url="http://127.0.0.1:1",
                   model=ANTHROPIC_PROFILE.model, api_key="sk-ant-test",
                   transport=_recording(claude_engine, sent)),
        gg.Backend(name="ds", provider="deepseek", base_url="http://127.0.0.1:2",
                   model="deepseek-reasoner", api_key="sk-test",
                   transport=_recording(ds_engine, sent)),
    ]
    async with gg.Gateway(backends, clock=clock, seed=1) as gate:
        params: dict[str, Any] = {"tools": TOOLS, "max_tokens": 2048, "thinking": THINK}
        r1 = await gate.chat(ASK, backend=first, **params)
        assert r1.raw is not None and r1.finish_reason == "tool_calls"
        message = r1.raw["choices"][0]["message"]
        turn = [*ASK, message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                "content": "prime"}]
        try:
            result: Any = await gate.chat(turn, backend=then, **params)
        except gg.GateError as error:
            result = error
    return result, sent


def test_claude_continues_another_providers_tool_turn_without_thinking() -> None:
    result, sent = run_virtual(_loop, "ds", "claude")
    assert isinstance(result, gg.ChatResult), result
    assert result.finish_reason == "stop"
    assert "thinking" not in sent[-1]  # this turn only: the loop's tool turn had none


def test_claude_keeps_thinking_on_its_own_tool_turn() -> None:
    result, sent = run_virtual(_loop, "claude", "claude")
    assert isinstance(result, gg.ChatResult), result
    assert sent[-1]["thinking"] == THINK


def test_deepseek_continues_claudes_tool_turn() -> None:
    result, sent = run_virtual(_loop, "claude", "ds")
    assert isinstance(result, gg.ChatResult), result
    assert sent[-1]["messages"][1]["reasoning_content"] == ""
    assert "thinking_blocks" not in sent[-1]["messages"][1]
