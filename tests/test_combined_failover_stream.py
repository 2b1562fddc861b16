"""SDK failover (``http_client("a", fallback=["b"])``) with the one rule for streams that end
early (gptgate/stream_cut.py): a primary that cuts its streams mid-answer — a reset, or a
clean EOF before ``[DONE]`` — is never re-sent to the fallback (the caller has read part of
the answer), each cut counts on ``a``'s circuit, and once it opens the next requests go to
``b``. A guard around an SDK on the fallback client sees the same. Real ``openai`` package,
loopback mock transports.

Before: a guard whose body read a stream cut before ``[DONE]`` through ``gate.http_client``
returned normally, and its success reset the run of failures the wire had just counted (the
circuit never opened); the other cases passed and guard the combination.
"""

from __future__ import annotations

import contextlib

import httpx2
import openai
import pytest

import gptgate as gg
from tests.streamends import SSE, URL, USER, EndingBody

THRESHOLD = 3


class Server:
    def __init__(self, end: str) -> None:
        self.end = end
        self.seen = 0

    def transport(self) -> httpx2.MockTransport:
        def handle(_: httpx2.Request) -> httpx2.Response:
            self.seen += 1
            return httpx2.Response(200, headers=SSE, stream=EndingBody(self.end, tokens=1))

        return httpx2.MockTransport(handle)


def _gate(a: Server, b: Server) -> gg.Gateway:
    backends = [gg.Backend(name=name, base_url=URL, model="m", api_key=f"sk-{name}-key-0123",
                           transport=server.transport(), idle_timeout=5.0)
                for name, server in (("a", a), ("b", b))]
    return gg.Gateway(backends, breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0,
                      max_breaker_wait_s=0.0, max_attempts=1)


async def _read(client: openai.AsyncOpenAI) -> str:
    stream = await client.chat.completions.create(  # type: ignore[call-overload]
        model="m", messages=USER, stream=True)
    text = ""
    async with stream:
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
    return text


@pytest.mark.parametrize("guarded", [False, True])
@pytest.mark.parametrize("end", ["reset", "truncated"])
async def test_a_primary_cutting_its_streams_opens_its_circuit_and_then_b_serves(
    end: str, guarded: bool
) -> None:
    a, b = Server(end), Server("whole")
    gate = _gate(a, b)
    async with gate:
        client = openai.AsyncOpenAI(base_url=URL, api_key="sk-a-key-0123", max_retries=0,
                                    http_client=gate.http_client("a", fallback=["b"]))

        async def once() -> str:
            return await _read(client)

        ask = gate.guard(backend="a")(once) if guarded else once
        for _ in range(THRESHOLD):
            with contextlib.suppress(openai.APIError, gg.GateError):
                await ask()
        cut = (a.seen, b.seen, gate.stats()["a"].failures, gate.stats()["a"].circuit)
        served = await once()  # the SDK's next request: a's circuit open, b serves it
        after = (a.seen, b.seen, gate.ledger.entries["b"].calls_ok)
        if guarded:  # a guard pinned to "a" follows its client's fallback= while a's
            # circuit is open (docs/guide/failover.md): b serves it, a is not asked
            assert await ask() == "t0 "
            assert (a.seen, b.seen) == (THRESHOLD, 2)
    assert cut == (THRESHOLD, 0, THRESHOLD, "open")  # never re-sent to b mid-answer
    assert served == "t0 "
    assert after == (THRESHOLD, 1, 1)
