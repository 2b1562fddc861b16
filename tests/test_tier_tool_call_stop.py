"""A small-tier answer that is a tool call is an answer, whatever its ``finish_reason``
(gptgate/tiers.py ``failure_reason``). OpenAI answers a named ``tool_choice`` (``{"type":
"function", "function": {"name": ...}}``, the usual way to force a structured extraction)
with ``finish_reason: "stop"`` and the call in ``message.tool_calls`` (vLLM does the same
since vllm-project/vllm#25054, Ollama and OpenVINO did for any tool call): its empty text
read as an ``empty`` answer, and the call was asked again of the large tier — paid twice."""

from __future__ import annotations

import json
from typing import Any

import httpx2

import gptgate as gg
from tests.mockbackend import Script, backend, completion

TOOLS = [{"type": "function", "function": {"name": "extract", "parameters": {
    "type": "object", "properties": {"name": {"type": "string"}}}}}]
NAMED = {"type": "function", "function": {"name": "extract"}}


def _forced_call(request: httpx2.Request) -> httpx2.Response:
    assert json.loads(request.content)["tool_choice"] == NAMED
    body: dict[str, Any] = completion("")
    body["choices"][0]["message"] = {
        "role": "assistant", "content": None, "refusal": None,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "extract", "arguments": '{"name": "Ada"}'}}]}
    body["choices"][0]["finish_reason"] = "stop"  # a named tool_choice's, as OpenAI sends it
    return httpx2.Response(200, json=body)


async def test_a_forced_tool_call_finished_at_stop_is_not_escalated() -> None:
    small, large = Script(_forced_call), Script(_forced_call)
    gate = gg.Gateway([
        backend(small, name="small", tier="small"), backend(large, name="large", tier="large"),
    ], tier_classifier=lambda m, p: "small")
    async with gate:
        result = await gate.chat([{"role": "user", "content": "Ada is 36."}], tools=TOOLS,
                                 tool_choice=NAMED, max_tokens=50)
        rule = gate.tier_stats().rules["classifier"]
    assert (result.backend, result.escalated, rule.escalated) == ("small", False, 0)
    assert len(large.requests) == 0
    assert result.raw is not None
    assert result.raw["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "extract"


async def test_an_empty_answer_without_a_tool_call_is_still_escalated() -> None:
    small = Script(httpx2.Response(200, json=completion("")))
    large = Script(httpx2.Response(200, json=completion("The answer.")))
    gate = gg.Gateway([
        backend(small, name="small", tier="small"), backend(large, name="large", tier="large"),
    ], tier_classifier=lambda m, p: "small")
    async with gate:
        result = await gate.chat([{"role": "user", "content": "hi"}], max_tokens=50)
    assert (result.backend, result.escalated, result.text) == ("large", True, "The answer.")
