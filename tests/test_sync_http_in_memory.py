"""``SyncGateway.http_client`` serves responses a mock transport built in memory
(``httpx2.Response(200, json=...)``, an SSE body given as ``content=``) — the way a user's own
tests fake a backend (``httpx2.MockTransport``). Before, the sync portal re-read every
response as a network stream, and an in-memory one (already read, so "consumed") failed every
sync SDK request with ``httpx2.StreamConsumed``."""

from __future__ import annotations

import json

import httpx2
import openai

import gptgate as gg
from tests.mockbackend import completion, sse


def _backend(handler: httpx2.MockTransport) -> gg.Backend:
    return gg.Backend(
        name="g", base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-test",
        concurrency=2, transport=handler,
    )


def _reply(request: httpx2.Request) -> httpx2.Response:
    if json.loads(request.content).get("stream"):
        return httpx2.Response(200, content=sse(["hel", "lo"]),
                               headers={"content-type": "text/event-stream"})
    return httpx2.Response(200, json=completion("hello"))


def test_sync_sdk_requests_read_in_memory_mock_responses() -> None:
    with gg.SyncGateway(backends=[_backend(httpx2.MockTransport(_reply))]) as gate:
        client = openai.OpenAI(
            api_key="sk-test", base_url="http://127.0.0.1:9/v1",
            http_client=gate.http_client("g"), max_retries=0,
        )
        plain = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}]
        )
        assert plain.choices[0].message.content == "hello"
        streamed = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        assert text == "hello"
        stats = gate.stats()["g"]
        assert stats.calls == 2 and stats.failures == 0
