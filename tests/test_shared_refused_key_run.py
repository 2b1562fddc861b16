"""With ``shared=``, an open whose run of failures includes a refused key stays in its
process, whatever failure came last.

A pod whose key is revoked while it has SDK streams open meets both at once: its new
requests are refused (401) and its open streams are cut — a cut SDK body counts against the
circuit as a server failure. Which of them opened the circuit was decided by the *last*
failure alone: two 401s then a cut stream published the open to the fleet, and every other
pod, whose key worked, stopped sending to a healthy backend for the whole cool-down. The run
was the key's; the other pods find a real outage in ``breaker_threshold`` requests of their
own. Real redis-server, real ``openai`` package on ``gate.http_client``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.shared.health import HEALTH_POLL_S
from tests.fleettools import namespace
from tests.test_shared_refused_key import NEW, OLD

URL = "http://127.0.0.1:9/v1"
USER = [{"role": "user", "content": "hi"}]
ANSWER = {"id": "c", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                       "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
CHUNK = {"id": "c", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {"content": "t"}, "finish_reason": None}]}


class _CutStream(httpx2.AsyncByteStream):
    """A stream the server breaks off after its first chunk (a revoked key's, a dying
    backend's)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield f"data: {json.dumps(CHUNK)}\n\n".encode()
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete "
                                         "message body (incomplete chunked read)")


def _server(request: httpx2.Request) -> httpx2.Response:
    """NEW is accepted; OLD is refused — but a stream it opened before the revocation (its
    body says stream) is answered and then cut."""
    if request.headers["authorization"] == f"Bearer {NEW}":
        return httpx2.Response(200, json=ANSWER)
    if json.loads(request.content).get("stream"):
        return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                               stream=_CutStream())
    return httpx2.Response(401, json={"error": {"message": "Incorrect API key provided",
                                                "type": "invalid_request_error",
                                                "code": "invalid_api_key"}})


async def test_a_revoked_pods_cut_streams_do_not_open_the_fleets_circuit(
    redis_url: str,
) -> None:
    shared = gg.Shared(redis_url, namespace=namespace())

    def gate(key: str) -> gg.Gateway:
        backend = gg.Backend(name="llm", base_url=URL, model="m", api_key=key,
                             transport=httpx2.MockTransport(_server))
        return gg.Gateway([backend], shared=shared, breaker_threshold=3,
                          breaker_cooldown_s=600.0, max_breaker_wait_s=0.0)

    old, new = gate(OLD), gate(NEW)
    async with old, new:
        sdk = openai.AsyncOpenAI(api_key=OLD, base_url=URL, max_retries=0,
                                 http_client=old.http_client("llm"))
        for _ in range(2):
            with pytest.raises(gg.BadRequestError):
                await old.chat(USER)
        with pytest.raises(openai.APIError):  # its stream, broken off: the third failure
            stream = await sdk.chat.completions.create(model="m", messages=USER,  # type: ignore[arg-type]
                                                       stream=True)
            async for _ in stream:
                pass
        assert old.stats()["llm"].circuit == "open"
        await anyio.sleep(4 * HEALTH_POLL_S)  # a published open: at the next poll
        assert new.stats()["llm"].circuit == "closed"  # open before, for 600 s
        answers = [await new.chat(USER) for _ in range(3)]
    assert [a.text for a in answers] == ["ok"] * 3


def test_the_run_ends_at_a_success() -> None:
    """A refused key before a success says nothing of the failures after it: an outage
    that follows is the fleet's."""
    from gptgate.circuit_cause import remember_failure
    from gptgate.routing import CircuitBreaker

    breaker = CircuitBreaker(threshold=3)
    refused = gg.BadRequestError("authentication failed", backend="llm", status=401)
    down = gg.BackendError("bad gateway", backend="llm", status=502)
    for error in (refused, down):
        remember_failure(breaker, error)
        breaker.on_failure(0.0)
    assert breaker.cause is not None and breaker.cause.refused_key  # the key's run
    breaker.on_success()
    for _ in range(3):
        remember_failure(breaker, down)
        breaker.on_failure(0.0)
    assert breaker.cause is not None and not breaker.cause.refused_key
