"""A kept-alive connection the server drops as the next request arrives (llama.cpp's
llama-server does this to ~5% of requests on a reused connection: "Server disconnected
without sending a response") is a stale connection, not a backend failure: the request goes
again at once on a fresh connection, with no failed attempt, no retry spent and no loss for
the limiter. A connection that fails on its first request is not stale: that stays a failure.
Real loopback HTTP (a raw asyncio server), since the fault lives in connection reuse."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import gptgate as gg
from tests.rawhttp import ANSWER, RawServer


class DroppingServer(RawServer):
    """Answers a connection's first ``serve`` requests, then closes it when the next one
    arrives, without a byte of response (``serve=0``: every connection dies at once)."""

    def __init__(self, serve: int) -> None:
        super().__init__()
        self.serve = serve
        self.dropped = 0

    async def respond(self, served: int) -> bytes | None:
        if served >= self.serve:
            self.dropped += 1
            return None
        return ANSWER


@pytest.fixture
def reuse_once() -> Iterator[DroppingServer]:
    with DroppingServer(serve=1) as server:
        yield server


def gateway(port: int, **options: object) -> gg.Gateway:
    backend = gg.Backend(name="b", base_url=f"http://127.0.0.1:{port}/v1", model="m",
                         concurrency=1, timeout=5)
    return gg.Gateway([backend], **options)  # type: ignore[arg-type]


async def test_a_stale_kept_alive_connection_is_sent_again_not_failed(
    reuse_once: DroppingServer,
) -> None:
    gate = gateway(reuse_once.port, max_attempts=1)
    async with gate:
        results = [await gate.chat([{"role": "user", "content": f"q{i}"}]) for i in range(4)]
        stats = gate.stats()["b"]
        pool = stats.pool
    assert [r.text for r in results] == ["hi"] * 4
    assert all(r.attempts == 1 for r in results)
    assert stats.failures == 0 and stats.retries == 0
    # every second call found its connection dropped, and went again on a new one
    assert reuse_once.dropped == 3 and pool.stale_retries == 3


async def test_the_sdk_on_gate_http_client_gets_the_same_resend(
    reuse_once: DroppingServer,
) -> None:
    openai = pytest.importorskip("openai")
    gate = gateway(reuse_once.port)
    async with gate:
        client = openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{reuse_once.port}/v1",
                                    http_client=gate.http_client("b"), max_retries=0)
        for i in range(3):
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"q{i}"}]
            )
            assert reply.choices[0].message.content == "hi"
    assert reuse_once.dropped == 2


async def test_a_connection_that_fails_its_first_request_is_a_failure() -> None:
    with DroppingServer(serve=0) as server:
        gate = gateway(server.port, max_attempts=1)
        async with gate:
            with pytest.raises(gg.BackendError):
                await gate.chat([{"role": "user", "content": "q"}])
            pool = gate.stats()["b"].pool
        # sent once: a fresh connection that dies is the backend's fault, not a stale one
        assert server.requests == 1 and pool.stale_retries == 0
