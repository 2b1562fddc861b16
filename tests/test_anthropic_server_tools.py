"""Anthropic's server tools (web search, web fetch, code execution) through gptgate.

The answers below are shaped as the anthropic SDK types them (``ServerToolUseBlock``,
``WebSearchToolResultBlock``, a ``TextBlock``'s ``citations`` of
``web_search_result_location``, ``usage.server_tool_use.web_search_requests``; streamed, a
server tool's input as ``input_json_delta``, its result whole in ``content_block_start``, a
citation as ``citations_delta``). Before: ``stop_reason: "pause_turn"`` came back as finish
``"stop"``, the server-tool blocks and citations were dropped from ``r.raw`` (so a paused turn
could not be sent back to continue, as Anthropic's docs ask), an assistant message carrying
them was refused before sending, and such a turn looked like a failed (empty) answer to
escalate. The searches' charge: tests/test_anthropic_web_search_bill.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.tiers import failure_reason

MODEL = "claude-sonnet-4-5"
ASK = [{"role": "user", "content": "When did gptgate ship?"}]
SEARCH = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
CITATION = {"type": "web_search_result_location", "url": "https://example.org/a", "title": "A",
            "encrypted_index": "Eo8BCioIAhgB", "cited_text": "Released in May."}
CONTENT: list[dict[str, Any]] = [
    {"type": "text", "text": "I'll search for that."},
    {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search",
     "input": {"query": "gptgate release"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
        {"type": "web_search_result", "url": "https://example.org/a", "title": "A",
         "encrypted_content": "EqgfCioIARgB", "page_age": "May 2, 2026"}]},
    {"type": "text", "text": "It shipped in May.", "citations": [CITATION]},
    {"type": "server_tool_use", "id": "srvtoolu_02", "name": "web_search",
     "input": {"query": "gptgate changelog"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_02",
     "content": {"type": "web_search_tool_result_error", "error_code": "unavailable"}},
]
USAGE = {"input_tokens": 1000, "output_tokens": 100, "cache_read_input_tokens": 0,
         "cache_creation_input_tokens": 0,
         "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 0}}
PAUSED = {"id": "msg_01", "type": "message", "role": "assistant", "model": MODEL,
          "content": CONTENT, "stop_reason": "pause_turn", "stop_sequence": None,
          "usage": USAGE}
DONE = {**PAUSED, "id": "msg_02", "content": [{"type": "text", "text": "May 2026."}],
        "stop_reason": "end_turn",
        "usage": {**USAGE, "server_tool_use": {"web_search_requests": 1}}}
PRICE = gg.Price(input_per_mtok=3.0, output_per_mtok=15.0)


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def _stream(message: dict[str, Any]) -> bytes:
    """``message`` as Anthropic streams it (the SDK's accumulate_event reads it back)."""
    events = [_event("message_start", {"message": {
        **message, "content": [], "stop_reason": None,
        "usage": {"input_tokens": 1000, "output_tokens": 1}}})]
    for i, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            events.append(_event("content_block_start", {
                "index": i, "content_block": {"type": "text", "text": ""}}))
            events.append(_event("content_block_delta", {
                "index": i, "delta": {"type": "text_delta", "text": block["text"]}}))
            for citation in block.get("citations") or ():
                events.append(_event("content_block_delta", {
                    "index": i, "delta": {"type": "citations_delta", "citation": citation}}))
        elif kind == "server_tool_use":
            events.append(_event("content_block_start", {
                "index": i, "content_block": {**block, "input": {}}}))
            arguments = json.dumps(block["input"])
            for part in (arguments[:5], arguments[5:]):
                events.append(_event("content_block_delta", {
                    "index": i, "delta": {"type": "input_json_delta", "partial_json": part}}))
        else:  # a server tool's result comes whole
            events.append(_event("content_block_start", {"index": i, "content_block": block}))
        events.append(_event("content_block_stop", {"index": i}))
    events.append(_event("message_delta", {
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": message["usage"]["output_tokens"],
                  "server_tool_use": message["usage"]["server_tool_use"]}}))
    events.append(_event("message_stop", {}))
    return b"".join(events)


