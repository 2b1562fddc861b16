"""Claude's thinking tokens are ``usage.reasoning_tokens``, as an o-series model's are.

The Messages API reports them as ``usage.output_tokens_details.thinking_tokens`` (the
anthropic SDK's ``OutputTokensDetails``: "always <= output_tokens"), in a whole answer and in
a stream's ``message_delta``. Before, that field was not read: every Claude answer with
extended thinking had ``reasoning_tokens == 0`` — in ``r.usage``, the ledger, ``stats()`` and
the spans' ``gen_ai.usage.reasoning.output_tokens`` — where an o-series or deepseek-reasoner
answer reported its own. The bill does not change: thinking is output, billed as output.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2

import gptgate as gg
from gptgate.wire.usage import parse_anthropic_usage, parse_usage

USAGE = {"input_tokens": 40, "output_tokens": 500, "cache_read_input_tokens": 0,
         "cache_creation_input_tokens": 0, "output_tokens_details": {"thinking_tokens": 420}}
MESSAGE = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [{"type": "thinking", "thinking": "Let me see.", "signature": "EqQB"},
                       {"type": "text", "text": "42."}],
           "stop_reason": "end_turn", "stop_sequence": None, "usage": USAGE}


def _events(*events: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
                    for name, data in events)


STREAM = _events(
    ("message_start", {"message": {**MESSAGE, "content": [], "stop_reason": None,
                                   "usage": {"input_tokens": 40, "output_tokens": 1}}}),
    ("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": "",
                                                           "signature": ""}}),
    ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta",
                                                   "thinking": "Let me see."}}),
    ("content_block_delta", {"index": 0, "delta": {"type": "signature_delta",
                                                   "signature": "EqQB"}}),
    ("content_block_stop", {"index": 0}),
    ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "42."}}),
    ("content_block_stop", {"index": 1}),
    ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                       "usage": {"output_tokens": 500,
                                 "output_tokens_details": {"thinking_tokens": 420}}}),
    ("message_stop", {}),
)


def _claude(streamed: bool) -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get("stream"):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=STREAM)
        return httpx2.Response(200, json=MESSAGE)

    return gg.Backend(name="claude", provider="anthropic", model="claude-sonnet-4-5",
                      base_url="http://127.0.0.1:9", api_key="sk-ant-test",
                      price=gg.Price(input_per_mtok=3.0, output_per_mtok=15.0),
                      transport=httpx2.MockTransport(answer))


def test_the_usage_reader_takes_the_thinking_tokens_as_a_part_of_the_output() -> None:
    usage = parse_anthropic_usage(USAGE)
    assert usage is not None and (usage.output_tokens, usage.reasoning_tokens) == (500, 420)
    assert parse_usage(USAGE) == usage  # the SDK's traffic is read through parse_usage
    over = parse_anthropic_usage({**USAGE, "output_tokens_details": {"thinking_tokens": 900}})
    assert over is not None and over.reasoning_tokens == 500  # a part never above its whole


async def test_chat_stream_and_the_sdk_report_claudes_thinking_tokens() -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    async with gg.Gateway([_claude(False)]) as gate:
        chat = await gate.chat([{"role": "user", "content": "6 x 7?"}], thinking=thinking)
        async with gate.stream([{"role": "user", "content": "6 x 7?"}], thinking=thinking) as s:
            text = "".join([t async for t in s])
        client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9",
                                          http_client=gate.http_client("claude"), max_retries=0)
        async with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=4096, thinking=thinking,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "6 x 7?"}],
        ) as sdk:
            await sdk.get_final_message()
        stats = gate.stats()["claude"]
    assert chat.text == text == "42."
    assert chat.usage.reasoning_tokens == s.result.usage.reasoning_tokens == 420
    assert stats.reasoning_tokens == 3 * 420 and stats.output_tokens == 3 * 500
    assert chat.cost_usd == s.result.cost_usd == (40 * 3.0 + 500 * 15.0) / 1e6  # unchanged
