"""llama-server refuses a request it cannot take with an HTTP 500, not a 400.

Its request parser (llama.cpp ``oaicompat_chat_params_parse``, server utils) throws
``std::runtime_error`` for a parameter the running server does not take, and the handler's
``catch (const std::exception &)`` answers those as ``ERROR_TYPE_SERVER``: HTTP 500,
``{"error": {"code": 500, "message": "tools param requires --jinja flag", "type":
"server_error"}}`` for tools on a server started without ``--jinja`` (also "tool_choice param
requires --jinja flag", "Unsupported param (--jinja mode required for tool call): tools",
"Cannot use tools with stream" in older builds), "Only one completion choice is allowed" for
``n`` > 1, "Unsupported param: best_of"… The same request gets the same answer every time.

Before: each was a retryable ``BackendError``: sent ``max_attempts`` times, counted as the
server's failures, and two tool calls opened the circuit — every plain call to that server then
failed with ``CircuitOpenError`` until it closed. Now it is a ``BadRequestError``: sent once,
its circuit untouched.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
OK = {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "qwen",
      "choices": [{"index": 0, "finish_reason": "stop",
                   "message": {"role": "assistant", "content": "ok"}}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def _refusal(message: str) -> dict[str, Any]:
    return {"error": {"code": 500, "message": message, "type": "server_error"}}


def _server(message: str, sent: list[dict[str, Any]]) -> gg.Backend:
    """A llama-server that refuses any request with ``tools`` or ``n`` as its parser does."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        sent.append(body)
        if "tools" in body or body.get("n", 1) != 1:
            return httpx2.Response(500, json=_refusal(message))
        return httpx2.Response(200, json=OK)

    return gg.Backend(name="llama", provider="llamacpp", model="qwen", signals=False,
                      base_url="http://127.0.0.1:9/v1", transport=httpx2.MockTransport(answer))


@pytest.mark.parametrize(("message", "params"), [
    ("tools param requires --jinja flag", {"tools": TOOLS}),
    ("Unsupported param (--jinja mode required for tool call): tools", {"tools": TOOLS}),
    ("Cannot use tools with stream", {"tools": TOOLS}),
    ("Only one completion choice is allowed", {"n": 2}),
])
async def test_the_refusal_is_a_bad_request_sent_once(message: str, params: Any) -> None:
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([_server(message, sent)], max_attempts=3) as gate:
        for _ in range(4):
            with pytest.raises(gg.BadRequestError) as caught:
                await gate.chat([{"role": "user", "content": "hi"}], **params)
            assert message in caught.value.message
            assert caught.value.status == 500
            assert not caught.value.retryable
        plain = await gate.chat([{"role": "user", "content": "hi"}])  # the server is fine
        circuit = gate.stats()["llama"].circuit
    assert len(sent) == 5  # each refused call sent once, then the plain one
    assert plain.text == "ok"
    assert circuit == "closed"


async def test_a_real_server_error_is_still_retried() -> None:
    """A 500 that is not a refusal of the request (a decode failure) stays retryable."""
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([_server("Could not decode the next token", sent)],
                          max_attempts=2) as gate:
        with pytest.raises(gg.BackendError) as caught:
            await gate.chat([{"role": "user", "content": "hi"}], n=2)
    assert not isinstance(caught.value, gg.BadRequestError)
    assert len(sent) == 2


async def test_the_same_refusal_in_an_older_builds_stream() -> None:
    """Older builds answer a stream with 200 and an ``error:`` line (tests/
    test_llama_error_field.py): the refusal there is the same bad request."""
    line = f"error: {json.dumps(_refusal('tools param requires --jinja flag')['error'])}\n\n"
    sent: list[int] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(1)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=line.encode())

    backend = gg.Backend(name="llama", provider="llamacpp", model="qwen", signals=False,
                         base_url="http://127.0.0.1:9/v1", transport=httpx2.MockTransport(answer))
    async with gg.Gateway([backend], max_attempts=3) as gate:
        with pytest.raises(gg.BadRequestError):
            async with gate.stream([{"role": "user", "content": "hi"}], tools=TOOLS) as s:
                async for _ in s:
                    pass
    assert len(sent) == 1


async def test_an_sdk_call_through_the_gate_is_not_retried_nor_held_against_the_server() -> None:
    """The openai SDK on ``gate.http_client``: the refusal reaches it once (``x-should-retry:
    false``, not its own retries of a 500) and the circuit stays closed."""
    sent: list[dict[str, Any]] = []
    async with gg.Gateway([_server("tools param requires --jinja flag", sent)]) as gate:
        client = openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1",
                                    http_client=gate.http_client("llama"))
        for _ in range(4):
            with pytest.raises(openai.InternalServerError):
                await client.chat.completions.create(
                    model="qwen", messages=[{"role": "user", "content": "hi"}],
                    tools=TOOLS,  # type: ignore[arg-type]
                )
        circuit = gate.stats()["llama"].circuit
    assert len(sent) == 4
    assert circuit == "closed"
