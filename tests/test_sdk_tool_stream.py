"""A streamed tool call read by the openai SDK on ``gate.http_client`` without a usage chunk
(the SDK's default: no ``stream_options.include_usage``) is booked at the characters of its
names and arguments, as ``gate.chat`` books one (gptgate/wire/answer_chars.py).

The tap counted each ``delta.tool_calls`` as its whole JSON — ``index``, ``id``, ``type`` and
the key names around a two-character piece of arguments — so a parallel call of 55 characters
of names and arguments was booked 119 output tokens where 14 were generated (8.5x; OpenAI
streams arguments about a token a delta, so a long call's overcount is larger still)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai

import gptgate as gg

PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=10.0)
TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "system_fingerprint": "fp", "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def _call(index: int, call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}


def _args(index: int, piece: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


#: two parallel calls as OpenAI streams them: the call's head, then its arguments in pieces
CHUNKS = [
    _chunk({"role": "assistant", "content": None, "refusal": None}),
    _chunk(_call(0, "call_a")), *(_chunk(_args(0, p)) for p in ('{"ci', 'ty": "Pa', 'ris"}')),
    _chunk(_call(1, "call_b")), *(_chunk(_args(1, p)) for p in ('{"city"', ': "Rome"}')),
    _chunk({}, "tool_calls"),
]


def _answer(request: httpx2.Request) -> httpx2.Response:
    assert json.loads(request.content)["stream"] is True
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in CHUNKS) + "data: [DONE]\n\n"
    return httpx2.Response(200, content=body.encode(),
                           headers={"content-type": "text/event-stream; charset=utf-8"})


async def test_a_streamed_parallel_tool_call_is_booked_at_its_names_and_arguments() -> None:
    backend = gg.Backend(name="b", model="m", base_url="http://127.0.0.1:9/v1",
                         api_key="sk-test", transport=httpx2.MockTransport(_answer), price=PRICE)
    async with gg.Gateway([backend]) as gate:
        client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                                    http_client=gate.http_client("b"), max_retries=0)
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS,
            stream=True)
        arguments: dict[int, str] = {}
        async for chunk in stream:
            for call in chunk.choices[0].delta.tool_calls or ():
                arguments[call.index] = arguments.get(call.index, "") + (
                    call.function.arguments if call.function and call.function.arguments else "")
        entry = gate.runner.ledger.entries["b"]
    assert arguments == {0: '{"city": "Paris"}', 1: '{"city": "Rome"}'}
    chars = 2 * len("get_weather") + len('{"city": "Paris"}') + len('{"city": "Rome"}')
    assert entry.output_tokens == (chars + 3) // 4 == 14
    assert entry.estimated_attempts == 1
