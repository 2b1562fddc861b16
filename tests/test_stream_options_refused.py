"""A server that refuses ``stream_options`` (Azure OpenAI before api-version
2024-09-01-preview: "Unrecognized request argument supplied: stream_options"; servers that
answer OpenAI's "Unknown parameter: 'stream_options'"): gptgate asks every stream for
``include_usage``, so every ``gate.stream`` on such a backend — and every ``gate.chat`` that
streams (hedged, long answers) — was a BadRequestError. The backend learns it at the first
refusal: that attempt is tried again at once without ``stream_options``, and later streams go
without; their usage is estimated (``usage.estimated``), as for any server sending none."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

M = [{"role": "user", "content": "hi"}]

_REFUSALS = {
    "azure": {"error": {"code": None, "message": "Unrecognized request argument supplied: "
                        "stream_options", "param": None, "type": "invalid_request_error"}},
    "openai": {"error": {"message": "Unknown parameter: 'stream_options'.",
                         "type": "invalid_request_error", "param": "stream_options",
                         "code": "unknown_parameter"}},
}


def _stream() -> httpx2.Response:
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello there"},
                      "finish_reason": None}]},
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx2.Response(200, content=body.encode(),
                           headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize("server", sorted(_REFUSALS))
async def test_a_server_refusing_stream_options_still_streams(server: str) -> None:
    sent: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        sent.append(body)
        if "stream_options" in body:
            return httpx2.Response(400, json=_REFUSALS[server])
        return _stream()

    backend = gg.Backend(name="b", provider="openai", model="m",
                         base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                         transport=httpx2.MockTransport(answer))
    async with gg.Gateway([backend]) as gate:
        texts = []
        for _ in range(2):
            async with gate.stream(M, max_tokens=20) as s:
                texts.append("".join([d async for d in s]))
        result = s.result
    assert texts == ["Hello there", "Hello there"]
    assert ["stream_options" in body for body in sent] == [True, False, False]
    assert result.attempts == 1
    assert result.usage.estimated and result.usage.output_tokens == 3


async def test_another_bad_request_is_not_retried() -> None:
    sent: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(400, json={"error": {"message": "Unknown parameter: 'foo'.",
                                                    "param": "foo"}})

    backend = gg.Backend(name="b", provider="openai", model="m",
                         base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                         transport=httpx2.MockTransport(answer))
    async with gg.Gateway([backend]) as gate:
        with pytest.raises(gg.BadRequestError, match="foo"):
            async with gate.stream(M, foo=1) as s:
                [_ async for _ in s]
    assert len(sent) == 1 and "stream_options" in sent[0]
