"""A tool loop on DeepSeek's thinking mode, streamed or not.

DeepSeek's thinking mode answers with ``reasoning_content`` beside the content or the tool
call, and for a turn that made a tool call it wants that reasoning back in every later
request — without it the loop's next turn is a 400 ("The `reasoning_content` in the thinking
mode must be passed back to the API"). A non-streamed answer's ``r.raw`` message is the
server's own, reasoning included, so appending it works; a streamed answer's ``r.raw`` was
rebuilt from the deltas without the reasoning, and the loop's second turn was that 400. The
simulator's ``deepseek-reasoner`` enforces the rule, as the real API does."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.sim import DEEPSEEK_PROFILE, LoopClock, SimEngine, SimTransport, run_virtual

ROOT = "http://127.0.0.1:1"
MODEL = "deepseek-reasoner"
PROFILE = DEEPSEEK_PROFILE.model_copy(update={"model": MODEL, "output_tokens_mean": 60})
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "look a fact up",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}}]
ASK = [{"role": "user", "content": "Look up 7."}]


async def _loop(stream: bool) -> tuple[dict[str, Any], gg.ChatResult]:
    clock = LoopClock()
    engine = SimEngine(PROFILE, clock=clock, seed=3)
    backend = gg.Backend(name="ds", provider="deepseek", base_url=ROOT, model=MODEL,
                         api_key="sk-test", transport=SimTransport(engine))
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        first = await gate.chat(ASK, tools=TOOLS, max_tokens=400, stream=stream)
        assert first.raw is not None and first.finish_reason == "tool_calls"
        message: dict[str, Any] = first.raw["choices"][0]["message"]
        (call,) = message["tool_calls"]
        turn = [*ASK, message, {"role": "tool", "tool_call_id": call["id"], "content": "prime"}]
        second = await gate.chat(turn, tools=TOOLS, max_tokens=400, stream=stream)
    return message, second


@pytest.mark.parametrize("stream", [False, True])
def test_a_thinking_tool_loop_sends_the_reasoning_back(stream: bool) -> None:
    message, second = run_virtual(_loop, stream)
    assert message["reasoning_content"]  # the answer's own, streamed or not
    assert second.text and second.finish_reason == "stop"


def test_the_simulator_refuses_a_tool_loop_that_dropped_the_reasoning() -> None:
    async def main() -> tuple[dict[str, Any], httpx2.Response]:
        engine = SimEngine(PROFILE, clock=LoopClock(), seed=3)
        async with httpx2.AsyncClient(transport=SimTransport(engine), base_url=ROOT) as client:
            auth = {"authorization": "Bearer sk-test"}
            body = {"model": MODEL, "messages": ASK, "tools": TOOLS, "max_tokens": 400}
            first = (await client.post("/chat/completions", json=body, headers=auth)).json()
            message = first["choices"][0]["message"]
            call = message["tool_calls"][0]
            dropped = {k: v for k, v in message.items() if k != "reasoning_content"}
            body["messages"] = [*ASK, dropped, {"role": "tool", "tool_call_id": call["id"],
                                                "content": "prime"}]
            return message, await client.post("/chat/completions", json=body, headers=auth)

    message, refused = run_virtual(main)
    assert message["reasoning_content"] and message["content"] is None
    assert refused.status_code == 400
    assert "reasoning_content" in json.dumps(refused.json())