class Claude:
    """Answers the first request paused, a request that sends the paused turn back done."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        answer = DONE if body["messages"][-1]["role"] == "assistant" else PAUSED
        if body.get("stream"):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=_stream(answer))
        return httpx2.Response(200, json=answer)


def _claude(server: Claude, price: gg.Price | None = PRICE, **kwargs: Any) -> gg.Backend:
    return gg.Backend(name="claude", provider="anthropic", model=MODEL,
                      base_url="http://127.0.0.1:9", api_key="sk-ant-test", price=price,
                      transport=httpx2.MockTransport(server), **kwargs)


async def _ask(gate: gg.Gateway, stream: bool, messages: Any = ASK) -> gg.ChatResult:
    if stream:
        async with gate.stream(messages, tools=SEARCH) as s:
            [_ async for _ in s]
        return s.result
    return await gate.chat(messages, tools=SEARCH)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_paused_turn_keeps_every_block_and_says_it_paused(stream: bool) -> None:
    async with gg.Gateway([_claude(Claude())]) as gate:
        r = await _ask(gate, stream)
    assert r.finish_reason == "pause_turn"  # was "stop": a paused turn looked finished
    assert r.text == "I'll search for that.It shipped in May."
    assert r.raw is not None
    message = r.raw["choices"][0]["message"]
    assert message["content_blocks"] == CONTENT  # every block, in order, citations included
    assert "tool_calls" not in message  # a server tool is no call of the caller's to run


@pytest.mark.parametrize("stream", [False, True])
async def test_a_paused_turn_sent_back_as_it_came_continues(stream: bool) -> None:
    server = Claude()
    async with gg.Gateway([_claude(server)]) as gate:
        paused = await _ask(gate, stream)
        assert paused.raw is not None
        message = paused.raw["choices"][0]["message"]
        done = await gate.chat([*ASK, message], tools=SEARCH)
        # the assistant's content blocks as they are, Anthropic's shape (the SDK's way)
        again = await gate.chat([*ASK, {"role": "assistant", "content": CONTENT}], tools=SEARCH)
    assert done.finish_reason == again.finish_reason == "stop" and done.text == "May 2026."
    for body in server.bodies[1:]:
        assert body["messages"][-1] == {"role": "assistant", "content": CONTENT}


async def test_a_turn_paused_twice_goes_back_as_one_turn_in_order() -> None:
    bodies: list[dict[str, Any]] = []
    answers = [PAUSED, {**PAUSED, "id": "msg_03", "content": CONTENT[3:]}, DONE]

    def server(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return httpx2.Response(200, json=answers[len(bodies) - 1])

    backend = gg.Backend(name="claude", provider="anthropic", model=MODEL, price=PRICE,
                         base_url="http://127.0.0.1:9", api_key="sk-ant-test",
                         transport=httpx2.MockTransport(server))
    messages: list[Any] = list(ASK)
    async with gg.Gateway([backend]) as gate:
        r = await gate.chat(messages, tools=SEARCH)
        while r.finish_reason == "pause_turn" and len(bodies) < 5:
            assert r.raw is not None
            messages = [*messages, r.raw["choices"][0]["message"]]
            r = await gate.chat(messages, tools=SEARCH)
    assert r.text == "May 2026." and len(bodies) == 3
    assert bodies[2]["messages"][1:] == [{"role": "assistant", "content": CONTENT + CONTENT[3:]}]


async def test_the_blocks_stay_out_of_an_openai_dialect_request() -> None:
    seen: list[dict[str, Any]] = []

    def openai(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json={
            "id": "c", "model": "gpt-4o", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "May."}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}})

    gpt = gg.Backend(name="gpt", provider="openai", model="gpt-4o", api_key="sk-test",
                     base_url="http://127.0.0.1:9/v1", transport=httpx2.MockTransport(openai))
    async with gg.Gateway([_claude(Claude()), gpt]) as gate:
        paused = await gate.chat(ASK, tools=SEARCH, backend="claude")
        assert paused.raw is not None
        message = paused.raw["choices"][0]["message"]
        await gate.chat([*ASK, message, {"role": "user", "content": "Thanks"}], backend="gpt")
    (sent,) = seen
    assert "content_blocks" not in sent["messages"][1]
    assert sent["messages"][1]["content"] == "I'll search for that.It shipped in May."


def test_a_paused_turn_is_no_failed_answer_to_escalate() -> None:
    """A paused turn without text yet (it searched and paused) is not ``empty``: the large
    tier would start the turn over, searches paid again, and lose the paused work."""
    usage = gg.Usage(input_tokens=10, output_tokens=5)
    paused = gg.ChatResult(
        text="", finish_reason="pause_turn", backend="small", hardware="cpu", model="m",
        streamed=False, attempts=1, usage=usage, billed_usage=usage, ttft_s=None,
        latency_s=0.1, queue_s=0.0, cost_usd=0.0, scenario="default", stream_decision="rule",
    )
    assert failure_reason(paused, {"max_tokens": 100}) is None


async def test_a_mixed_fleet_keeps_a_server_tool_call_on_claude() -> None:
    """OpenAI's API answers a tool it does not know with a 400: a call with Anthropic's web
    search went to whichever backend the router chose, and failed there. Its dialect now
    refuses it before sending, so the call stays on Claude; pinned to OpenAI it is a
    ``BadRequestError``, nothing sent."""
    seen: list[httpx2.Request] = []

    def openai(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(400, json={"error": {"message": "Invalid value: 'web_search_"
                                                    "20250305'", "type": "invalid_request_error"}})

    gpt = gg.Backend(name="gpt", provider="openai", model="gpt-4o", api_key="sk-test",
                     price=PRICE, transport=httpx2.MockTransport(openai))
    async with gg.Gateway([gpt, _claude(Claude())]) as gate:
        answers = [await gate.chat(ASK, tools=SEARCH) for _ in range(6)]
        with pytest.raises(gg.BadRequestError, match="web_search_20250305"):
            await gate.chat(ASK, tools=SEARCH, backend="gpt")
    assert {r.backend for r in answers} == {"claude"} and not seen
