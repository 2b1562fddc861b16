"""llama-server builds before its October 2025 rework (PR 16486) answer a streamed request
with HTTP 200 and send any failure as an ``error:`` line — an SSE field of its own, not
``event: error`` (``server_sent_event(sink, "error", error_data)`` writes
``error: {json}\\n\\n``). That includes a prompt too long for the slot's context, which the
newer builds answer with a plain HTTP 400.

A decoder following the EventSource rules ignores an unknown field, so the error vanished: the
stream simply ended without ``[DONE]``. Before: a prompt too long for the context was a
retryable "stream ended before its final chunk (no [DONE])", sent 3 times with
``max_attempts=3``, blamed on the backend and never moved to a backend with a longer window;
a failure after the first token lost its message too. Now the line is that error, mapped as
its HTTP twin would be: the too-long prompt a ``RequestTooLargeError`` with the server's
counts, sent once.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.wire.sse import SSEDecoder

#: the older llama-server's refusal of a prompt longer than the slot's context (its
#: format_error_response of ERROR_TYPE_EXCEED_CONTEXT_SIZE)
TOO_LONG = {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 3000,
            "n_ctx": 2048, "message": "request (3000 tokens) exceeds the available context "
                                      "size (2048 tokens), try increasing it"}
#: its failure mid-answer (a decode error)
FAILED = {"code": 500, "type": "server_error", "message": "Could not decode the next token"}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
            "created": 1, "id": "chatcmpl-x", "model": "qwen", "object": "chat.completion.chunk"}
    return f"data: {json.dumps(body)}\n\n".encode()


def _error_line(error: dict[str, Any]) -> bytes:
    return f"error: {json.dumps(error)}\n\n".encode()


def _server(hits: Counter[str], name: str, body: bytes) -> gg.Backend:
    def answer(request: httpx2.Request) -> httpx2.Response:
        hits[name] += 1
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               content=body)

    return gg.Backend(name=name, provider="llamacpp", model="qwen", signals=False,
                      base_url="http://127.0.0.1:9/v1", transport=httpx2.MockTransport(answer))


def test_the_decoder_gives_the_error_field_as_an_error_event() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(_error_line(FAILED)) + decoder.feed(b'error: {"code":503}')
    events += decoder.close()  # the last one without its blank line, at EOF
    assert [(e.event, json.loads(e.data)["code"]) for e in events] == [("error", 500),
                                                                       ("error", 503)]


async def test_a_prompt_too_long_for_the_context_is_refused_once_with_the_servers_counts(
) -> None:
    hits: Counter[str] = Counter()
    body = _error_line(TOO_LONG)
    async with gg.Gateway([_server(hits, "small", body)], max_attempts=3) as gate:
        with pytest.raises(gg.RequestTooLargeError) as caught:
            async with gate.stream([{"role": "user", "content": "long " * 3000}]) as s:
                [t async for t in s]
    assert hits == {"small": 1}
    assert (caught.value.limit, caught.value.requested) == (2048, 3000)
    assert "exceeds the available context size" in caught.value.message


async def test_in_a_fleet_it_moves_to_the_server_with_the_longer_context() -> None:
    hits: Counter[str] = Counter()
    answer = (_chunk({"role": "assistant", "content": "Done"}) + _chunk({}, "stop")
              + b"data: [DONE]\n\n")
    small = _server(hits, "small", _error_line(TOO_LONG)).model_copy(update={"hardware": "tpu"})
    large = _server(hits, "large", answer).model_copy(update={"hardware": "cpu"})
    gate = gg.Gateway([small, large])
    async with gate, gate.stream([{"role": "user", "content": "long " * 3000}]) as s:
        text = "".join([t async for t in s])
    assert text == "Done" and s.result.backend == "large" and hits == {"small": 1, "large": 1}


async def test_a_failure_after_the_first_token_keeps_the_servers_message() -> None:
    hits: Counter[str] = Counter()
    body = _chunk({"role": "assistant", "content": None}) + _chunk({"content": "Hi"})
    async with gg.Gateway([_server(hits, "ll", body + _error_line(FAILED))]) as gate:
        with pytest.raises(gg.StreamInterruptedError) as caught:
            async with gate.stream([{"role": "user", "content": "hi"}]) as s:
                [t async for t in s]
    assert caught.value.partial_text == "Hi"
    assert "Could not decode the next token" in str(caught.value.__cause__)
