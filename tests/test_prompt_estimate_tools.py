"""The prompt estimate (gptgate/tokens.py) counts what a tool-using request sends besides its
messages' text: the ``tools`` definitions, an assistant turn's tool calls (names and
arguments), a Responses API ``function_call`` / ``function_call_output`` item, Anthropic's
``tool_use`` input and ``tool_result`` content. It counted the text alone, so a tool-using
request was sized at a few tokens: an SDK stream without a usage chunk (the openai SDK's
default) was booked that prompt, the rate budget reserved it, and a call whose tools overflow
every backend's context window was sent to be refused."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.tokens import estimate_prompt_tokens, estimate_tools_tokens

#: five tools of the usual shape: a description and a few typed parameters each
TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}",
    "description": "Look up the current weather for a city and return it as structured data.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}} for i in range(5)]
ARGUMENTS = json.dumps({"city": "Paris", "unit": "celsius"})
FOLLOW_UP = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "tool_0", "arguments": ARGUMENTS}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 degrees"},
]


def test_a_tool_turn_counts_its_calls_and_results() -> None:
    text_only = 3 * 4 + (len("weather?") + 3) // 4 + (len("sunny, 21 degrees") + 3) // 4
    call = len("tool_0") + len(ARGUMENTS)
    assert estimate_prompt_tokens(FOLLOW_UP) == 3 * 4 + (8 + 3) // 4 + (call + 3) // 4 + (
        17 + 3) // 4
    assert estimate_prompt_tokens(FOLLOW_UP) > text_only
    responses_items = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "tool_0",
         "arguments": ARGUMENTS},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 degrees"},
    ]
    assert estimate_prompt_tokens(responses_items) == estimate_prompt_tokens(FOLLOW_UP)
    anthropic = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "tool_0",
             "input": {"city": "Paris", "unit": "celsius"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "sunny, 21 degrees"}]},
    ]
    assert estimate_prompt_tokens(anthropic) == estimate_prompt_tokens(FOLLOW_UP)


def test_tools_are_sized_by_their_definitions() -> None:
    size = len(json.dumps(TOOLS, separators=(",", ":")))
    assert estimate_tools_tokens(TOOLS) == (size + 3) // 4 > 300
    assert estimate_tools_tokens(None) == estimate_tools_tokens([]) == 0


def _stream_without_usage(request: httpx2.Request) -> httpx2.Response:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "It is sunny."},
                          "finish_reason": "stop"}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})


async def test_an_sdk_stream_without_usage_is_booked_its_tools_and_tool_turn() -> None:
    backend = gg.Backend(name="b", model="m", base_url="http://127.0.0.1:9/v1",
                         api_key="sk-test", transport=httpx2.MockTransport(_stream_without_usage))
    async with gg.Gateway([backend]) as gate:
        client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                                    http_client=gate.http_client("b"), max_retries=0)
        stream = await client.chat.completions.create(
            model="m", messages=FOLLOW_UP, tools=TOOLS, stream=True)  # type: ignore[arg-type]
        async for _ in stream:
            pass
        entry = gate.runner.ledger.entries["b"]
    expected = estimate_prompt_tokens(FOLLOW_UP) + estimate_tools_tokens(TOOLS)
    assert entry.input_tokens == expected > 300


async def test_tools_that_overflow_every_context_window_are_refused_unsent() -> None:
    sent: list[Any] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(400, json={"error": {"message": "context length exceeded"}})

    backend = gg.Backend(name="b", model="m", base_url="http://127.0.0.1:9/v1",
                         transport=httpx2.MockTransport(answer), context_tokens=200)
    async with gg.Gateway([backend]) as gate:
        with pytest.raises(gg.RequestTooLargeError):
            await gate.chat([{"role": "user", "content": "weather?"}], tools=TOOLS * 2,
                            max_tokens=50)
    assert sent == []
